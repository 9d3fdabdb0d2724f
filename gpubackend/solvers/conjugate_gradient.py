"""Nonlinear conjugate gradients, Polak-Ribière+ (port of scipy's ``_minimize_cg``).

scipy's line search (Moré-Thuente, then strong Wolfe, ``c2=0.4`` by default)
with its extra condition: the next direction must be a sufficient descent
direction (Gilbert & Nocedal), unless the step already converges. Converges
when the infinity norm of the gradient is at most ``gtol``. ``fun(x, args)``
returns ``(f, grad)`` in float64.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers import minimize_maxiter
from gpubackend.solvers.small_vectors import dot, max_abs, norm
from gpubackend.solvers.wolfe12 import make_wolfe12

# The step bounds scipy's CG gives its Moré-Thuente search.
_STEP_MIN, _STEP_MAX = 1e-100, 1e100
# scipy's sufficient-descent constant (``sigma_3``).
_SUFFICIENT_DESCENT = 0.01


@numba_njit(inline="always")
def _polak_ribiere_beta(gk, g_new):
    """``max(0, (g_new - gk).g_new / gk.gk)``."""
    total = 0.0
    for i in range(gk.shape[0]):
        total += (g_new[i] - gk[i]) * g_new[i]
    return max(0.0, total / dot(gk, gk))


@numba_njit(inline="always")
def _descent_condition(gk, pk, g_new, gtol):
    """scipy's ``descent_condition``: the step converges, or the next direction descends enough."""
    if max_abs(g_new) <= gtol:
        return True
    beta = _polak_ribiere_beta(gk, g_new)
    slope = 0.0
    for i in range(gk.shape[0]):
        slope += (-g_new[i] + beta * pk[i]) * g_new[i]
    return slope <= -_SUFFICIENT_DESCENT * dot(g_new, g_new)


def make_conjugate_gradient(fun: Callable) -> Callable:
    """``solve(x0, args, settings: LineSearchSettings) -> (x, converged)``."""
    line_search = make_wolfe12(fun, _STEP_MIN, _STEP_MAX, _descent_condition)

    @numba_njit
    def solve(x0, args, settings):
        gtol, c1, c2 = settings.gtol, settings.c1, settings.c2
        xk = x0.astype(np.float64)
        n = xk.shape[0]
        maxiter = minimize_maxiter(settings.maxiter, n)
        fk, gk = fun(xk, args)
        old_old_fk = fk + norm(gk) / 2.0
        pk = -gk
        trial_x = np.empty(n)
        gnorm = max_abs(gk)
        k = 0
        while gnorm > gtol and k < maxiter:
            found, alpha, f_new, g_new = line_search(
                xk, pk, args, fk, gk, old_old_fk, c1, c2, trial_x, gtol
            )
            if not found:
                return xk, False
            beta = _polak_ribiere_beta(gk, g_new)
            for i in range(n):
                xk[i] = xk[i] + alpha * pk[i]
                pk[i] = -g_new[i] + beta * pk[i]
            gk = g_new
            old_old_fk = fk
            fk = f_new
            gnorm = max_abs(gk)
            k += 1
        # scipy's verdict: out of iterations is a failure even where the last one converged.
        return xk, k < maxiter and not (np.isnan(gnorm) or np.isnan(fk) or np.isnan(xk).any())

    return solve
