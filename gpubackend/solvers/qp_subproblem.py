"""scipy's ``qp_subproblem`` for trust-constr's barrier subproblem under box bounds.

The steps of scipy's Byrd-Omojokun SQP (``equality_constrained_sqp``) inside
its interior-point method: the normal step ``modified_dogleg`` and the
tangential step ``projected_cg``, each kept inside the trust sphere and the box
on the slack steps, with scipy's ``sphere_intersections``,
``box_intersections`` and ``box_sphere_intersections`` line for line.

``rows`` are the bound rows of the Jacobian ``A = [J, diag(s)]`` with their
projections (`bound_projections`), as ``(variable, sign, partner, slack)``; the
Hessian of the barrier Lagrangian is ``diag(hessian_x, hessian_s)``.
"""

import math

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.bound_projections import (
    jacobian_times,
    jacobian_transpose_times,
    null_space,
    row_space,
)
from gpubackend.solvers.small_vectors import dot, norm
from gpubackend.solvers.trust_subproblems import boundary_intersections

_CLOSE_TO_ZERO = 1e-25


@numba_njit
def hessian_times(hessian_x, hessian_s, w):
    """The barrier Lagrangian's scaled Hessian ``diag(H_x, S H_s S)`` times ``w``."""
    n = hessian_x.shape[0]
    out = np.empty(w.shape[0])
    out[:n] = hessian_x @ w[:n]
    out[n:] = hessian_s * w[n:]
    return out


@numba_njit
def _sphere_intersections(z, d, radius, entire_line):
    if norm(d) == 0.0:
        return 0.0, 0.0, False
    if np.isinf(radius):
        if entire_line:
            return -np.inf, np.inf, True
        return 0.0, 1.0, True
    a = dot(d, d)
    b = 2.0 * dot(z, d)
    c = dot(z, z) - radius**2
    if b * b - 4.0 * a * c < 0.0:
        return 0.0, 0.0, False
    ta, tb = boundary_intersections(z, d, radius)
    if entire_line:
        return ta, tb, True
    if tb < 0.0 or ta > 1.0:
        return 0.0, 0.0, False
    return max(0.0, ta), min(1.0, tb), True


@numba_njit
def box_intersections(z, d, lower, upper, entire_line):
    """scipy's ``box_intersections``: ``(ta, tb, intersect)`` of the line ``z + t d`` and the
    box."""
    if norm(d) == 0.0:
        return 0.0, 0.0, False
    ta, tb = -np.inf, np.inf
    for i in range(z.shape[0]):
        if d[i] == 0.0:
            if z[i] < lower[i] or z[i] > upper[i]:
                return 0.0, 0.0, False
            continue
        t_lower = (lower[i] - z[i]) / d[i]
        t_upper = (upper[i] - z[i]) / d[i]
        ta = max(ta, min(t_lower, t_upper))
        tb = min(tb, max(t_lower, t_upper))
    intersect = ta <= tb
    if not entire_line:
        if tb < 0.0 or ta > 1.0:
            return 0.0, 0.0, False
        ta, tb = max(0.0, ta), min(1.0, tb)
    return ta, tb, intersect


@numba_njit
def _box_sphere_intersections(z, d, lower, upper, radius, entire_line):
    ta_box, tb_box, intersect_box = box_intersections(z, d, lower, upper, entire_line)
    ta_sphere, tb_sphere, intersect_sphere = _sphere_intersections(z, d, radius, entire_line)
    ta, tb = max(ta_box, ta_sphere), min(tb_box, tb_sphere)
    return ta, tb, intersect_box and intersect_sphere and ta <= tb


@numba_njit(inline="always")
def _inside(x, lower, upper):
    return np.all(lower <= x) and np.all(x <= upper)


@numba_njit(inline="always")
def _clip(x, lower, upper):
    return np.minimum(np.maximum(x, lower), upper)


@numba_njit
def modified_dogleg(rows, b, radius, lower, upper):
    """scipy's ``modified_dogleg``: the normal step, towards ``A d + b = 0``."""
    variable, sign, partner, slack = rows
    n = lower.shape[0] - variable.shape[0]
    newton_point = -row_space(variable, sign, partner, slack, b, n)
    if _inside(newton_point, lower, upper) and norm(newton_point) <= radius:
        return newton_point
    g = jacobian_transpose_times(variable, sign, slack, b, n)
    a_g = jacobian_times(variable, sign, slack, g)
    cauchy_point = -dot(g, g) / dot(a_g, a_g) * g
    origin = np.zeros_like(cauchy_point)
    _, alpha, intersect = _box_sphere_intersections(
        cauchy_point, newton_point - cauchy_point, lower, upper, radius, False
    )
    if intersect:
        x1 = cauchy_point + alpha * (newton_point - cauchy_point)
    else:
        _, alpha, _ = _box_sphere_intersections(origin, cauchy_point, lower, upper, radius, False)
        x1 = origin + alpha * cauchy_point
    _, alpha, _ = _box_sphere_intersections(origin, newton_point, lower, upper, radius, False)
    x2 = origin + alpha * newton_point
    residual1 = norm(jacobian_times(variable, sign, slack, x1) + b)
    residual2 = norm(jacobian_times(variable, sign, slack, x2) + b)
    return x1 if residual1 < residual2 else x2


@numba_njit
def projected_cg(hessian_x, hessian_s, c, rows, radius, lower, upper):
    """scipy's ``projected_cg`` with ``b = 0`` (the tangential step): CG on ``A``'s null space,
    inside the trust sphere and the box, at most ``n - m`` (the number of variables)
    iterations."""
    variable, sign, partner, slack = rows
    m = variable.shape[0]
    n_iterations = c.shape[0] - m
    x = np.zeros(c.shape[0])
    r = null_space(variable, sign, partner, slack, c)
    g = null_space(variable, sign, partner, slack, r)
    p = -g
    hessian_p = hessian_times(hessian_x, hessian_s, p)
    rt_g = norm(g) ** 2
    if radius < _CLOSE_TO_ZERO:
        return x
    tol = max(min(0.01 * math.sqrt(rt_g), 0.1 * rt_g), _CLOSE_TO_ZERO)
    counter = 0
    last_feasible_x = np.zeros_like(x)
    for _ in range(n_iterations):
        if rt_g < tol:
            break
        curvature = dot(hessian_p, p)
        if curvature <= 0.0:
            _, alpha, intersect = _box_sphere_intersections(x, p, lower, upper, radius, True)
            if intersect:
                x = x + alpha * p
            return _clip(x, lower, upper)
        alpha = rt_g / curvature
        x_next = x + alpha * p
        if norm(x_next) >= radius:
            _, theta, intersect = _box_sphere_intersections(
                x, alpha * p, lower, upper, radius, False
            )
            if intersect:
                x = x + theta * alpha * p
            return _clip(x, lower, upper)
        counter = 0 if _inside(x_next, lower, upper) else counter + 1
        if counter > 0:
            _, theta, intersect = _box_sphere_intersections(
                x, alpha * p, lower, upper, radius, False
            )
            if intersect:
                last_feasible_x = _clip(x + theta * alpha * p, lower, upper)
                counter = 0
        if counter > n_iterations:
            break
        g_next = null_space(variable, sign, partner, slack, r + alpha * hessian_p)
        beta = norm(g_next) ** 2 / rt_g
        p = -g_next + beta * p
        x = x_next
        g = g_next
        r = g_next
        rt_g = norm(g) ** 2
        hessian_p = hessian_times(hessian_x, hessian_s, p)
    if not _inside(x, lower, upper):
        return last_feasible_x
    return x
