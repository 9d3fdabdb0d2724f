"""scipy's CG-Steihaug (``trust-ncg``) and dogleg trust-region subproblems.

Each minimises the model ``g.p + p.H p / 2`` over ``|p| <= radius`` and returns
``(p, hits_boundary, solved)`` (see `trust_region_minimize`).
"""

import math

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.small_vectors import dot, norm
from gpubackend.solvers.trust_exact import refuse_non_finite


@numba_njit
def boundary_intersections(z, d, radius):
    """The two ``t`` (low, high) with ``|z + t d| = radius``, in scipy's rounding-safe form."""
    a = dot(d, d)
    b = 2.0 * dot(z, d)
    c = dot(z, z) - radius**2
    sqrt_discriminant = np.sqrt(b * b - 4.0 * a * c)
    aux = b + math.copysign(sqrt_discriminant, b)
    if aux == 0.0:
        # z on the boundary and d = 0 along it: numpy's 0 / 0, which Numba would raise on.
        return np.nan, np.nan
    ta, tb = -aux / (2.0 * a), -2.0 * c / aux
    return min(ta, tb), max(ta, tb)


@numba_njit
def _model(hessian, gradient, p):
    return dot(gradient, p) + 0.5 * dot(p, hessian @ p)


@numba_njit
def steihaug_cg_subproblem(hessian, gradient, radius):
    """Nocedal & Wright's algorithm 7.2, as scipy's ``CGSteihaugSubproblem``."""
    gradient_norm = norm(gradient)
    # scipy's early exit for |g| below this tolerance can never fire: it is not ported.
    tolerance = min(0.5, np.sqrt(gradient_norm)) * gradient_norm
    z = np.zeros_like(gradient)
    r = gradient.copy()
    d = -r
    while True:
        bd = hessian @ d
        curvature = dot(d, bd)
        if curvature <= 0.0:
            # Negative curvature: the boundary point along d with the lower model value.
            ta, tb = boundary_intersections(z, d, radius)
            pa, pb = z + ta * d, z + tb * d
            if _model(hessian, gradient, pa) < _model(hessian, gradient, pb):
                return pa, True, True
            return pb, True, True
        r_squared = dot(r, r)
        alpha = r_squared / curvature
        z_next = z + alpha * d
        if norm(z_next) >= radius:
            _, tb = boundary_intersections(z, d, radius)
            return z + tb * d, True, True
        r = r + alpha * bd
        r_next_squared = dot(r, r)
        if np.sqrt(r_next_squared) < tolerance:
            return z_next, False, True
        d = -r + (r_next_squared / r_squared) * d
        z = z_next


@numba_njit
def _cholesky_solve(hessian, rhs):
    """``(x, ok)`` with ``H x = rhs``; ``ok`` is False where ``H`` is not positive definite (LAPACK
    ``potrf`` failing)."""
    n = rhs.shape[0]
    lower = np.zeros((n, n))
    for j in range(n):
        pivot = hessian[j, j]
        for k in range(j):
            pivot -= lower[j, k] * lower[j, k]
        if not pivot > 0.0:
            return rhs, False
        lower[j, j] = np.sqrt(pivot)
        for i in range(j + 1, n):
            total = hessian[i, j]
            for k in range(j):
                total -= lower[i, k] * lower[j, k]
            lower[i, j] = total / lower[j, j]
    y = np.empty(n)
    for i in range(n):
        total = rhs[i]
        for k in range(i):
            total -= lower[i, k] * y[k]
        y[i] = total / lower[i, i]
    x = np.empty(n)
    for i in range(n - 1, -1, -1):
        total = y[i]
        for k in range(i + 1, n):
            total -= lower[k, i] * x[k]
        x[i] = total / lower[i, i]
    return x, True


@numba_njit
def dogleg_subproblem(hessian, gradient, radius):
    """Nocedal & Wright's dogleg (2nd ed., p. 73), as scipy's ``DoglegSubproblem``: unsolved where
    ``H`` is not positive definite; a non-finite ``H`` raises scipy's ``ValueError``."""
    refuse_non_finite(hessian)
    newton, positive_definite = _cholesky_solve(hessian, -gradient)
    if not positive_definite:
        return newton, False, False
    if norm(newton) < radius:
        return newton, False, True
    cauchy = -(dot(gradient, gradient) / dot(gradient, hessian @ gradient)) * gradient
    cauchy_norm = norm(cauchy)
    if cauchy_norm >= radius:
        return cauchy * (radius / cauchy_norm), True, True
    _, tb = boundary_intersections(cauchy, newton - cauchy, radius)
    return cauchy + tb * (newton - cauchy), True, True
