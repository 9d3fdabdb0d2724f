"""The Gauss-Newton step ``J p = -F`` that never raises.

``np.linalg.solve`` raises inside Numba on a singular Jacobian; a solver must
report failure instead. A square, numerically non-singular system is solved by
Gaussian elimination with partial pivoting written out in loops (LAPACK's
workspace queries and copies cost more than the elimination on the few
equations an optimize op holds); any other system falls back to the
minimum-norm least-squares step, and a non-finite one reports ``ok=False``.
"""

import numpy as np

from gpubackend.solvers.jit import solver_njit

_EPS = np.finfo(np.float64).eps


@solver_njit
def all_finite(a) -> bool:
    for value in a.flat:
        if not np.isfinite(value):
            return False
    return True


@solver_njit
def _pivoted_elimination_step(jacobian, residual):
    """``(ok, p)`` with ``J p = -F`` for square ``J``; ``ok`` is False when a pivot is numerically
    zero."""
    n = residual.shape[0]
    lu = jacobian.copy()
    step = -residual
    largest_pivot = 0.0
    for k in range(n):
        pivot_row = k
        for i in range(k + 1, n):
            if abs(lu[i, k]) > abs(lu[pivot_row, k]):
                pivot_row = i
        if pivot_row != k:
            for j in range(n):
                lu[k, j], lu[pivot_row, j] = lu[pivot_row, j], lu[k, j]
            step[k], step[pivot_row] = step[pivot_row], step[k]
        pivot = lu[k, k]
        largest_pivot = max(largest_pivot, abs(pivot))
        if abs(pivot) <= n * _EPS * largest_pivot:
            return False, step
        for i in range(k + 1, n):
            factor = lu[i, k] / pivot
            for j in range(k + 1, n):
                lu[i, j] -= factor * lu[k, j]
            step[i] -= factor * step[k]
    for k in range(n - 1, -1, -1):
        total = step[k]
        for j in range(k + 1, n):
            total -= lu[k, j] * step[j]
        step[k] = total / lu[k, k]
    return True, step


@solver_njit
def gauss_newton_step(jacobian, residual):
    """``(ok, p)`` with ``p`` minimising ``|J p + F|``; ``ok`` is False on non-finite input."""
    if not (all_finite(jacobian) and all_finite(residual)):
        return False, np.zeros_like(residual)
    if jacobian.shape[0] == jacobian.shape[1] == residual.shape[0] > 0:
        solved, step = _pivoted_elimination_step(jacobian, residual)
        if solved:
            return all_finite(step), step
    step = np.linalg.lstsq(jacobian, -residual)[0]
    return all_finite(step), step
