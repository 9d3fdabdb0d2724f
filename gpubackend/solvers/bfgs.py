"""BFGS quasi-Newton minimisation with a strong-Wolfe line search.

Follows scipy's ``_minimize_bfgs``: inverse-Hessian update, initial step guess
``dx ~ 1``, convergence on the infinity norm of the gradient (``gtol``), and
``xrtol`` on the step. ``fun(x, args)`` returns ``(f, grad)`` in float64.
"""

from collections.abc import Callable

import numpy as np

from gpubackend.solvers.budgets import minimize_maxiter
from gpubackend.solvers.jit import solver_njit
from gpubackend.solvers.line_search import make_strong_wolfe


def make_bfgs(fun: Callable) -> Callable:
    """``solve(x0, args, settings: LineSearchSettings) -> (x, converged)``."""
    line_search = make_strong_wolfe(fun)

    @solver_njit
    def solve(x0, args, settings):
        gtol, c1, c2, xrtol = settings.gtol, settings.c1, settings.c2, settings.xrtol
        xk = x0.astype(np.float64)
        n = xk.shape[0]
        maxiter = minimize_maxiter(settings.maxiter, n)
        fk, gk = fun(xk, args)
        hess_inv = np.eye(n)
        old_old_fk = fk + np.linalg.norm(gk) / 2.0
        gnorm = np.max(np.abs(gk)) if n else 0.0
        k = 0
        while gnorm > gtol and k < maxiter:
            pk = -(hess_inv @ gk)
            found, alpha, f_new, g_new = line_search(xk, pk, args, fk, gk, old_old_fk, c1, c2)
            if not found:
                return xk, False
            sk = alpha * pk
            xk = xk + sk
            yk = g_new - gk
            gk = g_new
            old_old_fk = fk
            fk = f_new
            k += 1
            gnorm = np.max(np.abs(gk))
            if gnorm <= gtol:
                break
            if alpha * np.linalg.norm(pk) <= xrtol * (xrtol + np.linalg.norm(xk)):
                # scipy reports a step below ``xrtol`` as a successful exit.
                return xk, True
            if not np.isfinite(fk):
                return xk, False
            rhok_inv = np.dot(yk, sk)
            rhok = 1000.0 if rhok_inv == 0.0 else 1.0 / rhok_inv
            # H <- (I - r s y^T) H (I - r y s^T) + r s s^T, expanded to avoid n^3 products.
            hy = hess_inv @ yk
            yhy = np.dot(yk, hy)
            hess_inv = (
                hess_inv
                - rhok * (np.outer(hy, sk) + np.outer(sk, hy))
                + (rhok * rhok * yhy + rhok) * np.outer(sk, sk)
            )
        return xk, gnorm <= gtol

    return solve
