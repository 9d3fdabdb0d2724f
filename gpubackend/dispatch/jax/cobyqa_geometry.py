"""COBYQA's geometry-improving steps (scipy's vendored ``cobyqa/subsolvers/geometry.py``:
``cauchy_geometry`` and ``spider_geometry``), as `gpubackend.solvers.cobyqa_geometry` ports them.

Both look for a step within the trust region and the bounds that makes the
Lagrange polynomial of the point to replace (a `Model` with constant 0) large
in magnitude: a Cauchy step along its gradient, either sign, or a step along a
line through another interpolation point. COBYQA bounds the "spider" steps with
one ratio over all lines (its ``atleast_2d`` flattens them); that is kept. The
lines are weighed at once; the first with the largest magnitude wins, as in
COBYQA's loop, which takes a line only where it beats every earlier one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from gpubackend.dispatch.jax.cobyqa_model import Model, curv
from gpubackend.dispatch.jax.cobyqa_tangential import tiny


def _cauchy_direction(grad, xl, xu, delta) -> jax.Array:
    """``_cauchy_geom``'s step before its length is chosen: along ``grad``, the variables that
    leave their bounds held there, within the trust region."""
    small = tiny(grad.dtype)
    fixed_xl = (xl < 0.0) & (grad > 0.0)
    fixed_xu = (xu > 0.0) & (grad < 0.0)
    cauchy_step = jnp.where(fixed_xu, xu, jnp.where(fixed_xl, xl, 0.0))

    def running(carry):
        return carry[2]

    def body(carry):
        cauchy_step, working, _ = carry
        g_norm = jnp.sqrt(jnp.sum(jnp.where(working, grad**2, 0.0)))
        delta_reduced = jnp.sqrt(delta**2 - jnp.sum(jnp.where(working, 0.0, cauchy_step**2)))
        scales = g_norm > small * jnp.abs(delta_reduced)
        mu = jnp.maximum(delta_reduced / jnp.where(scales, g_norm, 1.0), 0.0)
        scaled = jnp.where(working, mu * grad, cauchy_step)
        leaves_xl = working & (scaled < xl)
        leaves_xu = working & (scaled > xu)
        clipped = jnp.where(leaves_xu, xu, jnp.where(leaves_xl, xl, scaled))
        leaves = jnp.any(leaves_xl | leaves_xu)
        return (
            jnp.where(scales, clipped, cauchy_step),
            working & ~(leaves_xl | leaves_xu),
            scales & leaves,
        )

    too_long = jnp.linalg.norm(cauchy_step) > delta
    return jax.lax.while_loop(running, body, (cauchy_step, fixed_xl | fixed_xu, too_long))[0]


def _cauchy_geom(sign: float, lagrange: Model, xpt, xl, xu, delta):
    """scipy's ``_cauchy_geom`` on ``sign`` times the polynomial: ``(step, q_val)``."""
    small = tiny(xpt.dtype)
    grad = sign * lagrange.grad
    cauchy_step = _cauchy_direction(grad, xl, xu, delta)
    grad_step = grad @ cauchy_step
    s_norm = jnp.linalg.norm(cauchy_step)
    alpha_tr = jnp.where(
        s_norm > small * delta, jnp.maximum(delta / jnp.where(s_norm > 0, s_norm, 1.0), 0.0), 0.0
    )
    curv_step = sign * curv(xpt, lagrange, cauchy_step)
    alpha_quad = jnp.where(
        curv_step < -small * grad_step, jnp.maximum(-grad_step / curv_step, 0.0), jnp.inf
    )
    safe = jnp.where(cauchy_step != 0.0, cauchy_step, 1.0)
    alpha_xl = jnp.min(jnp.where((xl > -jnp.inf) & (cauchy_step < small * xl), xl / safe, jnp.inf))
    alpha_xu = jnp.min(jnp.where((xu < jnp.inf) & (cauchy_step > small * xu), xu / safe, jnp.inf))
    alpha = jnp.minimum(jnp.minimum(alpha_tr, alpha_quad), jnp.minimum(alpha_xl, alpha_xu))
    ascends = grad_step >= 0.0
    step = jnp.where(ascends, jnp.clip(alpha * cauchy_step, xl, xu), 0.0)
    q_val = jnp.where(ascends, alpha * grad_step + 0.5 * alpha**2 * curv_step, 0.0)
    return step, q_val


def cauchy_geometry(lagrange: Model, xpt, xl_in, xu_in, delta) -> jax.Array:
    xl = jnp.minimum(xl_in, 0.0)
    xu = jnp.maximum(xu_in, 0.0)
    step1, q_val1 = _cauchy_geom(1.0, lagrange, xpt, xl, xu, delta)
    step2, q_val2 = _cauchy_geom(-1.0, lagrange, xpt, xl, xu, delta)
    return jnp.where(jnp.abs(q_val1) >= jnp.abs(q_val2), step1, step2)


def spider_geometry(lagrange: Model, xpt, lines, xl_in, xu_in, delta) -> jax.Array:
    """scipy's ``spider_geometry`` along the columns of ``lines``."""
    small = tiny(xpt.dtype)
    xl = jnp.minimum(xl_in, 0.0)[:, None]
    xu = jnp.maximum(xu_in, 0.0)[:, None]
    s_norm = jnp.linalg.norm(lines, axis=0)
    safe_lines = jnp.where(lines != 0.0, lines, 1.0)
    # COBYQA's bound ratios, each one maximum over every line; the two taken with initial=inf
    # are always inf.
    alpha_xl_pos = jnp.max(
        jnp.where((xl > -jnp.inf) & (lines > -small * xl), xl / safe_lines, -jnp.inf)
    )
    alpha_xu_neg = jnp.max(
        jnp.where((xu < jnp.inf) & (lines < -small * xu), xu / safe_lines, -jnp.inf)
    )
    considered = s_norm > small * delta
    alpha_tr = jnp.maximum(delta / jnp.where(considered, s_norm, 1.0), 0.0)
    alpha_bd_neg = jnp.minimum(jnp.maximum(alpha_xl_pos, alpha_xu_neg), 0.0)
    grad_step = lagrange.grad @ lines
    curv_step = jax.vmap(lambda line: curv(xpt, lagrange, line), in_axes=1)(lines)
    safe_curv = jnp.where(curv_step != 0.0, curv_step, 1.0)
    quad_pos = ((grad_step >= 0.0) & (curv_step < -small * grad_step)) | (
        (grad_step <= 0.0) & (curv_step > -small * grad_step)
    )
    alpha_quad_pos = jnp.where(quad_pos, jnp.maximum(-grad_step / safe_curv, 0.0), jnp.inf)
    quad_neg = ((grad_step >= 0.0) & (curv_step > small * grad_step)) | (
        (grad_step <= 0.0) & (curv_step < small * grad_step)
    )
    alpha_quad_neg = jnp.where(quad_neg, jnp.minimum(-grad_step / safe_curv, 0.0), -jnp.inf)

    def q_val(alpha):
        return alpha * grad_step + 0.5 * alpha**2 * curv_step

    alpha_pos = alpha_tr
    alpha_neg = jnp.maximum(-alpha_tr, alpha_bd_neg)
    q_val_pos, q_val_neg = q_val(alpha_pos), q_val(alpha_neg)
    q_val_quad_pos = q_val(jnp.where(quad_pos, alpha_quad_pos, 0.0))
    to_quad_pos = (alpha_quad_pos < alpha_pos) & (jnp.abs(q_val_quad_pos) > jnp.abs(q_val_pos))
    alpha_pos = jnp.where(to_quad_pos, alpha_quad_pos, alpha_pos)
    q_val_pos = jnp.where(to_quad_pos, q_val_quad_pos, q_val_pos)
    q_val_quad_neg = q_val(jnp.where(quad_neg, alpha_quad_neg, 0.0))
    to_quad_neg = (alpha_quad_neg > alpha_neg) & (jnp.abs(q_val_quad_neg) > jnp.abs(q_val_neg))
    alpha_neg = jnp.where(to_quad_neg, alpha_quad_neg, alpha_neg)
    q_val_neg = jnp.where(to_quad_neg, q_val_quad_neg, q_val_neg)

    positive = jnp.abs(q_val_pos) >= jnp.abs(q_val_neg)
    magnitude = jnp.where(positive, jnp.abs(q_val_pos), jnp.abs(q_val_neg))
    # COBYQA's comparisons take no line with a NaN value.
    comparable = ~jnp.isnan(q_val_pos) & ~jnp.isnan(q_val_neg)
    magnitude = jnp.where(considered & comparable, magnitude, 0.0)
    k = jnp.argmax(magnitude)
    alpha = jnp.where(positive[k], alpha_pos[k], alpha_neg[k])
    step = jnp.clip(alpha * lines[:, k], xl[:, 0], xu[:, 0])
    return jnp.where(magnitude[k] > 0.0, step, jnp.zeros_like(step))
