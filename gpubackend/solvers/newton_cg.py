"""Line-search Newton-CG minimisation with an analytic Hessian (port of scipy's
``_minimize_newtoncg``).

The Newton system is solved by truncated conjugate gradients (forcing term
``min(0.5, sqrt(|g|_1)) |g|_1``, stopping at negative curvature), followed by
scipy's line search (Moré-Thuente, then strong Wolfe). Converges when the 1-norm of the last update
is at most ``n * xtol`` (scipy's ``xtol`` is an average over the ``n`` variables).
``fun(x, args)`` returns ``(f, grad, hess)``.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers import minimize_maxiter
from gpubackend.solvers.wolfe12 import make_wolfe12

_EPS = np.finfo(np.float64).eps
# The step bounds scipy's Newton-CG leaves its Moré-Thuente search (line_search_wolfe1's defaults).
_STEP_MIN, _STEP_MAX = 1e-8, 50.0


@numba_njit
def truncated_cg(hessian, gradient):
    """``(ok, p)``: approximate solution of ``H p = -g``; ``ok`` is False if CG ran out of
    iterations."""
    maggrad = np.sum(np.abs(gradient))
    termcond = min(0.5, np.sqrt(maggrad)) * maggrad
    step = np.zeros_like(gradient)
    residual = gradient.copy()
    direction = -residual
    dri0 = np.dot(residual, residual)
    for i in range(20 * gradient.shape[0]):
        if np.sum(np.abs(residual)) <= termcond:
            return True, step
        hp = hessian @ direction
        curvature = np.dot(direction, hp)
        if 0.0 <= curvature <= 3.0 * _EPS:
            return True, step
        if curvature < 0.0:
            if i == 0:
                # Negative curvature at once: a scaled steepest-descent step.
                return True, (dri0 / -curvature) * -gradient
            return True, step
        alpha = dri0 / curvature
        step = step + alpha * direction
        residual = residual + alpha * hp
        dri1 = np.dot(residual, residual)
        direction = -residual + (dri1 / dri0) * direction
        dri0 = dri1
    return False, step


def make_newton_cg(fun: Callable) -> Callable:
    """``solve(x0, args, settings: NewtonCGSettings) -> (x, converged)``."""

    @numba_njit
    def value_and_gradient(x, args):
        f, g, _ = fun(x, args)
        return f, g

    line_search = make_wolfe12(value_and_gradient, _STEP_MIN, _STEP_MAX)

    @numba_njit
    def solve(x0, args, settings):
        c1, c2 = settings.c1, settings.c2
        xk = x0.astype(np.float64)
        xtol = settings.xtol * xk.shape[0]
        maxiter = minimize_maxiter(settings.maxiter, xk.shape[0])
        fk, gk, hk = fun(xk, args)
        trial_x = np.empty_like(xk)
        old_fk = np.nan
        update_size = 2.0 * xtol
        k = 0
        while update_size > xtol:
            if k >= maxiter:
                return xk, False
            ok, pk = truncated_cg(hk, gk)
            if not ok:
                return xk, False
            found, alpha, _f_new, _g_new = line_search(
                xk, pk, args, fk, gk, old_fk, c1, c2, trial_x, None
            )
            if not found:
                return xk, False
            update = alpha * pk
            xk = xk + update
            old_fk = fk
            fk, gk, hk = fun(xk, args)
            update_size = np.sum(np.abs(update))
            k += 1
            if np.isnan(fk) or np.isnan(update_size):
                return xk, False
        return xk, True

    return solve
