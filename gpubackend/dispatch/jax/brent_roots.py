"""Brent's root bracketing methods as optimistix root finders: scipy's
``root_scalar(method="brentq")`` and ``method="brenth"`` (its ``brentq.c`` and ``brenth.c``) step
for step.

The two differ only in how they extrapolate from three points: inverse
quadratic interpolation (``brentq``) or a hyperbola (``brenth``, Bus and
Dekker's); the bracketing, bisection fallback and termination are the same.
The Numba solvers (`gpubackend.solvers.brentq`) are the same port.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.bracket_start import BracketRootFinder, Verdict, bracket_start, running


def inverse_quadratic_step(fcur, fpre, fblk, dpre, dblk):
    return -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))


def hyperbolic_step(fcur, fpre, fblk, dpre, dblk):
    return -fcur * (fblk - fpre) / (fblk * dpre - fpre * dblk)


class _BrentState(eqx.Module):
    """scipy's names: the iterate ``xcur``, the one before ``xpre``, the contrapoint ``xblk``
    (``f`` changes sign between it and ``xcur``), the step before last ``spre`` and the last
    ``scur``."""

    xpre: jax.Array
    xcur: jax.Array
    xblk: jax.Array
    fpre: jax.Array
    fcur: jax.Array
    fblk: jax.Array
    spre: jax.Array
    scur: jax.Array
    verdict: Verdict


class BrentRoot(BracketRootFinder):
    """scipy's Brent iteration on a bracket given as ``options["lower"]``, ``options["upper"]``,
    extrapolating by ``extrapolated_step`` (`inverse_quadratic_step` for ``brentq``,
    `hyperbolic_step` for ``brenth``): converged at an exact zero or once half the bracket is
    below ``(xtol + rtol |xcur|) / 2``, tested at the start of an iteration."""

    # optimistix reads these off any root finder: scipy's rtol and xtol.
    rtol: float
    atol: float
    # mypy reads a default into optimistix's abstract fields: this follows them, with none.
    extrapolated_step: Callable = eqx.field(static=True)  # type: ignore[misc]
    norm: Callable = optx.max_norm

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _BrentState:
        xpre, xcur, fpre, fcur, verdict = bracket_start(fn, args, options, f_struct.dtype)
        zero = jnp.zeros_like(xpre)
        # scipy returns the second end should maxiter be 0.
        return _BrentState(xpre, xcur, zero, fpre, fcur, zero, zero, zero, verdict.returning(xcur))

    def step(self, fn, y, args, options, state: _BrentState, tags):
        s = state
        xpre, xcur, xblk, fpre, fcur, fblk = s.xpre, s.xcur, s.xblk, s.fpre, s.fcur, s.fblk
        # The contrapoint moves where the last step crossed the root.
        crossed = (fpre != 0) & (fcur != 0) & (jnp.signbit(fpre) != jnp.signbit(fcur))
        xblk, fblk = jnp.where(crossed, xpre, xblk), jnp.where(crossed, fpre, fblk)
        spre = jnp.where(crossed, xcur - xpre, s.spre)
        scur = jnp.where(crossed, xcur - xpre, s.scur)
        # The iterate is the end with the smaller value.
        swaps = jnp.abs(fblk) < jnp.abs(fcur)
        xpre, xcur, xblk = (
            jnp.where(swaps, new, old) for new, old in ((xcur, xpre), (xblk, xcur), (xcur, xblk))
        )
        fpre, fcur, fblk = (
            jnp.where(swaps, new, old) for new, old in ((fcur, fpre), (fblk, fcur), (fcur, fblk))
        )
        delta = (self.atol + self.rtol * jnp.abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        converged = (fcur == 0) | (jnp.abs(sbis) < delta)

        # Extrapolate (a secant step from two distinct points) where the steps so far shrink.
        secant = -fcur * (xcur - xpre) / (fcur - fpre)
        dpre = (fpre - fcur) / (xpre - xcur)
        dblk = (fblk - fcur) / (xblk - xcur)
        stry = jnp.where(xpre == xblk, secant, self.extrapolated_step(fcur, fpre, fblk, dpre, dblk))
        extrapolates = (jnp.abs(spre) > delta) & (jnp.abs(fcur) < jnp.abs(fpre))
        accepted = extrapolates & (
            2 * jnp.abs(stry) < jnp.minimum(jnp.abs(spre), 3 * jnp.abs(sbis) - delta)
        )
        spre, scur = jnp.where(accepted, scur, sbis), jnp.where(accepted, stry, sbis)
        xpre, fpre = xcur, fcur
        # A step no longer than the tolerance is taken at its length, towards the contrapoint.
        xcur = xcur + jnp.where(jnp.abs(scur) > delta, scur, jnp.where(sbis > 0, delta, -delta))
        fcur, _ = fn(xcur, args)

        verdict = (
            running(xcur)
            .stopped(converged, xpre, converged=True)
            .stopped(jnp.isnan(fcur), xcur, converged=False)
        )
        new_state = _BrentState(xpre, xcur, xblk, fpre, fcur, fblk, spre, scur, verdict)
        return verdict.root, new_state, None
