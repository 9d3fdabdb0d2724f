"""scipy's COBYLA (PRIMA's, through scipy 1.18's pure-Python port ``pyprima``) as an optimistix
minimiser.

COBYLA models the objective and the constraints by linear interpolation on a
simplex of ``n + 1`` points and takes trust-region steps of radius ``delta``
(at least ``rho``, which falls from ``rhobeg`` to ``tol``), or geometry steps
that keep the simplex well shaped. PyTensor's ``minimize`` takes no
constraints, so the only ones are ``bounds``, which pyprima, as here, turns
into linear constraints ``x_i >= lower_i`` and ``x_i <= upper_i`` for the
finite bounds: COBYLA may evaluate points outside them. Variables whose bounds
(nearly) meet are fixed, as pyprima fixes them, and ``x0`` is first clipped
into the bounds.

``init`` evaluates the start simplex (pyprima's ``initxfc``, the filter's
``initfilt``); each optimistix step is one iteration of pyprima's ``cobylb``
loop: the penalty (``getcpen``), the trust-region step (`cobyla_trstlp`) and
its evaluation, the geometry step, the reduction of ``rho``. The verdict is
PRIMA's ``info`` (scipy's ``status``): 0 once ``rho`` reaches ``tol``, 1 once
``f <= f_target`` at a feasible point, 3 once ``maxiter`` evaluations are
spent, 7 where rounding damages the simplex's inverse, -1 or -2 at a NaN or
infinite point or value, 20 after ``10 * maxiter`` iterations; scipy's
``success`` is 0 or 1 with the answer's violation within ``catol``. The
answer is pyprima's ``selectx`` among the filter of evaluated points
(`cobyla_filter`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from gpubackend.dispatch.jax.cobyla_filter import CWEIGHT, FUNCMAX, Filter, save, select
from gpubackend.dispatch.jax.cobyla_simplex import (
    Simplex,
    find_pole,
    geometry_step,
    model_gradient,
    trust_region_drop,
    update_point,
    update_pole,
)
from gpubackend.dispatch.jax.cobyla_trstlp import trust_region_step
from gpubackend.dispatch.jax.nelder_mead import flat_objective
from gpubackend.dispatch.jax.scipy_status import status_verdict

RUNNING = -100
SMALL_TR_RADIUS, FTARGET_ACHIEVED, MAXFUN_REACHED = 0, 1, 3
NAN_INF_X, NAN_INF_F, DAMAGING_ROUNDING, MAXTR_REACHED = -1, -2, 7, 20
"""PRIMA's ``info`` codes, scipy's ``status``."""

ETA1, ETA2, GAMMA1, GAMMA2 = 0.1, 0.7, 0.5, 2.0
"""PRIMA's trust-region constants (scipy passes none of its own)."""
MIN_MAXFILT, MAXFILT = 200, 2000


class Problem(NamedTuple):
    """The problem COBYLA solves: the free variables' bounds as linear constraints."""

    free: np.ndarray
    """Which variables are free (the others fixed at ``fixed_values``)."""
    fixed_values: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    amat: np.ndarray
    """``(m, n_free)``: ``amat @ x - bvec <= 0`` are the finite bounds, lower ones first."""
    bvec: np.ndarray


def fixed_by_bounds(lb: np.ndarray, ub: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(fixed, values)``: the variables whose bounds meet within PRIMA's and COBYQA's
    ``get_arrays_tol``, and the value of every variable there (the bounds' clipped midpoint)."""
    eps = np.finfo(np.float64).eps
    weight = max(np.max(np.abs(bound[np.isfinite(bound)]), initial=1.0) for bound in (lb, ub))
    tol = 10.0 * eps * max(lb.size, 1.0) * weight
    with np.errstate(invalid="ignore"):
        fixed = (lb <= ub) & (np.abs(lb - ub) < tol)
        return fixed, np.clip(0.5 * (lb + ub), lb, ub)


def bounded_problem(lower: tuple[float, ...], upper: tuple[float, ...], n: int) -> Problem:
    """pyprima's ``minimize`` preprocessing of ``bounds``: fixed variables, then ``get_lincon``."""
    if len(lower) not in (1, n) or len(upper) != len(lower):
        raise ValueError("`bounds` must hold one (lower, upper) pair per element of x")
    lb = np.broadcast_to(np.asarray(lower, np.float64), (n,))
    ub = np.broadcast_to(np.asarray(upper, np.float64), (n,))
    fixed, fixed_values = fixed_by_bounds(lb, ub)
    if fixed.all():
        raise ValueError(
            "minimize(method='COBYLA'): every variable is fixed by its bounds, which scipy's "
            "COBYLA refuses (a zero-size array error)"
        )
    free = ~fixed
    boundmax = np.finfo(np.float64).max / 4
    xl = np.maximum(np.nan_to_num(lb[free], nan=-boundmax), -boundmax)
    xu = np.minimum(np.nan_to_num(ub[free], nan=boundmax), boundmax)
    lower_rows, upper_rows = np.flatnonzero(xl > -boundmax), np.flatnonzero(xu < boundmax)
    identity = np.eye(int(free.sum()))
    amat = np.vstack([-identity[lower_rows], identity[upper_rows]])
    bvec = np.concatenate([-xl[lower_rows], xu[upper_rows]])
    return Problem(free, fixed_values, lb[free], ub[free], amat, bvec)


class Settings(eqx.Module):
    """scipy's options after PRIMA's ``preproc``."""

    rhobeg: float
    rhoend: float
    maxfun: int
    ctol: float
    ftarget: float


def preprocessed(rhobeg: float, tol: float, maxiter: int, catol: float, f_target: float, n: int):
    """PRIMA's ``preproc`` of scipy's options for ``n`` free variables (it warns where it
    changes one; these are its replacements)."""
    eps = float(np.finfo(np.float64).eps)
    maxfun = max(int(maxiter), n + 2)
    rhoend = float(tol)
    if abs(rhobeg - rhoend) < 100 * eps * max(abs(rhobeg), 1):
        rhoend = rhobeg
    if rhobeg <= 0 or not np.isfinite(rhobeg):
        rhobeg = max(10 * rhoend, 1.0) if np.isfinite(rhoend) and rhoend > 0 else 1.0
    if rhoend <= 0 or rhobeg < rhoend or not np.isfinite(rhoend):
        rhoend = max(eps, min(0.1 * rhobeg, 1e-6))
    ctol = float(np.sqrt(eps)) if np.isnan(catol) or catol < 0 else float(catol)
    ftarget = -float(np.finfo(np.float64).max) if np.isnan(f_target) else float(f_target)
    return Settings(float(rhobeg), float(rhoend), maxfun, ctol, ftarget)


def _moderated_f(f: jax.Array) -> jax.Array:
    huge = jnp.finfo(f.dtype).max
    return jnp.clip(jnp.where(jnp.isnan(f), FUNCMAX, f), -huge, FUNCMAX)


def _moderated_x(x: jax.Array) -> jax.Array:
    huge = jnp.finfo(x.dtype).max
    return jnp.clip(jnp.where(jnp.isnan(x), 0.0, x), -huge, huge)


def _violation(constr: jax.Array) -> jax.Array:
    return jnp.max(constr, initial=0.0) if constr.size else jnp.zeros((), constr.dtype)


def _check_break(maxfun: int, nf, cstrv, ctol: float, f, ftarget: float, x) -> jax.Array:
    """pyprima's ``checkbreak_con``: the info that ends the solve here, or `RUNNING`."""
    info = jnp.where(jnp.any(jnp.isnan(x) | jnp.isinf(x)), NAN_INF_X, RUNNING)
    bad_f = jnp.isnan(f) | jnp.isposinf(f) | jnp.isnan(cstrv) | jnp.isposinf(cstrv)
    info = jnp.where(bad_f, NAN_INF_F, info)
    info = jnp.where((cstrv <= ctol) & (f <= ftarget), FTARGET_ACHIEVED, info)
    return jnp.where(nf >= maxfun, MAXFUN_REACHED, info)


def _penalty_ratio(conmat: jax.Array, fval: jax.Array) -> jax.Array:
    """pyprima's ``fcratio``."""
    if conmat.shape[0] == 0:
        return jnp.zeros((), fval.dtype)
    cmin, cmax = jnp.min(-conmat, axis=1), jnp.max(-conmat, axis=1)
    fmin, fmax = jnp.min(fval), jnp.max(fval)
    spread = cmin < 0.5 * cmax
    denom = jnp.min(jnp.where(spread, jnp.maximum(cmax, 0) - cmin, jnp.inf))
    return jnp.where(jnp.any(spread) & (fmin < fmax), (fmax - fmin) / denom, 0.0)


def _reduced_rho(rho, rhoend: float):
    """pyprima's ``redrho``."""
    ratio = rho / rhoend
    return jnp.where(
        ratio > 250, 0.1 * rho, jnp.where(ratio <= 16, rhoend, jnp.sqrt(ratio) * rhoend)
    )


def _reduction_ratio(actual, predicted):
    """pyprima's ``redrat`` with its shrink threshold ``ETA1``."""
    huge = jnp.finfo(actual.dtype).max
    ratio = jnp.where(
        jnp.isposinf(predicted) & jnp.isposinf(actual),
        1.0,
        jnp.where(jnp.isposinf(predicted) & jnp.isneginf(actual), -huge, actual / predicted),
    )
    unpredicted = jnp.isnan(predicted) | (predicted <= 0)
    ratio = jnp.where(unpredicted, jnp.where(actual > 0, ETA1 / 2, -huge), ratio)
    return jnp.where(jnp.isnan(actual), -huge, ratio)


def _new_radius(delta, dnorm, ratio):
    """pyprima's ``trrad``."""
    return jnp.where(
        ratio <= ETA1,
        GAMMA1 * dnorm,
        jnp.where(
            ratio <= ETA2,
            jnp.maximum(GAMMA1 * delta, dnorm),
            jnp.maximum(GAMMA1 * delta, GAMMA2 * dnorm),
        ),
    )


class _CobylaState(eqx.Module):
    simplex: Simplex
    filt: Filter
    rho: jax.Array
    delta: jax.Array
    cpen: jax.Array
    evaluations: jax.Array
    iterations: jax.Array
    status: jax.Array


class _Evaluated(eqx.Module):
    f: jax.Array
    constr: jax.Array
    cstrv: jax.Array


class ScipyCOBYLA(optx.AbstractMinimiser):
    """scipy's ``_minimize_cobyla`` without constraints; ``lower`` and ``upper`` are the settings'
    bound tuples."""

    rhobeg: float = eqx.field(static=True)
    tol: float = eqx.field(static=True)
    maxiter: int = eqx.field(static=True)
    catol: float = eqx.field(static=True)
    f_target: float = eqx.field(static=True)
    lower: tuple[float, ...] = eqx.field(static=True)
    upper: tuple[float, ...] = eqx.field(static=True)
    # optimistix reads these off any minimiser; the verdicts above replace them.
    rtol: float
    atol: float
    norm: Callable

    def _problem(self, y) -> tuple[Problem, Settings]:
        problem = bounded_problem(self.lower, self.upper, y.size)
        n = int(problem.free.sum())
        return problem, preprocessed(
            self.rhobeg, self.tol, self.maxiter, self.catol, self.f_target, n
        )

    def _filter_size(self, problem: Problem, settings: Settings) -> int:
        # Without constraints every violation is 0, and the filter holds the lowest point alone.
        if problem.amat.shape[0] == 0:
            return 1
        return min(settings.maxfun, max(MIN_MAXFILT, MAXFILT))

    def _evaluator(self, fn, y, args, problem: Problem):
        value_of = flat_objective(fn, y, args)
        amat = jnp.asarray(problem.amat, y.dtype)
        bvec = jnp.asarray(problem.bvec, y.dtype)
        free = np.flatnonzero(problem.free)
        full = jnp.asarray(problem.fixed_values, y.dtype)

        def evaluate(x: jax.Array) -> _Evaluated:
            # pyprima's ``evaluate``: the bounds' constraints, and f at the moderated point.
            constr = amat @ x - bvec
            has_nan = jnp.any(jnp.isnan(x))
            f = _moderated_f(value_of(full.at[free].set(_moderated_x(x))))
            f = jnp.where(has_nan, jnp.sum(x), f)
            return _Evaluated(f, constr, _violation(constr))

        return evaluate, amat

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _CobylaState:
        problem, settings = self._problem(y)
        evaluate, _ = self._evaluator(fn, y, args, problem)
        dtype = y.dtype
        n = int(problem.free.sum())
        m = problem.amat.shape[0]
        rhobeg = settings.rhobeg
        lower = jnp.asarray(problem.lower, dtype)
        upper = jnp.asarray(problem.upper, dtype)
        # pyprima's ``_project`` (NaN-ignoring clip), then ``moderatex``.
        start = jnp.ravel(y)[np.flatnonzero(problem.free)]
        start = jnp.fmin(jnp.fmax(start, lower), upper)
        start = _moderated_x(start)
        first = evaluate(start)
        constr0 = jnp.clip(
            jnp.where(jnp.isnan(first.constr), FUNCMAX, first.constr), -FUNCMAX, FUNCMAX
        )
        huge = jnp.finfo(dtype).max
        sim = (jnp.eye(n, n + 1, dtype=dtype) * rhobeg).at[:, n].set(start)
        simplex = Simplex(
            sim=sim,
            simi=jnp.eye(n, dtype=dtype) / rhobeg,
            fval=jnp.full((n + 1,), huge, dtype).at[n].set(first.f),
            conmat=jnp.full((m, n + 1), huge, dtype).at[:, n].set(constr0),
            cval=jnp.full((n + 1,), huge, dtype).at[n].set(_violation(constr0)),
        )
        status = _check_break(
            settings.maxfun, 0, _violation(constr0), settings.ctol, first.f, settings.ftarget, start
        )

        def vertex(k, carry):
            simplex, status, evaluated = carry
            j = k - 1
            x = simplex.sim[:, n].at[j].add(rhobeg)
            running = status == RUNNING
            point = jax.lax.cond(
                running,
                evaluate,
                lambda _: _Evaluated(
                    jnp.zeros((), dtype), jnp.zeros((m,), dtype), jnp.zeros((), dtype)
                ),
                x,
            )
            fval = simplex.fval.at[j].set(point.f)
            conmat = simplex.conmat.at[:, j].set(point.constr)
            cval = simplex.cval.at[j].set(point.cstrv)
            stops = _check_break(
                settings.maxfun, k, point.cstrv, settings.ctol, point.f, settings.ftarget, x
            )
            swaps = (stops == RUNNING) & (fval[j] < fval[n])
            # The better point becomes the pole; row j of the displacements is -rhobeg up to j.
            moved = simplex.sim.at[:, n].set(x)
            swapped = Simplex(
                sim=moved.at[j].set(jnp.where(jnp.arange(n + 1) <= j, -rhobeg, moved[j])),
                simi=simplex.simi,
                fval=fval.at[j].set(fval[n]).at[n].set(fval[j]),
                conmat=conmat.at[:, j].set(conmat[:, n]).at[:, n].set(conmat[:, j]),
                cval=cval.at[j].set(cval[n]).at[n].set(cval[j]),
            )
            plain = Simplex(simplex.sim, simplex.simi, fval, conmat, cval)
            updated = jax.tree.map(lambda a, b: jnp.where(swaps, a, b), swapped, plain)
            updated = jax.tree.map(lambda a, b: jnp.where(running, a, b), updated, simplex)
            return (
                updated,
                jnp.where(running, stops, status),
                evaluated.at[j].set(running),
            )

        evaluated = jnp.zeros((n + 1,), bool).at[n].set(True)
        simplex, status, evaluated = jax.lax.fori_loop(
            1, n + 1, vertex, (simplex, status, evaluated)
        )
        all_evaluated = jnp.all(evaluated)
        simplex = simplex._replace(
            simi=jnp.where(all_evaluated, jnp.linalg.inv(simplex.sim[:, :n]), simplex.simi)
        )

        def saved(i, filt):
            x = jnp.where(i < n, simplex.sim[:, i] + simplex.sim[:, n], simplex.sim[:, n])
            stored = save(filt, x, simplex.fval[i], simplex.cval[i], settings.ctol)
            return jax.tree.map(lambda a, b: jnp.where(evaluated[i], a, b), stored, filt)

        filt = jax.lax.fori_loop(
            0, n + 1, saved, Filter.empty(self._filter_size(problem, settings), n, dtype)
        )
        rho = jnp.asarray(rhobeg, dtype)
        cpen = jnp.maximum(
            jnp.finfo(dtype).eps, jnp.minimum(1000.0, _penalty_ratio(simplex.conmat, simplex.fval))
        )
        return _CobylaState(
            simplex=simplex,
            filt=filt,
            rho=rho,
            delta=rho,
            cpen=cpen.astype(dtype),
            evaluations=jnp.sum(evaluated),
            iterations=jnp.array(0),
            status=status,
        )

    def step(self, fn, y, args, options, state: _CobylaState, tags):
        problem, settings = self._problem(y)
        evaluate, amat = self._evaluator(fn, y, args, problem)
        n = int(problem.free.sum())
        m = amat.shape[0]
        dtype = y.dtype
        eps = jnp.finfo(dtype).eps
        rhoend, maxfun, ctol = settings.rhoend, settings.maxfun, settings.ctol
        rho = state.rho
        a = amat.T
        gamma3 = max(1.0, min(0.75 * GAMMA2, 1.5))

        def lp_step(simplex: Simplex, delta):
            return trust_region_step(a, -simplex.conmat[:, n], delta, model_gradient(simplex))

        def predicted(simplex: Simplex, d):
            preref = -(d @ model_gradient(simplex))
            prerec = simplex.cval[n] - jnp.max(simplex.conmat[:, n] + d @ a, initial=0.0)
            return preref, prerec

        cpen = state.cpen
        if m > 0:
            cpen = self._penalty(state, lp_step, predicted, cpen)
        simplex, damaged = update_pole(cpen, state.simplex)
        status = jnp.where(damaged, DAMAGING_ROUNDING, RUNNING)
        delta = state.delta
        adequate_geo = jnp.all(jnp.sum(simplex.sim[:, :n] ** 2, axis=0) <= 4 * delta**2)
        d = lp_step(simplex, delta)
        dnorm = jnp.minimum(delta, jnp.linalg.norm(d))
        shortd = dnorm <= 0.1 * rho
        preref, prerec = predicted(simplex, d)
        prerem = preref + cpen * prerec
        trfail = ~(prerem > 1e-6 * jnp.minimum(cpen, 1.0) * rho)
        skips = shortd | trfail | damaged

        def point_at(simplex: Simplex, x, evaluations, filt):
            """pyprima's reuse of a simplex point within ``1e-4 * rhoend`` of ``x``, else an
            evaluation, counted and filtered."""
            pole = simplex.sim[:, n]
            distsq = jnp.concatenate(
                [
                    jnp.sum((x[:, None] - (pole[:, None] + simplex.sim[:, :n])) ** 2, axis=0),
                    jnp.sum((x - pole) ** 2)[None],
                ]
            )
            j = jnp.argmin(distsq)
            near = distsq[j] <= (1e-4 * rhoend) ** 2

            def evaluated(_):
                point = evaluate(x)
                return point, evaluations + 1, save(filt, x, point.f, point.cstrv, ctol)

            def reused(_):
                known = _Evaluated(simplex.fval[j], simplex.conmat[:, j], simplex.cval[j])
                return known, evaluations, filt

            return jax.lax.cond(near, reused, evaluated, None)

        def trust_region(carry):
            simplex, delta, evaluations, filt = carry
            x = simplex.sim[:, n] + d
            point, evaluations, filt = point_at(simplex, x, evaluations, filt)
            actrem = simplex.fval[n] + cpen * simplex.cval[n] - (point.f + cpen * point.cstrv)
            ratio = _reduction_ratio(actrem, prerem)
            delta = _new_radius(delta, dnorm, ratio)
            delta = jnp.where(delta <= gamma3 * rho, rho, delta)
            ximproved = actrem > 0
            jdrop = trust_region_drop(ximproved, d, delta, rho, simplex.sim, simplex.simi)
            updated, damaged = update_point(
                jdrop, d, point.f, point.constr, point.cstrv, cpen, simplex
            )
            status = jnp.where(
                damaged,
                DAMAGING_ROUNDING,
                _check_break(maxfun, evaluations, point.cstrv, ctol, point.f, settings.ftarget, x),
            )
            bad = (ratio <= 0) | (jdrop < 0)
            return (updated, delta, evaluations, filt), status, bad

        def shrink(carry):
            simplex, delta, evaluations, filt = carry
            delta = 0.1 * delta
            delta = jnp.where(delta <= gamma3 * rho, rho, delta)
            return (simplex, delta, evaluations, filt), status, jnp.array(True)

        carry = (simplex, delta, state.evaluations, state.filt)
        carry, status, bad = jax.lax.cond(skips, shrink, trust_region, carry)
        simplex, delta, evaluations, filt = carry
        bad_trstep = shortd | trfail | bad
        improve_geo = bad_trstep & ~adequate_geo
        reduce_rho = bad_trstep & adequate_geo & (jnp.maximum(delta, dnorm) <= rho)
        lengths = jnp.sum(simplex.sim[:, :n] ** 2, axis=0)
        geometry = (status == RUNNING) & improve_geo & ~jnp.all(lengths <= 4 * delta**2)

        def geometry_move(carry):
            simplex, delta, evaluations, filt = carry
            jdrop = jnp.argmax(lengths)
            step = geometry_step(jdrop, amat, cpen, delta / 2, simplex)
            x = simplex.sim[:, n] + step
            point, evaluations, filt = point_at(simplex, x, evaluations, filt)
            updated, damaged = update_point(
                jdrop, step, point.f, point.constr, point.cstrv, cpen, simplex
            )
            status = jnp.where(
                damaged,
                DAMAGING_ROUNDING,
                _check_break(maxfun, evaluations, point.cstrv, ctol, point.f, settings.ftarget, x),
            )
            return (updated, delta, evaluations, filt), status

        carry, status = jax.lax.cond(geometry, geometry_move, lambda carry: (carry, status), carry)
        simplex, delta, evaluations, filt = carry

        reduces = (status == RUNNING) & reduce_rho
        ends_small = reduces & (rho <= rhoend)
        status = jnp.where(ends_small, SMALL_TR_RADIUS, status)
        lowers = reduces & ~ends_small
        new_rho = _reduced_rho(rho, rhoend)
        delta = jnp.where(lowers, jnp.maximum(0.5 * rho, new_rho), delta)
        rho = jnp.where(lowers, new_rho, rho)
        eased = jnp.maximum(eps, jnp.minimum(cpen, _penalty_ratio(simplex.conmat, simplex.fval)))
        cpen = jnp.where(lowers, eased, cpen)
        repoled, damaged = update_pole(cpen, simplex)
        simplex = jax.tree.map(lambda a, b: jnp.where(lowers, a, b), repoled, simplex)
        status = jnp.where(lowers & damaged, DAMAGING_ROUNDING, status)

        # pyprima evaluates the last short step once rho has reached tol.
        x = simplex.sim[:, n] + d
        final = (
            ends_small
            & shortd
            & (jnp.linalg.norm(x - simplex.sim[:, n]) > 1e-3 * rhoend)
            & (evaluations < maxfun)
        )

        def last_point(carry):
            evaluations, filt = carry
            point = evaluate(x)
            return evaluations + 1, save(filt, x, point.f, point.cstrv, ctol)

        evaluations, filt = jax.lax.cond(
            final, last_point, lambda carry: carry, (evaluations, filt)
        )
        iterations = state.iterations + 1
        status = jnp.where((status == RUNNING) & (iterations >= 10 * maxfun), MAXTR_REACHED, status)
        new_state = _CobylaState(
            simplex=simplex,
            filt=filt,
            rho=rho,
            delta=delta,
            cpen=cpen,
            evaluations=evaluations,
            iterations=iterations,
            status=status,
        )
        return self._answer(y, problem, new_state, settings)[0], new_state, None

    def _penalty(self, state: _CobylaState, lp_step, predicted, cpen):
        """pyprima's ``getcpen``: the least penalty, up from ``cpen``, at which the trust-region
        step lowers the merit, tried on copies of the simplex whose pole it moves."""
        n = state.simplex.simi.shape[0]
        huge = jnp.finfo(cpen.dtype).max

        def body(carry):
            k, simplex, cpen, stopped = carry
            simplex, damaged = update_pole(cpen, simplex)
            d = lp_step(simplex, state.delta)
            preref, prerec = predicted(simplex, d)
            raises = ~damaged & (prerec > 0) & (preref < 0)
            raised = jnp.maximum(cpen, jnp.minimum(-2 * preref / prerec, huge))
            cpen = jnp.where(raises, raised, cpen)
            stopped = ~raises | (find_pole(cpen, simplex.cval, simplex.fval) == n)
            return k + 1, simplex, cpen, stopped

        def running(carry):
            k, _, _, stopped = carry
            return ~stopped & (k < n + 1)

        start = (jnp.array(0), state.simplex, cpen, jnp.array(False))
        return jax.lax.while_loop(running, body, start)[2]

    def _answer(self, y, problem: Problem, state: _CobylaState, settings: Settings):
        """pyprima's ``selectx`` among the filter: ``(x, f, cstrv)`` of the answer, ``x`` with
        the fixed variables."""
        cweight = jnp.maximum(state.cpen, CWEIGHT)
        k = select(state.filt, cweight, settings.ctol)
        full = jnp.asarray(problem.fixed_values, y.dtype).at[np.flatnonzero(problem.free)]
        x = full.set(state.filt.x[k])
        return x.reshape(y.shape), state.filt.f[k], state.filt.c[k]

    def outcome(self, y, state: _CobylaState):
        """scipy's ``(x, fun, nfev, status, success)`` of a finished solve."""
        problem, settings = self._problem(y)
        x, f, cstrv = self._answer(y, problem, state, settings)
        succeeded = (cstrv <= settings.ctol) & (
            (state.status == SMALL_TR_RADIUS) | (state.status == FTARGET_ACHIEVED)
        )
        return x, f, state.evaluations, state.status, succeeded

    def terminate(self, fn, y, args, options, state: _CobylaState, tags):
        succeeded = self.outcome(y, state)[4]
        out_of_budget = (state.status == MAXFUN_REACHED) | (state.status == MAXTR_REACHED)
        return status_verdict(state.status, RUNNING, succeeded, out_of_budget)

    def postprocess(self, fn, y, aux, args, options, state: _CobylaState, tags, result):
        return self.outcome(y, state)[0], aux, {}
