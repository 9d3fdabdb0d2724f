"""Anderson mixing for `nonlin_solve`: scipy's ``Anderson`` (``root(method="anderson")``).

The inverse Jacobian is ``-alpha I`` corrected over the last ``M`` steps
``dx_k`` and residual changes ``df_k`` (oldest first):
``J^-1 f = -alpha f + sum_k gamma_k (dx_k + alpha df_k)``, with ``gamma``
solving the small system ``A gamma = (df_k . f)_k``, ``A`` the Gram matrix
of the ``df_k`` whose diagonal is scaled by ``1 + w0^2`` (Eyert's
regularisation; ``w0 = 0`` is the secant condition on every kept step).
``A`` is solved as scipy 1.18's ``scipy.linalg.solve`` detects it: a
diagonal ``A`` by division, else by Cholesky, else (not positive definite)
by LU; where LU finds ``A`` exactly singular (scipy's ``LinAlgError``) the
history is dropped and the step is ``-alpha f``. A non-finite ``A`` or
right-hand side is scipy's ``ValueError``.
"""

from typing import NamedTuple

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.nonlin_solve import initial_alpha, make_nonlin_solver
from gpubackend.solvers.small_vectors import dot
from gpubackend.solvers.trust_exact import refuse_non_finite
from gpubackend.solvers.trust_subproblems import _cholesky_solve


class MixingHistory(NamedTuple):
    """The first ``kept`` rows of ``dxs`` and ``dfs``: the last steps and residual changes,
    oldest first (at most ``M``)."""

    alpha: float
    dxs: np.ndarray
    dfs: np.ndarray
    kept: int


@numba_njit
def _with_kept(history, kept):
    return MixingHistory(history.alpha, history.dxs, history.dfs, kept)


@numba_njit(error_model="numpy")
def _mixing_matrix(dfs, kept, w0):
    """scipy's ``Anderson.a``: ``(1 + w0^2 [i = j]) df_i . df_j``."""
    a = np.empty((kept, kept))
    for i in range(kept):
        for j in range(i, kept):
            a[i, j] = dot(dfs[i], dfs[j])
            a[j, i] = a[i, j]
        a[i, i] *= 1.0 + w0**2
    return a


@numba_njit(error_model="numpy")
def _is_diagonal(a):
    for i in range(a.shape[0]):
        for j in range(a.shape[0]):
            if i != j and a[i, j] != 0.0:
                return False
    return True


@numba_njit(error_model="numpy")
def solve_mixing(a, rhs):
    """``(gamma, solved)`` with ``A gamma = rhs``: ``solved`` is False where ``A`` is exactly
    singular."""
    refuse_non_finite(a)
    refuse_non_finite(rhs)
    if _is_diagonal(a):
        diagonal = np.diag(a)
        return rhs / diagonal, bool(np.all(diagonal != 0.0))
    gamma, positive_definite = _cholesky_solve(a, rhs)
    if positive_definite:
        return gamma, True
    try:
        return np.linalg.solve(a, rhs), True
    # LAPACK's getrf found a zero pivot: scipy's LinAlgError (Numba catches no narrower class).
    except Exception:  # noqa: BLE001
        return rhs, False


@numba_njit(error_model="numpy")
def setup(x, f, options):
    n = x.shape[0]
    m = int(options.M)
    return MixingHistory(initial_alpha(options.alpha, x, f), np.zeros((m, n)), np.zeros((m, n)), 0)


@numba_njit(error_model="numpy")
def inverse_times(history, options, f, tol):
    """scipy's ``Anderson.solve``."""
    step = -history.alpha * f
    kept = history.kept
    if kept == 0:
        return history, step
    rhs = np.empty(kept)
    for k in range(kept):
        rhs[k] = dot(history.dfs[k], f)
    gamma, solved = solve_mixing(_mixing_matrix(history.dfs, kept, options.w0), rhs)
    if not solved:
        return _with_kept(history, 0), step
    for k in range(kept):
        step += gamma[k] * (history.dxs[k] + history.alpha * history.dfs[k])
    return history, step


@numba_njit(error_model="numpy")
def update(history, options, x, f, x_previous, f_previous):
    """scipy's ``Anderson._update``: keep the newest ``M`` pairs."""
    m = history.dxs.shape[0]
    if m == 0:
        return history
    kept = history.kept
    if kept == m:
        history.dxs[:-1] = history.dxs[1:].copy()
        history.dfs[:-1] = history.dfs[1:].copy()
        kept -= 1
    history.dxs[kept] = x - x_previous
    history.dfs[kept] = f - f_previous
    return _with_kept(history, kept + 1)


make_anderson = make_nonlin_solver(setup, inverse_times, update)
