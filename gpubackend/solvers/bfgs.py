"""BFGS quasi-Newton minimisation with scipy's line search (Moré-Thuente, then strong Wolfe).

Follows scipy's ``_minimize_bfgs``: inverse-Hessian update, initial step guess
``dx ~ 1``, convergence on the infinity norm of the gradient (``gtol``), and
``xrtol`` on the step. ``fun(x, args)`` returns ``(f, grad)`` in float64.

The iterate and the inverse Hessian are updated in place with explicit loops:
for the small problems these ops solve, numpy temporaries and BLAS calls cost
more than the arithmetic, and the helpers are inlined so that no array
crosses a call (each crossing is an atomic reference-count update).
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers import minimize_maxiter
from gpubackend.solvers.small_vectors import dot, max_abs, norm
from gpubackend.solvers.wolfe12 import make_wolfe12

# The step bounds scipy's BFGS gives its Moré-Thuente search.
_STEP_MIN, _STEP_MAX = 1e-100, 1e100


@numba_njit(inline="always")
def _descent_direction(hess_inv, gk, pk):
    """``pk = -hess_inv @ gk``."""
    n = gk.shape[0]
    for i in range(n):
        total = 0.0
        for j in range(n):
            total += hess_inv[i, j] * gk[j]
        pk[i] = -total


@numba_njit(inline="always")
def _update_inverse_hessian(hess_inv, sk, yk, hy):
    """H <- (I - r s y^T) H (I - r y s^T) + r s s^T, expanded to avoid n^3 products."""
    n = sk.shape[0]
    rhok_inv = dot(yk, sk)
    rhok = 1000.0 if rhok_inv == 0.0 else 1.0 / rhok_inv
    for i in range(n):
        total = 0.0
        for j in range(n):
            total += hess_inv[i, j] * yk[j]
        hy[i] = total
    ss_coefficient = rhok * rhok * dot(yk, hy) + rhok
    for i in range(n):
        for j in range(n):
            hess_inv[i, j] += (
                -rhok * (hy[i] * sk[j] + sk[i] * hy[j]) + ss_coefficient * sk[i] * sk[j]
            )


def make_bfgs(fun: Callable) -> Callable:
    """``solve(x0, args, settings: LineSearchSettings) -> (x, converged)``."""
    line_search = make_wolfe12(fun, _STEP_MIN, _STEP_MAX)

    @numba_njit
    def solve(x0, args, settings):
        gtol, c1, c2, xrtol = settings.gtol, settings.c1, settings.c2, settings.xrtol
        xk = x0.astype(np.float64)
        n = xk.shape[0]
        maxiter = minimize_maxiter(settings.maxiter, n)
        fk, gk = fun(xk, args)
        hess_inv = np.eye(n)
        pk, sk, yk, hy, trial_x = np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n)
        old_old_fk = fk + norm(gk) / 2.0
        gnorm = max_abs(gk)
        k = 0
        while gnorm > gtol and k < maxiter:
            _descent_direction(hess_inv, gk, pk)
            found, alpha, f_new, g_new = line_search(
                xk, pk, args, fk, gk, old_old_fk, c1, c2, trial_x, None
            )
            if not found:
                return xk, False
            for i in range(n):
                sk[i] = alpha * pk[i]
                xk[i] = xk[i] + sk[i]
                yk[i] = g_new[i] - gk[i]
            gk = g_new
            old_old_fk = fk
            fk = f_new
            k += 1
            gnorm = max_abs(gk)
            if gnorm <= gtol:
                break
            # With scipy's default xrtol=0 the bound is 0 whatever |x|: no norm to take.
            step_bound = xrtol * (xrtol + norm(xk)) if xrtol > 0.0 else 0.0
            if alpha * norm(pk) <= step_bound:
                # scipy reports a step below ``xrtol`` as a successful exit.
                break
            if not np.isfinite(fk):
                return xk, False
            _update_inverse_hessian(hess_inv, sk, yk, hy)
        # scipy's verdict: out of iterations is a failure even where the last one converged
        # (maxiter=0 at the optimum included), and so is a NaN.
        return xk, k < maxiter and not (np.isnan(gnorm) or np.isnan(fk) or np.isnan(xk).any())

    return solve
