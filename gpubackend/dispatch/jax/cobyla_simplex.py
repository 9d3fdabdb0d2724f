"""PRIMA's COBYLA simplex: its pole, its updates and its geometry, as scipy 1.18's pyprima runs
them.

The simplex holds ``n + 1`` points: ``sim[:, n]`` is the pole (the best point
by the merit ``f + cpen * c``), ``sim[:, j]`` for ``j < n`` the others'
displacements from it; ``simi`` is the inverse of the displacements, updated
by rank-one formulas and recomputed where they have drifted (PRIMA's ``erri``
test). ``fval``, ``cval`` and ``conmat`` hold the objective, the violation and
the constraints at each point.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

DAMAGED_TOLERANCE = 1.0
"""PRIMA's ``itol``: ``simi`` further than this from the inverse is damaged by rounding."""


class Simplex(NamedTuple):
    sim: jax.Array
    simi: jax.Array
    fval: jax.Array
    conmat: jax.Array
    cval: jax.Array


def find_pole(cpen, cval: jax.Array, fval: jax.Array) -> jax.Array:
    """pyprima's ``findpole``: the point of least merit, of least violation among ties; the
    current pole where it is as good."""
    n = fval.shape[0] - 1
    phi = fval + cpen * cval
    phimin = jnp.min(phi)
    moves = (phimin < phi[n]) | jnp.any((cval < cval[n]) & (phi <= phi[n]))
    return jnp.where(moves, jnp.argmin(jnp.where(phi > phimin, jnp.inf, cval)), n)


def _inverse_error(simi: jax.Array, sim: jax.Array) -> jax.Array:
    n = simi.shape[0]
    return jnp.max(jnp.abs(simi @ sim[:, :n] - jnp.eye(n, dtype=simi.dtype)))


def _checked_inverse(sim: jax.Array, simi: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(simi, erri)``: the updated inverse, or the recomputed one where the update drifted and
    the recomputed one is closer."""
    n = simi.shape[0]
    erri = _inverse_error(simi, sim)
    recomputed = jnp.linalg.inv(sim[:, :n])
    erri_test = _inverse_error(recomputed, sim)
    drifted = (erri > 0.1 * DAMAGED_TOLERANCE) | jnp.isnan(erri)
    closer = (erri_test < erri) | (jnp.isnan(erri) & ~jnp.isnan(erri_test))
    takes = drifted & closer
    return jnp.where(takes, recomputed, simi), jnp.where(takes, erri_test, erri)


def _swap_columns(matrix: jax.Array, i, j) -> jax.Array:
    return matrix.at[..., i].set(matrix[..., j]).at[..., j].set(matrix[..., i])


def update_pole(cpen, simplex: Simplex) -> tuple[Simplex, jax.Array]:
    """pyprima's ``updatepole``: the best point becomes the pole; ``(simplex, damaged)``, the
    simplex unchanged where rounding has damaged its inverse."""
    sim, simi, fval, conmat, cval = simplex
    n = simi.shape[0]
    jopt = find_pole(cpen, cval, fval)
    moves = jopt < n
    column = jnp.minimum(jopt, n - 1)
    moved_sim = sim.at[:, n].add(sim[:, column])
    pole_step = moved_sim[:, column]
    moved_sim = moved_sim.at[:, column].set(0.0)
    moved_sim = moved_sim.at[:, :n].add(-pole_step[:, None])
    moved_simi = simi.at[column].set(-jnp.sum(simi, axis=0))
    new_sim = jnp.where(moves, moved_sim, sim)
    new_simi = jnp.where(moves, moved_simi, simi)
    new_simi, erri = _checked_inverse(new_sim, new_simi)
    damaged = ~(erri <= DAMAGED_TOLERANCE)
    swapped = Simplex(
        new_sim,
        new_simi,
        jnp.where(moves, _swap_columns(fval, column, n), fval),
        jnp.where(moves, _swap_columns(conmat, column, n), conmat),
        jnp.where(moves, _swap_columns(cval, column, n), cval),
    )
    return jax.tree.map(lambda old, new: jnp.where(damaged, old, new), simplex, swapped), damaged


def update_point(
    jdrop: jax.Array, d: jax.Array, f, constr: jax.Array, cstrv, cpen, simplex: Simplex
) -> tuple[Simplex, jax.Array]:
    """pyprima's ``updatexfc``: point ``jdrop`` replaced by the pole plus ``d`` (no point where
    ``jdrop`` is negative, pyprima's None); ``(simplex, damaged)``."""
    sim, simi, fval, conmat, cval = simplex
    n = simi.shape[0]
    column = jnp.clip(jdrop, 0, n - 1)
    # A displacement replaced.
    row = simi[column] / (simi[column] @ d)
    vertex_simi = (simi - jnp.outer(simi @ d, row)).at[column].set(row)
    vertex_sim = sim.at[:, column].set(d)
    # The pole moved by d.
    pole_sim = sim.at[:, n].add(d).at[:, :n].add(-d[:, None])
    simid = simi @ d
    pole_simi = simi + jnp.outer(simid, jnp.sum(simi, axis=0) / (1 - jnp.sum(simid)))
    at_vertex = jdrop < n
    new_sim = jnp.where(at_vertex, vertex_sim, pole_sim)
    new_simi, erri = _checked_inverse(new_sim, jnp.where(at_vertex, vertex_simi, pole_simi))
    damaged = ~(erri <= DAMAGED_TOLERANCE)
    at = jnp.clip(jdrop, 0, n)
    replaced = Simplex(
        new_sim,
        new_simi,
        fval.at[at].set(f),
        conmat.at[:, at].set(constr),
        cval.at[at].set(cstrv),
    )
    updated, pole_damaged = update_pole(cpen, replaced)
    drops = jdrop >= 0
    kept = jax.tree.map(lambda old, new: jnp.where(drops & ~damaged, new, old), simplex, updated)
    return kept, drops & (damaged | pole_damaged)


def trust_region_drop(ximproved, d: jax.Array, delta, rho, sim: jax.Array, simi: jax.Array):
    """pyprima's ``setdrop_tr``: the point a trust-region step replaces, -1 for none."""
    n = simi.shape[0]
    displaced = jnp.sum((sim[:, :n] - d[:, None]) ** 2, axis=0)
    distsq = jnp.where(
        ximproved,
        jnp.concatenate([displaced, (d @ d)[None]]),
        jnp.concatenate([jnp.sum(sim[:, :n] ** 2, axis=0), jnp.zeros((1,), d.dtype)]),
    )
    weight = jnp.maximum(1.0, distsq / jnp.maximum(rho, delta / 10) ** 2)
    simid = simi @ d
    score = weight * jnp.abs(jnp.concatenate([simid, (1 - jnp.sum(simid))[None]]))
    score = jnp.where(ximproved, score, score.at[n].set(-1.0))
    score = jnp.where(jnp.isnan(score), -1.0, score)
    return jnp.where(
        jnp.any(score > 0), jnp.argmax(score), jnp.where(ximproved, jnp.argmax(distsq), -1)
    )


def geometry_step(jdrop, amat: jax.Array, cpen, delbar, simplex: Simplex) -> jax.Array:
    """pyprima's ``geostep``: a step of length ``delbar`` along row ``jdrop`` of ``simi``, with
    the sign of the lower merit of the linear models."""
    simi, fval, conmat = simplex.simi, simplex.fval, simplex.conmat
    n = simi.shape[0]
    d = simi[jdrop]
    d = delbar * (d / jnp.linalg.norm(d))
    g = (fval[:n] - fval[n]) @ simi
    moved = d @ amat.T
    cvpd = jnp.max(conmat[:, n] + moved, initial=0.0)
    cvnd = jnp.max(conmat[:, n] - moved, initial=0.0)
    return jnp.where(-(d @ g) + cpen * cvnd < d @ g + cpen * cvpd, -d, d)


def model_gradient(simplex: Simplex) -> jax.Array:
    n = simplex.simi.shape[0]
    return (simplex.fval[:n] - simplex.fval[n]) @ simplex.simi
