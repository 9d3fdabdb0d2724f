"""scipy's ``trust-constr`` with bounds, its ``tr_interior_point``, as an optimistix minimiser.

scipy turns the bounds into inequality constraints ``c(x) <= 0`` (one per finite
bound, `bound_rows`, in its canonical order) after moving every finite bound one
ulp outwards, and solves a sequence of barrier subproblems

    minimize f(x) - mu sum(log s)  subject to  c(x) + s = 0

over ``z = (x, s)`` by ``equality_constrained_sqp``, each to the tolerance
``tolerance``, then ``mu`` and ``tolerance`` shrink fivefold and the trust radius
restarts at ``max(initial_tr_radius, 5 radius)`` with the initial penalty.

Each optimistix step is one SQP iteration, as scipy's: the normal step
(``modified_dogleg``), the tangential step (``projected_cg``), the merit
function's reduction ratio, scipy's second-order correction, the radius rule
and, on acceptance, the least-squares multipliers and the Lagrangian Hessian
(the objective's, exact where the op carries one, else scipy's ``BFGS``
updated at every evaluated point; the slack block primal-dual where a
multiplier is positive, else primal). Each step ends in scipy's stopping tests
(``nit`` counts them, the first before any step and one at each subproblem's
start), and a subproblem that ends starts the next one inside the same step.
The projections are scipy's for the sparse Jacobian of bounds
(``AugmentedSystem``, `constrained_qp`). Statuses are scipy's: ``gtol`` (1) and
``xtol`` once the barrier parameter is below ``barrier_tol`` (2) succeed, unless
the bounds are violated by more than ``gtol`` (scipy's status 4); the
``maxiter``-th stopping test (0) fails.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from gpubackend.dispatch.jax.constrained_qp import (
    Projections,
    box_intersections,
    modified_dogleg,
    projected_cg,
)
from gpubackend.dispatch.jax.damped_newton import in_manual_mesh
from gpubackend.dispatch.jax.implicit import varying_leaves_like
from gpubackend.dispatch.jax.scipy_status import status_verdict
from gpubackend.dispatch.jax.trust_constr import (
    GRADIENT_SMALL,
    OUT_OF_ITERATIONS,
    RADIUS_SMALL,
    RUNNING,
    bfgs_update,
    derivatives,
    next_radius,
)

_BOUNDARY = 0.995
"""The fraction of a slack variable a step may take (``tau``)."""
_BARRIER_DECAY = 0.2
_TRUST_ENLARGEMENT = 5.0
_TR_FACTOR, _BOX_FACTOR = 0.8, 0.5
"""The normal step's share of the trust radius and of the slack box."""
_SOC_THRESHOLD = 0.1
_SUFFICIENT = 1e-8
_PENALTY_FACTOR = 0.3
_LEAST_VIOLATION_REDUCTION = 1e-16


def bound_rows(
    lower: np.ndarray, upper: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scipy's inequality constraints for ``bounds``: ``(index, sign, bound, lower, upper)``.

    Row ``k`` is ``x[index] - bound`` (``sign`` +1, an upper bound) or ``bound -
    x[index]`` (``sign`` -1, a lower one), in scipy's canonical order (upper-only
    bounds, lower-only, then both bounds' upper rows and lower rows); ``lower`` and
    ``upper`` are the bounds moved one ulp outwards, as scipy moves them. No rows:
    every bound is infinite (scipy's unbounded SQP).
    """
    lower = np.where(np.isfinite(lower), np.nextafter(lower, -np.inf), lower)
    upper = np.where(np.isfinite(upper), np.nextafter(upper, np.inf), upper)
    if np.any(lower == upper):
        raise NotImplementedError(
            "minimize(method='trust-constr'): bounds with equal infinite ends (scipy's "
            "equality constraints) are not supported by the JAX (optimistix) lowering; give "
            "finite bounds or none"
        )
    lower_inf, upper_inf = lower == -np.inf, upper == np.inf
    if lower_inf.all():
        groups = [(np.flatnonzero(~upper_inf), 1.0)]
    elif upper_inf.all():
        groups = [(np.flatnonzero(~lower_inf), -1.0)]
    else:
        both = np.flatnonzero(~lower_inf & ~upper_inf)
        groups = [
            (np.flatnonzero(lower_inf & ~upper_inf), 1.0),
            (np.flatnonzero(upper_inf & ~lower_inf), -1.0),
            (both, 1.0),
            (both, -1.0),
        ]
    index = np.concatenate([rows for rows, _ in groups]).astype(np.int32)
    sign = np.concatenate([np.full(rows.size, side) for rows, side in groups])
    bound = np.where(sign > 0, upper[index], lower[index])
    return index, sign, bound, lower, upper


class _InteriorPointState(eqx.Module):
    z: jax.Array
    """``(x, s)``: the iterate and its slack variables."""
    objective: jax.Array
    barrier: jax.Array
    """``f(x)`` and the barrier function ``f(x) - mu sum(log s)`` at ``z``."""
    constraints: jax.Array
    """``c(x) + s`` at ``z``."""
    gradient: jax.Array
    hessian: jax.Array
    """The objective's at ``x`` (with BFGS, the approximation as last updated)."""
    multipliers: jax.Array
    """scipy's least-squares Lagrange multipliers at ``z``."""
    x_evaluated: jax.Array
    gradient_evaluated: jax.Array
    """The last evaluated point and its gradient, from which BFGS updates."""
    first_update: jax.Array
    radius: jax.Array
    penalty: jax.Array
    barrier_parameter: jax.Array
    barrier_tolerance: jax.Array
    subproblem_optimality: jax.Array
    subproblem_violation: jax.Array
    """The barrier subproblem's stopping measures at ``z``."""
    optimality: jax.Array
    violation: jax.Array
    """scipy's ``optimality`` (of the Lagrangian's gradient in ``x``) and ``constr_violation``."""
    iterations: jax.Array
    """scipy's ``nit``: stopping tests made."""
    evaluations: jax.Array
    """scipy's ``nfev``: distinct points at which the objective was evaluated."""
    status: jax.Array


class _Trial(eqx.Module):
    z: jax.Array
    objective: jax.Array
    gradient: jax.Array
    hessian: jax.Array | None
    barrier: jax.Array
    constraints: jax.Array


class TrustRegionInteriorPoint(optx.AbstractMinimiser):
    """scipy's ``trust-constr`` inside bounds (``tr_interior_point``); see the module."""

    gtol: float
    xtol: float
    barrier_tol: float
    initial_tr_radius: float
    initial_constr_penalty: float
    initial_barrier_parameter: float
    initial_barrier_tolerance: float
    index: jax.Array
    sign: jax.Array
    bound: jax.Array
    lower: jax.Array
    upper: jax.Array
    """`bound_rows`."""
    # optimistix reads these off any minimiser; the verdicts above replace them.
    rtol: float
    atol: float
    max_iterations: int = eqx.field(static=True)
    norm: Callable

    def _bound_constraints(self, x):
        bound = self.bound.astype(x.dtype)
        at = x[self.index]
        return jnp.where(self.sign > 0, at - bound, bound - at)

    def _jacobian(self, n, slack):
        rows = self.sign.astype(slack.dtype)[:, None] * jax.nn.one_hot(
            self.index, n, dtype=slack.dtype
        )
        return jnp.concatenate([rows, jnp.diag(slack)], axis=1)

    def _trial(self, evaluate, z, n, barrier_parameter) -> _Trial:
        x, slack = z[:n], z[n:]
        f, gradient, hessian = evaluate(x)
        log_slack = jnp.where(slack > 0, jnp.log(jnp.where(slack > 0, slack, 1.0)), -jnp.inf)
        return _Trial(
            z,
            f,
            gradient,
            hessian,
            f - barrier_parameter * jnp.sum(log_slack),
            self._bound_constraints(x) + slack,
        )

    @staticmethod
    def _lagrangian_hessian(state: _InteriorPointState, n) -> Callable:
        """scipy's scaled Lagrangian Hessian: the objective's, and ``S Hs S`` on the slacks."""
        slack, v = state.z[n:], state.multipliers
        slack_block = jnp.where(v > 0, v * slack, state.barrier_parameter)
        return lambda p: jnp.concatenate([state.hessian @ p[:n], slack_block * p[n:]])

    def _gradient(self, state: _InteriorPointState):
        m = self.index.shape[0]
        return jnp.concatenate(
            [state.gradient, -state.barrier_parameter * jnp.ones(m, state.gradient.dtype)]
        )

    def _at_iterate(self, state: _InteriorPointState, n) -> _InteriorPointState:
        """The multipliers and stopping measures at ``z`` under the barrier parameter."""
        x, slack = state.z[:n], state.z[n:]
        jacobian = self._jacobian(n, slack)
        gradient = self._gradient(state)
        v = -Projections.of(jacobian).least_squares(gradient)
        log_slack = jnp.where(slack > 0, jnp.log(jnp.where(slack > 0, slack, 1.0)), -jnp.inf)
        bound_multipliers = jnp.zeros(n, x.dtype).at[self.index].add(self.sign.astype(x.dtype) * v)
        lower, upper = self.lower.astype(x.dtype), self.upper.astype(x.dtype)
        violation = jnp.maximum(0, jnp.maximum(jnp.max(lower - x), jnp.max(x - upper)))
        return eqx.tree_at(
            lambda s: (
                s.barrier,
                s.multipliers,
                s.subproblem_optimality,
                s.subproblem_violation,
                s.optimality,
                s.violation,
            ),
            state,
            (
                state.objective - state.barrier_parameter * jnp.sum(log_slack),
                v,
                jnp.max(jnp.abs(gradient + jacobian.T @ v)),
                jnp.max(jnp.abs(state.constraints)),
                jnp.max(jnp.abs(state.gradient + bound_multipliers)),
                violation,
            ),
        )

    def _stopping_test(self, state: _InteriorPointState) -> _InteriorPointState:
        """scipy's ``stop_criteria``: one more ``nit`` and the status."""
        iterations = state.iterations + 1
        status = jnp.where(
            (state.optimality < self.gtol) & (state.violation < self.gtol),
            GRADIENT_SMALL,
            jnp.where(
                (state.radius < self.xtol) & (state.barrier_parameter < self.barrier_tol),
                RADIUS_SMALL,
                jnp.where(iterations >= self.max_iterations, OUT_OF_ITERATIONS, RUNNING),
            ),
        )
        return eqx.tree_at(lambda s: (s.iterations, s.status), state, (iterations, status))

    def _settled(self, state: _InteriorPointState, n) -> _InteriorPointState:
        """The stopping tests after an iteration, and the barrier subproblems that end there."""

        def subproblem_ended(state):
            tolerance = state.barrier_tolerance
            small = (state.subproblem_optimality < tolerance) & (
                state.subproblem_violation < tolerance
            )
            return (state.status == RUNNING) & (small | (state.radius < self.xtol))

        def next_subproblem(state):
            radius = jnp.maximum(self.initial_tr_radius, _TRUST_ENLARGEMENT * state.radius)
            state = eqx.tree_at(
                lambda s: (s.radius, s.penalty, s.barrier_parameter, s.barrier_tolerance),
                state,
                (
                    radius.astype(state.radius.dtype),
                    jnp.full_like(state.penalty, self.initial_constr_penalty),
                    state.barrier_parameter * _BARRIER_DECAY,
                    state.barrier_tolerance * _BARRIER_DECAY,
                ),
            )
            return self._stopping_test(self._at_iterate(state, n))

        # Inside a manual mesh the carry starts as varying as a subproblem's start makes it.
        tested = varying_leaves_like(self._stopping_test(state), (state.z, state.gradient))
        return jax.lax.while_loop(subproblem_ended, next_subproblem, tested)

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _InteriorPointState:
        flat = y.reshape(-1)
        n, dtype = flat.size, flat.dtype
        f, gradient, hessian = derivatives(fn, y, args, options)(flat)
        if hessian is None:
            hessian = jnp.eye(n, dtype=dtype)
        constraints = self._bound_constraints(flat)
        slack = jnp.maximum(-1.5 * constraints, jnp.ones_like(constraints))
        scalar = lambda value: jnp.array(value, dtype)  # noqa: E731
        state = _InteriorPointState(
            z=jnp.concatenate([flat, slack]),
            objective=f,
            barrier=f,
            constraints=constraints + slack,
            gradient=gradient,
            hessian=hessian,
            multipliers=jnp.zeros_like(slack),
            x_evaluated=flat,
            gradient_evaluated=gradient,
            first_update=jnp.array(True),
            radius=scalar(self.initial_tr_radius),
            penalty=scalar(self.initial_constr_penalty),
            barrier_parameter=scalar(self.initial_barrier_parameter),
            barrier_tolerance=scalar(self.initial_barrier_tolerance),
            subproblem_optimality=scalar(0),
            subproblem_violation=scalar(0),
            optimality=scalar(0),
            violation=scalar(0),
            iterations=jnp.array(0),
            evaluations=jnp.array(1),
            status=jnp.array(RUNNING),
        )
        return self._settled(self._at_iterate(state, n), n)

    def step(self, fn, y, args, options, state: _InteriorPointState, tags):
        evaluate = derivatives(fn, y, args, options)
        n = y.size
        m = self.index.shape[0]
        z, b, dtype = state.z, state.constraints, state.z.dtype
        slack = z[n:]
        projections = Projections.of(self._jacobian(n, slack))
        trust_lower = jnp.concatenate(
            [jnp.full(n, -jnp.inf, dtype), jnp.full(m, -_BOUNDARY, dtype)]
        )
        trust_upper = jnp.full(n + m, jnp.inf, dtype)
        hessian = self._lagrangian_hessian(state, n)
        gradient = self._gradient(state)
        radius = state.radius

        normal = modified_dogleg(
            projections,
            b,
            _TR_FACTOR * radius,
            _BOX_FACTOR * trust_lower,
            _BOX_FACTOR * trust_upper,
        )
        tangential = projected_cg(
            hessian,
            hessian(normal) + gradient,
            projections,
            jnp.sqrt(radius**2 - jnp.linalg.norm(normal) ** 2),
            trust_lower - normal,
            trust_upper - normal,
            max_iter=n,
        )
        d = normal + tangential
        model = 1 / 2 * jnp.dot(hessian(d), d) + jnp.dot(gradient, d)
        linearized = projections.jacobian @ d + b
        reduction = jnp.maximum(
            _LEAST_VIOLATION_REDUCTION, jnp.linalg.norm(b) - jnp.linalg.norm(linearized)
        )
        penalty = jnp.where(
            model > 0,
            jnp.maximum(state.penalty, model / ((1 - _PENALTY_FACTOR) * reduction)),
            state.penalty,
        )
        predicted = -model + penalty * reduction
        merit = state.barrier + penalty * jnp.linalg.norm(b)
        scaling = jnp.concatenate([jnp.ones(n, dtype), slack])
        barrier_parameter = state.barrier_parameter

        def ratio_at(trial: _Trial):
            return (merit - (trial.barrier + penalty * jnp.linalg.norm(trial.constraints))) / (
                predicted
            )

        trial = self._trial(evaluate, z + scaling * d, n, barrier_parameter)
        ratio = ratio_at(trial)
        # scipy's second-order correction, where the step failed on its tangential part.
        corrected = (ratio < _SUFFICIENT) & (
            jnp.linalg.norm(normal) <= _SOC_THRESHOLD * jnp.linalg.norm(tangential)
        )

        def correction(_):
            y_soc = -projections.row_space(trial.constraints)
            interval = box_intersections(d, y_soc, trust_lower, trust_upper)
            soc = z + scaling * (d + interval.high * y_soc)
            return self._trial(evaluate, soc, n, barrier_parameter), interval.intersect

        if in_manual_mesh():
            # jax's cond of a varying predicate under vmap inside a mesh re-marks the varying
            # operands of its branches (a ValueError of pvary): there both run, one is taken.
            candidate, reaches = correction(None)
            soc = jax.tree.map(lambda a, b: jnp.where(corrected, a, b), candidate, trial)
            intersect = corrected & reaches
        else:
            soc, intersect = jax.lax.cond(
                corrected, correction, lambda _: (trial, jnp.array(False)), None
            )
        soc_ratio = ratio_at(soc)
        taken = corrected & intersect & (soc_ratio >= _SUFFICIENT)
        ratio = jnp.where(taken, soc_ratio, ratio)
        accepted = ratio >= _SUFFICIENT
        new = jax.tree.map(lambda a, b: jnp.where(taken, a, b), soc, trial)

        # The objective at the trial point and (after the correction) at its corrected one; BFGS
        # updates at each, as scipy's does whatever the step's fate.
        evaluations = state.evaluations + jnp.any(trial.z[:n] != state.x_evaluated)
        evaluations = evaluations + (corrected & jnp.any(soc.z[:n] != trial.z[:n]))
        hessian_matrix, first_update = state.hessian, state.first_update
        quasi_newton = trial.hessian is None
        if quasi_newton:
            for at, previous_x, previous_gradient in (
                (trial, state.x_evaluated, state.gradient_evaluated),
                (soc, trial.z[:n], trial.gradient),
            ):
                hessian_matrix, first_update = bfgs_update(
                    hessian_matrix,
                    at.z[:n] - previous_x,
                    at.gradient - previous_gradient,
                    first_update,
                )
            new_hessian = hessian_matrix
        else:
            new_hessian = new.hessian
        moved = eqx.tree_at(
            lambda s: (s.z, s.objective, s.constraints, s.gradient, s.hessian, s.penalty),
            state,
            (new.z, new.objective, new.constraints, new.gradient, new_hessian, penalty),
        )
        moved = self._at_iterate(moved, n)
        stayed = eqx.tree_at(lambda s: s.hessian, state, hessian_matrix)
        state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), moved, stayed)
        state = eqx.tree_at(
            lambda s: (
                s.x_evaluated,
                s.gradient_evaluated,
                s.first_update,
                s.radius,
                s.evaluations,
            ),
            state,
            (
                soc.z[:n],
                soc.gradient,
                first_update,
                next_radius(radius, ratio, jnp.linalg.norm(d)).astype(dtype),
                evaluations,
            ),
        )
        state = self._settled(state, n)
        return state.z[:n].reshape(y.shape).astype(y.dtype), state, None

    def terminate(self, fn, y, args, options, state: _InteriorPointState, tags):
        # scipy's status 4: converged, but outside the bounds by more than gtol.
        within = ~(state.violation > self.gtol)
        succeeded = ((state.status == GRADIENT_SMALL) | (state.status == RADIUS_SMALL)) & within
        return status_verdict(state.status, RUNNING, succeeded, state.status == OUT_OF_ITERATIONS)

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}
