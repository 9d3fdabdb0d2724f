"""Ridders' method as an optimistix root finder: scipy's ``root_scalar(method="ridder")`` (its
``ridder.c``) step for step. The Numba solver (`gpubackend.solvers.ridder`) is the same port."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.bracket_start import BracketRootFinder, Verdict, bracket_start, running


class _RidderState(eqx.Module):
    xa: jax.Array
    xb: jax.Array
    fa: jax.Array
    fb: jax.Array
    tol: jax.Array
    """scipy's tolerance: ``xtol + rtol min(|xa|, |xb|)`` at first, then ``xtol + rtol xn``
    (``xn`` signed, as scipy's)."""
    verdict: Verdict


class Ridder(BracketRootFinder):
    """scipy's Ridders' method on a bracket given as ``options["lower"]``, ``options["upper"]``:
    each iteration evaluates the midpoint and the point the exponential through the bracket and
    the midpoint puts the root at; converged at an exact zero or once the bracket is narrower
    than the tolerance."""

    # optimistix reads these off any root finder: scipy's rtol and xtol.
    rtol: float
    atol: float
    norm: Callable = optx.max_norm

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _RidderState:
        xa, xb, fa, fb, verdict = bracket_start(fn, args, options, f_struct.dtype)
        tol = self.atol + self.rtol * jnp.minimum(jnp.abs(xa), jnp.abs(xb))
        # scipy's ``xn`` before any iteration, what it returns when maxiter is 0.
        return _RidderState(xa, xb, fa, fb, tol, verdict.returning(jnp.zeros_like(xa)))

    def step(self, fn, y, args, options, state: _RidderState, tags):
        xa, xb, fa, fb = state.xa, state.xb, state.fa, state.fb
        dm = 0.5 * (xb - xa)
        xm = xa + dm
        fm, _ = fn(xm, args)
        # Normalised by fa, as scipy's, so that fm * fm cannot underflow.
        ratio = fm / fa
        dn = dm * ratio / jnp.sqrt(ratio * ratio - fb / fa)
        towards = jnp.where(dn > 0, 1.0, -1.0).astype(dn.dtype)
        xn = xm + towards * jnp.minimum(jnp.abs(dn), jnp.abs(dm) - 0.5 * state.tol)
        fn_value, _ = fn(xn, args)
        # The root lies between the midpoint and xn where their signs differ, else between xn
        # and the end whose sign differs from xn's.
        across = jnp.signbit(fn_value) != jnp.signbit(fm)
        below = ~across & (jnp.signbit(fn_value) != jnp.signbit(fa))
        xa, fa = (
            jnp.where(across, xn, jnp.where(below, xa, xn)),
            jnp.where(across, fn_value, jnp.where(below, fa, fn_value)),
        )
        xb, fb = (
            jnp.where(across, xm, jnp.where(below, xn, xb)),
            jnp.where(across, fm, jnp.where(below, fn_value, fb)),
        )
        tol = self.atol + self.rtol * xn
        verdict = (
            running(xn)
            .stopped(jnp.isnan(fm), xm, converged=False)
            .stopped(fm == 0, xm, converged=True)
            .stopped(jnp.isnan(fn_value), xn, converged=False)
            .stopped((fn_value == 0) | (jnp.abs(xb - xa) < tol), xn, converged=True)
        )
        return verdict.root, _RidderState(xa, xb, fa, fb, tol, verdict), None
