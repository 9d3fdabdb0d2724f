"""TNC's search direction (``tnc.c``'s ``tnc_direction``) as a `jax.lax.while_loop`: truncated
preconditioned CG on the Newton equations, as the Numba solver runs it
(`gpubackend.solvers.tnc_direction`, where the method is described).

Each CG iteration is one pass of the loop; its branches (truncation for lack of
curvature or of budget, the diagonal update, the stop on the quadratic model's
decrease, the step back from an ascent direction) are selected with
``jnp.where``, so a batch of solves (vmap) runs them in step. A product ``H v``
calls the objective once, counted only where the iteration gets that far.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from gpubackend.dispatch.jax.implicit import varying_leaves_like
from gpubackend.dispatch.jax.tnc_vectors import Evaluations, Objective, Scaling, project

_CG_TOLERANCE = 1e-12
_SMALLEST_DIAGONAL = 1e-6


class Memory(NamedTuple):
    """The preconditioner: a diagonal and the BFGS pairs of the last step (``sk``, ``yk``) and
    of the steps since the last reset (``sr``, ``yr``)."""

    diagb: jax.Array
    sk: jax.Array
    yk: jax.Array
    sr: jax.Array
    yr: jax.Array
    upd1: jax.Array
    lreset: jax.Array
    yksk: jax.Array
    yrsr: jax.Array


def _self_scaled_bfgs(sj, hjv, hjyj, yjsj, yjhyj, vsj, vhyj) -> jax.Array:
    """``H_{j+1} v`` from ``H_j v`` by one BFGS update with the pair ``(sj, yj)`` (``ssbfgs``)."""
    regular = yjsj != 0.0
    safe = jnp.where(regular, yjsj, 1.0)
    delta = jnp.where(regular, (yjhyj / safe + 1.0) * vsj / safe - vhyj / safe, 0.0)
    beta = jnp.where(regular, -vsj / safe, 0.0)
    return hjv + delta * sj + beta * hjyj


def precondition(g: jax.Array, memory: Memory) -> jax.Array:
    """``M^-1 g`` (``msolve``): the diagonal alone on the first cycle, otherwise BFGS updates of
    it by the last step and, unless reset, the accumulated one."""
    m = memory
    rdiagb = 1.0 / m.diagb
    hg, hyk = g * rdiagb, m.yk * rdiagb
    gsk = jnp.dot(g, m.sk)
    reset = _self_scaled_bfgs(m.sk, hg, hyk, m.yksk, jnp.dot(m.yk, hyk), gsk, jnp.dot(g, hyk))
    hyr = m.yr * rdiagb
    yrhyr = jnp.dot(m.yr, hyr)
    hg_r = _self_scaled_bfgs(m.sr, hg, hyr, m.yrsr, yrhyr, jnp.dot(g, m.sr), jnp.dot(g, hyr))
    hyk_r = _self_scaled_bfgs(
        m.sr, hyk, hyr, m.yrsr, yrhyr, jnp.dot(m.yk, m.sr), jnp.dot(m.yk, hyr)
    )
    accumulated = _self_scaled_bfgs(
        m.sk, hg_r, hyk_r, m.yksk, jnp.dot(hyk_r, m.yk), gsk, jnp.dot(hyk_r, g)
    )
    return jnp.where(m.upd1, g / m.diagb, jnp.where(m.lreset, reset, accumulated))


def _one_if_zero(value: jax.Array) -> jax.Array:
    return jnp.where(value == 0.0, 1.0, value)


def _initial_diagonal(memory: Memory) -> jax.Array:
    """The diagonal CG starts from (``initPreconditioner``)."""
    m = memory
    td = m.diagb
    yksk = _one_if_zero(m.yksk)
    bsk = td * m.sk
    sds = _one_if_zero(jnp.dot(m.sk, bsk))
    reset = td - td * td * m.sk * m.sk / sds + m.yk * m.yk / yksk
    bsr = td * m.sr
    sds = _one_if_zero(jnp.dot(m.sr, bsr))
    srds = jnp.dot(m.sk, bsr)
    yrsk = jnp.dot(m.yr, m.sk)
    yrsr = _one_if_zero(m.yrsr)
    bsk = td * m.sk - bsr * srds / sds + m.yr * yrsk / yrsr
    accumulated = td - td * td * m.sr * m.sr / sds + m.yr * m.yr / yrsr
    sds = _one_if_zero(jnp.dot(m.sk, bsk))
    accumulated = accumulated - (bsk * bsk / sds + m.yk * m.yk / yksk)
    return jnp.where(m.upd1, m.diagb, jnp.where(m.lreset, reset, accumulated))


class _CG(NamedTuple):
    k: jax.Array
    zsol: jax.Array
    r: jax.Array
    v: jax.Array
    emat: jax.Array
    qold: jax.Array
    rzold: jax.Array
    evaluations: Evaluations
    done: jax.Array


class Direction(NamedTuple):
    zsol: jax.Array
    diagb: jax.Array
    evaluations: Evaluations


def direction(
    objective: Objective,
    x: jax.Array,
    g: jax.Array,
    memory: Memory,
    scaling: Scaling,
    fscale: jax.Array,
    pivot: jax.Array,
    gnorm: jax.Array,
    xnorm: jax.Array,
    evaluations: Evaluations,
    max_cg_iterations: int,
    max_evaluations: int,
    accuracy: float,
) -> Direction:
    """TNC's direction at scaled ``x`` with scaled, projected gradient ``g``, the diagonal CG
    refined, and the calls it made."""
    steepest = project(-g, pivot)
    if max_cg_iterations == 0:
        return Direction(steepest, memory.diagb, evaluations)
    delta = accuracy * (xnorm + 1.0)

    def iterate(c: _CG) -> _CG:
        first = c.k == 0
        r = project(c.r, pivot)
        zk = project(precondition(r, memory), pivot)
        rz = jnp.dot(r, zk)
        out_of_room = (rz / gnorm < _CG_TOLERANCE) | (
            c.evaluations.requested >= max_evaluations - 1
        )
        beta = jnp.where(first, 0.0, rz / c.rzold)
        v = project(zk + beta * c.v, pivot)
        # H v by a forward difference of gradients (hessianTimesVector).
        _, gv, full = objective.at(scaling.point(x, delta, v))
        evaluations = c.evaluations.after(full, ~out_of_room)
        dinv = 1.0 / delta
        gv = (scaling.gradient(gv, fscale) - g) * dinv
        gv = project(jnp.where(scaling.xscale == 0.0, 0.0, gv), pivot)
        vgv = jnp.dot(v, gv)
        flat = ~out_of_room & (vgv / gnorm < _CG_TOLERANCE)
        # diagonalScaling: a diagonal BFGS update of the preconditioner.
        vr = 1.0 / jnp.dot(v, r)
        emat = c.emat + (-r * r * vr + gv * gv * (1.0 / vgv))
        emat = jnp.where(emat <= _SMALLEST_DIAGONAL, 1.0, emat)
        alpha = rz / vgv
        zsol = c.zsol + alpha * v
        r_next = r + -alpha * gv
        gtp = jnp.dot(zsol, g)
        qnew = (gtp + jnp.dot(r_next, zsol)) * 0.5
        qtest = (c.k + 1) * (1.0 - c.qold / qnew)
        small_decrease = qtest <= 0.5
        # Not a descent direction any more: step back.
        ascent = ~small_decrease & (gtp > 0.0)
        zsol = jnp.where(ascent, zsol + -alpha * v, zsol)
        truncated = out_of_room | flat
        truncated_zsol = jnp.where(out_of_room, steepest, project(-precondition(g, memory), pivot))
        return _CG(
            k=c.k + 1,
            zsol=jnp.where(truncated, jnp.where(first, truncated_zsol, c.zsol), zsol),
            r=jnp.where(truncated, r, r_next),
            v=v,
            emat=jnp.where(truncated, c.emat, emat),
            qold=qnew,
            rzold=rz,
            evaluations=evaluations,
            done=truncated | small_decrease | ascent | (c.k + 1 >= max_cg_iterations),
        )

    zero = jnp.zeros_like(x)
    start = _CG(
        k=jnp.array(0),
        zsol=zero,
        r=-g,
        v=zero,
        emat=_initial_diagonal(memory),
        qold=jnp.array(0.0),
        rzold=jnp.array(0.0),
        evaluations=evaluations,
        done=jnp.array(False),
    )
    # Inside a manual mesh the carry starts as varying as the body makes it.
    start = varying_leaves_like(start, (x, g, evaluations))
    end = jax.lax.while_loop(lambda c: ~c.done, iterate, start)
    return Direction(end.zsol, end.emat, end.evaluations)
