"""Reductions over short float64 vectors as plain loops.

``np.dot`` and ``np.linalg.norm`` go through BLAS in Numba, whose per-call
overhead dwarfs the arithmetic on the few elements an optimize op works on.
They are inlined into their callers (Numba's ``inline="always"``): a call
passing arrays costs reference-count updates (atomic) that outweigh these
loops, and inlined, Numba prunes them.
"""

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit


@numba_njit(inline="always")
def dot(a, b) -> float:
    total = 0.0
    for i in range(a.shape[0]):
        total += a[i] * b[i]
    return total


@numba_njit(inline="always")
def max_abs(a) -> float:
    """Infinity norm; 0 for an empty vector, NaN if any element is NaN (as
    ``np.max(np.abs(a))``)."""
    largest = 0.0
    for i in range(a.shape[0]):
        value = abs(a[i])
        if np.isnan(value):
            return value
        largest = max(largest, value)
    return largest


@numba_njit(inline="always")
def norm(a) -> float:
    """Euclidean norm; rescaled by the largest element only where squaring over- or underflows (as
    BLAS ``nrm2``)."""
    total = dot(a, a)
    if 1e-280 < total < 1e280:
        return np.sqrt(total)
    scale = max_abs(a)
    if scale == 0.0 or not np.isfinite(scale):
        return scale
    total = 0.0
    for i in range(a.shape[0]):
        scaled = a[i] / scale
        total += scaled * scaled
    return scale * np.sqrt(total)


@numba_njit(inline="always")
def matvec(a, v):
    """``a @ v`` for a matrix ``a`` (a transposed view too)."""
    out = np.zeros(a.shape[0])
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[i] += a[i, j] * v[j]
    return out


@numba_njit
def all_finite(a) -> bool:
    for value in a.flat:
        if not np.isfinite(value):
            return False
    return True
