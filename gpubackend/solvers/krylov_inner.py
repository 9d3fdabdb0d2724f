"""The inner linear solvers of scipy's ``KrylovJacobian``, one restart cycle each as it runs
them: ``scipy.sparse.linalg.lgmres`` (``maxiter=1``, the default) and ``gmres``
(``restart=inner_maxiter``, ``maxiter=1``), both from ``x0 = 0`` without a preconditioner.

``make_lgmres(matvec)`` and ``make_gmres(matvec)`` take a jitted
``matvec(operand, v) -> A v``; ``operand`` is handed through untouched.

lgmres prepends the ``outer`` directions kept from earlier calls (``outer_k``
of them, unit vectors, newest last; scipy's ``prepend_outer_v`` with
``store_outer_Av=False``, so each costs a product) to the Krylov vectors of
its flexible GMRES, stops once the least-squares residual falls below scipy's
``ptol`` or the Arnoldi process breaks down, solves the small triangular
system by least squares (LAPACK's ``gelsd``, as scipy's ``lstsq``) and hands
back the new direction to keep. The Hessenberg matrix is reduced by Givens
rotations, as scipy's ``qr_insert`` does. Where the small system is not finite
scipy's lgmres returns its start, zero.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.small_vectors import all_finite, dot, norm

_EPS = float(np.finfo(np.float64).eps)


@numba_njit(error_model="numpy")
def _lartg(f, g):
    """LAPACK's ``lartg``: ``(c, s, r)`` with ``[c s; -s c] [f; g] = [r; 0]``."""
    if g == 0.0:
        return 1.0, 0.0, f
    if f == 0.0:
        return 0.0, np.sign(g), abs(g)
    d = np.sqrt(f * f + g * g)
    r = d if f > 0.0 else -d
    return abs(f) / d, g / r, r


@numba_njit(error_model="numpy")
def _reduce_column(column, j, cosines, sines):
    """Apply the first ``j`` rotations to Hessenberg ``column`` (length ``j + 2``) and add the one
    zeroing its last entry; returns that rotation's ``(c, s)``."""
    for k in range(j):
        c, s = cosines[k], sines[k]
        upper, lower = column[k], column[k + 1]
        column[k] = c * upper + s * lower
        column[k + 1] = -s * upper + c * lower
    c, s, r = _lartg(column[j], column[j + 1])
    cosines[j], sines[j] = c, s
    column[j], column[j + 1] = r, 0.0
    return c, s


@numba_njit(error_model="numpy")
def _orthogonalise(w, basis, count, column):
    """Modified Gram-Schmidt of ``w`` against the first ``count`` rows of ``basis``, coefficients
    into ``column``; returns ``|w|`` after."""
    for i in range(count):
        alpha = dot(basis[i], w)
        column[i] = alpha
        w -= alpha * basis[i]
    return norm(w)


def make_lgmres(matvec: Callable) -> Callable:
    """``lgmres(operand, b, rtol, atol, inner_m, outer, kept) -> (x, outer, kept)``."""

    @numba_njit(error_model="numpy")
    def fgmres(operand, v0, inner_m, ptol, outer, kept):
        """scipy's ``_fgmres`` with ``prepend_outer_v``: ``(zs, y, columns)``; ``y`` all NaN where
        the small system is not finite (scipy's ``LinAlgError``)."""
        n = v0.shape[0]
        m = inner_m + kept
        if m == 0:
            raise ValueError("lgmres: inner_m=0 with no outer vectors (scipy fails here)")
        vs = np.empty((m + 1, n))
        zs = np.empty((m, n))
        r = np.zeros((m + 1, m))
        cosines, sines = np.empty(m), np.empty(m)
        rotated_e1 = np.zeros(m + 1)
        rotated_e1[0] = 1.0
        vs[0] = v0
        j = 0
        for j in range(m):
            if j < kept:
                z = outer[j].copy()
            elif j == kept:
                z = v0.copy()
            else:
                z = vs[j].copy()
            w = matvec(operand, z)
            w_norm = norm(w)
            column = r[: j + 2, j]
            column[j + 1] = _orthogonalise(w, vs, j + 1, column)
            inverse = 1.0 / column[j + 1] if column[j + 1] != 0.0 else np.inf
            if np.isfinite(inverse):
                w *= inverse
            breakdown = not (column[j + 1] > _EPS * w_norm)
            vs[j + 1] = w
            zs[j] = z
            c, s = _reduce_column(column, j, cosines, sines)
            upper = rotated_e1[j]
            rotated_e1[j], rotated_e1[j + 1] = c * upper, -s * upper
            if abs(rotated_e1[j + 1]) < ptol or breakdown:
                break
        columns = j + 1
        if not np.isfinite(r[j, j]) or not all_finite(r[:columns, :columns]):
            return zs, np.full(columns, np.nan), columns
        y = np.linalg.lstsq(r[:columns, :columns], rotated_e1[:columns], rcond=_EPS)[0]
        return zs, y, columns

    @numba_njit(error_model="numpy")
    def lgmres(operand, b, rtol, atol, inner_m, outer, kept):
        n = b.shape[0]
        x = np.zeros(n)
        if not all_finite(b):
            raise ValueError("RHS must contain only finite numbers")
        b_norm = norm(b)
        atol = max(atol, rtol * b_norm)
        if b_norm == 0.0:
            return b.copy(), kept
        # The residual at x = 0 without a product: scipy's matvec returns 0 * v there.
        r_norm = b_norm
        if r_norm <= max(atol, rtol * b_norm):
            return x, kept
        v0 = b * (1.0 / b_norm)
        ptol = min(1.0, max(atol, rtol * b_norm) / r_norm)
        zs, y, columns = fgmres(operand, v0, inner_m, ptol, outer, kept)
        y *= b_norm
        if not all_finite(y):
            return x, kept
        x = zs[0] * y[0]
        for i in range(1, columns):
            x += zs[i] * y[i]
        x_norm = norm(x)
        if x_norm > 0.0 and outer.shape[0] > 0:
            if kept == outer.shape[0]:
                outer[:-1] = outer[1:].copy()
                kept -= 1
            outer[kept] = x / x_norm
            kept += 1
        return x, kept

    return lgmres


def make_gmres(matvec: Callable) -> Callable:
    """``gmres(operand, b, rtol, atol, restart) -> x``: scipy's gmres, one cycle of at most
    ``min(restart, len(b))`` products, and the product of its closing residual check (which
    changes nothing returned, but evaluates the equations as scipy does)."""

    @numba_njit(error_model="numpy")
    def gmres(operand, b, rtol, atol, restart):
        n = b.shape[0]
        b_norm = norm(b)
        atol = max(atol, rtol * b_norm)
        if b_norm == 0.0:
            return b.copy()
        restart = min(restart, n)
        if restart <= 0:
            raise ValueError("gmres: restart=0 (scipy fails here)")
        ptol = b_norm * min(1.0, atol / b_norm)
        if b_norm < atol:
            return np.zeros(n)
        v = np.empty((restart + 1, n))
        h = np.zeros((restart + 2, restart))
        cosines, sines = np.empty(restart), np.empty(restart)
        s_vector = np.zeros(restart + 1)
        v[0] = b * (1.0 / b_norm)
        s_vector[0] = b_norm
        col = 0
        for col in range(restart):
            w = matvec(operand, v[col].copy())
            h0 = norm(w)
            column = h[: col + 2, col]
            h1 = _orthogonalise(w, v, col + 1, column)
            column[col + 1] = h1
            v[col + 1] = w
            breakdown = h1 <= _EPS * h0
            if breakdown:
                column[col + 1] = 0.0
            else:
                v[col + 1] *= 1.0 / h1
            c, s = _reduce_column(column, col, cosines, sines)
            rotated = -s * s_vector[col]
            s_vector[col], s_vector[col + 1] = c * s_vector[col], rotated
            if abs(rotated) <= ptol or breakdown:
                break
        if h[col, col] == 0.0:
            s_vector[col] = 0.0
        y = s_vector[: col + 1].copy()
        for k in range(col, 0, -1):
            if y[k] != 0.0:
                y[k] /= h[k, k]
                y[:k] -= y[k] * h[:k, k]
        if y[0] != 0.0:
            y[0] /= h[0, 0]
        x = np.zeros(n)
        for k in range(col + 1):
            x += y[k] * v[k]
        matvec(operand, x)
        return x

    return gmres
