"""Bisection root finding (port of scipy's ``bisect.c``)."""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.bracket_start import make_bracket_start


def make_bisect(fun: Callable) -> Callable:
    """``solve(args, x0, bracket, settings: RootScalarSettings) -> (x, converged)``; ``x0`` is
    unused.

    A bracket without a sign change raises scipy's ``ValueError``.
    """
    start = make_bracket_start(fun)

    @numba_njit
    def solve(args, x0, bracket, settings):
        xtol, rtol, maxiter = settings.xtol, settings.rtol, settings.maxiter
        fa, _, stops, x, converged = start(bracket, args)
        if stops:
            return x, converged
        xa, xb = bracket[0], bracket[1]
        dm = xb - xa
        for _ in range(maxiter):
            dm *= 0.5
            xm = xa + dm
            fm = fun(xm, args)
            # scipy's root_scalar stops at a NaN value of f, there, not converged.
            if np.isnan(fm):
                return xm, False
            if fm * fa >= 0:
                xa = xm
            if fm == 0 or abs(dm) < xtol + rtol * abs(xm):
                return xm, True
        return xa, False

    return solve
