"""The minimiser of a strictly convex quadratic over a box, in JAX: `gpubackend.solvers.box_qp`'s
primal active-set method, with the active set as a mask so that it traces once and vmaps."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve

from gpubackend.dispatch.jax.implicit import varying_leaves_like

FREE, AT_LOWER, AT_UPPER = 0, 1, 2


def box_qp(hessian, gradient, lower, upper, max_changes: int) -> tuple[jax.Array, jax.Array]:
    """``(s, solved)`` minimising ``0.5 s'Bs + g's`` over ``lower <= s <= upper``; not solved where
    B's free block is not positive definite or the active set changed more than ``max_changes``
    times."""
    n = gradient.shape[0]
    eye = jnp.eye(n, dtype=gradient.dtype)

    def body(carry):
        s, state, changes, _, _ = carry
        free = state == FREE
        both_free = free[:, None] & free[None, :]
        reduced = jnp.where(both_free, hessian, eye)
        rhs = jnp.where(free, -(gradient + hessian @ s), 0.0)
        factor = jnp.linalg.cholesky(reduced)
        factored = jnp.all(jnp.isfinite(factor))
        step = cho_solve((factor, True), rhs)
        crosses_lower = (step < 0) & (s + step < lower)
        crosses_upper = (step > 0) & (s + step > upper)
        safe_step = jnp.where(step == 0, 1.0, step)
        to_bound = jnp.where(
            crosses_lower,
            (lower - s) / safe_step,
            jnp.where(crosses_upper, (upper - s) / safe_step, jnp.inf),
        )
        blocking = jnp.argmin(to_bound)
        blocked = to_bound[blocking] < 1.0
        length = jnp.where(blocked, to_bound[blocking], 1.0)
        moved = s + length * step
        at = jnp.arange(n) == blocking
        side = jnp.where(crosses_lower[blocking], AT_LOWER, AT_UPPER)
        moved = jnp.where(blocked & at, jnp.where(side == AT_LOWER, lower, upper), moved)
        # Once the reduced problem is solved, the bound whose multiplier is most wrong leaves.
        multiplier = gradient + hessian @ moved
        wrong = jnp.where(
            state == AT_LOWER, -multiplier, jnp.where(state == AT_UPPER, multiplier, 0.0)
        )
        leaving = jnp.argmax(wrong)
        optimal = ~blocked & ~(wrong[leaving] > 0)
        new_state = jnp.where(
            blocked & at,
            side,
            jnp.where(~blocked & (jnp.arange(n) == leaving) & ~optimal, FREE, state),
        ).astype(state.dtype)
        s = jnp.where(factored, moved, s)
        return s, new_state, changes + 1, optimal | ~factored, factored

    def unfinished(carry):
        _, _, changes, finished, _ = carry
        return ~finished & (changes <= max_changes)

    start = jnp.clip(jnp.zeros_like(gradient), lower, upper)
    state = jnp.zeros(n, dtype=jnp.int8)
    # Inside a manual mesh the carry starts as varying as the problem, as the body makes it.
    carry = varying_leaves_like(
        (start, state, jnp.array(0), jnp.array(False), jnp.array(True)),
        (hessian, gradient, lower, upper),
    )
    s, _, _, finished, factored = jax.lax.while_loop(unfinished, body, carry)
    return s, finished & factored
