"""Trust-region minimisation with the exact subproblem solution (scipy ``method="trust-exact"``).

The outer loop follows scipy's ``_minimize_trust_region`` (radius
``initial_trust_radius`` to start, at most ``max_trust_radius``, acceptance
``rho > eta``, convergence on ``|g|_2 < gtol``). The
subproblem ``min g.p + p.H p / 2, |p| <= radius`` is solved exactly from the
eigendecomposition of ``H`` (scipy iterates on Cholesky factors; both find the
same global minimiser). ``fun(x, args)`` returns ``(f, grad, hess)``.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers import minimize_maxiter

_SECULAR_ITERS = 100


@numba_njit
def _step_for_shift(eigenvalues, gradient_coords, shift):
    return -gradient_coords / (eigenvalues + shift)


@numba_njit
def exact_subproblem(hessian, gradient, radius):
    """``(p, hits_boundary)`` minimising the quadratic model inside the ball of ``radius``."""
    eigenvalues, vectors = np.linalg.eigh(hessian)
    gradient_coords = vectors.T @ gradient
    lowest = eigenvalues[0]
    if lowest > 0.0:
        coords = _step_for_shift(eigenvalues, gradient_coords, 0.0)
        if np.linalg.norm(coords) <= radius:
            return vectors @ coords, False
    # On the boundary: find shift >= max(0, -lowest) with |p(shift)| = radius.
    low = max(0.0, -lowest)
    scale = np.linalg.norm(gradient) / radius + abs(lowest) + 1.0
    high = low + scale
    while np.linalg.norm(_step_for_shift(eigenvalues, gradient_coords, high)) > radius:
        high = low + 2.0 * (high - low)
    # The hard case: |p| stays below the radius even as the shift approaches -lowest.
    nearly_low = low + 1e-12 * scale
    if np.linalg.norm(_step_for_shift(eigenvalues, gradient_coords, nearly_low)) <= radius:
        coords = np.zeros_like(gradient_coords)
        for i in range(coords.shape[0]):
            if eigenvalues[i] + low > 1e-12 * scale:
                coords[i] = -gradient_coords[i] / (eigenvalues[i] + low)
        remaining = radius**2 - np.dot(coords, coords)
        coords[0] += np.sqrt(max(remaining, 0.0))
        return vectors @ coords, True
    low = nearly_low
    for _ in range(_SECULAR_ITERS):
        mid = 0.5 * (low + high)
        if np.linalg.norm(_step_for_shift(eigenvalues, gradient_coords, mid)) > radius:
            low = mid
        else:
            high = mid
        if high - low <= 1e-14 * max(1.0, high):
            break
    return vectors @ _step_for_shift(eigenvalues, gradient_coords, high), True


@numba_njit
def _refuse_non_finite(hessian):
    """scipy checks every Hessian it factors (``scipy.linalg`` with ``check_finite``)."""
    if not np.all(np.isfinite(hessian)):
        raise ValueError("array must not contain infs or NaNs")


def make_trust_exact(fun: Callable) -> Callable:
    """``solve(x0, args, settings: TrustRegionSettings) -> (x, converged)``; a non-finite Hessian
    (a NaN start) raises scipy's ``ValueError``."""

    @numba_njit
    def solve(x0, args, settings):
        gtol, radius = settings.gtol, settings.initial_trust_radius
        x = x0.astype(np.float64)
        maxiter = minimize_maxiter(settings.maxiter, x.shape[0])
        f, g, h = fun(x, args)
        _refuse_non_finite(h)
        k = 0
        while np.linalg.norm(g) >= gtol:
            step, hits_boundary = exact_subproblem(h, g, radius)
            predicted = -(np.dot(g, step) + 0.5 * np.dot(step, h @ step))
            if predicted <= 0.0:
                return x, False
            x_new = x + step
            f_new, g_new, h_new = fun(x_new, args)
            _refuse_non_finite(h_new)
            rho = (f - f_new) / predicted
            if rho < 0.25:
                radius *= 0.25
            elif rho > 0.75 and hits_boundary:
                radius = min(2.0 * radius, settings.max_trust_radius)
            if rho > settings.eta:
                x, f, g, h = x_new, f_new, g_new, h_new
            k += 1
            if k >= maxiter:
                return x, False
        return x, True

    return solve
