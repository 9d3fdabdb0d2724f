"""A damped Newton solver in plain JAX, for where optimistix's solvers cannot be traced: inside a
manual mesh (``jax.pmap``, ``shard_map``).

There, every value carries the mesh in its abstract sharding, and lineax builds
an operator's input structure without it: optimistix's BFGS, L-BFGS and
Levenberg-Marquardt are refused when their positive-semidefinite operators
are built ("Symmetric/Hermitian matrices must have matching input and output
structures", lineax issue 185), and equinox's closure conversion in
``optimistix.root_find`` refuses the iterate ("Closure-converted function
called with different dynamic arguments"). This solver uses none of them: each
step solves ``(A + damping I) p = -b`` with ``jnp.linalg.solve``, where
``(b, A)`` is the gradient and Hessian of the objective for a minimum, or
``(J^T F, J^T J)`` for a root of ``F``, and keeps a step only when it lowers the
merit (the objective, or ``|F|^2 / 2``), raising the damping otherwise
(Levenberg-Marquardt). Exact derivatives make the last steps quadratic, so a
solve converges at least as tightly as the quasi-Newton methods it stands in for.
A non-finite merit or system stops the solve with ``success=False``; nothing raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from gpubackend.dispatch.jax.implicit import varying_like

Function = Callable[[jax.Array, Any], jax.Array]


def in_manual_mesh() -> bool:
    """Whether tracing happens inside a manual mesh (``pmap``, ``shard_map``)."""
    return bool(jax.sharding.get_abstract_mesh().manual_axes)


class Tolerances(NamedTuple):
    """When a solve has converged: after an accepted step ``p`` with
    ``|p|_inf <= atol + rtol |y|_inf``, or at a point whose gradient (for a minimum) or
    residual (for a root) has ``|.|_inf <= atol``."""

    rtol: float
    atol: float


class Budget(NamedTuple):
    """At most ``max_iterations`` accepted steps and ``max_evaluations`` trial points."""

    max_iterations: int
    max_evaluations: int


class NewtonState(NamedTuple):
    y: jax.Array
    merit: jax.Array
    gradient: jax.Array
    system: jax.Array
    small: jax.Array
    damping: jax.Array
    iterations: jax.Array
    evaluations: jax.Array
    converged: jax.Array


System = Callable[[jax.Array], tuple[jax.Array, jax.Array, jax.Array, jax.Array]]
"""``y -> (merit, b, A, small)``: the merit, the system ``A p = -b`` of a Newton step at (flat)
``y``, and whether ``y`` already meets the absolute tolerance."""


def _solve(system: System, y0: jax.Array, tolerances: Tolerances, budget: Budget):
    shape = y0.shape
    merit, gradient, matrix, small = system(y0.ravel())
    eye = jnp.eye(gradient.size, dtype=gradient.dtype)

    def keep_going(state: NewtonState) -> jax.Array:
        finite = jnp.isfinite(state.merit) & jnp.all(jnp.isfinite(state.system))
        within = (state.iterations < budget.max_iterations) & (
            state.evaluations < budget.max_evaluations
        )
        return ~state.converged & finite & within

    def step(state: NewtonState) -> NewtonState:
        scale = state.damping * jnp.maximum(jnp.max(jnp.abs(jnp.diag(state.system))), 1.0)
        direction = jnp.linalg.solve(state.system + scale * eye, -state.gradient)
        trial = state.y + direction
        merit, gradient, matrix, small = system(trial)
        better = jnp.isfinite(merit) & (merit <= state.merit) & jnp.all(jnp.isfinite(direction))
        stalled = jnp.max(jnp.abs(direction)) <= tolerances.atol + tolerances.rtol * jnp.max(
            jnp.abs(state.y)
        )

        def pick(new: jax.Array, old: jax.Array) -> jax.Array:
            return jnp.where(better, new, old)

        return NewtonState(
            y=pick(trial, state.y),
            merit=pick(merit, state.merit),
            gradient=pick(gradient, state.gradient),
            system=pick(matrix, state.system),
            small=pick(small, state.small),
            damping=jnp.where(better, state.damping / 4, jnp.maximum(state.damping * 8, 1e-8)),
            iterations=state.iterations + better.astype(state.iterations.dtype),
            evaluations=state.evaluations + 1,
            converged=(better & (small | stalled)),
        )

    state = NewtonState(
        y=y0.ravel(),
        merit=merit,
        gradient=gradient,
        system=matrix,
        small=small,
        damping=jnp.zeros((), dtype=gradient.dtype),
        iterations=jnp.array(0),
        evaluations=jnp.array(1),
        converged=small & jnp.isfinite(merit),
    )
    # Inside shard_map, a loop's carry keeps one type: every part varies as the iterate does.
    state = jax.tree.map(lambda leaf: varying_like(leaf, tuple(state)), state)
    final = jax.lax.while_loop(keep_going, step, state)
    success = final.converged & jnp.isfinite(final.merit) & jnp.all(jnp.isfinite(final.y))
    return final.y.reshape(shape), success


def minimise(
    objective: Function, y0: jax.Array, args: Any, tolerances: Tolerances, budget: Budget
) -> tuple[jax.Array, jax.Array]:
    """``(y, success)``: a minimum of ``objective(y, args)`` from ``y0``."""

    def flat(y: jax.Array) -> jax.Array:
        return objective(y.reshape(y0.shape), args)

    def system(y: jax.Array):
        merit, gradient = jax.value_and_grad(flat)(y)
        hessian = jax.hessian(flat)(y)
        return merit, gradient, hessian, jnp.max(jnp.abs(gradient)) <= tolerances.atol

    return _solve(system, y0, tolerances, budget)


def root_find(
    equations: Function, y0: jax.Array, args: Any, tolerances: Tolerances, budget: Budget
) -> tuple[jax.Array, jax.Array]:
    """``(y, success)``: a root of ``equations(y, args)`` (of ``y``'s shape) from ``y0``."""

    def flat(y: jax.Array) -> jax.Array:
        return jnp.ravel(equations(y.reshape(y0.shape), args))

    def system(y: jax.Array):
        residual = flat(y)
        jacobian = jax.jacfwd(flat)(y)
        merit = 0.5 * jnp.sum(residual**2)
        small = jnp.max(jnp.abs(residual)) <= tolerances.atol
        return merit, jacobian.T @ residual, jacobian.T @ jacobian, small

    return _solve(system, y0, tolerances, budget)
