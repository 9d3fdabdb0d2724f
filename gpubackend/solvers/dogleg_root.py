"""Powell's hybrid (dogleg trust-region) method for ``F(x) = 0`` with an analytic Jacobian.

The method scipy's ``root(method="hybr")`` runs (MINPACK ``hybrj``), with the
Jacobian evaluated at every accepted point instead of Broyden-updated, since
the lowered inner graph returns it with the residual anyway. Trust-region
updates and the convergence test (``delta <= xtol * |x|``) follow MINPACK.
"""

from collections.abc import Callable

import numpy as np

from gpubackend.solvers.budgets import minpack_maxfev
from gpubackend.solvers.jit import solver_njit
from gpubackend.solvers.least_squares_step import all_finite, gauss_newton_step
from gpubackend.solvers.small_vectors import dot, matvec, norm

_EPS = np.finfo(np.float64).eps


@solver_njit
def dogleg_step(jacobian, residual, gauss_newton, delta):
    """Point of the dogleg path (steepest descent then Gauss-Newton) at length ``delta``."""
    if norm(gauss_newton) <= delta:
        return gauss_newton
    gradient = matvec(jacobian.T, residual)
    gradient_norm = norm(gradient)
    if gradient_norm == 0.0:
        return gauss_newton * (delta / norm(gauss_newton))
    jg = matvec(jacobian, gradient)
    cauchy = -(gradient_norm**2 / dot(jg, jg)) * gradient
    cauchy_norm = norm(cauchy)
    if cauchy_norm >= delta:
        return cauchy * (delta / cauchy_norm)
    # Walk from the Cauchy point towards Gauss-Newton until |p| = delta.
    d = gauss_newton - cauchy
    a = dot(d, d)
    b = 2.0 * dot(cauchy, d)
    c = cauchy_norm**2 - delta**2
    tau = (-b + np.sqrt(b * b - 4.0 * a * c)) / (2.0 * a)
    return cauchy + tau * d


def make_dogleg_root(fun: Callable) -> Callable:
    """``solve(x0, args, settings: HybrSettings) -> (x, converged)``; ``fun`` returns ``(F, J)``."""

    @solver_njit
    def solve(x0, args, settings):
        xtol, factor = settings.xtol, settings.factor
        x = x0.astype(np.float64)
        maxfev = minpack_maxfev(settings.maxfev, x.shape[0])
        residual, jacobian = fun(x, args)
        nfev = 1
        fnorm = norm(residual)
        xnorm = norm(x)
        delta = factor * xnorm if xnorm > 0 else factor
        first = True
        successes = 0
        while True:
            if fnorm == 0.0:
                return x, True
            ok, gauss_newton = gauss_newton_step(jacobian, residual)
            if not ok:
                return x, False
            step = dogleg_step(jacobian, residual, gauss_newton, delta)
            step_norm = norm(step)
            if first:
                delta = min(delta, step_norm)
                first = False
            x_new = x + step
            residual_new, jacobian_new = fun(x_new, args)
            nfev += 1
            fnorm_new = norm(residual_new) if all_finite(residual_new) else np.inf
            actual = 1.0 - (fnorm_new / fnorm) ** 2 if fnorm_new < fnorm else -1.0
            predicted_residual = residual + matvec(jacobian, step)
            predicted = 1.0 - (norm(predicted_residual) / fnorm) ** 2
            ratio = actual / predicted if predicted > 0.0 else 0.0
            if ratio < 0.1:
                successes = 0
                delta = 0.5 * delta
            else:
                successes += 1
                if ratio >= 0.5 or successes > 1:
                    delta = max(delta, step_norm / 0.5)
                if abs(ratio - 1.0) <= 0.1:
                    delta = step_norm / 0.5
            if ratio >= 1e-4:
                x = x_new
                residual, jacobian = residual_new, jacobian_new
                fnorm = fnorm_new
                xnorm = norm(x)
            if delta <= xtol * xnorm or fnorm == 0.0:
                return x, True
            if nfev >= maxfev:
                return x, False
            if 0.1 * max(0.1 * delta, step_norm) <= _EPS * xnorm:
                # xtol is too small: no further improvement in x is possible.
                return x, False

    return solve
