"""scipy's COBYQA (its vendored ``cobyqa`` package: ``main.minimize`` and
``framework.TrustRegion``) without constraints but bounds, as an optimistix minimiser: a port of
the NUMBA solver `gpubackend.solvers.cobyqa`, derivative-free.

A trust-region method on quadratic models interpolating ``2n + 1`` points
(`cobyqa_model`), its steps from truncated conjugate gradients within the bounds
(`cobyqa_tangential`), and geometry steps that keep the interpolation set poised
(`cobyqa_geometry`). Without linear or nonlinear constraints COBYQA's normal
step is zero, its merit function the objective and its Lagrange multipliers
empty; what remains is ported as scipy runs it: start points near the bounds,
the radius and resolution updates, the base shifts, the alternative models, the
budgets and the answer, COBYQA's best evaluated point (`cobyqa_problem`).

``init`` evaluates the start points and fits the first model; each optimistix
step is one iteration of COBYQA's loop, its branches ``lax.cond``s. The verdict
is scipy's ``status``: 0 once the resolution reaches ``final_tr_radius``, 1 once
a value is at most ``f_target``, 5 past ``maxfev`` evaluations, 6 after
``maxiter`` iterations (also, as scipy has it, out of evaluations before the
first model), -1 with infeasible bounds (``x0`` evaluated once, the answer),
-2 where a model's system is not finite (scipy's ``LinAlgError``). Every
variable fixed by its bounds is scipy's ``ValueError``.

The trial points are scipy's up to rounding: the eigendecomposition is
``jnp.linalg.eigh`` (LAPACK's ``syevd`` on CPU) where scipy calls ``dsyevr``, and
XLA's products sum in its own order (and may fuse ``a * b + c``) where numpy
calls BLAS, so the last bits differ; where a comparison (a ratio at 0.1, a
distance at the radius, an eigenvalue at ``eps``, a tie between points) is
decided by them, a path parts from scipy's and ends near its answer after a few
evaluations more or fewer (tests/test_jax_cobyqa.py says how often).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from gpubackend.dispatch.jax.cobyqa_geometry import cauchy_geometry, spider_geometry
from gpubackend.dispatch.jax.cobyqa_model import (
    Model,
    System,
    build_system,
    determinants,
    fit,
    gradient,
    hess_prod,
    shift_model,
    update,
    value,
)
from gpubackend.dispatch.jax.cobyqa_problem import (
    Problem,
    bounded_problem,
    clipped,
    full_x,
    start,
    takes_into_filter,
)
from gpubackend.dispatch.jax.cobyqa_tangential import tangential_step, tiny
from gpubackend.dispatch.jax.nelder_mead import flat_objective
from gpubackend.dispatch.jax.scipy_status import status_verdict
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
from gpubackend.scipy_options.settings import COBYQASettings

RUNNING = -100


def budgets(settings: COBYQASettings, n: int) -> tuple[int, int]:
    """``(maxfev, maxiter)`` for ``n`` variables (all of them, fixed ones too, as scipy)."""
    maxfev = settings.maxfev if settings.maxfev >= 0 else PER_VARIABLE_EVALUATIONS * n
    maxiter = settings.maxiter if settings.maxiter >= 0 else PER_VARIABLE_ITERATIONS * n
    return maxfev, maxiter


def _radii(settings: COBYQASettings, problem: Problem) -> tuple[float, float]:
    """``(rhobeg, rhoend)``: scipy's, the first at most half the narrowest bound gap."""
    rhobeg, rhoend = settings.initial_tr_radius, settings.final_tr_radius
    max_radius = 0.5 * float(np.min(problem.upper - problem.lower, initial=np.inf))
    if rhobeg > max_radius:
        return max_radius, min(rhoend, max_radius)
    return rhobeg, rhoend


def _radius_floor(radius, resolution):
    """COBYQA's radius setter: a radius within 1.4 resolutions is the resolution."""
    return jnp.where(radius <= DECREASE_RADIUS_THRESHOLD * resolution, resolution, radius)


def _updated_radius(radius, resolution, s_norm, ratio):
    """COBYQA's ``update_radius``."""
    return _radius_floor(
        jnp.where(
            ratio <= LOW_RATIO,
            DECREASE_RADIUS_FACTOR * radius,
            jnp.where(
                ratio <= HIGH_RATIO,
                jnp.maximum(DECREASE_RADIUS_FACTOR * radius, s_norm),
                jnp.minimum(
                    INCREASE_RADIUS_FACTOR * radius,
                    jnp.maximum(
                        DECREASE_RADIUS_FACTOR * radius, INCREASE_RADIUS_THRESHOLD * s_norm
                    ),
                ),
            ),
        ),
        resolution,
    )


def _best_index(fun_val, best):
    """COBYQA's ``set_best_index``: the first point with a lower value than the current best."""
    return jnp.where(fun_val[best] <= jnp.min(fun_val), best, jnp.argmin(fun_val))


def _initial_points(x0, xl, xu, rhobeg: float):
    """``(x_base, xpt)``: scipy's ``Interpolation`` start, moved away from or onto close bounds."""
    n = x0.shape[0]
    half = 0.5 * rhobeg
    very_close_xl = x0 <= xl + half
    near_xl = (xl + half < x0) & (x0 <= xl + rhobeg)
    x_base = jnp.where(very_close_xl, xl, jnp.where(near_xl, jnp.minimum(xl + rhobeg, xu), x0))
    very_close_xu = x_base >= xu - half
    near_xu = (x_base < xu - half) & (xu - rhobeg <= x_base)
    x_base = jnp.where(very_close_xu, xu, jnp.where(near_xu, jnp.maximum(xu - rhobeg, xl), x_base))
    forward = jnp.where(very_close_xu, -rhobeg, rhobeg)
    backward = jnp.where(
        very_close_xl, 2.0 * rhobeg, jnp.where(very_close_xu, -2.0 * rhobeg, -rhobeg)
    )
    xpt = jnp.concatenate(
        [jnp.zeros((n, 1), x0.dtype), jnp.diag(forward), jnp.diag(backward)], axis=1
    )
    return x_base, xpt


class Interpolation(eqx.Module):
    """The interpolation set ``x_base + xpt[:, k]``, its system and model, and its best point."""

    x_base: jax.Array
    xpt: jax.Array
    system: System
    model: Model
    fun_val: jax.Array
    best: jax.Array

    def x_best(self) -> jax.Array:
        return self.x_base + self.xpt[:, self.best]


class Record(eqx.Module):
    """COBYQA's filter of evaluated points (one without constraints) and the evaluation count."""

    x: jax.Array
    f: jax.Array
    filled: jax.Array
    evaluations: jax.Array

    def kept(self, point, f) -> Record:
        takes = takes_into_filter(self.filled, self.f, f)
        return Record(
            jnp.where(takes, point, self.x),
            jnp.where(takes, f, self.f),
            self.filled | takes,
            self.evaluations + 1,
        )


def _index_to_remove(interp: Interpolation, x_new, radius, resolution):
    """``(k, distance, ok)``: COBYQA's ``get_index_to_remove``, for ``x_new`` unless None."""
    xpt = interp.xpt
    dist_sq = jnp.sum((xpt - xpt[:, interp.best][:, None]) ** 2, axis=0)
    weights = dist_sq
    ok = jnp.array(True)
    if x_new is not None:
        sigma, ok = determinants(interp.system, interp.x_base, xpt, x_new)
        scale = jnp.maximum(LOW_RADIUS_FACTOR * radius, resolution) ** 2
        weights = jnp.maximum(1.0, dist_sq / scale) ** 3 * jnp.abs(sigma)
        weights = weights.at[interp.best].set(-1.0 * jnp.abs(sigma[interp.best]))
    k = jnp.argmax(weights)
    return k, jnp.sqrt(dist_sq[k]), ok


def _replaced(interp: Interpolation, k_new, x_new, f):
    """COBYQA's ``update_interpolation``: ``(interp, ill_conditioned, ok)``, its best point
    updated."""
    npt = interp.xpt.shape[1]
    fun_diff = (
        jnp.zeros((npt,), f.dtype)
        .at[k_new]
        .set(f - value(interp.x_base, interp.xpt, interp.model, x_new))
    )
    dir_old = interp.xpt[:, k_new]
    xpt = interp.xpt.at[:, k_new].set(x_new - interp.x_base)
    system = build_system(xpt)
    model, ill_conditioned, ok = update(system, xpt, interp.model, k_new, dir_old, fun_diff)
    fun_val = interp.fun_val.at[k_new].set(f)
    replaced = Interpolation(
        interp.x_base, xpt, system, model, fun_val, _best_index(fun_val, interp.best)
    )
    return replaced, ill_conditioned, ok


def _geometry_step(interp: Interpolation, k_new, xl, xu, radius):
    """``(step, ok)``: COBYQA's ``get_geometry_step`` without constraints."""
    xpt = interp.xpt
    npt = xpt.shape[1]
    coord_vec = (jnp.arange(npt) == k_new).astype(xpt.dtype)
    lagrange, _, ok = fit(interp.system, xpt, coord_vec)
    x_best = interp.x_best()
    lagrange = eqx.tree_at(
        lambda m: m.grad, lagrange, gradient(interp.x_base, xpt, lagrange, x_best)
    )
    lower, upper = xl - x_best, xu - x_best
    step = cauchy_geometry(lagrange, xpt, lower, upper, radius)
    sigma, ok_sigma = determinants(interp.system, interp.x_base, xpt, x_best + step, k_new)
    # The other points relative to the best one, in COBYQA's order (the best's column and the
    # first swapped, then the first dropped).
    others = jnp.arange(1, npt)
    lines = xpt[:, jnp.where(others == interp.best, 0, others)] - xpt[:, interp.best][:, None]
    step_alt = spider_geometry(lagrange, xpt, lines, lower, upper, radius)
    sigma_alt, ok_alt = determinants(interp.system, interp.x_base, xpt, x_best + step_alt, k_new)
    step = jnp.where(jnp.abs(sigma_alt) > jnp.abs(sigma), step_alt, step)
    return step, ok & ok_sigma & ok_alt


class _CobyqaState(eqx.Module):
    interp: Interpolation
    record: Record
    resolution: jax.Array
    radius: jax.Array
    n_short_steps: jax.Array
    n_very_short_steps: jax.Array
    n_alt_models: jax.Array
    iterations: jax.Array
    status: jax.Array


class _Move(eqx.Module):
    """What an iteration's first part leaves to the rest."""

    state: _CobyqaState
    k_new: jax.Array
    improve_geometry: jax.Array
    enhance_resolution: jax.Array


class ScipyCOBYQA(optx.AbstractMinimiser):
    """scipy's ``minimize(method="COBYQA")`` without constraints, on `COBYQASettings`."""

    settings: COBYQASettings = eqx.field(static=True)
    # optimistix reads these off any minimiser; the verdicts above replace them.
    rtol: float
    atol: float
    norm: Callable

    def _problem(self, y) -> Problem:
        lower, upper = self.settings.bounds
        problem = bounded_problem(lower, upper, y.size, self.settings.scale)
        if problem.n == 0:
            raise ValueError(
                "minimize(method='COBYQA'): every variable is fixed by its bounds, which scipy's "
                "COBYQA refuses (`lb` and `ub` must be non-empty)"
            )
        return problem

    def _evaluator(self, fn, y, args, problem: Problem, clips: bool = True):
        value_of = flat_objective(fn, y, args)
        return lambda point: value_of(full_x(problem, point, clips))

    def _target_met(self, f) -> jax.Array:
        return (f <= self.settings.f_target) & (0.0 <= self.settings.feasibility_tol)

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _CobyqaState:
        problem = self._problem(y)
        dtype = y.dtype
        n = problem.n
        x0 = start(problem, jnp.ravel(y))
        maxfev, _ = budgets(self.settings, y.size)
        npt = 2 * n + 1
        if not problem.feasible:
            # scipy evaluates x0, unclipped, for its answer.
            f = self._evaluator(fn, y, args, problem, clips=False)(x0)
            xpt = jnp.zeros((n, npt), dtype)
            system = build_system(xpt)
            return _CobyqaState(
                interp=Interpolation(
                    x0,
                    xpt,
                    system,
                    fit(system, xpt, jnp.zeros((npt,), dtype))[0],
                    jnp.zeros((npt,), dtype),
                    jnp.array(0),
                ),
                record=Record(x0, f, jnp.array(True), jnp.array(1)),
                resolution=jnp.zeros((), dtype),
                radius=jnp.zeros((), dtype),
                n_short_steps=jnp.array(0),
                n_very_short_steps=jnp.array(0),
                n_alt_models=jnp.array(0),
                iterations=jnp.array(0),
                status=jnp.array(INFEASIBLE_ERROR),
            )
        evaluate = self._evaluator(fn, y, args, problem)
        rhobeg, _ = _radii(self.settings, problem)
        x_base, xpt = _initial_points(
            x0, jnp.asarray(problem.lower, dtype), jnp.asarray(problem.upper, dtype), rhobeg
        )
        record = Record(
            jnp.asarray(x0), jnp.full((), jnp.nan, dtype), jnp.array(False), jnp.array(0)
        )

        def start_point(k, carry):
            fun_val, record, status = carry
            running = status == RUNNING

            def evaluated(record):
                point = x_base + xpt[:, k]
                f = evaluate(point)
                return clipped(f), record.kept(point, f)

            f, record = jax.lax.cond(
                running & (k < maxfev),
                evaluated,
                lambda record: (jnp.full((), jnp.nan, dtype), record),
                record,
            )
            # scipy's quirk: out of evaluations before the first model reads as maxiter.
            status = jnp.where(running & (k >= maxfev), MAX_ITER_WARNING, status)
            status = jnp.where(running & (k < maxfev) & self._target_met(f), TARGET_SUCCESS, status)
            return fun_val.at[k].set(jnp.where(running, f, fun_val[k])), record, status

        fun_val, record, status = jax.lax.fori_loop(
            0, npt, start_point, (jnp.full((npt,), jnp.nan, dtype), record, jnp.array(RUNNING))
        )
        system = build_system(xpt)
        model, _, ok = fit(system, xpt, fun_val)
        status = jnp.where((status == RUNNING) & ~ok, LINALG_ERROR, status)
        resolution = jnp.asarray(rhobeg, dtype)
        return _CobyqaState(
            interp=Interpolation(x_base, xpt, system, model, fun_val, _best_index(fun_val, 0)),
            record=record,
            resolution=resolution,
            radius=resolution,
            n_short_steps=jnp.array(0),
            n_very_short_steps=jnp.array(0),
            n_alt_models=jnp.array(0),
            iterations=jnp.array(0),
            status=status,
        )

    def step(self, fn, y, args, options, state: _CobyqaState, tags):
        problem = self._problem(y)
        if not problem.feasible:
            return self._answer(y, problem, state)[0], state, None
        evaluate = self._evaluator(fn, y, args, problem)
        dtype = y.dtype
        small = tiny(dtype)
        maxfev, maxiter = budgets(self.settings, y.size)
        _, rhoend = _radii(self.settings, problem)
        xl = jnp.asarray(problem.lower, dtype)
        xu = jnp.asarray(problem.upper, dtype)

        interp = state.interp
        new_x_base = interp.x_best()

        def shifted(interp: Interpolation) -> Interpolation:
            model = shift_model(interp.x_base, interp.xpt, interp.model, new_x_base)
            moved = new_x_base - interp.x_base
            xpt = interp.xpt - moved[:, None]
            return Interpolation(
                interp.x_base + moved, xpt, build_system(xpt), model, interp.fun_val, interp.best
            )

        shifts = jnp.linalg.norm(new_x_base - interp.x_base) >= LARGE_SHIFT_FACTOR * state.radius
        interp = jax.lax.cond(shifts, shifted, lambda interp: interp, interp)
        state = eqx.tree_at(lambda s: s.interp, state, interp)
        radius_save = state.radius
        resolution = state.resolution
        x_best = interp.x_best()
        grad_best = gradient(interp.x_base, interp.xpt, interp.model, x_best)
        step = tangential_step(
            grad_best,
            interp.xpt,
            interp.model,
            xl - x_best,
            xu - x_best,
            jnp.sqrt(state.radius**2),
        )
        s_norm = jnp.linalg.norm(step)

        def short_step(state: _CobyqaState) -> _Move:
            radius = _radius_floor(state.radius * DECREASE_RESOLUTION_FACTOR, resolution)
            restarts = radius_save > resolution
            n_short = jnp.where(restarts, 0, state.n_short_steps + 1)
            n_very_short = jnp.where(
                restarts | (s_norm > 0.1 * resolution), 0, state.n_very_short_steps + 1
            )
            enhance = (n_short >= 5) | (n_very_short >= 3)
            k_new, dist_new, _ = _index_to_remove(state.interp, None, radius, resolution)
            improve = ~enhance & (dist_new > jnp.maximum(radius, RESOLUTION_FACTOR * resolution))
            state = eqx.tree_at(
                lambda s: (s.radius, s.n_short_steps, s.n_very_short_steps),
                state,
                (radius, jnp.where(enhance, 0, n_short), jnp.where(enhance, 0, n_very_short)),
            )
            return _Move(state, k_new, improve, enhance)

        def trust_region_step(state: _CobyqaState) -> _Move:
            interp = state.interp
            x_new = x_best + step
            f_raw = evaluate(x_new)
            record = state.record.kept(x_new, f_raw)
            f = clipped(f_raw)
            fun_best = interp.fun_val[interp.best]
            model_decrease = step @ (grad_best + 0.5 * hess_prod(interp.xpt, interp.model, step))
            ratio = jnp.where(
                jnp.abs(0.0 - model_decrease) > small * jnp.abs(fun_best - f),
                (fun_best - f) / jnp.abs(0.0 - model_decrease),
                -1.0,
            )
            k_new, _, ok_index = _index_to_remove(interp, x_new, state.radius, resolution)
            interp, ill_conditioned, ok_update = _replaced(interp, k_new, x_new, f)
            radius = _updated_radius(state.radius, resolution, s_norm, ratio)
            # COBYQA's alternative model: after three poor steps at the resolution whose model
            # gradient was small against the alternative's, the least-Frobenius-norm model.
            at_resolution = radius <= resolution
            poor = ~(ratio >= VERY_LOW_RATIO)
            x_best_new = interp.x_best()
            grad_new = gradient(interp.x_base, interp.xpt, interp.model, x_best_new)
            alternative, _, ok_alt = fit(interp.system, interp.xpt, interp.fun_val)
            grad_alt = gradient(interp.x_base, interp.xpt, alternative, x_best_new)
            counts = (
                at_resolution
                & poor
                & ~(jnp.linalg.norm(grad_new) < LARGE_GRADIENT_FACTOR * jnp.linalg.norm(grad_alt))
            )
            n_alt = jnp.where(
                counts, state.n_alt_models + 1, jnp.where(at_resolution, 0, state.n_alt_models)
            )
            switches = n_alt >= 3
            interp = eqx.tree_at(
                lambda i: i.model,
                interp,
                jax.tree.map(lambda a, b: jnp.where(switches, a, b), alternative, interp.model),
            )
            n_alt = jnp.where(switches, 0, n_alt)
            k_new, dist_new, _ = _index_to_remove(interp, None, radius, resolution)
            improve = ill_conditioned | (
                (ratio <= LOW_RATIO)
                & (dist_new > jnp.maximum(radius, RESOLUTION_FACTOR * resolution))
            )
            enhance = (radius_save <= resolution) & (ratio <= LOW_RATIO) & ~improve
            failed = ~ok_index | ~ok_update | (at_resolution & poor & ~ok_alt)
            status = jnp.where(
                self._target_met(f),
                TARGET_SUCCESS,
                jnp.where(failed, LINALG_ERROR, state.status),
            )
            state = _CobyqaState(
                interp,
                record,
                state.resolution,
                radius,
                state.n_short_steps,
                state.n_very_short_steps,
                n_alt,
                state.iterations,
                status,
            )
            return _Move(state, k_new, improve, enhance)

        def long_step(state: _CobyqaState) -> _Move:
            def out_of_evaluations(state: _CobyqaState) -> _Move:
                state = eqx.tree_at(lambda s: s.status, state, jnp.array(MAX_EVAL_WARNING))
                return _Move(state, jnp.array(0), jnp.array(False), jnp.array(False))

            return jax.lax.cond(
                state.record.evaluations >= maxfev, out_of_evaluations, trust_region_step, state
            )

        move = jax.lax.cond(
            s_norm <= SHORT_STEP_THRESHOLD * resolution, short_step, long_step, state
        )
        state = move.state
        running = state.status == RUNNING

        # COBYQA's resolution update.
        enhances = running & move.enhance_resolution
        ends = enhances & (state.resolution <= rhoend)
        resolution = state.resolution
        new_resolution = jnp.where(
            LARGE_RESOLUTION_THRESHOLD * rhoend < resolution,
            resolution * DECREASE_RESOLUTION_FACTOR,
            jnp.where(
                MODERATE_RESOLUTION_THRESHOLD * rhoend < resolution,
                jnp.sqrt(resolution * rhoend),
                rhoend,
            ),
        )
        lowers = enhances & ~ends
        state = eqx.tree_at(
            lambda s: (s.resolution, s.radius, s.status),
            state,
            (
                jnp.where(lowers, new_resolution, resolution),
                jnp.where(
                    lowers,
                    jnp.maximum(DECREASE_RADIUS_FACTOR * state.radius, new_resolution),
                    state.radius,
                ),
                jnp.where(ends, RADIUS_SUCCESS, state.status),
            ),
        )

        def geometry(state: _CobyqaState) -> _CobyqaState:
            interp = state.interp
            step, ok = _geometry_step(interp, move.k_new, xl, xu, state.radius)

            def evaluated(state: _CobyqaState) -> _CobyqaState:
                x_new = interp.x_best() + step
                f_raw = evaluate(x_new)
                f = clipped(f_raw)
                replaced, _, ok = _replaced(interp, move.k_new, x_new, f)
                status = jnp.where(
                    self._target_met(f),
                    TARGET_SUCCESS,
                    jnp.where(ok, state.status, LINALG_ERROR),
                )
                return eqx.tree_at(
                    lambda s: (s.interp, s.record, s.status),
                    state,
                    (replaced, state.record.kept(x_new, f_raw), status),
                )

            def stopped(state: _CobyqaState) -> _CobyqaState:
                status = jnp.where(ok, MAX_EVAL_WARNING, LINALG_ERROR)
                return eqx.tree_at(lambda s: s.status, state, status)

            evaluates = ok & (state.record.evaluations < maxfev)
            return jax.lax.cond(evaluates, evaluated, stopped, state)

        improves = (state.status == RUNNING) & move.improve_geometry
        state = jax.lax.cond(improves, geometry, lambda state: state, state)
        iterations = state.iterations + 1
        status = jnp.where(
            (state.status == RUNNING) & (iterations >= maxiter), MAX_ITER_WARNING, state.status
        )
        state = eqx.tree_at(lambda s: (s.iterations, s.status), state, (iterations, status))
        return self._answer(y, problem, state)[0], state, None

    def _answer(self, y, problem: Problem, state: _CobyqaState):
        """``(x, f)``: COBYQA's best evaluated point, with the fixed variables."""
        if not problem.feasible:
            x = full_x(problem, state.record.x, clips=False)
        else:
            lower = jnp.asarray(problem.lower, state.record.x.dtype)
            upper = jnp.asarray(problem.upper, state.record.x.dtype)
            x = full_x(problem, jnp.clip(state.record.x, lower, upper))
        return x.reshape(y.shape), state.record.f

    def outcome(self, y, state: _CobyqaState):
        """scipy's ``(x, fun, nfev, nit, status, success)`` of a finished solve."""
        problem = self._problem(y)
        x, f = self._answer(y, problem, state)
        status = state.status
        succeeded = (
            ((status == RADIUS_SUCCESS) | (status == TARGET_SUCCESS))
            & jnp.isfinite(f)
            & (0.0 <= self.settings.feasibility_tol)
        )
        return x, f, state.record.evaluations, state.iterations, status, succeeded

    def terminate(self, fn, y, args, options, state: _CobyqaState, tags):
        succeeded = self.outcome(y, state)[5]
        out_of_budget = (state.status == MAX_EVAL_WARNING) | (state.status == MAX_ITER_WARNING)
        return status_verdict(state.status, RUNNING, succeeded, out_of_budget)

    def postprocess(self, fn, y, aux, args, options, state: _CobyqaState, tags, result):
        return self.outcome(y, state)[0], aux, {}
