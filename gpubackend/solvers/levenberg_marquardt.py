"""Levenberg-Marquardt for ``F(x) = 0`` with an analytic Jacobian (scipy ``root(method="lm")``).

MINPACK ``lmder`` semantics for the tolerances: success when the relative
reduction of the sum of squares (actual and predicted) is at most ``ftol``,
when the relative step is at most ``xtol``, when the gradient's cosine with
the residual is at most ``gtol``, or when the residual is exactly zero. The
damping uses the classic scaled update (Marquardt's diagonal, Nielsen's
gain-ratio rule) instead of MINPACK's trust-region ``lmpar``, so MINPACK's
``factor`` option is not supported.

Every product of an iteration (``J^T F``, ``J^T J``, the column norms, the
predicted residual) is a loop into work arrays allocated once per solve: for
the few equations an optimize op holds, BLAS calls and numpy temporaries cost
more than the arithmetic. The damped normal equations are solved by the
pivoted elimination of `least_squares_step`, not LAPACK's ``lstsq``.
"""

from collections.abc import Callable

import numpy as np

from gpubackend.solvers.budgets import minpack_maxfev
from gpubackend.solvers.jit import solver_njit
from gpubackend.solvers.least_squares_step import all_finite, gauss_newton_step
from gpubackend.solvers.small_vectors import norm

# Marquardt's dimensionless damping of the scaled normal equations, to start.
_INITIAL_DAMPING = 1e-3
# A step is taken when the actual reduction is at least this share of the predicted one.
_ACCEPT_RATIO = 1e-4


@solver_njit
def _column_norms(jacobian, out):
    for j in range(jacobian.shape[1]):
        total = 0.0
        for i in range(jacobian.shape[0]):
            total += jacobian[i, j] * jacobian[i, j]
        out[j] = np.sqrt(total)


@solver_njit
def _damped_normal_equations(jacobian, residual, damping, scale, system, gradient):
    """``system = J^T J + damping * diag(scale^2)`` and ``gradient = J^T F``."""
    m, n = jacobian.shape
    for j in range(n):
        total = 0.0
        for i in range(m):
            total += jacobian[i, j] * residual[i]
        gradient[j] = total
        for k in range(j, n):
            total = 0.0
            for i in range(m):
                total += jacobian[i, j] * jacobian[i, k]
            system[j, k] = total
            system[k, j] = total
        system[j, j] += damping * scale[j] * scale[j]


@solver_njit
def _gradient_cosine(gradient, column_norms, fnorm) -> float:
    """MINPACK's ``gnorm``: the largest cosine between a Jacobian column and the residual."""
    cosine = 0.0
    for j in range(gradient.shape[0]):
        if column_norms[j] > 0.0:
            cosine = max(cosine, abs(gradient[j]) / (column_norms[j] * fnorm))
    return cosine


@solver_njit
def _predicted_residual_norm(jacobian, residual, step) -> float:
    """``|F + J step|``."""
    total = 0.0
    for i in range(jacobian.shape[0]):
        value = residual[i]
        for j in range(jacobian.shape[1]):
            value += jacobian[i, j] * step[j]
        total += value * value
    return np.sqrt(total)


@solver_njit
def _scaled_norm(scale, v) -> float:
    total = 0.0
    for j in range(v.shape[0]):
        total += (scale[j] * v[j]) ** 2
    return np.sqrt(total)


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
        fnorm = norm(residual)
        column_norms, scale, gradient = np.empty(n), np.empty(n), np.empty(n)
        system, x_new = np.empty((n, n)), np.empty(n)
        _column_norms(jacobian, scale)
        for j in range(n):
            if scale[j] == 0.0:
                scale[j] = 1.0
        damping = _INITIAL_DAMPING
        growth = 2.0
        while True:
            if fnorm == 0.0:
                return x, True
            _damped_normal_equations(jacobian, residual, damping, scale, system, gradient)
            if gtol > 0.0:
                _column_norms(jacobian, column_norms)
                if _gradient_cosine(gradient, column_norms, fnorm) <= gtol:
                    return x, True
            ok, step = gauss_newton_step(system, gradient)
            if not ok:
                return x, False
            for j in range(n):
                x_new[j] = x[j] + step[j]
            residual_new, jacobian_new = fun(x_new, args)
            nfev += 1
            finite = all_finite(residual_new) and all_finite(jacobian_new)
            fnorm_new = norm(residual_new) if finite else np.inf
            actual = 1.0 - (fnorm_new / fnorm) ** 2 if fnorm_new < fnorm else -1.0
            predicted = 1.0 - (_predicted_residual_norm(jacobian, residual, step) / fnorm) ** 2
            ratio = actual / predicted if predicted > 0.0 else 0.0
            scaled_step = _scaled_norm(scale, step)
            if ratio > _ACCEPT_RATIO:
                x, x_new = x_new, x
                residual, jacobian = residual_new, jacobian_new
                fnorm = fnorm_new
                _column_norms(jacobian, column_norms)
                for j in range(n):
                    scale[j] = max(scale[j], column_norms[j])
                damping *= max(1.0 / 3.0, 1.0 - (2.0 * ratio - 1.0) ** 3)
                growth = 2.0
            else:
                damping *= growth
                growth *= 2.0
            small_reduction = abs(actual) <= ftol and predicted <= ftol and ratio <= 2.0
            small_step = scaled_step <= xtol * _scaled_norm(scale, x)
            if small_reduction or small_step or fnorm == 0.0:
                return x, True
            if nfev >= maxfev:
                return x, False

    return solve
