"""Secant root finding for a scalar equation (scipy's ``newton`` without ``fprime``)."""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

_DEFAULT_OFFSET = 1e-4


def make_secant(fun: Callable) -> Callable:
    """``solve(args, x0, interval, settings: SecantSettings) -> (x, converged)``.

    ``settings.x1`` NaN means scipy's default second point next to ``x0``.
    """

    @numba_njit
    def solve(args, x0, interval, settings):
        xtol, rtol, maxiter, x1 = settings.xtol, settings.rtol, settings.maxiter, settings.x1
        p0 = x0
        if np.isnan(x1):
            p1 = x0 * (1 + _DEFAULT_OFFSET)
            p1 += _DEFAULT_OFFSET if p1 >= 0 else -_DEFAULT_OFFSET
        else:
            p1 = x1
        if p1 == p0:
            return p0, False
        q0 = fun(p0, args)
        q1 = fun(p1, args)
        if abs(q1) < abs(q0):
            p0, p1, q0, q1 = p1, p0, q1, q0
        p = p1
        for _ in range(maxiter):
            if q1 == q0:
                return (p1 + p0) / 2.0, False
            if abs(q1) > abs(q0):
                p = (-q0 / q1 * p1 + p0) / (1 - q0 / q1)
            else:
                p = (-q1 / q0 * p0 + p1) / (1 - q1 / q0)
            if abs(p - p1) <= xtol + rtol * abs(p1):
                return p, True
            p0, q0 = p1, q1
            p1 = p
            q1 = fun(p1, args)
        return p, False

    return solve
