"""scipy's ``trust-constr`` without constraints or bounds.

With no constraints scipy runs its equality-constrained SQP
(``equality_constrained_sqp``, Byrd-Omojokun) with an empty constraint set:
the normal step is zero and the tangential step is scipy's ``projected_cg``
with the identity as projection, which is Steihaug's truncated CG with
scipy's own stopping rule (``|r|^2 < max(min(0.01 |g|, 0.1 |g|^2), 1e-25)``,
at most n iterations). The rest is that loop line for line: the merit
function is ``f`` (the penalty term vanishes: ``vpred`` is floored at 1e-16),
a trial point is accepted where the reduction ratio is at least 1e-8, the
radius grows to ``max(7 |d|, radius)`` above a ratio of 0.9 and
``max(2 |d|, radius)`` above 0.3 and shrinks by scipy's interpolated factor
(between 0.1 and 0.5) below 1e-8; the second-order correction is a no-op
without constraints. scipy's verdicts: ``max|g| < gtol`` (status 1) and
``radius < xtol`` (status 2) are success, ``maxiter`` checks (the first one
before any step counts) is failure (status 0).

The Hessian is the op's own (``hess=True``) or, as scipy's default, its
``BFGS`` quasi-Newton approximation (``skip_update``, scale ``auto`` at the
first update), updated at every evaluated point from the previous one,
accepted or not, as scipy's ``ScalarFunction`` does.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.small_vectors import dot, max_abs, norm
from gpubackend.solvers.trust_subproblems import boundary_intersections

SUFFICIENT_REDUCTION, _INTERMEDIARY, _LARGE = 1e-8, 0.3, 0.9
_ENLARGE_SMALL, _ENLARGE_LARGE = 2.0, 7.0
_MAX_REDUCTION, _MIN_REDUCTION = 0.5, 0.1
PENALTY_FACTOR = 0.3
LEAST_VIOLATION_REDUCTION = 1e-16
_CLOSE_TO_ZERO = 1e-25
_MIN_CURVATURE = 1e-8


@numba_njit
def projected_cg(hessian, gradient, radius):
    """scipy's ``projected_cg`` with no constraints and no box: Steihaug's CG with scipy's
    tolerance and at most n iterations."""
    n = gradient.shape[0]
    x = np.zeros(n)
    if radius < _CLOSE_TO_ZERO:
        return x
    r = gradient.copy()
    p = -r
    hp = hessian @ p
    rt_g = dot(r, r)
    tol = max(min(0.01 * np.sqrt(rt_g), 0.1 * rt_g), _CLOSE_TO_ZERO)
    for _ in range(n):
        if rt_g < tol:
            break
        curvature = dot(hp, p)
        if curvature <= 0.0:
            _, high = boundary_intersections(x, p, radius)
            return x + high * p
        alpha = rt_g / curvature
        x_next = x + alpha * p
        if norm(x_next) >= radius:
            _, high = boundary_intersections(x, alpha * p, radius)
            return x + min(1.0, high) * alpha * p
        r = r + alpha * hp
        rt_g_next = dot(r, r)
        p = -r + (rt_g_next / rt_g) * p
        x = x_next
        rt_g = rt_g_next
        hp = hessian @ p
    return x


@numba_njit
def _auto_scale(step, gradient_change):
    s_norm2 = dot(step, step)
    y_norm2 = dot(gradient_change, gradient_change)
    ys = abs(dot(gradient_change, step))
    if ys == 0.0 or y_norm2 == 0.0 or s_norm2 == 0.0:
        return 1.0
    return y_norm2 / ys


@numba_njit
def bfgs_update(hessian, step, gradient_change, first):
    """scipy's ``BFGS(exception_strategy='skip_update')`` update of a Hessian approximation in
    place; returns whether the first update (the one that scales B) is still to come."""
    if np.all(step == 0.0) or np.all(gradient_change == 0.0):
        return first
    if first:
        hessian *= _auto_scale(step, gradient_change)
    hessian_step = hessian @ step
    model_curvature = dot(hessian_step, step)
    if model_curvature <= 0.0:
        hessian[:] = _auto_scale(step, gradient_change) * np.eye(step.shape[0])
        hessian_step = hessian @ step
        model_curvature = dot(hessian_step, step)
    curvature = dot(step, gradient_change)
    if curvature <= _MIN_CURVATURE * model_curvature:
        return False
    hessian += np.outer(gradient_change, gradient_change) / curvature
    hessian -= np.outer(hessian_step, hessian_step) / model_curvature
    return False


@numba_njit(inline="always")
def next_radius(radius, ratio, step_norm):
    """scipy's trust-radius rule of ``equality_constrained_sqp``."""
    if ratio >= _LARGE:
        return max(_ENLARGE_LARGE * step_norm, radius)
    if ratio >= _INTERMEDIARY:
        return max(_ENLARGE_SMALL * step_norm, radius)
    if ratio < SUFFICIENT_REDUCTION:
        reduced = (1 - SUFFICIENT_REDUCTION) / (1 - ratio) * step_norm
        if reduced >= _MAX_REDUCTION * radius:
            return _MAX_REDUCTION * radius
        if reduced >= _MIN_REDUCTION * radius:
            return reduced
        return _MIN_REDUCTION * radius
    return radius


def _make_trust_constr(evaluate: Callable, quasi_newton: bool) -> Callable:
    @numba_njit
    def solve(x0, args, settings):
        gtol, xtol = settings.gtol, settings.xtol
        x = x0.astype(np.float64)
        n = x.shape[0]
        f, g, hessian = evaluate(x, args)
        if quasi_newton:
            hessian = np.eye(n)
        first_update = True
        x_evaluated, g_evaluated = x, g
        radius = settings.initial_tr_radius
        penalty = settings.initial_constr_penalty
        optimality = max_abs(g)
        iterations = 0
        while True:
            iterations += 1
            if optimality < gtol and 0.0 < gtol:
                return x, True
            if radius < xtol:
                return x, True
            if iterations >= settings.maxiter:
                return x, False
            step = projected_cg(hessian, g, radius)
            model = 0.5 * dot(hessian @ step, step) + dot(g, step)
            previous_penalty = penalty
            if model > 0.0:
                penalty = max(penalty, model / ((1 - PENALTY_FACTOR) * LEAST_VIOLATION_REDUCTION))
            predicted = -model + penalty * LEAST_VIOLATION_REDUCTION
            x_next = x + step
            f_next, g_next, hessian_next = evaluate(x_next, args)
            if quasi_newton:
                first_update = bfgs_update(
                    hessian, x_next - x_evaluated, g_next - g_evaluated, first_update
                )
                x_evaluated, g_evaluated = x_next, g_next
            ratio = (f - f_next) / predicted
            radius = next_radius(radius, ratio, norm(step))
            if ratio >= SUFFICIENT_REDUCTION:
                x, f, g = x_next, f_next, g_next
                if not quasi_newton:
                    hessian = hessian_next
                optimality = max_abs(g)
            else:
                penalty = previous_penalty

    return solve


def with_no_hessian(fun: Callable) -> Callable:
    """``evaluate(x, args) -> (f, grad, empty Hessian)`` from ``fun(x, args) -> (f, grad)``, for
    the solvers on the BFGS approximation."""

    @numba_njit(inline="always")
    def evaluate(x, args):
        f, g = fun(x, args)
        return f, g, np.empty((0, 0))

    return evaluate


def make_trust_constr(fun: Callable) -> Callable:
    """``solve(x0, args, settings: TrustConstrSettings) -> (x, converged)`` on the BFGS
    approximation; ``fun(x, args)`` returns ``(f, grad)``."""
    return _make_trust_constr(with_no_hessian(fun), quasi_newton=True)


def make_trust_constr_hessian(fun: Callable) -> Callable:
    """The same on the op's own Hessian; ``fun(x, args)`` returns ``(f, grad, hess)``."""
    return _make_trust_constr(fun, quasi_newton=False)
