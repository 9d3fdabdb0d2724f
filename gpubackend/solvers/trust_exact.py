"""The exact trust-region subproblem (scipy ``method="trust-exact"``; the loop around it is
`trust_region_minimize`).

The subproblem ``min g.p + p.H p / 2, |p| <= radius`` is solved exactly from the
eigendecomposition of ``H`` (scipy iterates on Cholesky factors; both find the
same global minimiser).
"""

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.small_vectors import all_finite

_SECULAR_ITERS = 100


@numba_njit
def _step_for_shift(eigenvalues, gradient_coords, shift):
    return -gradient_coords / (eigenvalues + shift)


@numba_njit
def exact_subproblem(hessian, gradient, radius):
    """``(p, hits_boundary, solved)``: the minimiser of the model inside the ball of ``radius``."""
    eigenvalues, vectors = np.linalg.eigh(hessian)
    gradient_coords = vectors.T @ gradient
    lowest = eigenvalues[0]
    if lowest > 0.0:
        coords = _step_for_shift(eigenvalues, gradient_coords, 0.0)
        if np.linalg.norm(coords) <= radius:
            return vectors @ coords, False, True
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
        return vectors @ coords, True, True
    low = nearly_low
    for _ in range(_SECULAR_ITERS):
        mid = 0.5 * (low + high)
        if np.linalg.norm(_step_for_shift(eigenvalues, gradient_coords, mid)) > radius:
            low = mid
        else:
            high = mid
        if high - low <= 1e-14 * max(1.0, high):
            break
    return vectors @ _step_for_shift(eigenvalues, gradient_coords, high), True, True


@numba_njit
def refuse_non_finite(hessian):
    """scipy checks every Hessian it factors (``scipy.linalg`` with ``check_finite``)."""
    if not all_finite(hessian):
        raise ValueError("array must not contain infs or NaNs")
