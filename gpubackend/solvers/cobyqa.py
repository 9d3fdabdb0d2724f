"""COBYQA without constraints but bounds (port of scipy's vendored ``cobyqa``: ``main.minimize``
and ``framework.TrustRegion``), derivative-free: ``fun(x, args)`` returns the objective alone.

A trust-region method on quadratic models interpolating ``2n + 1`` points
(`cobyqa_model`), its steps from truncated conjugate gradients within the bounds
(`cobyqa_tangential`), and geometry steps that keep the interpolation set poised
(`cobyqa_geometry`). Without linear or nonlinear constraints COBYQA's normal
step is zero, its merit function the objective and its Lagrange multipliers
empty; what remains is ported as scipy runs it: start points near the bounds,
the radius and resolution updates, the base shifts, the alternative models, the
budgets (an evaluation past ``maxfev`` ends the solve, as do ``maxiter``
iterations and a value at most ``f_target``) and the answer, COBYQA's best
evaluated point (`cobyqa_problem`).

`cobyqa_minimize` returns scipy's ``(x, fun, nfev, nit, status, success)``;
the op's solver `make_cobyqa` ``(x, success)``.
"""

from collections.abc import Callable

import numpy as np

from gpubackend.scipy_options.cobyqa_constants import (
    DECREASE_RADIUS_FACTOR,
    DECREASE_RADIUS_THRESHOLD,
    DECREASE_RESOLUTION_FACTOR,
    HIGH_RATIO,
    INCREASE_RADIUS_FACTOR,
    INCREASE_RADIUS_THRESHOLD,
    INFEASIBLE_ERROR,
    LARGE_GRADIENT_FACTOR,
    LARGE_RESOLUTION_THRESHOLD,
    LARGE_SHIFT_FACTOR,
    LINALG_ERROR,
    LOW_RADIUS_FACTOR,
    LOW_RATIO,
    MAX_EVAL_WARNING,
    MAX_ITER_WARNING,
    MODERATE_RESOLUTION_THRESHOLD,
    PER_VARIABLE_EVALUATIONS,
    PER_VARIABLE_ITERATIONS,
    RADIUS_SUCCESS,
    RESOLUTION_FACTOR,
    SHORT_STEP_THRESHOLD,
    TARGET_SUCCESS,
    VERY_LOW_RATIO,
)
from gpubackend.solvers.box_bounds import box_bounds
from gpubackend.solvers.cobyqa_geometry import cauchy_geometry, spider_geometry
from gpubackend.solvers.cobyqa_model import (
    determinants,
    fit,
    gradient,
    hess_prod,
    new_system,
    shift_model,
    update,
    value,
)
from gpubackend.solvers.cobyqa_problem import (
    clipped,
    free_problem,
    full_x,
    takes_into_filter,
)
from gpubackend.solvers.cobyqa_tangential import TINY, tangential_step
from gpubackend.solvers.ieee import ieee_njit
from gpubackend.solvers.numpy_products import dot, norm


@ieee_njit
def _radius_floor(radius, resolution):
    """COBYQA's radius setter: a radius within 1.4 resolutions is the resolution."""
    if radius <= DECREASE_RADIUS_THRESHOLD * resolution:
        return resolution
    return radius


@ieee_njit
def _initial_points(x0, xl, xu, rhobeg, npt):
    """``(x_base, xpt)``: scipy's ``Interpolation`` start, moved away from or onto close bounds."""
    n = x0.shape[0]
    x_base = x0.copy()
    very_close_xl = x_base <= xl + 0.5 * rhobeg
    for i in range(n):
        if very_close_xl[i]:
            x_base[i] = xl[i]
        elif xl[i] + 0.5 * rhobeg < x_base[i] <= xl[i] + rhobeg:
            x_base[i] = min(xl[i] + rhobeg, xu[i])
    very_close_xu = x_base >= xu - 0.5 * rhobeg
    for i in range(n):
        if very_close_xu[i]:
            x_base[i] = xu[i]
        elif x_base[i] < xu[i] - 0.5 * rhobeg and xu[i] - rhobeg <= x_base[i]:
            x_base[i] = max(xu[i] - rhobeg, xl[i])
    xpt = np.zeros((n, npt))
    for k in range(1, npt):
        if k <= n:
            xpt[k - 1, k] = -rhobeg if very_close_xu[k - 1] else rhobeg
        elif k <= 2 * n:
            i = k - n - 1
            if very_close_xl[i]:
                xpt[i, k] = 2.0 * rhobeg
            elif very_close_xu[i]:
                xpt[i, k] = -2.0 * rhobeg
            else:
                xpt[i, k] = -rhobeg
        else:
            spread = (k - n - 1) // n
            k1 = k - (1 + spread) * n - 1
            k2 = (k1 + spread) % n
            xpt[k1, k] = xpt[k1, k1 + 1]
            xpt[k2, k] = xpt[k2, k2 + 1]
    return x_base, xpt


@ieee_njit
def _best_index(fun_val, best):
    """COBYQA's ``set_best_index``: the first point with a lower value than the current best."""
    for k in range(fun_val.shape[0]):
        if k != best and fun_val[k] < fun_val[best]:
            best = k
    return best


@ieee_njit
def _index_to_remove(system, x_base, xpt, best, x_new, has_new, radius, resolution):
    """``(k, distance, ok)``: COBYQA's ``get_index_to_remove``, for ``x_new`` where ``has_new``."""
    n, npt = xpt.shape
    dist_sq = np.zeros(npt)
    for k in range(npt):
        for i in range(n):
            dist_sq[k] += (xpt[i, k] - xpt[i, best]) ** 2.0
    weights = dist_sq.copy()
    ok = True
    if has_new:
        sigma, ok = determinants(system, x_base, xpt, x_new, -1)
        scale = max(LOW_RADIUS_FACTOR * radius, resolution) ** 2.0
        for k in range(npt):
            weights[k] = max(1.0, dist_sq[k] / scale) ** 3.0 * abs(sigma[k])
        weights[best] = -1.0 * abs(sigma[best])
    k_max = np.argmax(weights)
    return k_max, np.sqrt(dist_sq[k_max]), ok


@ieee_njit
def _geometry_step(system, x_base, xpt, best, k_new, xl, xu, radius):
    """``(step, ok)``: COBYQA's ``get_geometry_step`` without constraints."""
    n, npt = xpt.shape
    coord_vec = np.zeros(npt)
    coord_vec[k_new] = 1.0
    const, grad, i_hess, _, ok = fit(system, xpt, coord_vec)
    e_hess = np.zeros((n, n))
    x_best = x_base + xpt[:, best]
    g_lag = gradient(x_base, xpt, (const, grad, i_hess, e_hess), x_best)
    lower = xl - x_best
    upper = xu - x_best
    step = cauchy_geometry(g_lag, xpt, i_hess, e_hess, lower, upper, radius)
    sigma, ok_sigma = determinants(system, x_base, xpt, x_best + step, k_new)
    # The other points relative to the best one, in COBYQA's order (the best's column and the
    # first swapped, then the first dropped).
    lines = np.empty((n, npt - 1))
    for k in range(1, npt):
        source = 0 if k == best else k
        lines[:, k - 1] = xpt[:, source] - xpt[:, best]
    step_alt = spider_geometry(g_lag, xpt, i_hess, e_hess, lines, lower, upper, radius)
    sigma_alt, ok_alt = determinants(system, x_base, xpt, x_best + step_alt, k_new)
    if abs(sigma_alt[0]) > abs(sigma[0]):
        step = step_alt
    return step, ok and ok_sigma and ok_alt


@ieee_njit
def _resolve_budgets(settings, n_orig):
    maxfev = settings.maxfev
    if maxfev < 0:
        maxfev = PER_VARIABLE_EVALUATIONS * n_orig
    maxiter = settings.maxiter
    if maxiter < 0:
        maxiter = PER_VARIABLE_ITERATIONS * n_orig
    return maxfev, maxiter


@ieee_njit
def _replace_point(system, x_base, xpt, model, fun_val, k_new, x_new, f):
    """COBYQA's ``update_interpolation``: ``(ill_conditioned, ok)``."""
    npt = xpt.shape[1]
    fun_diff = np.zeros(npt)
    fun_diff[k_new] = f - value(x_base, xpt, model, x_new)
    fun_val[k_new] = f
    dir_old = xpt[:, k_new].copy()
    xpt[:, k_new] = x_new - x_base
    return update(system, xpt, model, k_new, dir_old, fun_diff)


@ieee_njit
def _updated_radius(radius, resolution, s_norm, ratio):
    """COBYQA's ``update_radius``."""
    if ratio <= LOW_RATIO:
        return _radius_floor(DECREASE_RADIUS_FACTOR * radius, resolution)
    if ratio <= HIGH_RATIO:
        return _radius_floor(max(DECREASE_RADIUS_FACTOR * radius, s_norm), resolution)
    return _radius_floor(
        min(
            INCREASE_RADIUS_FACTOR * radius,
            max(DECREASE_RADIUS_FACTOR * radius, INCREASE_RADIUS_THRESHOLD * s_norm),
        ),
        resolution,
    )


@ieee_njit
def _record(record, best_x, point, f):
    """Counts an evaluation and keeps it in COBYQA's filter; ``record`` = [best value, filled,
    evaluations]. Returns the value the models see."""
    if takes_into_filter(record[1] == 1.0, record[0], f):
        best_x[:] = point
        record[0] = f
        record[1] = 1.0
    record[2] += 1.0
    return clipped(f)


def make_cobyqa_minimize(fun: Callable) -> Callable:
    """``cobyqa_minimize(x0, args, settings: COBYQASettings) -> (x, fun, nfev, nit, status,
    success)``, scipy's result fields."""

    @ieee_njit
    def evaluate(point, args, problem, record, best_x):
        fixed, fixed_val, factor, shift, xl_full, xu_full = problem
        x = full_x(point, fixed, fixed_val, factor, shift, xl_full, xu_full, True)
        return _record(record, best_x, point, fun(x, args))

    @ieee_njit
    def iterate(
        x_base,
        xpt,
        system,
        model,
        fun_val,
        xl,
        xu,
        rhobeg,
        rhoend,
        settings,
        budgets,
        args,
        problem,
        record,
        best_x,
    ):
        """COBYQA's main loop from its first model: ``(status, success, nit)``."""
        maxfev, maxiter = budgets
        target = settings.f_target
        feasible_target = 0.0 <= settings.feasibility_tol
        n, npt = xpt.shape
        const, grad, i_hess, e_hess = model
        best = _best_index(fun_val, 0)
        resolution = rhobeg
        radius = rhobeg
        nit = 0
        n_short_steps = 0
        n_very_short_steps = 0
        n_alt_models = 0
        k_new = 0
        while True:
            if nit >= maxiter:
                return MAX_ITER_WARNING, False, nit
            nit += 1
            new_x_base = x_base + xpt[:, best]
            if norm(new_x_base - x_base) >= LARGE_SHIFT_FACTOR * radius:
                shift_model(x_base, xpt, model, new_x_base)
                moved = new_x_base - x_base
                x_base += moved
                for k in range(npt):
                    xpt[:, k] -= moved
            radius_save = radius
            x_best = x_base + xpt[:, best]
            step = tangential_step(
                gradient(x_base, xpt, model, x_best),
                xpt,
                i_hess,
                e_hess,
                xl - x_best,
                xu - x_best,
                np.sqrt(radius**2.0),
            )
            s_norm = norm(step)
            if s_norm <= SHORT_STEP_THRESHOLD * resolution:
                radius = _radius_floor(radius * DECREASE_RESOLUTION_FACTOR, resolution)
                if radius_save > resolution:
                    n_short_steps = 0
                    n_very_short_steps = 0
                else:
                    n_short_steps += 1
                    n_very_short_steps += 1
                    if s_norm > 0.1 * resolution:
                        n_very_short_steps = 0
                enhance_resolution = n_short_steps >= 5 or n_very_short_steps >= 3
                if enhance_resolution:
                    n_short_steps = 0
                    n_very_short_steps = 0
                    improve_geometry = False
                else:
                    k_new, dist_new, ok = _index_to_remove(
                        system, x_base, xpt, best, x_best, False, radius, resolution
                    )
                    improve_geometry = dist_new > max(radius, RESOLUTION_FACTOR * resolution)
            else:
                if record[2] >= maxfev:
                    return MAX_EVAL_WARNING, False, nit
                x_new = x_best + step
                f = evaluate(x_new, args, problem, record, best_x)
                if f <= target and feasible_target:
                    return TARGET_SUCCESS, True, nit
                fun_best = fun_val[best]
                model_decrease = dot(
                    step,
                    gradient(x_base, xpt, model, x_best)
                    + 0.5 * hess_prod(xpt, i_hess, e_hess, step),
                )
                if abs(0.0 - model_decrease) > TINY * abs(fun_best - f):
                    ratio = (fun_best - f) / abs(0.0 - model_decrease)
                else:
                    ratio = -1.0
                k_new, _, ok = _index_to_remove(
                    system, x_base, xpt, best, x_new, True, radius, resolution
                )
                if not ok:
                    return LINALG_ERROR, False, nit
                ill_conditioned, ok = _replace_point(
                    system, x_base, xpt, model, fun_val, k_new, x_new, f
                )
                if not ok:
                    return LINALG_ERROR, False, nit
                best = _best_index(fun_val, best)
                radius = _updated_radius(radius, resolution, s_norm, ratio)
                if radius <= resolution:
                    if ratio >= VERY_LOW_RATIO:
                        n_alt_models = 0
                    else:
                        n_alt_models += 1
                        x_best = x_base + xpt[:, best]
                        grad_best = gradient(x_base, xpt, model, x_best)
                        alt_const, alt_grad, alt_i_hess, _, ok = fit(system, xpt, fun_val)
                        if not ok:
                            return LINALG_ERROR, False, nit
                        grad_alt = gradient(
                            x_base,
                            xpt,
                            (alt_const, alt_grad, alt_i_hess, np.zeros((n, n))),
                            x_best,
                        )
                        if norm(grad_best) < LARGE_GRADIENT_FACTOR * norm(grad_alt):
                            n_alt_models = 0
                        if n_alt_models >= 3:
                            const[:] = alt_const
                            grad[:] = alt_grad
                            i_hess[:] = alt_i_hess
                            e_hess[:] = 0.0
                            n_alt_models = 0
                x_best = x_base + xpt[:, best]
                k_new, dist_new, ok = _index_to_remove(
                    system, x_base, xpt, best, x_best, False, radius, resolution
                )
                improve_geometry = ill_conditioned or (
                    ratio <= LOW_RATIO and dist_new > max(radius, RESOLUTION_FACTOR * resolution)
                )
                enhance_resolution = (
                    radius_save <= resolution and ratio <= LOW_RATIO and not improve_geometry
                )
            if enhance_resolution:
                if resolution <= rhoend:
                    return RADIUS_SUCCESS, True, nit
                if LARGE_RESOLUTION_THRESHOLD * rhoend < resolution:
                    resolution *= DECREASE_RESOLUTION_FACTOR
                elif MODERATE_RESOLUTION_THRESHOLD * rhoend < resolution:
                    resolution = np.sqrt(resolution * rhoend)
                else:
                    resolution = rhoend
                radius = max(DECREASE_RADIUS_FACTOR * radius, resolution)
            if improve_geometry:
                step, ok = _geometry_step(system, x_base, xpt, best, k_new, xl, xu, radius)
                if not ok:
                    return LINALG_ERROR, False, nit
                if record[2] >= maxfev:
                    return MAX_EVAL_WARNING, False, nit
                x_new = x_base + xpt[:, best] + step
                f = evaluate(x_new, args, problem, record, best_x)
                if f <= target and feasible_target:
                    return TARGET_SUCCESS, True, nit
                _, ok = _replace_point(system, x_base, xpt, model, fun_val, k_new, x_new, f)
                if not ok:
                    return LINALG_ERROR, False, nit
                best = _best_index(fun_val, best)

    @ieee_njit
    def cobyqa_minimize(x0_full, args, settings):
        n_orig = x0_full.shape[0]
        lower, upper = box_bounds(settings.bounds, n_orig)
        xl_full = np.where(np.isnan(lower), -np.inf, lower)
        xu_full = np.where(np.isnan(upper), np.inf, upper)
        fixed, fixed_val, xl, xu, x0, factor, shift, feasible = free_problem(
            x0_full, xl_full, xu_full, settings.scale
        )
        problem = (fixed, fixed_val, factor, shift, xl_full, xu_full)
        n = x0.shape[0]
        if n == 0:
            # scipy's COBYQA builds the free variables' Bounds, which refuses to be empty.
            raise ValueError(
                "minimize(method='COBYQA'): every variable is fixed by its bounds, which scipy's "
                "COBYQA refuses (`lb` and `ub` must be non-empty)"
            )
        budgets = _resolve_budgets(settings, n_orig)
        feasible_target = 0.0 <= settings.feasibility_tol
        best_x = x0.copy()
        record = np.array([np.nan, 0.0, 0.0])
        nit = 0
        if not feasible:
            # scipy evaluates x0 for its answer.
            f = fun(full_x(x0, fixed, fixed_val, factor, shift, xl_full, xu_full, False), args)
            x = full_x(x0, fixed, fixed_val, factor, shift, xl_full, xu_full, False)
            return x, f, 1, 0, INFEASIBLE_ERROR, False
        rhobeg = settings.initial_tr_radius
        rhoend = settings.final_tr_radius
        max_radius = 0.5 * np.min(xu - xl)
        if rhobeg > max_radius:
            rhobeg = max_radius
            rhoend = min(rhoend, max_radius)
        npt = 2 * n + 1
        x_base, xpt = _initial_points(x0, xl, xu, rhobeg, npt)
        system = new_system(n, npt)
        fun_val = np.full(npt, np.nan)
        status = RADIUS_SUCCESS
        success = False
        started = True
        for k in range(npt):
            if k >= budgets[0]:
                # scipy's quirk: out of evaluations before the first model reads as maxiter.
                status = MAX_ITER_WARNING
                started = False
                break
            fun_val[k] = evaluate(x_base + xpt[:, k], args, problem, record, best_x)
            if fun_val[k] <= settings.f_target and feasible_target:
                status = TARGET_SUCCESS
                success = True
                started = False
                break
        if started:
            const, grad, i_hess, _, ok = fit(system, xpt, fun_val)
            if ok:
                model = (const, grad, i_hess, np.zeros((n, n)))
                status, success, nit = iterate(
                    x_base,
                    xpt,
                    system,
                    model,
                    fun_val,
                    xl,
                    xu,
                    rhobeg,
                    rhoend,
                    settings,
                    budgets,
                    args,
                    problem,
                    record,
                    best_x,
                )
            else:
                status = LINALG_ERROR
        best_f = record[0]
        x = full_x(
            np.minimum(np.maximum(best_x, xl), xu),
            fixed,
            fixed_val,
            factor,
            shift,
            xl_full,
            xu_full,
            True,
        )
        success = success and np.isfinite(best_f)
        if status != TARGET_SUCCESS:
            success = success and feasible_target
        return x, best_f, int(record[2]), nit, status, success

    return cobyqa_minimize


def make_cobyqa(fun: Callable) -> Callable:
    """``solve(x0, args, settings: COBYQASettings) -> (x, success)``."""
    cobyqa_minimize = make_cobyqa_minimize(fun)

    @ieee_njit
    def solve(x0, args, settings):
        x, _, _, _, _, success = cobyqa_minimize(x0, args, settings)
        return x, success

    return solve
