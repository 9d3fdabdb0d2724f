"""COBYQA's trust-region step without constraints but bounds (port of scipy's vendored
``cobyqa/subsolvers/optim.py``: ``tangential_byrd_omojokun`` and ``_alpha_tr``).

Steihaug-Toint truncated conjugate gradients on the model, each variable that
hits a bound fixed and the iteration restarted; once the boundary of the trust
region is reached, COBYQA's ``improve_tcg`` search along the boundary (a fixed
sample of angles per pass), kept only where it lowers the model.
"""

import numpy as np

from gpubackend.solvers.cobyqa_model import EPS, hess_prod
from gpubackend.solvers.ieee import ieee_njit
from gpubackend.solvers.numpy_products import dot, masked_dot, norm

TINY = float(np.finfo(float).tiny)
_N_SAMPLES = 20
"""Angles sampled on a full pass of the boundary search."""


@ieee_njit
def alpha_tr(step, sd, delta):
    """``(alpha, ok)``: the step length along ``sd`` from ``step`` to the trust-region boundary;
    ``ok`` False where scipy raises ``ZeroDivisionError``."""
    step_sd = dot(step, sd)
    sd_sq = dot(sd, sd)
    dist_tr_sq = delta**2.0 - dot(step, step)
    temp = np.sqrt(max(step_sd**2.0 + sd_sq * dist_tr_sq, 0.0))
    if step_sd <= 0.0 and sd_sq > TINY * abs(temp - step_sd):
        return max((temp - step_sd) / sd_sq, 0.0), True
    if abs(temp + step_sd) > TINY * dist_tr_sq:
        return max(dist_tr_sq / (temp + step_sd), 0.0), True
    return 0.0, False


@ieee_njit
def _first_min(values) -> int:
    """``np.argmin``: the first minimum (a NaN first)."""
    best = 0
    for i in range(values.shape[0]):
        if np.isnan(values[i]):
            return i
        if values[i] < values[best]:
            best = i
    return best


@ieee_njit
def _fix_all_minima(values, bound, step, free):
    """scipy's ``_argmin``: every variable at the minimum of ``values`` moves onto its bound."""
    smallest = np.min(values)
    for i in range(values.shape[0]):
        if values[i] <= smallest:
            step[i] = bound[i]
            free[i] = False


@ieee_njit
def _steepest_descent(sd, grad, free):
    for i in range(sd.shape[0]):
        sd[i] = -grad[i] if free[i] else 0.0


@ieee_njit
def tangential_step(grad_in, xpt, i_hess, e_hess, xl_in, xu_in, delta):
    """scipy's ``tangential_byrd_omojokun`` (``improve_tcg`` on), the Hessian products those of
    the model ``(i_hess, e_hess)`` on ``xpt``."""
    n = grad_in.shape[0]
    xl = np.minimum(xl_in, 0.0)
    xu = np.maximum(xu_in, 0.0)
    grad = grad_in.copy()
    grad_orig = grad_in.copy()
    free = ((xl < 0.0) | (grad < 0.0)) & ((xu > 0.0) | (grad > 0.0))
    step = np.zeros(n)
    sd = np.zeros(n)
    _steepest_descent(sd, grad, free)
    k = 0
    reduct = 0.0
    boundary_reached = False
    while k < np.count_nonzero(free):
        grad_sd = dot(grad, sd)
        if grad_sd >= -10.0 * EPS * n * max(1.0, norm(grad)):
            break
        alpha_boundary, ok = alpha_tr(step, sd, delta)
        if not ok:
            break
        if -alpha_boundary * grad_sd <= 1e-08 * reduct:
            break
        hess_sd = hess_prod(xpt, i_hess, e_hess, sd)
        curv_sd = dot(sd, hess_sd)
        if curv_sd > TINY * abs(grad_sd):
            alpha_quad = max(-grad_sd / curv_sd, 0.0)
        else:
            alpha_quad = np.inf
        alpha = min(alpha_boundary, alpha_quad)
        if -alpha * (grad_sd + 0.5 * alpha * curv_sd) <= 1e-08 * reduct:
            break
        all_alpha_xl = np.full(n, np.inf)
        all_alpha_xu = np.full(n, np.inf)
        for i in range(n):
            if xl[i] > -np.inf and sd[i] < -TINY * abs(xl[i] - step[i]):
                all_alpha_xl[i] = max((xl[i] - step[i]) / sd[i], 0.0)
            if xu[i] < np.inf and sd[i] > TINY * abs(xu[i] - step[i]):
                all_alpha_xu[i] = max((xu[i] - step[i]) / sd[i], 0.0)
        alpha_xl = np.min(all_alpha_xl)
        alpha_xu = np.min(all_alpha_xu)
        alpha_bd = min(alpha_xl, alpha_xu)
        alpha = min(alpha, alpha_bd)
        if alpha > 0.0:
            for i in range(n):
                if free[i]:
                    step[i] = min(max(step[i] + alpha * sd[i], xl[i]), xu[i])
            grad += alpha * hess_sd
            reduct -= alpha * (grad_sd + 0.5 * alpha * curv_sd)
        if alpha < min(alpha_boundary, alpha_bd):
            beta = masked_dot(grad, hess_sd, free) / curv_sd
            for i in range(n):
                sd[i] = beta * sd[i] - grad[i] if free[i] else 0.0
            k += 1
        elif alpha < alpha_boundary:
            if alpha_xl <= alpha:
                i_new = _first_min(all_alpha_xl)
                step[i_new] = xl[i_new]
            else:
                i_new = _first_min(all_alpha_xu)
                step[i_new] = xu[i_new]
            free[i_new] = False
            _steepest_descent(sd, grad, free)
            k = 0
        else:
            if alpha_xl <= alpha:
                _fix_all_minima(all_alpha_xl, xl, step, free)
            if alpha_xu <= alpha:
                _fix_all_minima(all_alpha_xu, xu, step, free)
            boundary_reached = True
            break
    if boundary_reached:
        step = _along_the_boundary(
            step, grad, grad_orig, sd, free, reduct, xpt, i_hess, e_hess, xl, xu
        )
    return step


@ieee_njit
def _linspace(start, stop, num):
    """``np.linspace(start, stop, num)`` as numpy computes it (``num`` >= 2)."""
    step = (stop - start) / (num - 1)
    out = np.arange(num) * step + start
    out[-1] = stop
    return out


@ieee_njit
def _model_change(grad_orig, xpt, i_hess, e_hess, step) -> float:
    return dot(grad_orig, step) + 0.5 * dot(step, hess_prod(xpt, i_hess, e_hess, step))


@ieee_njit
def _along_the_boundary(step, grad, grad_orig, sd, free, reduct, xpt, i_hess, e_hess, xl, xu):
    """COBYQA's ``improve_tcg``: rotate the step on the trust-region boundary while that lowers
    the model, fixing variables that reach their bounds; the step before it where it does not
    end lower."""
    n = step.shape[0]
    step_base = step.copy()
    step_comparator = _model_change(grad_orig, xpt, i_hess, e_hess, step_base)
    while np.count_nonzero(free) > 0:
        step_sq = masked_dot(step, step, free)
        grad_sq = masked_dot(grad, grad, free)
        grad_step = masked_dot(grad, step, free)
        grad_sd = -np.sqrt(max(step_sq * grad_sq - grad_step**2.0, 0.0))
        tiny_descent = False
        for i in range(n):
            if free[i]:
                sd[i] = grad_step * step[i] - step_sq * grad[i]
                if grad_sd >= -TINY * abs(sd[i]):
                    tiny_descent = True
            else:
                sd[i] = 0.0
        if grad_sd >= -1e-08 * reduct or tiny_descent:
            break
        temp_xl = np.zeros(n)
        temp_xu = np.zeros(n)
        for i in range(n):
            if free[i]:
                sd[i] /= -grad_sd
                temp_xl[i] = step[i] ** 2.0 + sd[i] ** 2.0 - xl[i] ** 2.0
                temp_xu[i] = step[i] ** 2.0 + sd[i] ** 2.0 - xu[i] ** 2.0
        all_t_xl = np.ones(n)
        all_t_xu = np.ones(n)
        for i in range(n):
            if temp_xl[i] > 0.0:
                temp_xl[i] = np.sqrt(temp_xl[i]) - sd[i]
            if temp_xu[i] > 0.0:
                temp_xu[i] = np.sqrt(temp_xu[i]) + sd[i]
            dist_xl = max(step[i] - xl[i], 0.0)
            dist_xu = max(xu[i] - step[i], 0.0)
            if temp_xl[i] > TINY * dist_xl:
                all_t_xl[i] = min(1.0, dist_xl / temp_xl[i])
            if temp_xu[i] > TINY * dist_xu:
                all_t_xu[i] = min(1.0, dist_xu / temp_xu[i])
        t_xl = np.min(all_t_xl)
        t_xu = np.min(all_t_xu)
        t_bd = min(t_xl, t_xu)
        hess_step = hess_prod(xpt, i_hess, e_hess, step)
        hess_sd = hess_prod(xpt, i_hess, e_hess, sd)
        curv_step = dot(step, hess_step)
        curv_sd = dot(sd, hess_sd)
        curv_step_sd = dot(step, hess_sd)
        n_samples = int((_N_SAMPLES - 3) * t_bd + 3)
        t_samples = _linspace(t_bd / n_samples, t_bd, n_samples)
        sin_values = 2.0 * t_samples / (1.0 + t_samples**2.0)
        all_reduct = sin_values * (
            grad_step * t_samples
            - grad_sd
            - t_samples * curv_step
            + sin_values * (t_samples * curv_step_sd - 0.5 * (curv_sd - curv_step))
        )
        if np.all(all_reduct <= 0.0):
            break
        i_max = np.argmax(all_reduct)
        cos_value = (1.0 - t_samples[i_max] ** 2.0) / (1.0 + t_samples[i_max] ** 2.0)
        for i in range(n):
            if free[i]:
                step[i] = cos_value * step[i] + sin_values[i_max] * sd[i]
        grad += (cos_value - 1.0) * hess_step + sin_values[i_max] * hess_sd
        reduct += all_reduct[i_max]
        if t_bd < 1.0 and i_max == n_samples - 1:
            if t_xl <= t_bd:
                _fix_all_minima(all_t_xl, xl, step, free)
            if t_xu <= t_bd:
                _fix_all_minima(all_t_xu, xu, step, free)
        else:
            break
    if _model_change(grad_orig, xpt, i_hess, e_hess, step) > step_comparator:
        return step_base
    return step
