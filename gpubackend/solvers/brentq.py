"""Brent's root bracketing methods: ``brentq`` and ``brenth`` (ports of scipy's ``brentq.c`` and
``brenth.c``).

The two differ only in how they extrapolate from three points: inverse
quadratic interpolation (``brentq``) or a hyperbola (``brenth``, Bus and
Dekker's); the bracketing, bisection fallback and termination are the same.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.bracket_start import make_bracket_start


@numba_njit(inline="always")
def inverse_quadratic_step(fcur, fpre, fblk, dpre, dblk) -> float:
    return -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))


@numba_njit(inline="always")
def hyperbolic_step(fcur, fpre, fblk, dpre, dblk) -> float:
    return -fcur * (fblk - fpre) / (fblk * dpre - fpre * dblk)


def _make_brent_root(fun: Callable, extrapolated_step: Callable) -> Callable:
    start = make_bracket_start(fun)

    @numba_njit
    def solve(args, x0, bracket, settings):
        xtol, rtol, maxiter = settings.xtol, settings.rtol, settings.maxiter
        fpre, fcur, stops, x, converged = start(bracket, args)
        if stops:
            return x, converged
        xpre, xcur = bracket[0], bracket[1]
        xblk = fblk = spre = scur = 0.0
        for _ in range(maxiter):
            if fpre != 0 and fcur != 0 and np.signbit(fpre) != np.signbit(fcur):
                xblk, fblk = xpre, fpre
                spre = scur = xcur - xpre
            if abs(fblk) < abs(fcur):
                xpre, xcur, xblk = xcur, xblk, xcur
                fpre, fcur, fblk = fcur, fblk, fcur
            delta = (xtol + rtol * abs(xcur)) / 2
            sbis = (xblk - xcur) / 2
            if fcur == 0 or abs(sbis) < delta:
                return xcur, True
            if abs(spre) > delta and abs(fcur) < abs(fpre):
                if xpre == xblk:
                    stry = -fcur * (xcur - xpre) / (fcur - fpre)
                else:
                    dpre = (fpre - fcur) / (xpre - xcur)
                    dblk = (fblk - fcur) / (xblk - xcur)
                    stry = extrapolated_step(fcur, fpre, fblk, dpre, dblk)
                if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):
                    spre, scur = scur, stry
                else:
                    spre = scur = sbis
            else:
                spre = scur = sbis
            xpre, fpre = xcur, fcur
            if abs(scur) > delta:
                xcur += scur
            else:
                xcur += delta if sbis > 0 else -delta
            fcur = fun(xcur, args)
            # scipy's root_scalar stops at a NaN value of f, there, not converged.
            if np.isnan(fcur):
                return xcur, False
        return xcur, False

    return solve


def make_brentq(fun: Callable) -> Callable:
    """``solve(args, x0, bracket, settings: RootScalarSettings) -> (x, converged)``; ``x0`` is
    unused.

    A bracket without a sign change raises scipy's ``ValueError``.
    """
    return _make_brent_root(fun, inverse_quadratic_step)


def make_brenth(fun: Callable) -> Callable:
    """`make_brentq`'s solver, extrapolating by a hyperbola as scipy's ``brenth``."""
    return _make_brent_root(fun, hyperbolic_step)
