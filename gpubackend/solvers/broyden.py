"""Broyden's inverse-Jacobian approximations for `nonlin_solve`: scipy's ``BroydenFirst``
(``root(method="broyden1")``) and ``BroydenSecond`` (``"broyden2"``).

The inverse Jacobian is scipy's ``LowRankMatrix``: ``-alpha I`` plus one
rank-one term ``c d^T`` per update, kept as rows of ``cs`` and ``ds``, until
there are more terms than unknowns and it collapses to a dense matrix. Before
each update ``jac_options.reduction_method`` trims the terms beyond
``max_rank - 1``: ``restart`` drops them all, ``simple`` the oldest, ``svd``
keeps the ``max_rank - 3`` largest singular directions (van der Rotten's
Broyden rank reduction, as scipy computes it).
"""

from typing import NamedTuple

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.nonlin_solve import initial_alpha, make_nonlin_solver
from gpubackend.solvers.small_vectors import all_finite, dot, norm


class LowRankInverse(NamedTuple):
    """``scale I + sum_k cs[k] ds[k]^T`` (the first ``rank`` rows), or ``dense`` once
    ``collapsed``; ``scale`` stays ``-alpha``, where a reset starts again."""

    scale: float
    cs: np.ndarray
    ds: np.ndarray
    rank: int
    collapsed: bool
    dense: np.ndarray


@numba_njit
def _fresh(scale, n):
    return LowRankInverse(
        scale, np.zeros((n + 1, n)), np.zeros((n + 1, n)), 0, False, np.zeros((n, n))
    )


@numba_njit
def _with_rank(m, rank):
    return LowRankInverse(m.scale, m.cs, m.ds, rank, m.collapsed, m.dense)


@numba_njit
def _times(m, v, transposed):
    """``M v`` or ``M^T v``."""
    if m.collapsed:
        return m.dense.T @ v if transposed else m.dense @ v
    left, right = (m.ds, m.cs) if transposed else (m.cs, m.ds)
    w = m.scale * v
    for k in range(m.rank):
        w = w + dot(right[k], v) * left[k]
    return w


@numba_njit
def _append(m, c, d):
    n = c.shape[0]
    if m.collapsed:
        return LowRankInverse(m.scale, m.cs, m.ds, m.rank, True, m.dense + np.outer(c, d))
    m.cs[m.rank] = c
    m.ds[m.rank] = d
    rank = m.rank + 1
    if rank <= n:
        return _with_rank(m, rank)
    dense = m.scale * np.eye(n)
    for k in range(rank):
        dense += np.outer(m.cs[k], m.ds[k])
    return LowRankInverse(m.scale, m.cs, m.ds, 0, True, dense)


@numba_njit
def _keep(m, first, count):
    """The ``count`` terms from ``first`` on."""
    m.cs[:count] = m.cs[first : first + count].copy()
    m.ds[:count] = m.ds[first : first + count].copy()
    return _with_rank(m, count)


@numba_njit(error_model="numpy")
def _svd_reduce(m, max_rank):
    """scipy's ``svd_reduce(max_rank - 1)``: past ``min(max_rank - 1, n)`` terms, rotate them onto
    the singular directions of ``C D^T`` and keep the first ``max_rank - 3``."""
    n = m.cs.shape[1]
    p = min(max_rank - 1.0, float(n)) if m.rank > 0 else max_rank - 1.0
    q = int(max(0.0, min(max_rank - 3.0, p - 1.0)))
    if m.rank < p:
        return m
    c = m.cs[: m.rank].T.copy()
    d, r = np.linalg.qr(m.ds[: m.rank].T.copy())
    c = c @ np.ascontiguousarray(r.T)
    _, _, wh = np.linalg.svd(c, full_matrices=False)
    c = c @ np.linalg.inv(wh)
    d = d @ wh.T
    for k in range(q):
        m.cs[k] = c[:, k]
        m.ds[k] = d[:, k]
    return _with_rank(m, q)


@numba_njit(error_model="numpy")
def _reduce(m, options):
    """Trim to ``max_rank - 1`` terms before an update (scipy reduces first, so the update keeps
    the secant condition)."""
    limit = options.max_rank - 1.0
    if m.collapsed:
        return m
    if options.reduction_method == "svd":
        return _svd_reduce(m, options.max_rank)
    if not m.rank > limit:
        return m
    if options.reduction_method == "restart":
        return _with_rank(m, 0)
    keep = int(limit)
    return _keep(m, m.rank - keep, keep)


@numba_njit(error_model="numpy")
def setup(x, f, options):
    return _fresh(-initial_alpha(options.alpha, x, f), x.shape[0])


@numba_njit(error_model="numpy")
def inverse_times(m, options, f, tol):
    """scipy's ``BroydenFirst.solve``: where the product is not finite the approximation is singular
    and starts again from ``-alpha I``."""
    r = _times(m, f, False)
    if all_finite(r):
        return m, r
    fresh = _fresh(m.scale, f.shape[0])
    return fresh, fresh.scale * f


@numba_njit(error_model="numpy")
def update_first(m, options, x, f, x_previous, f_previous):
    """Broyden's first ("good") update of the inverse: ``c = dx - H df``, ``d = H^T dx /
    (df . H^T dx)``."""
    m = _reduce(m, options)
    dx, df = x - x_previous, f - f_previous
    v = _times(m, dx, True)
    return _append(m, dx - _times(m, df, False), v / dot(df, v))


@numba_njit(error_model="numpy")
def update_second(m, options, x, f, x_previous, f_previous):
    """Broyden's second ("bad") update: ``c = dx - H df``, ``d = df / |df|^2``."""
    m = _reduce(m, options)
    dx, df = x - x_previous, f - f_previous
    return _append(m, dx - _times(m, df, False), df / norm(df) ** 2)


make_broyden1 = make_nonlin_solver(setup, inverse_times, update_first)
make_broyden2 = make_nonlin_solver(setup, inverse_times, update_second)
