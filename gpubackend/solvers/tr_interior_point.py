"""scipy's ``trust-constr`` with box ``bounds``: its trust-region interior-point method.

scipy widens each finite bound by one ulp (``np.nextafter``) and turns the
bounds into inequality constraints ``c(x) <= 0``, one row per finite bound in
its canonical order: upper bounds of variables with no lower bound
(``x_i - ub_i``), lower bounds of variables with no upper bound
(``lb_i - x_i``), then both bounds of the doubly bounded variables (all upper
rows, then all lower rows). Infinite bounds make no row; with no finite bound
at all scipy runs its plain SQP (`trust_constr`). ``tr_interior_point`` then
solves barrier subproblems

    minimize f(x) - mu sum(log s)  subject to  c(x) + s = 0

from slacks ``s0 = max(-1.5 c(x0), 1)`` (a start outside the bounds is taken as
scipy takes it), each by scipy's Byrd-Omojokun SQP (``equality_constrained_sqp``)
in the variables ``(x, s)`` scaled by ``diag(1, s)``: the normal step
``modified_dogleg`` within 0.8 of the radius, the tangential step
``projected_cg`` (`qp_subproblem`) on the projections of `bound_projections`,
the slack steps kept above ``-0.995`` (scaled), the merit function
``f + penalty |c + s|``, scipy's second-order correction and its radius rule.
A subproblem ends when its own optimality and violation are below the barrier
tolerance or the radius below ``xtol``; then ``mu`` and the tolerance shrink by
0.2 and the radius restarts at ``max(initial_tr_radius, 5 radius)``.

scipy's stopping tests run at every SQP iteration, the first of each subproblem
included, and each counts towards ``maxiter``: the Lagrangian gradient
``max|g + J'v|`` and the bound violation below ``gtol`` (success), the radius
below ``xtol`` with ``mu`` below ``barrier_tol`` (success unless the bounds are
violated by more than ``gtol``), ``maxiter`` (failure).

The objective is evaluated as scipy's ``ScalarFunction`` asks for it: at every
trial point and again where the next subproblem starts if the last evaluated
point was a rejected trial; the BFGS approximation is updated at each
evaluation (`trust_constr.bfgs_update`), or the op's own Hessian is used.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.bound_projections import (
    jacobian_times,
    jacobian_transpose_times,
    least_squares,
    row_space,
)
from gpubackend.solvers.box_bounds import expand_bound
from gpubackend.solvers.qp_subproblem import (
    box_intersections,
    hessian_times,
    modified_dogleg,
    projected_cg,
)
from gpubackend.solvers.small_vectors import dot, max_abs, norm
from gpubackend.solvers.trust_constr import (
    LEAST_VIOLATION_REDUCTION,
    PENALTY_FACTOR,
    SUFFICIENT_REDUCTION,
    bfgs_update,
    next_radius,
    with_no_hessian,
)

_BOUNDARY_PARAMETER = 0.995
_BARRIER_DECAY_RATIO = 0.2
_TRUST_ENLARGEMENT = 5.0
_TR_FACTOR = 0.8
_BOX_FACTOR = 0.5
_SOC_THRESHOLD = 0.1


@numba_njit
def widened_bounds(settings_bounds, n):
    """scipy's bounds, each finite one moved outwards by one ulp."""
    lower = expand_bound(settings_bounds[0], n)
    upper = expand_bound(settings_bounds[1], n)
    for i in range(n):
        if np.isfinite(lower[i]):
            lower[i] = np.nextafter(lower[i], -np.inf)
        if np.isfinite(upper[i]):
            upper[i] = np.nextafter(upper[i], np.inf)
    return lower, upper


@numba_njit
def bound_rows(lower, upper):
    """scipy's canonical inequality rows: ``(variable, sign, bound, partner)`` per row, the
    constraint ``sign (x[variable] - bound) <= 0``."""
    n = lower.shape[0]
    less = [i for i in range(n) if lower[i] == -np.inf and upper[i] != np.inf]
    greater = [i for i in range(n) if upper[i] == np.inf and lower[i] != -np.inf]
    interval = [i for i in range(n) if lower[i] != -np.inf and upper[i] != np.inf]
    n_single = len(less) + len(greater)
    m = n_single + 2 * len(interval)
    variable = np.empty(m, dtype=np.int64)
    sign = np.empty(m)
    bound = np.empty(m)
    partner = np.full(m, -1, dtype=np.int64)
    for k, i in enumerate(less):
        variable[k], sign[k], bound[k] = i, 1.0, upper[i]
    for k, i in enumerate(greater):
        row = len(less) + k
        variable[row], sign[row], bound[row] = i, -1.0, lower[i]
    for k, i in enumerate(interval):
        upper_row, lower_row = n_single + k, n_single + len(interval) + k
        variable[upper_row], sign[upper_row], bound[upper_row] = i, 1.0, upper[i]
        variable[lower_row], sign[lower_row], bound[lower_row] = i, -1.0, lower[i]
        partner[upper_row], partner[lower_row] = lower_row, upper_row
    return variable, sign, bound, partner


@numba_njit(inline="always")
def _constraints(variable, sign, bound, x):
    return sign * (x[variable] - bound)


@numba_njit
def _barrier_value(f, slack, barrier_parameter):
    """scipy's ``f - mu sum(log s)``, with ``log s = -inf`` where ``s <= 0``."""
    total = 0.0
    for value in slack:
        total += np.log(value) if value > 0.0 else -np.inf
    return f - barrier_parameter * total


@numba_njit
def _violation(x, lower, upper):
    """scipy's ``max(0, max(lb - x), max(x - ub))``."""
    return max(0.0, max(np.max(lower - x), np.max(x - upper)))


def _make_tr_interior_point(evaluate: Callable, quasi_newton: bool) -> Callable:
    @numba_njit
    def visit(point, args, last, hessian, first_update):
        """The objective at ``point`` as scipy's ``ScalarFunction`` gives it: evaluated only at a
        point other than the last one, the BFGS approximation updated from that one."""
        if np.all(point == last[0]):
            return last, first_update
        f, g, point_hessian = evaluate(point, args)
        if quasi_newton:
            first_update = bfgs_update(hessian, point - last[0], g - last[2], first_update)
        return (point, f, g, point_hessian), first_update

    @numba_njit
    def trial(x, slack, step, constraint_rows, barrier_parameter, args, last, hessian, first):
        """The point ``(x, s) + diag(1, s) step`` with its barrier value and constraint residual,
        the objective visited there."""
        variable, sign, bound = constraint_rows
        n = x.shape[0]
        x_trial = x + step[:n]
        slack_trial = slack + slack * step[n:]
        last, first = visit(x_trial, args, last, hessian, first)
        value = _barrier_value(last[1], slack_trial, barrier_parameter)
        residual = _constraints(variable, sign, bound, x_trial) + slack_trial
        return x_trial, slack_trial, value, residual, last, first

    @numba_njit
    def solve_counting_iterations(x0, args, settings):
        """``(x, converged, nit)``."""
        x = x0.astype(np.float64)
        n = x.shape[0]
        lower, upper = widened_bounds(settings.bounds, n)
        variable, sign, bound, partner = bound_rows(lower, upper)
        m = variable.shape[0]
        f, g, point_hessian = evaluate(x, args)
        last = (x, f, g, point_hessian)
        hessian = np.eye(n) if quasi_newton else point_hessian
        first_update = True
        slack = np.maximum(-1.5 * _constraints(variable, sign, bound, x), 1.0)
        trust_lower = np.concatenate((np.full(n, -np.inf), np.full(m, -_BOUNDARY_PARAMETER)))
        trust_upper = np.full(n + m, np.inf)
        barrier_parameter = settings.initial_barrier_parameter
        tolerance = settings.initial_barrier_tolerance
        radius = settings.initial_tr_radius
        optimality = violation = sub_optimality = sub_violation = np.inf
        iterations = 0
        while True:
            rows = (variable, sign, partner, slack)
            value = _barrier_value(f, slack, barrier_parameter)
            residual = _constraints(variable, sign, bound, x) + slack
            penalty = settings.initial_constr_penalty
            accepted = True
            gradient = np.empty(n + m)
            hessian_s = np.empty(m)
            while True:
                if accepted:
                    gradient = np.concatenate((g, np.full(m, -barrier_parameter)))
                    multipliers = -least_squares(variable, sign, partner, slack, gradient)
                    hessian_s = np.where(multipliers > 0.0, multipliers * slack, barrier_parameter)
                    lagrangian = gradient + jacobian_transpose_times(
                        variable, sign, slack, multipliers, n
                    )
                    sub_optimality = max_abs(lagrangian)
                    sub_violation = max_abs(residual)
                    optimality = max_abs(lagrangian[:n])
                    violation = _violation(x, lower, upper)
                iterations += 1
                if optimality < settings.gtol and violation < settings.gtol:
                    return x, True, iterations
                if radius < settings.xtol and barrier_parameter < settings.barrier_tol:
                    return x, not violation > settings.gtol, iterations
                if iterations >= settings.maxiter:
                    return x, False, iterations
                if (sub_optimality < tolerance and sub_violation < tolerance) or (
                    radius < settings.xtol
                ):
                    break
                normal = modified_dogleg(
                    rows,
                    residual,
                    _TR_FACTOR * radius,
                    _BOX_FACTOR * trust_lower,
                    _BOX_FACTOR * trust_upper,
                )
                tangential = projected_cg(
                    hessian,
                    hessian_s,
                    hessian_times(hessian, hessian_s, normal) + gradient,
                    rows,
                    np.sqrt(radius**2 - norm(normal) ** 2),
                    trust_lower - normal,
                    trust_upper - normal,
                )
                step = normal + tangential
                model = 0.5 * dot(hessian_times(hessian, hessian_s, step), step) + dot(
                    gradient, step
                )
                linearized = jacobian_times(variable, sign, slack, step) + residual
                reduction = max(LEAST_VIOLATION_REDUCTION, norm(residual) - norm(linearized))
                previous_penalty = penalty
                if model > 0.0:
                    penalty = max(penalty, model / ((1 - PENALTY_FACTOR) * reduction))
                predicted = -model + penalty * reduction
                merit = value + penalty * norm(residual)
                constraint_rows = (variable, sign, bound)
                x_next, slack_next, value_next, residual_next, last, first_update = trial(
                    x,
                    slack,
                    step,
                    constraint_rows,
                    barrier_parameter,
                    args,
                    last,
                    hessian,
                    first_update,
                )
                ratio = (merit - (value_next + penalty * norm(residual_next))) / predicted
                if ratio < SUFFICIENT_REDUCTION and norm(normal) <= _SOC_THRESHOLD * norm(
                    tangential
                ):
                    correction = -row_space(variable, sign, partner, slack, residual_next, n)
                    _, t, intersect = box_intersections(
                        step, correction, trust_lower, trust_upper, False
                    )
                    x_soc, slack_soc, value_soc, residual_soc, last, first_update = trial(
                        x,
                        slack,
                        step + t * correction,
                        constraint_rows,
                        barrier_parameter,
                        args,
                        last,
                        hessian,
                        first_update,
                    )
                    ratio_soc = (merit - (value_soc + penalty * norm(residual_soc))) / predicted
                    if intersect and ratio_soc >= SUFFICIENT_REDUCTION:
                        x_next, slack_next = x_soc, slack_soc
                        value_next, residual_next = value_soc, residual_soc
                        ratio = ratio_soc
                radius = next_radius(radius, ratio, norm(step))
                accepted = ratio >= SUFFICIENT_REDUCTION
                if accepted:
                    # The accepted point is always the last evaluated one.
                    x, f, g = x_next, last[1], last[2]
                    slack, value, residual = slack_next, value_next, residual_next
                    rows = (variable, sign, partner, slack)
                    if not quasi_newton:
                        hessian = last[3]
                else:
                    penalty = previous_penalty
            radius = max(settings.initial_tr_radius, _TRUST_ENLARGEMENT * radius)
            barrier_parameter *= _BARRIER_DECAY_RATIO
            tolerance *= _BARRIER_DECAY_RATIO
            last, first_update = visit(x, args, last, hessian, first_update)
            f, g = last[1], last[2]

    return solve_counting_iterations


def _without_iterations(solve_counting_iterations: Callable) -> Callable:
    @numba_njit
    def solve(x0, args, settings):
        x, converged, _ = solve_counting_iterations(x0, args, settings)
        return x, converged

    return solve


def make_tr_interior_point_counting_iterations(fun: Callable) -> Callable:
    """``solve(x0, args, settings: TrustConstrSettings) -> (x, converged, nit)`` on the BFGS
    approximation; ``fun(x, args)`` returns ``(f, grad)``."""
    return _make_tr_interior_point(with_no_hessian(fun), quasi_newton=True)


def make_tr_interior_point(fun: Callable) -> Callable:
    """``solve(x0, args, settings) -> (x, converged)`` on the BFGS approximation."""
    return _without_iterations(make_tr_interior_point_counting_iterations(fun))


def make_tr_interior_point_hessian_counting_iterations(fun: Callable) -> Callable:
    """The same on the op's own Hessian; ``fun(x, args)`` returns ``(f, grad, hess)``."""
    return _make_tr_interior_point(fun, quasi_newton=False)


def make_tr_interior_point_hessian(fun: Callable) -> Callable:
    """``solve(x0, args, settings) -> (x, converged)`` on the op's own Hessian."""
    return _without_iterations(make_tr_interior_point_hessian_counting_iterations(fun))
