"""Levenberg-Marquardt for ``F(x) = 0`` with an analytic Jacobian (scipy ``root(method="lm")``).

MINPACK ``lmder`` semantics for the tolerances: success when the relative
reduction of the sum of squares (actual and predicted) is at most ``ftol``,
when the relative step is at most ``xtol``, when the gradient's cosine with
the residual is at most ``gtol``, or when the residual is exactly zero. The
damping uses the classic scaled update (Marquardt's diagonal, Nielsen's
gain-ratio rule) instead of MINPACK's trust-region ``lmpar``, so MINPACK's
``factor`` option is not supported.
"""

from collections.abc import Callable

import numpy as np

from gpubackend.solvers.budgets import minpack_maxfev
from gpubackend.solvers.jit import solver_njit
from gpubackend.solvers.least_squares_step import all_finite



def make_levenberg_marquardt(fun: Callable) -> Callable:
    """``solve(x0, args, settings: LMSettings) -> (x, converged)``; ``fun`` returns ``(F, J)``.

    ``settings.maxiter`` counts evaluations of ``fun``, as scipy's does (MINPACK's ``maxfev``).
    """

    @solver_njit
    def solve(x0, args, settings):
        xtol, ftol, gtol = settings.xtol, settings.ftol, settings.gtol
        x = x0.astype(np.float64)
        n = x.shape[0]
        maxfev = minpack_maxfev(settings.maxiter, n)
        residual, jacobian = fun(x, args)
        nfev = 1
        if not (all_finite(residual) and all_finite(jacobian)):
            return x, False
        fnorm = np.linalg.norm(residual)
        scale = np.sqrt(np.sum(jacobian * jacobian, axis=0))
        scale[scale == 0.0] = 1.0
        # Marquardt's dimensionless damping of the scaled normal equations.
        damping = 1e-3
        growth = 2.0
        while True:
            if fnorm == 0.0:
                return x, True
            gradient = jacobian.T @ residual
            column_norms = np.sqrt(np.sum(jacobian * jacobian, axis=0))
            if gtol > 0.0:
                cosine = 0.0
                for j in range(n):
                    if column_norms[j] > 0.0:
                        cosine = max(cosine, abs(gradient[j]) / (column_norms[j] * fnorm))
                if cosine <= gtol:
                    return x, True
            normal = jacobian.T @ jacobian
            system = normal + damping * np.diag(scale * scale)
            step = np.linalg.lstsq(system, -gradient)[0]
            if not all_finite(step):
                return x, False
            x_new = x + step
            residual_new, jacobian_new = fun(x_new, args)
            nfev += 1
            finite = all_finite(residual_new) and all_finite(jacobian_new)
            fnorm_new = np.linalg.norm(residual_new) if finite else np.inf
            actual = 1.0 - (fnorm_new / fnorm) ** 2 if fnorm_new < fnorm else -1.0
            predicted = 1.0 - (np.linalg.norm(residual + jacobian @ step) / fnorm) ** 2
            ratio = actual / predicted if predicted > 0.0 else 0.0
            scaled_step = np.linalg.norm(scale * step)
            if ratio > 1e-4:
                x = x_new
                residual, jacobian = residual_new, jacobian_new
                fnorm = fnorm_new
                scale = np.maximum(scale, np.sqrt(np.sum(jacobian * jacobian, axis=0)))
                damping *= max(1.0 / 3.0, 1.0 - (2.0 * ratio - 1.0) ** 3)
                growth = 2.0
            else:
                damping *= growth
                growth *= 2.0
            small_reduction = abs(actual) <= ftol and predicted <= ftol and ratio <= 2.0
            small_step = scaled_step <= xtol * np.linalg.norm(scale * x)
            if small_reduction or small_step or fnorm == 0.0:
                return x, True
            if nfev >= maxfev:
                return x, False

    return solve
