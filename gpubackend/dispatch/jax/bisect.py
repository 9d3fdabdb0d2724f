"""Bisection as an optimistix root finder: scipy's ``root_scalar(method="bisect")`` (its
``bisect.c``) step for step. The Numba solver (`gpubackend.solvers.bisect`) is the same port."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.bracket_start import BracketRootFinder, Verdict, bracket_start, running


class _BisectState(eqx.Module):
    xa: jax.Array
    """The end of the bracket the midpoints are taken from; scipy keeps ``f`` at the first."""
    fa: jax.Array
    dm: jax.Array
    """The signed distance from ``xa`` to the bracket's other end."""
    verdict: Verdict


class Bisect(BracketRootFinder):
    """scipy's bisection on a bracket given as ``options["lower"]``, ``options["upper"]``:
    converged at an exact zero or once ``|dm| < xtol + rtol |xm|``."""

    # optimistix reads these off any root finder: scipy's rtol and xtol.
    rtol: float
    atol: float
    norm: Callable = optx.max_norm

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _BisectState:
        xa, xb, fa, _, verdict = bracket_start(fn, args, options, f_struct.dtype)
        return _BisectState(xa=xa, fa=fa, dm=xb - xa, verdict=verdict)

    def step(self, fn, y, args, options, state: _BisectState, tags):
        dm = state.dm * 0.5
        xm = state.xa + dm
        fm, _ = fn(xm, args)
        xa = jnp.where(fm * state.fa >= 0, xm, state.xa)
        small = jnp.abs(dm) < self.atol + self.rtol * jnp.abs(xm)
        verdict = (
            running(xa)
            .stopped(jnp.isnan(fm), xm, converged=False)
            .stopped((fm == 0) | small, xm, converged=True)
        )
        return verdict.root, _BisectState(xa=xa, fa=state.fa, dm=dm, verdict=verdict), None
