"""scipy's SLSQP without constraints as an optimistix minimiser (see `gpubackend.solvers.slsqp`
for the method and what differs from scipy's).

Each optimistix step is one of scipy's iterations: the search direction
(`box_qp` on the damped-BFGS model inside the bounds), scipy's convergence
test on ``|g's|``, a reset of B where the direction does not descend, Kraft's
line search (an inner loop of at most 11 evaluations) and the update of B.
The verdicts are scipy's exit modes: 0 (success), 9 (out of iterations), 8
(the resets ran out and the relaxed test failed) and a failed subproblem.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.box_qp import box_qp
from gpubackend.dispatch.jax.implicit import varying_leaves_like
from gpubackend.dispatch.jax.scipy_status import status_verdict

RUNNING, CONVERGED, OUT_OF_ITERATIONS, POSITIVE_DIRECTIONAL_DERIVATIVE, SUBPROBLEM_FAILED = (
    -1,
    0,
    9,
    8,
    3,
)
"""The solve's status: scipy's exit mode once it ends."""

_MAX_RESETS = 5
_MAX_LINE_SEARCH = 10
_SMALLEST_SHRINK = 0.1


class _SLSQPState(eqx.Module):
    f: jax.Array
    gradient: jax.Array
    """At the iterate, flattened."""
    hessian: jax.Array
    resets: jax.Array
    iterations: jax.Array
    status: jax.Array


def _value_and_gradient(fn, args, shape) -> Callable:
    def value(flat):
        f, _ = fn(flat.reshape(shape), args)
        # The objective's graph may compute in a wider dtype than x: the loop keeps x's.
        return jnp.asarray(f, flat.dtype)

    return jax.value_and_grad(value)


def _damped_bfgs(hessian, step, gradient_change):
    """Powell's damped BFGS update of B, and whether it is regular (scipy resets B where not)."""
    hessian_step = hessian @ step
    curvature = jnp.dot(step, gradient_change)
    model_curvature = jnp.dot(step, hessian_step)
    floor = 0.2 * model_curvature
    damped = curvature < floor
    theta = (model_curvature - floor) / jnp.where(damped, model_curvature - curvature, 1.0)
    gradient_change = jnp.where(
        damped, theta * gradient_change + (1 - theta) * hessian_step, gradient_change
    )
    curvature = jnp.where(damped, floor, curvature)
    regular = (curvature != 0) & (model_curvature != 0)
    safe_curvature = jnp.where(regular, curvature, 1.0)
    safe_model = jnp.where(regular, model_curvature, 1.0)
    updated = (
        hessian
        + jnp.outer(gradient_change, gradient_change) / safe_curvature
        - jnp.outer(hessian_step, hessian_step) / safe_model
    )
    return updated, regular


class SLSQP(optx.AbstractMinimiser):
    """scipy's ``_minimize_slsqp`` with no constraints, box bounds included."""

    ftol: float
    lower: jax.Array
    upper: jax.Array
    # optimistix reads these off any minimiser; the verdicts above replace them.
    rtol: float
    atol: float
    max_iterations: int = eqx.field(static=True)
    norm: Callable

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _SLSQPState:
        flat = jnp.clip(y.reshape(-1), self.lower.astype(y.dtype), self.upper.astype(y.dtype))
        f, gradient = _value_and_gradient(fn, args, y.shape)(flat)
        return _SLSQPState(
            f=f,
            gradient=gradient,
            hessian=jnp.eye(flat.size, dtype=y.dtype),
            resets=jnp.array(1),
            iterations=jnp.array(0),
            status=jnp.where(self.max_iterations <= 0, OUT_OF_ITERATIONS, RUNNING),
        )

    def _relaxed(self, f_now, f_start, step):
        """scipy's test once B has been reset too often (label 255): success or exit 8."""
        tol = 10 * abs(self.ftol)
        met = ((jnp.abs(f_now - f_start) < tol) | (jnp.linalg.norm(step) < tol)) & (f_now == f_now)
        return jnp.where(met, CONVERGED, POSITIVE_DIRECTIONAL_DERIVATIVE)

    def step(self, fn, y, args, options, state: _SLSQPState, tags):
        acc = abs(self.ftol)
        evaluate = _value_and_gradient(fn, args, y.shape)
        lower = self.lower.astype(y.dtype)
        upper = self.upper.astype(y.dtype)
        # scipy starts from x0 clipped into the bounds (`init` evaluated there).
        x = y.reshape(-1)
        x = jnp.where(state.iterations == 0, jnp.clip(x, lower, upper), x)
        f, gradient = state.f, state.gradient
        n = x.size
        direction, solved = box_qp(state.hessian, gradient, lower - x, upper - x, 6 * n + 3)
        slope = jnp.dot(gradient, direction)
        converged_at_start = (jnp.abs(slope) < acc) & (f == f)
        descends = slope < 0
        searches = solved & ~converged_at_start & descends

        def line_search_step(carry):
            line, alpha, expected, step, _, _, _ = carry
            line = line + 1
            expected = alpha * expected
            step = alpha * step
            f_new, gradient_new = evaluate(x + step)
            decrease = f_new - f
            accepted = (decrease <= expected / 10) | (line > _MAX_LINE_SEARCH)
            proposal = expected / (2 * (expected - decrease))
            # C's fmax: a NaN proposal shrinks by the floor.
            alpha = jnp.where(proposal > _SMALLEST_SHRINK, proposal, _SMALLEST_SHRINK)
            return line, alpha, expected, step, f_new, gradient_new, accepted

        _, _, _, step, f_new, gradient_new, _ = jax.lax.while_loop(
            lambda carry: ~carry[-1],
            line_search_step,
            # Inside a manual mesh the carry starts as varying as the iterate, as the body makes it.
            varying_leaves_like(
                (
                    jnp.array(0),
                    jnp.array(1.0, x.dtype),
                    slope,
                    direction,
                    f,
                    gradient,
                    ~searches,
                ),
                (x, f, gradient),
            ),
        )
        converged_after_step = ((jnp.abs(f_new - f) < acc) | (jnp.linalg.norm(step) < acc)) & (
            f_new == f_new
        )
        updated, regular = _damped_bfgs(state.hessian, step, gradient_new - gradient)
        # scipy resets B where the direction does not descend and where the update is singular.
        reset = (solved & ~converged_at_start & ~descends) | (
            searches & ~converged_after_step & ~regular
        )
        resets = state.resets + reset.astype(state.resets.dtype)
        identity = jnp.eye(n, dtype=x.dtype)
        hessian = jnp.where(reset, identity, jnp.where(searches, updated, state.hessian))
        iterations = state.iterations + 1
        f_after = jnp.where(searches, f_new, f)
        relaxed = self._relaxed(f_after, f, jnp.where(searches, step, direction))
        status = jnp.where(
            ~solved,
            SUBPROBLEM_FAILED,
            jnp.where(
                converged_at_start | (searches & converged_after_step),
                CONVERGED,
                jnp.where(
                    reset & (resets > _MAX_RESETS),
                    relaxed,
                    jnp.where(iterations >= self.max_iterations, OUT_OF_ITERATIONS, RUNNING),
                ),
            ),
        )
        new_state = _SLSQPState(
            f=f_after,
            gradient=jnp.where(searches, gradient_new, gradient),
            hessian=hessian,
            resets=resets,
            iterations=iterations,
            status=status,
        )
        new_y = jnp.where(searches, x + step, x).reshape(y.shape).astype(y.dtype)
        return new_y, new_state, None

    def terminate(self, fn, y, args, options, state: _SLSQPState, tags):
        return status_verdict(
            state.status, RUNNING, state.status == CONVERGED, state.status == OUT_OF_ITERATIONS
        )

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}
