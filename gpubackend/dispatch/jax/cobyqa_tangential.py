"""COBYQA's trust-region step without constraints but bounds (scipy's vendored
``cobyqa/subsolvers/optim.py``: ``tangential_byrd_omojokun`` and ``_alpha_tr``), as
`gpubackend.solvers.cobyqa_tangential` ports it.

Steihaug-Toint truncated conjugate gradients on the model, each variable that
hits a bound fixed and the iteration restarted; once the boundary of the trust
region is reached, COBYQA's ``improve_tcg`` search along the boundary (a fixed
sample of angles per pass: at most `N_SAMPLES`, masked to the pass's count),
kept only where it lowers the model. Each loop is a ``lax.while_loop`` whose
breaks are a ``stopped`` flag; a pass that breaks keeps its state unchanged.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from gpubackend.dispatch.jax.cobyqa_model import Model, hess_prod

N_SAMPLES = 20
"""Angles sampled on a full pass of the boundary search."""


def tiny(dtype) -> float:
    return float(jnp.finfo(dtype).tiny)


def alpha_tr(step, sd, delta) -> tuple[jax.Array, jax.Array]:
    """``(alpha, ok)``: the step length along ``sd`` from ``step`` to the trust-region boundary;
    ``ok`` False where scipy raises ``ZeroDivisionError``."""
    small = tiny(step.dtype)
    step_sd = step @ sd
    sd_sq = sd @ sd
    dist_tr_sq = delta**2 - step @ step
    temp = jnp.sqrt(jnp.maximum(step_sd**2 + sd_sq * dist_tr_sq, 0.0))
    inward = (step_sd <= 0.0) & (sd_sq > small * jnp.abs(temp - step_sd))
    outward = jnp.abs(temp + step_sd) > small * dist_tr_sq
    alpha = jnp.where(
        inward,
        jnp.maximum((temp - step_sd) / sd_sq, 0.0),
        jnp.where(outward, jnp.maximum(dist_tr_sq / (temp + step_sd), 0.0), 0.0),
    )
    return alpha, inward | outward


def fix_all_minima(values, bound, step, free):
    """scipy's ``_argmin``: every variable at the minimum of ``values`` moves onto its bound."""
    at_minimum = values <= jnp.min(values)
    return jnp.where(at_minimum, bound, step), free & ~at_minimum


def fix_all_minima_where(where, values, bound, step, free):
    """`fix_all_minima` where ``where`` holds."""
    fixed_step, fixed_free = fix_all_minima(values, bound, step, free)
    return jnp.where(where, fixed_step, step), jnp.where(where, fixed_free, free)


class _Descent(eqx.Module):
    k: jax.Array
    step: jax.Array
    sd: jax.Array
    grad: jax.Array
    free: jax.Array
    reduct: jax.Array
    boundary_reached: jax.Array
    stopped: jax.Array


def _bound_ratios(lower_or_upper, step, sd, towards_lower: bool):
    """Each free variable's step length along ``sd`` to its bound, or inf."""
    small = tiny(step.dtype)
    gap = lower_or_upper - step
    if towards_lower:
        reaches = (lower_or_upper > -jnp.inf) & (sd < -small * jnp.abs(gap))
    else:
        reaches = (lower_or_upper < jnp.inf) & (sd > small * jnp.abs(gap))
    return jnp.where(reaches, jnp.maximum(gap / jnp.where(reaches, sd, 1.0), 0.0), jnp.inf)


def tangential_step(grad0, xpt, model: Model, xl_in, xu_in, delta) -> jax.Array:
    """scipy's ``tangential_byrd_omojokun`` (``improve_tcg`` on)."""
    n = grad0.shape[0]
    dtype = grad0.dtype
    small = tiny(dtype)
    eps = jnp.finfo(dtype).eps
    xl = jnp.minimum(xl_in, 0.0)
    xu = jnp.maximum(xu_in, 0.0)
    free = ((xl < 0.0) | (grad0 < 0.0)) & ((xu > 0.0) | (grad0 > 0.0))
    zero = jnp.zeros((), dtype)

    def running(s: _Descent):
        return ~s.stopped & (s.k < jnp.count_nonzero(s.free))

    def body(s: _Descent) -> _Descent:
        grad_sd = s.grad @ s.sd
        flat = grad_sd >= -10.0 * eps * n * jnp.maximum(1.0, jnp.linalg.norm(s.grad))
        alpha_boundary, ok = alpha_tr(s.step, s.sd, delta)
        hess_sd = hess_prod(xpt, model, s.sd)
        curv_sd = s.sd @ hess_sd
        alpha_quad = jnp.where(
            curv_sd > small * jnp.abs(grad_sd), jnp.maximum(-grad_sd / curv_sd, 0.0), jnp.inf
        )
        alpha = jnp.minimum(alpha_boundary, alpha_quad)
        stops = (
            flat
            | ~ok
            | (-alpha_boundary * grad_sd <= 1e-08 * s.reduct)
            | (-alpha * (grad_sd + 0.5 * alpha * curv_sd) <= 1e-08 * s.reduct)
        )
        all_alpha_xl = _bound_ratios(xl, s.step, s.sd, True)
        all_alpha_xu = _bound_ratios(xu, s.step, s.sd, False)
        alpha_xl = jnp.min(all_alpha_xl)
        alpha_xu = jnp.min(all_alpha_xu)
        alpha_bd = jnp.minimum(alpha_xl, alpha_xu)
        alpha = jnp.minimum(alpha, alpha_bd)
        moves = alpha > 0.0
        step = jnp.where(moves & s.free, jnp.clip(s.step + alpha * s.sd, xl, xu), s.step)
        grad = jnp.where(moves, s.grad + alpha * hess_sd, s.grad)
        reduct = jnp.where(moves, s.reduct - alpha * (grad_sd + 0.5 * alpha * curv_sd), s.reduct)

        # Inside the region and the bounds: a conjugate direction.
        beta = jnp.sum(jnp.where(s.free, grad * hess_sd, 0.0)) / curv_sd
        conjugate = jnp.where(s.free, beta * s.sd - grad, 0.0)
        # On a bound first: that variable is fixed and the iteration restarts.
        at_lower = alpha_xl <= alpha
        i_new = jnp.where(at_lower, jnp.argmin(all_alpha_xl), jnp.argmin(all_alpha_xu))
        bound_step = step.at[i_new].set(jnp.where(at_lower, xl[i_new], xu[i_new]))
        bound_free = s.free.at[i_new].set(False)
        # On the trust region's boundary: the variables there on their bounds too are fixed.
        edge_step, edge_free = fix_all_minima_where(at_lower, all_alpha_xl, xl, step, s.free)
        edge_step, edge_free = fix_all_minima_where(
            alpha_xu <= alpha, all_alpha_xu, xu, edge_step, edge_free
        )
        interior = alpha < jnp.minimum(alpha_boundary, alpha_bd)
        on_bound = ~interior & (alpha < alpha_boundary)
        on_edge = ~interior & ~on_bound
        new = _Descent(
            k=jnp.where(interior, s.k + 1, 0),
            step=jnp.where(interior, step, jnp.where(on_bound, bound_step, edge_step)),
            sd=jnp.where(
                interior,
                conjugate,
                jnp.where(on_bound, jnp.where(bound_free, -grad, 0.0), s.sd),
            ),
            grad=grad,
            free=jnp.where(interior, s.free, jnp.where(on_bound, bound_free, edge_free)),
            reduct=reduct,
            boundary_reached=on_edge,
            stopped=on_edge,
        )
        stopped = eqx.tree_at(lambda d: d.stopped, s, jnp.array(True))
        return jax.tree.map(lambda a, b: jnp.where(stops, a, b), stopped, new)

    start = _Descent(
        k=jnp.array(0),
        step=jnp.zeros((n,), dtype),
        sd=jnp.where(free, -grad0, 0.0),
        grad=grad0,
        free=free,
        reduct=zero,
        boundary_reached=jnp.array(False),
        stopped=jnp.array(False),
    )
    s = jax.lax.while_loop(running, body, start)
    along = along_the_boundary(s, grad0, xpt, model, xl, xu)
    return jnp.where(s.boundary_reached, along, s.step)


def _model_change(grad0, xpt, model: Model, step) -> jax.Array:
    return grad0 @ step + 0.5 * (step @ hess_prod(xpt, model, step))


def _linspace(start, stop, num, size: int):
    """``np.linspace(start, stop, num)`` as numpy computes it, in the first ``num`` of ``size``
    entries (``num`` >= 2)."""
    index = jnp.arange(size)
    out = index * ((stop - start) / (num - 1)) + start
    return jnp.where(index == num - 1, stop, out)


def along_the_boundary(s: _Descent, grad0, xpt, model: Model, xl, xu) -> jax.Array:
    """COBYQA's ``improve_tcg``: rotate the step on the trust-region boundary while that lowers
    the model, fixing variables that reach their bounds; the step before it where it does not
    end lower."""
    small = tiny(grad0.dtype)
    step_comparator = _model_change(grad0, xpt, model, s.step)

    def running(s: _Descent):
        return ~s.stopped & (jnp.count_nonzero(s.free) > 0)

    def body(s: _Descent) -> _Descent:
        step, grad, free = s.step, s.grad, s.free
        step_sq = jnp.sum(jnp.where(free, step * step, 0.0))
        grad_sq = jnp.sum(jnp.where(free, grad * grad, 0.0))
        grad_step = jnp.sum(jnp.where(free, grad * step, 0.0))
        grad_sd = -jnp.sqrt(jnp.maximum(step_sq * grad_sq - grad_step**2, 0.0))
        sd = jnp.where(free, grad_step * step - step_sq * grad, 0.0)
        tiny_descent = jnp.any(free & (grad_sd >= -small * jnp.abs(sd)))
        flat = (grad_sd >= -1e-08 * s.reduct) | tiny_descent
        sd = jnp.where(free, sd / -grad_sd, 0.0)
        temp_xl = jnp.where(free, step**2 + sd**2 - xl**2, 0.0)
        temp_xu = jnp.where(free, step**2 + sd**2 - xu**2, 0.0)
        temp_xl = jnp.where(temp_xl > 0.0, jnp.sqrt(jnp.maximum(temp_xl, 0.0)) - sd, temp_xl)
        temp_xu = jnp.where(temp_xu > 0.0, jnp.sqrt(jnp.maximum(temp_xu, 0.0)) + sd, temp_xu)
        dist_xl = jnp.maximum(step - xl, 0.0)
        dist_xu = jnp.maximum(xu - step, 0.0)
        all_t_xl = jnp.where(
            temp_xl > small * dist_xl,
            jnp.minimum(1.0, dist_xl / jnp.where(temp_xl > 0, temp_xl, 1.0)),
            1.0,
        )
        all_t_xu = jnp.where(
            temp_xu > small * dist_xu,
            jnp.minimum(1.0, dist_xu / jnp.where(temp_xu > 0, temp_xu, 1.0)),
            1.0,
        )
        t_xl = jnp.min(all_t_xl)
        t_xu = jnp.min(all_t_xu)
        t_bd = jnp.minimum(t_xl, t_xu)
        hess_step = hess_prod(xpt, model, step)
        hess_sd = hess_prod(xpt, model, sd)
        curv_step = step @ hess_step
        curv_sd = sd @ hess_sd
        curv_step_sd = step @ hess_sd
        n_samples = ((N_SAMPLES - 3) * t_bd + 3).astype(jnp.int32)
        t_samples = _linspace(t_bd / n_samples, t_bd, n_samples, N_SAMPLES)
        sampled = jnp.arange(N_SAMPLES) < n_samples
        sin_values = 2.0 * t_samples / (1.0 + t_samples**2)
        all_reduct = sin_values * (
            grad_step * t_samples
            - grad_sd
            - t_samples * curv_step
            + sin_values * (t_samples * curv_step_sd - 0.5 * (curv_sd - curv_step))
        )
        no_reduction = jnp.all(~sampled | (all_reduct <= 0.0))
        i_max = jnp.argmax(jnp.where(sampled, all_reduct, -jnp.inf))
        cos_value = (1.0 - t_samples[i_max] ** 2) / (1.0 + t_samples[i_max] ** 2)
        new_step = jnp.where(free, cos_value * step + sin_values[i_max] * sd, step)
        new_grad = grad + ((cos_value - 1.0) * hess_step + sin_values[i_max] * hess_sd)
        reduct = s.reduct + all_reduct[i_max]
        goes_on = (t_bd < 1.0) & (i_max == n_samples - 1)
        fixed_step, fixed_free = fix_all_minima_where(t_xl <= t_bd, all_t_xl, xl, new_step, free)
        fixed_step, fixed_free = fix_all_minima_where(
            t_xu <= t_bd, all_t_xu, xu, fixed_step, fixed_free
        )
        new = _Descent(
            k=s.k,
            step=jnp.where(goes_on, fixed_step, new_step),
            sd=sd,
            grad=new_grad,
            free=jnp.where(goes_on, fixed_free, free),
            reduct=reduct,
            boundary_reached=s.boundary_reached,
            stopped=~goes_on,
        )
        stopped = eqx.tree_at(lambda d: d.stopped, s, jnp.array(True))
        return jax.tree.map(lambda a, b: jnp.where(flat | no_reduction, a, b), stopped, new)

    ended = jax.lax.while_loop(running, body, eqx.tree_at(lambda d: d.stopped, s, jnp.array(False)))
    raises = _model_change(grad0, xpt, model, ended.step) > step_comparator
    return jnp.where(raises, s.step, ended.step)
