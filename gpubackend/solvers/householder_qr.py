"""MINPACK's QR factorization by Householder reflections (``qrfac``, ``qform``), in loops.

MINPACK's ``hybrj`` and ``lmder`` (scipy's ``root`` methods ``hybr`` and
``lm``) steer by this factorization; the same loops give the same iterates, so
a budget of a few evaluations ends where scipy's does. For the few equations an
optimize op holds, loops cost less than LAPACK's calls.
"""

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

_EPS = np.finfo(np.float64).eps


@numba_njit
def column_norms(a, out):
    for j in range(a.shape[1]):
        total = 0.0
        for i in range(a.shape[0]):
            total += a[i, j] * a[i, j]
        out[j] = np.sqrt(total)


@numba_njit
def householder_qr(a, pivot: bool, rdiag, acnorm, permutation):
    """``qrfac``: ``a`` (m x n) is overwritten with the Householder vectors below its diagonal and
    the strict upper triangle of ``R`` above it; ``rdiag`` gets ``R``'s diagonal, ``acnorm`` the
    column norms of the input, and with ``pivot`` the columns are taken largest remaining norm
    first (``permutation[j]``: the input column in position ``j``)."""
    m, n = a.shape
    column_norms(a, acnorm)
    work = np.empty(n)
    for j in range(n):
        rdiag[j] = acnorm[j]
        work[j] = acnorm[j]
        permutation[j] = j
    for j in range(min(m, n)):
        if pivot:
            largest = j
            for k in range(j, n):
                if rdiag[k] > rdiag[largest]:
                    largest = k
            if largest != j:
                for i in range(m):
                    a[i, j], a[i, largest] = a[i, largest], a[i, j]
                rdiag[largest] = rdiag[j]
                work[largest] = work[j]
                permutation[j], permutation[largest] = permutation[largest], permutation[j]
        total = 0.0
        for i in range(j, m):
            total += a[i, j] * a[i, j]
        column_norm = np.sqrt(total)
        if column_norm != 0.0:
            if a[j, j] < 0.0:
                column_norm = -column_norm
            for i in range(j, m):
                a[i, j] /= column_norm
            a[j, j] += 1.0
            for k in range(j + 1, n):
                total = 0.0
                for i in range(j, m):
                    total += a[i, j] * a[i, k]
                scale = total / a[j, j]
                for i in range(j, m):
                    a[i, k] -= scale * a[i, j]
                if pivot and rdiag[k] != 0.0:
                    ratio = a[j, k] / rdiag[k]
                    rdiag[k] *= np.sqrt(max(0.0, 1.0 - ratio * ratio))
                    if 0.05 * (rdiag[k] / work[k]) ** 2 <= _EPS:
                        total = 0.0
                        for i in range(j + 1, m):
                            total += a[i, k] * a[i, k]
                        rdiag[k] = np.sqrt(total)
                        work[k] = rdiag[k]
        rdiag[j] = -column_norm


@numba_njit
def apply_qt(a, v):
    """``Q^T v`` in place, for the Householder vectors `householder_qr` left in ``a``."""
    for j in range(min(a.shape)):
        if a[j, j] != 0.0:
            total = 0.0
            for i in range(j, a.shape[0]):
                total += a[i, j] * v[i]
            scale = -total / a[j, j]
            for i in range(j, a.shape[0]):
                v[i] += scale * a[i, j]


@numba_njit
def form_q(a, q):
    """``qform``: the square orthogonal ``Q`` from the Householder vectors in ``a``."""
    m = a.shape[0]
    for i in range(m):
        for j in range(m):
            q[i, j] = 0.0
        q[i, i] = 1.0
    work = np.empty(m)
    for k in range(min(a.shape) - 1, -1, -1):
        for i in range(k, m):
            work[i] = a[i, k]
        if work[k] != 0.0:
            for j in range(k, m):
                total = 0.0
                for i in range(k, m):
                    total += q[i, j] * work[i]
                scale = total / work[k]
                for i in range(k, m):
                    q[i, j] -= scale * work[i]
