"""PRIMA's filter of COBYLA's evaluated points (``savefilt``) and its choice of the answer
(``selectx``), as scipy 1.18's pyprima runs them.

The filter keeps the points no other point beats in both the objective and the
constraint violation, in the order they came; with more than ``size`` of them
it drops the worst by the merit ``f + cweight * max(c - ctol, 0)``. Arrays keep
their full size; the first ``count`` entries hold the filter.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

FUNCMAX = 1e30
"""PRIMA's cap on objective values (and on constraint values, ``CONSTRMAX``)."""
CWEIGHT = 1e8
"""PRIMA's ``CWEIGHT_DEFAULT``, the filter's weight of the violation."""


class Filter(eqx.Module):
    x: jax.Array
    f: jax.Array
    c: jax.Array
    count: jax.Array

    @staticmethod
    def empty(size: int, n: int, dtype) -> Filter:
        return Filter(
            x=jnp.zeros((size, n), dtype),
            f=jnp.zeros((size,), dtype),
            c=jnp.zeros((size,), dtype),
            count=jnp.array(0),
        )


def _bad(f: jax.Array, c: jax.Array) -> jax.Array:
    return jnp.isnan(f) | jnp.isposinf(f) | jnp.isnan(c) | jnp.isposinf(c)


def is_better(f1, c1, f2, c2, ctol: float) -> jax.Array:
    """pyprima's ``isbetter``: ``(f1, c1)`` beats ``(f2, c2)`` (its first clause as pyprima writes
    it)."""
    eps = jnp.finfo(jnp.result_type(f1)).eps
    huge = jnp.finfo(jnp.result_type(f1)).max
    cref = 10 * max(float(eps), min(ctol, 0.01 * FUNCMAX))
    better = _bad(f1, c1) & ~_bad(f2, c2)
    better = better | ((f1 < f2) & (c1 <= c2)) | ((f1 <= f2) & (c1 < c2))
    return better | ((f1 < huge) & (c1 <= ctol) & ((c2 > max(ctol, cref)) | jnp.isnan(c2)))


def save(filt: Filter, x: jax.Array, f: jax.Array, c: jax.Array, ctol: float) -> Filter:
    """pyprima's ``savefilt``: ``(x, f, c)`` joins the filter unless a point there beats it, and
    the points it beats leave."""
    size = filt.f.shape[0]
    index = jnp.arange(size)
    valid = index < filt.count
    huge = jnp.finfo(filt.f.dtype).max
    beaten = jnp.any(
        valid & (is_better(filt.f, filt.c, f, c, ctol) | ((filt.f <= f) & (filt.c <= c)))
    )
    keep = valid & ~is_better(f, c, filt.f, filt.c, ctol)
    shifted = jnp.maximum(filt.c - ctol, 0.0)
    phi = jnp.nan_to_num(jnp.maximum(filt.f, -huge), nan=-huge) + CWEIGHT * shifted
    cref = jnp.max(jnp.where(phi >= jnp.max(phi), shifted, -jnp.inf))
    fref = jnp.max(jnp.where(shifted >= cref, filt.f, -jnp.inf))
    worst = jnp.argmax(jnp.where(filt.f > fref, -jnp.inf, filt.c))
    keep = jnp.where(jnp.sum(keep) == size, keep & (index != worst), keep)
    count = jnp.sum(keep)
    # The kept points move to the front, in order, and the new one follows them.
    order = jnp.argsort(~keep, stable=True)
    slot = jnp.minimum(count, size - 1)
    saved = Filter(
        x=filt.x[order].at[slot].set(x),
        f=filt.f[order].at[slot].set(f),
        c=filt.c[order].at[slot].set(c),
        count=count + 1,
    )
    return jax.tree.map(lambda old, new: jnp.where(beaten, old, new), filt, saved)


def select(filt: Filter, cweight: jax.Array, ctol: float) -> jax.Array:
    """pyprima's ``selectx``: the index of the answer among the filter's points."""
    f, c = filt.f, filt.c
    huge = jnp.finfo(f.dtype).max
    eps = jnp.finfo(f.dtype).eps
    valid = jnp.arange(f.shape[0]) < filt.count

    def some(condition):
        return jnp.any(valid & condition)

    fref = jnp.where(
        some((f < FUNCMAX) & (c < FUNCMAX)),
        FUNCMAX,
        jnp.where(
            some((f < huge) & (c < FUNCMAX)),
            huge,
            jnp.where(some((f < FUNCMAX) & (c < huge)), FUNCMAX, huge),
        ),
    ).astype(f.dtype)
    cref = jnp.where(
        some((f < FUNCMAX) & (c < FUNCMAX)) | some((f < huge) & (c < FUNCMAX)), FUNCMAX, huge
    ).astype(f.dtype)
    none = ~some((f < fref) & (c < cref))
    shifted = jnp.maximum(c - ctol, 0.0)
    below = valid & (f < fref)
    cmin = jnp.min(jnp.where(below, shifted, jnp.inf))
    cref = jnp.maximum(eps, 2 * cmin)
    phi = jnp.where(
        cweight <= 0,
        f,
        jnp.where(jnp.isposinf(cweight), shifted, jnp.maximum(f, -huge) + cweight * shifted),
    )
    phimin = jnp.min(jnp.where(below & (shifted <= cref), phi, jnp.inf))
    cref = jnp.min(jnp.where(below & (phi <= phimin), shifted, jnp.inf))
    fref = jnp.min(jnp.where(valid & (shifted <= cref), f, jnp.inf))
    best = jnp.argmin(jnp.where(valid & ~(f > fref), c, jnp.inf))
    return jnp.where(none, filt.count - 1, best)
