"""Golden-section search for scalar minimisation (port of scipy's ``_minimize_scalar_golden``)."""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.bracket import make_bracket

_RATIO = 0.61803399
_COMPLEMENT = 1.0 - _RATIO


def make_golden(fun: Callable) -> Callable:
    """``solve(args, x0, bracket, settings: BracketMinimizeSettings) -> (x, converged)``; ``x0`` is
    unused, as in scipy."""
    find_bracket = make_bracket(fun)

    @numba_njit
    def solve(args, x0, bracket, settings):
        xtol, maxiter = settings.xtol, settings.maxiter
        valid, xa, xb, xc, _fa, _fb, _fc = find_bracket(args, bracket)
        if not valid:
            return xb, False
        x3 = xc
        x0_ = xa
        if abs(xc - xb) > abs(xb - xa):
            x1 = xb
            x2 = xb + _COMPLEMENT * (xc - xb)
        else:
            x2 = xb
            x1 = xb - _COMPLEMENT * (xb - xa)
        f1 = fun(x1, args)
        f2 = fun(x2, args)
        iterations = 0
        for _ in range(maxiter):
            if abs(x3 - x0_) <= xtol * (abs(x1) + abs(x2)):
                break
            if f2 < f1:
                x0_, x1 = x1, x2
                x2 = _RATIO * x1 + _COMPLEMENT * x3
                f1 = f2
                f2 = fun(x2, args)
            else:
                x3, x2 = x2, x1
                x1 = _RATIO * x2 + _COMPLEMENT * x0_
                f2 = f1
                f1 = fun(x1, args)
            iterations += 1
        xmin, fmin = (x1, f1) if f1 < f2 else (x2, f2)
        return xmin, iterations < maxiter and not (np.isnan(xmin) or np.isnan(fmin))

    return solve
