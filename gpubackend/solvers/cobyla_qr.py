"""PRIMA's Givens-rotation updates of the QR factorization COBYLA's trust-region subproblem keeps.

Port of ``pyprima/common/powalg.py`` (``qradd_Rdiag``, ``qrexc_Rdiag``) and the
helpers of ``pyprima/common/linalg.py`` they use (``planerot``, ``isminor``), from
scipy 1.18's ``scipy/_external/pyprima`` (BSD-3-Clause, Zaikun Zhang and Nickolai
Belakovski). Only the diagonal of R is stored: ``Q`` is updated in place, and
the active constraints' gradients are the columns ``A[:, iact[k]]``.
"""

import numpy as np

from gpubackend.solvers.ieee import ieee_njit

EPS = float(np.finfo(np.float64).eps)
REALMIN = float(np.finfo(np.float64).tiny)
REALMAX = float(np.finfo(np.float64).max)
_SQRT_REALMIN = float(np.sqrt(REALMIN))
_SQRT_REALMAX_SAFE = float(np.sqrt(REALMAX / 2.1))


@ieee_njit(inline="always")
def isminor(x: float, ref: float) -> bool:
    """Whether ``x`` is negligible next to ``ref``: adding a tenth of it does not move ``ref``."""
    refa = abs(ref) + 0.1 * abs(x)
    refb = abs(ref) + 2 * 0.1 * abs(x)
    return abs(ref) >= refa or refa >= refb


@ieee_njit
def planerot(x0: float, x1: float) -> tuple[float, float]:
    """``(c, s)`` of the rotation ``[[c, s], [-s, c]]`` taking ``(x0, x1)`` to ``(r, 0)``."""
    if np.isnan(x0) or np.isnan(x1):
        return 1.0, 0.0
    if np.isinf(x0) and np.isinf(x1):
        return np.sign(x0) / np.sqrt(2.0), np.sign(x1) / np.sqrt(2.0)
    if abs(x0) <= 0 and abs(x1) <= 0:
        return 1.0, 0.0
    if abs(x1) <= EPS * abs(x0):
        return np.sign(x0), 0.0
    if abs(x0) <= EPS * abs(x1):
        return 0.0, np.sign(x1)
    if (
        _SQRT_REALMIN < abs(x0) < _SQRT_REALMAX_SAFE
        and _SQRT_REALMIN < abs(x1) < _SQRT_REALMAX_SAFE
    ):
        r = np.sqrt(x0 * x0 + x1 * x1)
        return x0 / r, x1 / r
    if abs(x0) > abs(x1):
        t = x1 / x0
        u = max(1.0, abs(t), np.sqrt(1 + t * t)) * np.sign(x0)
        return 1 / u, t / u
    t = x0 / x1
    u = max(1.0, abs(t), np.sqrt(1 + t * t)) * np.sign(x1)
    return t / u, 1 / u


@ieee_njit(inline="always")
def _rotate_columns(q, k: int, j: int, c: float, s: float) -> None:
    """``q[:, [k, j]] = q[:, [k, j]] @ [[c, -s], [s, c]]``."""
    for row in range(q.shape[0]):
        qk, qj = q[row, k], q[row, j]
        q[row, k] = qk * c + qj * s
        q[row, j] = qk * -s + qj * c


@ieee_njit
def qradd_rdiag(c, q, rdiag, n: int) -> int:
    """Append the column ``c`` to the factorization of ``n`` columns; the new count (``n`` where
    ``c`` is, to rounding, in their span)."""
    m = q.shape[1]
    cq = np.zeros(m)
    cqa = np.zeros(m)
    for j in range(m):
        for i in range(q.shape[0]):
            cq[j] += c[i] * q[i, j]
            cqa[j] += abs(c[i]) * abs(q[i, j])
        if isminor(cq[j], cqa[j]):
            cq[j] = 0.0
    for k in range(m - 2, n - 1, -1):
        if abs(cq[k + 1]) > 0:
            cos, sin = planerot(cq[k], cq[k + 1])
            _rotate_columns(q, k, k + 1, cos, sin)
            cq[k] = np.hypot(cq[k], cq[k + 1])
    if n < m and abs(cq[n]) > EPS**2 and not isminor(cq[n], cqa[n]):
        n += 1
    if 0 <= n - 1 < m:
        rdiag[n - 1] = cq[n - 1]
    return n


@ieee_njit(inline="always")
def column_dot(q, k: int, a, column: int) -> float:
    """``q[:, k] @ a[:, column]``."""
    total = 0.0
    for i in range(q.shape[0]):
        total += q[i, k] * a[i, column]
    return total


@ieee_njit
def qrexc_rdiag(a, iact, q, rdiag, n: int, i: int) -> None:
    """Move the ``i``-th of the ``n`` factorized columns ``a[:, iact[:n]]`` to the end."""
    if i < 0 or i >= n:
        return
    for k in range(i, n - 1):
        cos, sin = planerot(rdiag[k + 1], column_dot(q, k, a, iact[k + 1]))
        # q[:, [k, k+1]] = q[:, [k+1, k]] @ G.T
        for row in range(q.shape[0]):
            qk, qk1 = q[row, k], q[row, k + 1]
            q[row, k] = qk1 * cos + qk * sin
            q[row, k + 1] = qk1 * -sin + qk * cos
    for k in range(i, n - 1):
        rdiag[k] = column_dot(q, k, a, iact[k + 1])
    rdiag[n - 1] = column_dot(q, n - 1, a, iact[i])
