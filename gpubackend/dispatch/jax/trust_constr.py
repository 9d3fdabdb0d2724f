"""scipy's ``trust-constr`` without constraints or bounds as an optimistix minimiser (see
`gpubackend.solvers.trust_constr` for what it reduces to and what differs from scipy's).

Each optimistix step is one iteration of scipy's ``equality_constrained_sqp``
with no constraints: scipy's ``projected_cg`` step (Steihaug's CG, scipy's
tolerance, at most n iterations), the objective at the trial point, scipy's
radius rule and acceptance at a reduction ratio of 1e-8. The Hessian is the
op's own where it carries one (`DERIVATIVES_OPTION`), else scipy's ``BFGS``
approximation updated at every evaluated point. The verdicts are scipy's
statuses: ``max|grad| < gtol`` (1) and ``radius < xtol`` (2) succeed, and the
``maxiter``-th stopping test (0) fails.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.scipy_status import status_verdict
from gpubackend.dispatch.jax.trust_region import DERIVATIVES_OPTION
from gpubackend.dispatch.jax.trust_subproblems import boundary_intersections

RUNNING, OUT_OF_ITERATIONS, GRADIENT_SMALL, RADIUS_SMALL = -1, 0, 1, 2
"""The solve's status: scipy's ``status`` once it ends."""

_SUFFICIENT, _INTERMEDIARY, _LARGE = 1e-8, 0.3, 0.9
_PENALTY_FACTOR = 0.3
_LEAST_VIOLATION_REDUCTION = 1e-16
_CLOSE_TO_ZERO = 1e-25
_MIN_CURVATURE = 1e-8


def projected_cg(hessian, gradient, radius):
    """scipy's ``projected_cg`` with no constraints and no box."""
    n = gradient.shape[0]
    rt_g = jnp.dot(gradient, gradient)
    tol = jnp.maximum(jnp.minimum(0.01 * jnp.sqrt(rt_g), 0.1 * rt_g), _CLOSE_TO_ZERO)

    def body(carry):
        i, x, r, p, rt_g, _ = carry
        converged = rt_g < tol
        hp = hessian @ p
        curvature = jnp.dot(hp, p)
        negative = curvature <= 0
        alpha = rt_g / jnp.where(negative, 1.0, curvature)
        x_next = x + alpha * p
        crosses = jnp.linalg.norm(x_next) >= radius
        _, along_line = boundary_intersections(x, p, radius)
        _, along_step = boundary_intersections(x, alpha * p, radius)
        on_boundary = jnp.where(
            negative, x + along_line * p, x + jnp.minimum(1.0, along_step) * alpha * p
        )
        stop = converged | negative | crosses
        r_next = r + alpha * hp
        rt_next = jnp.dot(r_next, r_next)
        p_next = -r_next + (rt_next / rt_g) * p
        x = jnp.where(converged, x, jnp.where(negative | crosses, on_boundary, x_next))
        return (
            i + 1,
            x,
            jnp.where(stop, r, r_next),
            jnp.where(stop, p, p_next),
            jnp.where(stop, rt_g, rt_next),
            stop,
        )

    start = (jnp.array(0), jnp.zeros_like(gradient), gradient, -gradient, rt_g, radius < 1e-25)
    _, step, _, _, _, _ = jax.lax.while_loop(lambda carry: ~carry[-1] & (carry[0] < n), body, start)
    return step


def _auto_scale(step, gradient_change):
    s_norm2 = jnp.dot(step, step)
    y_norm2 = jnp.dot(gradient_change, gradient_change)
    ys = jnp.abs(jnp.dot(gradient_change, step))
    degenerate = (ys == 0) | (y_norm2 == 0) | (s_norm2 == 0)
    return jnp.where(degenerate, 1.0, y_norm2 / jnp.where(degenerate, 1.0, ys))


def bfgs_update(hessian, step, gradient_change, first):
    """scipy's ``BFGS(exception_strategy='skip_update')`` update: ``(B, first update still to
    come)``."""
    skipped = jnp.all(step == 0) | jnp.all(gradient_change == 0)
    scaled = jnp.where(first, _auto_scale(step, gradient_change) * hessian, hessian)
    hessian_step = scaled @ step
    model_curvature = jnp.dot(hessian_step, step)
    rescale = model_curvature <= 0
    eye = jnp.eye(step.shape[0], dtype=hessian.dtype)
    scaled = jnp.where(rescale, _auto_scale(step, gradient_change) * eye, scaled)
    hessian_step = scaled @ step
    model_curvature = jnp.dot(hessian_step, step)
    curvature = jnp.dot(step, gradient_change)
    update = curvature > _MIN_CURVATURE * model_curvature
    updated = (
        scaled
        + jnp.outer(gradient_change, gradient_change) / jnp.where(update, curvature, 1.0)
        - jnp.outer(hessian_step, hessian_step) / jnp.where(update, model_curvature, 1.0)
    )
    hessian = jnp.where(skipped, hessian, jnp.where(update, updated, scaled))
    return hessian, first & skipped


def next_radius(radius, ratio, step_norm):
    """scipy's trust-radius rule of ``equality_constrained_sqp``."""
    reduced = (1 - _SUFFICIENT) / (1 - ratio) * step_norm
    shrunk = jnp.where(
        reduced >= 0.5 * radius,
        0.5 * radius,
        jnp.where(reduced >= 0.1 * radius, reduced, 0.1 * radius),
    )
    return jnp.where(
        ratio >= _LARGE,
        jnp.maximum(7.0 * step_norm, radius),
        jnp.where(
            ratio >= _INTERMEDIARY,
            jnp.maximum(2.0 * step_norm, radius),
            jnp.where(ratio < _SUFFICIENT, shrunk, radius),
        ),
    )


def derivatives(fn, y, args, options) -> Callable:
    """``(f, grad, hess or None)`` of the flattened ``x``: the op's own Hessian where it carries
    one (`DERIVATIVES_OPTION`), else ``None`` (the caller's ``BFGS`` approximation stands in)."""
    own = options.get(DERIVATIVES_OPTION) if options else None

    def evaluate(flat):
        if own is not None:
            f, gradient, hessian = own(flat.reshape(y.shape), args)
            n = flat.size
            return (
                jnp.asarray(f, flat.dtype),
                jnp.reshape(gradient, (n,)).astype(flat.dtype),
                jnp.reshape(hessian, (n, n)).astype(flat.dtype),
            )
        # The objective's graph may compute in a wider dtype than x: the loop keeps x's.
        value = lambda v: jnp.asarray(fn(v.reshape(y.shape), args)[0], flat.dtype)  # noqa: E731
        f, gradient = jax.value_and_grad(value)(flat)
        return f, gradient, None

    return evaluate


class _TrustConstrState(eqx.Module):
    f: jax.Array
    gradient: jax.Array
    hessian: jax.Array
    """At the iterate, flattened (the BFGS approximation without the op's Hessian)."""
    x_evaluated: jax.Array
    gradient_evaluated: jax.Array
    """The last evaluated point and its gradient, from which BFGS updates."""
    first_update: jax.Array
    radius: jax.Array
    penalty: jax.Array
    iterations: jax.Array
    """scipy's ``nit``: stopping tests made."""
    status: jax.Array


class TrustConstr(optx.AbstractMinimiser):
    """scipy's ``trust-constr`` with no constraints and no bounds."""

    gtol: float
    xtol: float
    initial_tr_radius: float
    initial_constr_penalty: float
    # optimistix reads these off any minimiser; the verdicts above replace them.
    rtol: float
    atol: float
    max_iterations: int = eqx.field(static=True)
    norm: Callable

    def _verdict(self, optimality, radius, iterations):
        return jnp.where(
            (optimality < self.gtol) & (0 < self.gtol),
            GRADIENT_SMALL,
            jnp.where(
                radius < self.xtol,
                RADIUS_SMALL,
                jnp.where(iterations >= self.max_iterations, OUT_OF_ITERATIONS, RUNNING),
            ),
        )

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _TrustConstrState:
        flat = y.reshape(-1)
        f, gradient, hessian = derivatives(fn, y, args, options)(flat)
        if hessian is None:
            hessian = jnp.eye(flat.size, dtype=flat.dtype)
        radius = jnp.array(self.initial_tr_radius, flat.dtype)
        return _TrustConstrState(
            f=f,
            gradient=gradient,
            hessian=hessian,
            x_evaluated=flat,
            gradient_evaluated=gradient,
            first_update=jnp.array(True),
            radius=radius,
            penalty=jnp.array(self.initial_constr_penalty, flat.dtype),
            iterations=jnp.array(1),
            status=self._verdict(jnp.max(jnp.abs(gradient)), radius, jnp.array(1)),
        )

    def step(self, fn, y, args, options, state: _TrustConstrState, tags):
        x = y.reshape(-1)
        step = projected_cg(state.hessian, state.gradient, state.radius)
        model = 0.5 * jnp.dot(state.hessian @ step, step) + jnp.dot(state.gradient, step)
        penalty = jnp.where(
            model > 0,
            jnp.maximum(
                state.penalty, model / ((1 - _PENALTY_FACTOR) * _LEAST_VIOLATION_REDUCTION)
            ),
            state.penalty,
        )
        predicted = -model + penalty * _LEAST_VIOLATION_REDUCTION
        x_next = x + step
        f_next, gradient_next, hessian_next = derivatives(fn, y, args, options)(x_next)
        quasi_newton = hessian_next is None
        hessian, first_update = state.hessian, state.first_update
        if quasi_newton:
            hessian, first_update = bfgs_update(
                hessian,
                x_next - state.x_evaluated,
                gradient_next - state.gradient_evaluated,
                first_update,
            )
            hessian_next = hessian
        ratio = (state.f - f_next) / predicted
        radius = next_radius(state.radius, ratio, jnp.linalg.norm(step))
        accepted = ratio >= _SUFFICIENT
        gradient = jnp.where(accepted, gradient_next, state.gradient)
        iterations = state.iterations + 1
        new_state = _TrustConstrState(
            f=jnp.where(accepted, f_next, state.f),
            gradient=gradient,
            hessian=jnp.where(accepted, hessian_next, hessian),
            x_evaluated=x_next,
            gradient_evaluated=gradient_next,
            first_update=first_update,
            radius=radius,
            penalty=jnp.where(accepted, penalty, state.penalty),
            iterations=iterations,
            status=self._verdict(jnp.max(jnp.abs(gradient)), radius, iterations),
        )
        new_y = jnp.where(accepted, x_next, x).reshape(y.shape).astype(y.dtype)
        return new_y, new_state, None

    def terminate(self, fn, y, args, options, state: _TrustConstrState, tags):
        succeeded = (state.status == GRADIENT_SMALL) | (state.status == RADIUS_SMALL)
        return status_verdict(state.status, RUNNING, succeeded, state.status == OUT_OF_ITERATIONS)

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}
