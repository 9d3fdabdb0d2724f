"""Newton-Raphson and Halley root finding for a scalar equation (scipy's ``newton`` with
``fprime``, and with ``fprime2`` too)."""

from collections.abc import Callable

from pytensor.link.numba.dispatch.basic import numba_njit


@numba_njit(inline="always")
def newton_step(values) -> float:
    fval, fder = values[0], values[1]
    return fval / fder


@numba_njit(inline="always")
def halley_step(values) -> float:
    """Newton's step divided by ``1 - f f'' / (2 f'^2)`` where that stays within (0, 2), as scipy
    takes it (further out Halley would step away from Newton's direction)."""
    fval, fder, fder2 = values[0], values[1], values[2]
    step = fval / fder
    adjustment = step * fder2 / fder / 2
    if abs(adjustment) < 1:
        step /= 1.0 - adjustment
    return step


def _make_newton_iteration(fun: Callable, step_of: Callable) -> Callable:
    @numba_njit
    def solve(args, x0, interval, settings):
        xtol, rtol, maxiter = settings.xtol, settings.rtol, settings.maxiter
        p0 = x0
        for _ in range(maxiter):
            values = fun(p0, args)
            if values[0] == 0:
                return p0, True
            if values[1] == 0:
                return p0, False
            p = p0 - step_of(values)
            if abs(p - p0) <= xtol + rtol * abs(p0):
                return p, True
            p0 = p
        return p0, False

    return solve


def make_newton_scalar(fun: Callable) -> Callable:
    """``solve(args, x0, interval, settings: RootScalarSettings) -> (x, converged)``.

    ``fun(x, args)`` returns ``(f, f')``; a zero derivative stops with ``converged=False``.
    """
    return _make_newton_iteration(fun, newton_step)


def make_halley(fun: Callable) -> Callable:
    """`make_newton_scalar`'s solver with ``fun(x, args)`` returning ``(f, f', f'')`` and Halley's
    step."""
    return _make_newton_iteration(fun, halley_step)
