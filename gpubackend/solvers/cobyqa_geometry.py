"""COBYQA's geometry-improving steps (port of scipy's vendored
``cobyqa/subsolvers/geometry.py``: ``cauchy_geometry`` and ``spider_geometry``).

Both look for a step within the trust region and the bounds that makes the
Lagrange polynomial of the point to replace (``grad``, and its curvature on
``(xpt, i_hess)``; its constant is 0) large in magnitude: a Cauchy step along
its gradient, either sign, or a step along a line through another
interpolation point. COBYQA bounds the "spider" steps with one ratio over all
lines (its ``atleast_2d`` flattens them); that is kept.
"""

import numpy as np

from gpubackend.solvers.cobyqa_model import curv, curv_along_column
from gpubackend.solvers.cobyqa_tangential import TINY
from gpubackend.solvers.ieee import ieee_njit
from gpubackend.solvers.numpy_products import column_norms, dot, masked_dot, norm, strided_dot


@ieee_njit
def _clip(v, xl, xu):
    return np.minimum(np.maximum(v, xl), xu)


@ieee_njit
def _cauchy_geom(sign, grad_in, xpt, i_hess, e_hess, xl, xu, delta):
    """scipy's ``_cauchy_geom`` on ``sign`` times the polynomial: ``(step, q_val)``."""
    n = grad_in.shape[0]
    grad = sign * grad_in
    fixed_xl = (xl < 0.0) & (grad > 0.0)
    fixed_xu = (xu > 0.0) & (grad < 0.0)
    cauchy_step = np.zeros(n)
    for i in range(n):
        if fixed_xl[i]:
            cauchy_step[i] = xl[i]
        if fixed_xu[i]:
            cauchy_step[i] = xu[i]
    if norm(cauchy_step) > delta:
        working = fixed_xl | fixed_xu
        while True:
            g_norm = norm(grad[working])
            delta_reduced = np.sqrt(delta**2.0 - masked_dot(cauchy_step, cauchy_step, ~working))
            if g_norm > TINY * abs(delta_reduced):
                mu = max(delta_reduced / g_norm, 0.0)
            else:
                break
            any_fixed = False
            for i in range(n):
                fixed_xl[i] = False
                fixed_xu[i] = False
                if working[i]:
                    cauchy_step[i] = mu * grad[i]
                    fixed_xl[i] = cauchy_step[i] < xl[i]
                    fixed_xu[i] = cauchy_step[i] > xu[i]
                    any_fixed = any_fixed or fixed_xl[i] or fixed_xu[i]
            if not any_fixed:
                break
            for i in range(n):
                if fixed_xl[i]:
                    cauchy_step[i] = xl[i]
                if fixed_xu[i]:
                    cauchy_step[i] = xu[i]
                working[i] = working[i] and not (fixed_xl[i] or fixed_xu[i])
    grad_step = dot(grad, cauchy_step)
    if grad_step >= 0.0:
        s_norm = norm(cauchy_step)
        if s_norm > TINY * delta:
            alpha_tr = max(delta / s_norm, 0.0)
        else:
            alpha_tr = 0.0
        curv_step = sign * curv(xpt, i_hess, e_hess, cauchy_step)
        if curv_step < -TINY * grad_step:
            alpha_quad = max(-grad_step / curv_step, 0.0)
        else:
            alpha_quad = np.inf
        alpha_xl = np.inf
        alpha_xu = np.inf
        for i in range(n):
            if xl[i] > -np.inf and cauchy_step[i] < TINY * xl[i]:
                alpha_xl = min(alpha_xl, xl[i] / cauchy_step[i])
            if xu[i] < np.inf and cauchy_step[i] > TINY * xu[i]:
                alpha_xu = min(alpha_xu, xu[i] / cauchy_step[i])
        alpha_bd = min(alpha_xl, alpha_xu)
        alpha = min(alpha_tr, alpha_quad, alpha_bd)
        step = _clip(alpha * cauchy_step, xl, xu)
        q_val = alpha * grad_step + 0.5 * alpha**2.0 * curv_step
        return step, q_val
    return np.zeros(n), 0.0


@ieee_njit
def cauchy_geometry(grad, xpt, i_hess, e_hess, xl_in, xu_in, delta):
    xl = np.minimum(xl_in, 0.0)
    xu = np.maximum(xu_in, 0.0)
    step1, q_val1 = _cauchy_geom(1.0, grad, xpt, i_hess, e_hess, xl, xu, delta)
    step2, q_val2 = _cauchy_geom(-1.0, grad, xpt, i_hess, e_hess, xl, xu, delta)
    return step1 if abs(q_val1) >= abs(q_val2) else step2


@ieee_njit
def spider_geometry(grad, xpt, i_hess, e_hess, lines, xl_in, xu_in, delta):
    """scipy's ``spider_geometry`` along the columns of ``lines``."""
    xl = np.minimum(xl_in, 0.0)
    xu = np.maximum(xu_in, 0.0)
    n, n_lines = lines.shape
    s_norm = column_norms(lines)
    step = np.zeros(n)
    q_val = 0.0
    # COBYQA's bound ratios, each one maximum over every line; the two taken with initial=inf
    # are always inf.
    alpha_xl_pos = -np.inf
    alpha_xu_neg = -np.inf
    for k in range(n_lines):
        for i in range(n):
            if xl[i] > -np.inf and lines[i, k] > -TINY * xl[i]:
                alpha_xl_pos = max(alpha_xl_pos, xl[i] / lines[i, k])
            if xu[i] < np.inf and lines[i, k] < -TINY * xu[i]:
                alpha_xu_neg = max(alpha_xu_neg, xu[i] / lines[i, k])
    for k in range(n_lines):
        line = lines[:, k]
        if s_norm[k] > TINY * delta:
            alpha_tr = max(delta / s_norm[k], 0.0)
        else:
            continue
        alpha_bd_pos = np.inf
        alpha_bd_neg = min(max(alpha_xl_pos, alpha_xu_neg), 0.0)
        grad_step = strided_dot(grad, line)
        curv_step = curv_along_column(xpt, i_hess, e_hess, line)
        if (grad_step >= 0.0 and curv_step < -TINY * grad_step) or (
            grad_step <= 0.0 and curv_step > -TINY * grad_step
        ):
            alpha_quad_pos = max(-grad_step / curv_step, 0.0)
        else:
            alpha_quad_pos = np.inf
        if (grad_step >= 0.0 and curv_step > TINY * grad_step) or (
            grad_step <= 0.0 and curv_step < TINY * grad_step
        ):
            alpha_quad_neg = min(-grad_step / curv_step, 0.0)
        else:
            alpha_quad_neg = -np.inf
        alpha_pos = min(alpha_tr, alpha_bd_pos)
        alpha_neg = max(-alpha_tr, alpha_bd_neg)
        q_val_pos = alpha_pos * grad_step + 0.5 * alpha_pos**2.0 * curv_step
        q_val_neg = alpha_neg * grad_step + 0.5 * alpha_neg**2.0 * curv_step
        if alpha_quad_pos < alpha_pos:
            q_val_quad_pos = alpha_quad_pos * grad_step + 0.5 * alpha_quad_pos**2.0 * curv_step
            if abs(q_val_quad_pos) > abs(q_val_pos):
                alpha_pos = alpha_quad_pos
                q_val_pos = q_val_quad_pos
        if alpha_quad_neg > alpha_neg:
            q_val_quad_neg = alpha_quad_neg * grad_step + 0.5 * alpha_quad_neg**2.0 * curv_step
            if abs(q_val_quad_neg) > abs(q_val_neg):
                alpha_neg = alpha_quad_neg
                q_val_neg = q_val_quad_neg
        if abs(q_val_pos) >= abs(q_val_neg) and abs(q_val_pos) > abs(q_val):
            step = _clip(alpha_pos * line, xl, xu)
            q_val = q_val_pos
        elif abs(q_val_neg) > abs(q_val_pos) and abs(q_val_neg) > abs(q_val):
            step = _clip(alpha_neg * line, xl, xu)
            q_val = q_val_neg
    return step
