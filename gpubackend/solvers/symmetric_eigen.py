"""``scipy.linalg.eigh(a)`` in Numba: LAPACK's ``dsyevr`` (scipy's default driver, lower
triangle, all eigenpairs, ``abstol`` 0, its optimal workspace), where Numba's ``np.linalg.eigh``
runs ``dsyevd``.

The two drivers agree only up to rounding, and a solver whose steps go through
a nearly singular system (COBYQA's interpolation) follows scipy's iterates
only on scipy's driver. The routine is scipy's own (``scipy.linalg.cython_lapack``),
bound by a symbol name registered with LLVM at import, so compiled code holds
no raw address and caches like any other.
"""

import numpy as np
from llvmlite import binding
from numba.core import types
from numba.extending import get_cython_function_address

from gpubackend.solvers.ieee import ieee_njit

_SYMBOL = "gpubackend_scipy_dsyevr"
binding.add_symbol(_SYMBOL, get_cython_function_address("scipy.linalg.cython_lapack", "dsyevr"))
# Every argument of the Fortran routine is a pointer, passed as an address.
_dsyevr = types.ExternalFunction(_SYMBOL, types.void(*([types.intp] * 21)))

_V, _A, _L = ord("V"), ord("A"), ord("L")


@ieee_njit
def eigh(a):
    """``(eigenvalues ascending, eigenvectors as columns, ok)`` of the symmetric matrix ``a``, as
    ``scipy.linalg.eigh(a)``: the eigenvectors column-major as scipy's (a transposed view), ``ok``
    False where LAPACK reports a failure (scipy's ``LinAlgError``)."""
    n = a.shape[0]
    work_a = np.ascontiguousarray(a).copy()
    chars = np.array([_V, _A, _L], dtype=np.int8)
    ints = np.array([n, n, 1, n, 0, n, -1, -1, 0], dtype=np.int32)
    # ints: n, lda, il, iu, m, ldz, lwork, liwork, info
    reals = np.array([0.0, 1.0, 0.0])
    # reals: vl, vu, abstol
    w = np.empty(n)
    z = np.empty((n, n))
    isuppz = np.empty(2 * n, dtype=np.int32)
    work_query = np.empty(1)
    iwork_query = np.empty(1, dtype=np.int32)
    _call(chars, ints, reals, work_a, w, z, isuppz, work_query, iwork_query)
    ints[6] = int(work_query[0])
    ints[7] = iwork_query[0]
    ints[8] = 0
    work = np.empty(max(ints[6], 1))
    iwork = np.empty(max(ints[7], 1), dtype=np.int32)
    _call(chars, ints, reals, work_a, w, z, isuppz, work, iwork)
    # z is column-major, as LAPACK writes it (and scipy returns it): its transpose, a view.
    return w, z.T, ints[8] == 0


@ieee_njit
def _call(chars, ints, reals, a, w, z, isuppz, work, iwork):
    p_chars = chars.ctypes.data
    p_ints = ints.ctypes.data
    p_reals = reals.ctypes.data
    _dsyevr(
        p_chars,
        p_chars + 1,
        p_chars + 2,
        p_ints,
        a.ctypes.data,
        p_ints + 4,
        p_reals,
        p_reals + 8,
        p_ints + 8,
        p_ints + 12,
        p_reals + 16,
        p_ints + 16,
        w.ctypes.data,
        z.ctypes.data,
        p_ints + 20,
        isuppz.ctypes.data,
        work.ctypes.data,
        p_ints + 24,
        iwork.ctypes.data,
        p_ints + 28,
        p_ints + 32,
    )
