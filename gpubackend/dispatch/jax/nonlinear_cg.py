"""scipy's nonlinear conjugate gradients (``_minimize_cg``) as an optimistix minimiser.

Each optimistix step is one scipy iteration: scipy's line search
(`wolfe_search.line_search_wolfe12`: Moré-Thuente, then the strong-Wolfe search)
along the direction, with scipy's extra condition that the next
Polak-Ribière+ direction descend enough (or the step converge), then that
direction. The first trial step is scipy's: the start's "previous value" is
``f + |grad|_2 / 2``, a step of about 1. The verdicts are scipy's ``warnflag``,
in its order: out of iterations once ``maxiter`` of them are done (even where
the last one converged), failed where the line search finds no step
("precision loss"), converged once ``vecnorm(grad, ord=norm) <= gtol``, and
failed where the value, the gradient's norm or the iterate is NaN.

optimistix's ``NonlinearCG`` is left out: its backtracking search took more
iterations than scipy's (out of a budget where scipy converged) and stalled
inside the rounding of ``f`` short of a tight ``gtol`` that scipy met.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.newton_cg import NO_STEP, flat_value_gradient
from gpubackend.dispatch.jax.trust_region import (
    CONVERGED,
    OUT_OF_ITERATIONS,
    RUNNING,
    scipy_verdict,
)
from gpubackend.dispatch.jax.wolfe_search import line_search_wolfe12

UNDEFINED = 3
"""scipy's ``warnflag`` where the value, the gradient or the iterate is NaN."""

# scipy's sufficient-descent factor for the Polak-Ribière+ direction (``sigma_3``).
_SUFFICIENT_DESCENT = 0.01
# The step bounds scipy's CG gives its Moré-Thuente search.
_STEP_MIN, _STEP_MAX = 1e-100, 1e100


class _CGState(eqx.Module):
    f: jax.Array
    previous_f: jax.Array
    """At the previous iterate (at the start, scipy's guess for a step of about 1)."""
    gradient: jax.Array
    direction: jax.Array
    """Flattened."""
    iterations: jax.Array
    status: jax.Array


class ScipyCG(optx.AbstractMinimiser):
    """scipy's ``_minimize_cg`` (Polak-Ribière+) on the op's own gradient."""

    gtol: float
    gradient_norm: float
    """scipy's ``norm``: the order of the gradient's norm in the convergence test."""
    c1: float
    c2: float
    # optimistix reads these off any minimiser; scipy's verdicts replace them.
    rtol: float
    atol: float
    norm: Callable
    max_iterations: int = eqx.field(static=True)

    def _size(self, gradient) -> jax.Array:
        # scipy's vecnorm: max |g| for inf, min |g| for -inf, else the p-norm, as jnp's for vectors.
        return jnp.linalg.norm(gradient, ord=self.gradient_norm)

    def _status(self, iterations, f, gradient, y) -> jax.Array:
        """scipy's verdict after ``iterations`` (or before any), in its order; NaN norms stop."""
        undefined = jnp.isnan(f) | jnp.isnan(self._size(gradient)) | jnp.any(jnp.isnan(y))
        return jnp.where(
            iterations >= self.max_iterations,
            OUT_OF_ITERATIONS,
            jnp.where(
                self._size(gradient) > self.gtol,
                RUNNING,
                jnp.where(undefined, UNDEFINED, CONVERGED),
            ),
        )

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _CGState:
        f, gradient = flat_value_gradient(y, args, options)(jnp.reshape(y, (y.size,)))
        return _CGState(
            f=f,
            previous_f=f + jnp.linalg.norm(gradient) / 2,
            gradient=gradient,
            direction=-gradient,
            iterations=jnp.array(0),
            status=self._status(jnp.array(0), f, gradient, y),
        )

    def _next_direction(self, state: _CGState, gradient) -> jax.Array:
        """The Polak-Ribière+ direction from the new ``gradient``."""
        beta = jnp.maximum(
            0.0,
            jnp.dot(gradient - state.gradient, gradient) / jnp.dot(state.gradient, state.gradient),
        )
        return -gradient + beta * state.direction

    def step(self, fn, y, args, options, state: _CGState, tags):
        flat_y = jnp.reshape(y, (y.size,))
        value_gradient = flat_value_gradient(y, args, options)

        def descends(alpha, gradient):
            direction = self._next_direction(state, gradient)
            return (self._size(gradient) <= self.gtol) | (
                jnp.dot(direction, gradient) <= -_SUFFICIENT_DESCENT * jnp.dot(gradient, gradient)
            )

        search = line_search_wolfe12(
            value_gradient,
            flat_y,
            state.direction,
            state.f,
            state.gradient,
            state.previous_f,
            self.c1,
            self.c2,
            _STEP_MIN,
            _STEP_MAX,
            descends,
        )
        moved = flat_y + search.alpha * state.direction
        _, gradient = value_gradient(moved)
        iterations = state.iterations + 1
        searched = _CGState(
            f=search.f,
            previous_f=state.f,
            gradient=gradient,
            direction=self._next_direction(state, gradient),
            iterations=iterations,
            status=self._status(iterations, search.f, gradient, moved),
        )
        # scipy breaks off where the search fails, at the iterate it had.
        new_state = jax.tree.map(
            lambda new, old: jnp.where(search.found, new, old),
            searched,
            eqx.tree_at(lambda s: s.status, state, jnp.array(NO_STEP)),
        )
        new_y = jnp.where(search.found, moved, flat_y).reshape(y.shape).astype(y.dtype)
        return new_y, new_state, None

    def terminate(self, fn, y, args, options, state: _CGState, tags):
        return scipy_verdict(state.status)

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}
