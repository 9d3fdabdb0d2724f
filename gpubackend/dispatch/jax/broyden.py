"""Broyden's inverse-Jacobian approximations for `nonlin_solve`: scipy's ``BroydenFirst``
(``root(method="broyden1")``) and ``BroydenSecond`` (``"broyden2"``).

The inverse Jacobian is scipy's ``LowRankMatrix``: ``-alpha I`` plus one
rank-one term ``c d^T`` per update, kept as the first ``rank`` rows of ``cs``
and ``ds`` (sized for the most terms there can be), until there are more
terms than unknowns and it collapses to a dense matrix. Before each update
``reduction_method`` trims the terms beyond ``max_rank - 1``: ``restart``
drops them all, ``simple`` the oldest, ``svd`` keeps the ``max_rank - 3``
largest singular directions (computed on the zero-padded terms: the same
products ``c d^T`` up to rounding). The Numba solver is
`gpubackend.solvers.broyden`.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp

from gpubackend.dispatch.jax.nonlin_solve import InverseJacobian, initial_alpha, norm


class LowRankInverse(eqx.Module):
    """``scale I + sum_k cs[k] ds[k]^T`` over the first ``rank`` rows, or ``dense`` once
    ``collapsed``; ``scale`` stays ``-alpha``, where a reset starts again."""

    scale: jax.Array
    cs: jax.Array
    ds: jax.Array
    rank: jax.Array
    collapsed: jax.Array
    dense: jax.Array


def _fresh(scale, n: int, dtype) -> LowRankInverse:
    return LowRankInverse(
        scale=scale,
        cs=jnp.zeros((n + 1, n), dtype),
        ds=jnp.zeros((n + 1, n), dtype),
        rank=jnp.array(0),
        collapsed=jnp.array(False),
        dense=jnp.zeros((n, n), dtype),
    )


def _terms(m: LowRankInverse):
    """``cs`` and ``ds`` with the rows past ``rank`` zeroed."""
    kept = (jnp.arange(m.cs.shape[0]) < m.rank)[:, None]
    return jnp.where(kept, m.cs, 0.0), jnp.where(kept, m.ds, 0.0)


def _times(m: LowRankInverse, v, transposed: bool = False):
    """``M v`` or ``M^T v``."""
    cs, ds = _terms(m)
    left, right = (ds, cs) if transposed else (cs, ds)
    low_rank = m.scale * v + left.T @ (right @ v)
    dense = m.dense.T @ v if transposed else m.dense @ v
    return jnp.where(m.collapsed, dense, low_rank)


def _append(m: LowRankInverse, c, d) -> LowRankInverse:
    n = c.shape[0]
    cs, ds = m.cs.at[m.rank].set(c), m.ds.at[m.rank].set(d)
    rank = m.rank + 1
    grown = LowRankInverse(m.scale, cs, ds, rank, m.collapsed, m.dense)
    kept_cs, kept_ds = _terms(grown)
    collapse = rank > n
    collapsed_dense = m.scale * jnp.eye(n, dtype=c.dtype) + kept_cs.T @ kept_ds
    return LowRankInverse(
        scale=m.scale,
        cs=jnp.where(m.collapsed, m.cs, cs),
        ds=jnp.where(m.collapsed, m.ds, ds),
        rank=jnp.where(m.collapsed | collapse, 0, rank),
        collapsed=m.collapsed | collapse,
        dense=jnp.where(
            m.collapsed,
            m.dense + jnp.outer(c, d),
            jnp.where(collapse, collapsed_dense, m.dense),
        ),
    )


def _with_terms(m: LowRankInverse, cs, ds, rank) -> LowRankInverse:
    return LowRankInverse(m.scale, cs, ds, rank, m.collapsed, m.dense)


def _svd_reduced(m: LowRankInverse, max_rank: float) -> LowRankInverse:
    """scipy's ``svd_reduce(max_rank - 1)``: past ``min(max_rank - 1, n)`` terms, rotate them onto
    the singular directions of ``C D^T`` and keep the first ``max_rank - 3``."""
    n = m.cs.shape[1]
    p = min(max_rank - 1.0, float(n))
    keep = int(max(0.0, min(max_rank - 3.0, p - 1.0)))
    cs, ds = _terms(m)
    q, r = jnp.linalg.qr(ds.T)
    c = cs.T @ r.T
    _, _, wh = jnp.linalg.svd(c, full_matrices=False)
    c = c @ jnp.linalg.inv(wh)
    d = q @ wh.T
    kept = (jnp.arange(n + 1) < keep)[:, None]
    reduced_cs = jnp.where(kept, jnp.zeros_like(cs).at[: c.shape[1]].set(c.T), 0.0)
    reduced_ds = jnp.where(kept, jnp.zeros_like(ds).at[: d.shape[1]].set(d.T), 0.0)
    reduce = ~m.collapsed & (m.rank >= p)
    return _with_terms(
        m,
        jnp.where(reduce, reduced_cs, m.cs),
        jnp.where(reduce, reduced_ds, m.ds),
        jnp.where(reduce, keep, m.rank),
    )


def _reduced(m: LowRankInverse, reduction_method: str, max_rank: float) -> LowRankInverse:
    """Trimmed to ``max_rank - 1`` terms before an update (scipy reduces first, so the update keeps
    the secant condition)."""
    if math.isinf(max_rank) and reduction_method != "svd":
        return m
    if reduction_method == "svd":
        return _svd_reduced(m, max_rank)
    limit = max_rank - 1.0
    over = ~m.collapsed & (m.rank > limit)
    if reduction_method == "restart":
        return _with_terms(m, m.cs, m.ds, jnp.where(over, 0, m.rank))
    keep = int(limit)
    rows = jnp.clip(jnp.arange(m.cs.shape[0]) + m.rank - keep, 0, m.cs.shape[0] - 1)
    return _with_terms(
        m,
        jnp.where(over, m.cs[rows], m.cs),
        jnp.where(over, m.ds[rows], m.ds),
        jnp.where(over, keep, m.rank),
    )


class _Broyden(InverseJacobian):
    alpha: float
    """NaN: scipy's ``None`` (scaled from ``x0`` and ``F(x0)``)."""
    reduction_method: str = eqx.field(static=True)
    max_rank: float = eqx.field(static=True)

    def init(self, x, f) -> LowRankInverse:
        return _fresh(-initial_alpha(self.alpha, x, f), x.shape[0], x.dtype)

    def inverse_times(self, state: LowRankInverse, f, tol):
        """scipy's ``BroydenFirst.solve``: where the product is not finite the approximation is
        singular and starts again from ``-alpha I``."""
        r = _times(state, f)
        finite = jnp.all(jnp.isfinite(r))
        fresh = _fresh(state.scale, f.shape[0], f.dtype)
        state = jax.tree.map(lambda kept, reset: jnp.where(finite, kept, reset), state, fresh)
        return state, jnp.where(finite, r, fresh.scale * f)

    def _reduced(self, state: LowRankInverse) -> LowRankInverse:
        return _reduced(state, self.reduction_method, self.max_rank)


class BroydenFirst(_Broyden):
    """Broyden's first ("good") update of the inverse: ``c = dx - H df``, ``d = H^T dx /
    (df . H^T dx)``."""

    def update(self, state, x, f, x_previous, f_previous):
        state = self._reduced(state)
        dx, df = x - x_previous, f - f_previous
        v = _times(state, dx, transposed=True)
        return _append(state, dx - _times(state, df), v / (df @ v))


class BroydenSecond(_Broyden):
    """Broyden's second ("bad") update: ``c = dx - H df``, ``d = df / |df|^2``."""

    def update(self, state, x, f, x_previous, f_previous):
        state = self._reduced(state)
        dx, df = x - x_previous, f - f_previous
        return _append(state, dx - _times(state, df), df / norm(df) ** 2)
