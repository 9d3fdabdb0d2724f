"""Ridders' root bracketing method (port of scipy's ``ridder.c``)."""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.bracket_start import make_bracket_start


def make_ridder(fun: Callable) -> Callable:
    """``solve(args, x0, bracket, settings: RootScalarSettings) -> (x, converged)``; ``x0`` is
    unused.

    Each iteration evaluates the midpoint and the point the exponential through
    the bracket and the midpoint puts the root at. A bracket without a sign
    change raises scipy's ``ValueError``.
    """
    start = make_bracket_start(fun)

    @numba_njit
    def solve(args, x0, bracket, settings):
        xtol, rtol, maxiter = settings.xtol, settings.rtol, settings.maxiter
        fa, fb, stops, x, converged = start(bracket, args)
        if stops:
            return x, converged
        xa, xb = bracket[0], bracket[1]
        # scipy's first tolerance; each iteration then takes ``xtol + rtol * xn`` (xn signed).
        tol = xtol + rtol * min(abs(xa), abs(xb))
        xn = 0.0
        for _ in range(maxiter):
            dm = 0.5 * (xb - xa)
            xm = xa + dm
            fm = fun(xm, args)
            # scipy's root_scalar stops at a NaN value of f, there, not converged.
            if np.isnan(fm):
                return xm, False
            if fm == 0.0:
                return xm, True
            # Normalised by fa, as scipy's, so that fm * fm cannot underflow.
            ratio = fm / fa
            dn = dm * ratio / np.sqrt(ratio * ratio - fb / fa)
            xn = xm + (1.0 if dn > 0 else -1.0) * min(abs(dn), abs(dm) - 0.5 * tol)
            fn = fun(xn, args)
            if np.isnan(fn):
                return xn, False
            if np.signbit(fn) != np.signbit(fm):
                xa, fa, xb, fb = xn, fn, xm, fm
            elif np.signbit(fn) != np.signbit(fa):
                xb, fb = xn, fn
            else:
                xa, fa = xn, fn
            tol = xtol + rtol * xn
            if fn == 0.0 or abs(xb - xa) < tol:
                return xn, True
        return xn, False

    return solve
