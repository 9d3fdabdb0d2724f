"""Newton-Raphson root finding for a scalar equation (scipy's ``newton`` with ``fprime``)."""

from collections.abc import Callable

from pytensor.link.numba.dispatch.basic import numba_njit


def make_newton_scalar(fun: Callable) -> Callable:
    """``solve(args, x0, interval, settings: RootScalarSettings) -> (x, converged)``.

    ``fun(x, args)`` returns ``(f, f')``; a zero derivative stops with ``converged=False``.
    """

    @numba_njit
    def solve(args, x0, interval, settings):
        xtol, rtol, maxiter = settings.xtol, settings.rtol, settings.maxiter
        p0 = x0
        for _ in range(maxiter):
            fval, fder = fun(p0, args)
            if fval == 0:
                return p0, True
            if fder == 0:
                return p0, False
            p = p0 - fval / fder
            if abs(p - p0) <= xtol + rtol * abs(p0):
                return p, True
            p0 = p
        return p0, False

    return solve
