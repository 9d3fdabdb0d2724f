"""numpy's products of float64 vectors and matrices in Numba, to the bit.

A solver ported from numpy code whose iterates must be scipy's to the last bit
(COBYQA, whose interpolation systems are nearly singular) cannot sum products in
its own order: numpy's ``@`` runs OpenBLAS, whose kernels accumulate in blocks
(and fuse multiply-adds). Numba's ``np.dot`` runs the same OpenBLAS routines
(scipy's build), so each helper here calls the one numpy would for that
expression: ``ddot`` for a vector product and for a matrix product with one
output, ``dgemv`` for matrix times vector, ``dgemm`` for matrix products; and
OpenBLAS's own strided loop (`strided_dot`) where numpy hands ``ddot`` a
non-contiguous view (a column of a row-major matrix).
"""

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.ieee import ieee_njit


@ieee_njit
def dot(a, b) -> float:
    """``a @ b`` of contiguous vectors (``ddot``)."""
    return np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b))


@numba_njit(fastmath={"contract"})
def strided_dot(a, b) -> float:
    """``a @ b`` where numpy passes a non-contiguous view: OpenBLAS's ``ddot`` loop for strides
    other than 1 (two sums over alternate pairs of four), compiled as OpenBLAS is: products and
    sums contracted into fused multiply-adds where the CPU has them."""
    n = a.shape[0]
    temp1 = 0.0
    temp2 = 0.0
    i = 0
    while i < (n & -4):
        m1 = b[i] * a[i]
        m2 = b[i + 1] * a[i + 1]
        m3 = b[i + 2] * a[i + 2]
        m4 = b[i + 3] * a[i + 3]
        temp1 += m1 + m3
        temp2 += m2 + m4
        i += 4
    while i < n:
        temp1 += b[i] * a[i]
        i += 1
    return temp1 + temp2


@ieee_njit
def norm(a) -> float:
    """``np.linalg.norm(a)`` of a contiguous vector: ``sqrt(a @ a)``."""
    return np.sqrt(dot(a, a))


@ieee_njit
def column_norms(matrix):
    """``np.linalg.norm(matrix, axis=0)``: squares summed down each column, in order."""
    rows, columns = matrix.shape
    out = np.zeros(columns)
    for i in range(rows):
        for k in range(columns):
            out[k] += matrix[i, k] * matrix[i, k]
    return np.sqrt(out)


@ieee_njit
def matvec(matrix, v):
    """``matrix @ v`` (``dgemv``; ``ddot`` for a single row). ``matrix`` may be a transposed
    view."""
    if matrix.shape[0] == 1:
        return np.array([dot(matrix[0], v)])
    return np.dot(matrix, np.ascontiguousarray(v))


@ieee_njit
def vecmat(v, matrix):
    """``v @ matrix`` (``dgemv``; ``ddot`` for a single column)."""
    if matrix.shape[1] == 1:
        return np.array([dot(v, matrix[:, 0])])
    return np.dot(np.ascontiguousarray(v), matrix)


@ieee_njit
def matmul(a, b):
    """``a @ b`` of matrices: ``dgemv`` where ``b`` has one column (as numpy), else ``dgemm``
    (``dsyrk`` for ``m.T @ m``, which gives the same bits)."""
    if b.shape[1] == 1:
        return matvec(a, b[:, 0]).reshape((a.shape[0], 1))
    return np.dot(a, b)


@ieee_njit
def masked_dot(a, b, mask) -> float:
    """``a[mask] @ b[mask]``."""
    return dot(a[mask], b[mask])
