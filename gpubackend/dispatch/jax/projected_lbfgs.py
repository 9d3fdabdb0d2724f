"""`gpubackend.solvers.projected_lbfgs` (``minimize(method="L-BFGS-B")`` with box bounds) as an
optimistix minimiser: the same projected quasi-Newton method, step for step.

Each optimistix step is one iteration of the Numba solver: variables at a bound
whose gradient pushes outwards are held, the two-loop L-BFGS direction (a ring
buffer of ``maxcor`` pairs, masked by how many are filled) acts on the others,
and a backtracking Armijo search (an inner loop of at most ``maxls``
evaluations) runs along the projected path. The verdicts are the Numba
solver's, which stops on scipy's criteria: projected-gradient infinity norm
``<= gtol`` before an iteration, or relative decrease of ``f`` ``<= ftol`` after
one (both success); out of iterations (``maxiter``), out of evaluations
(``maxfun``) or a search that accepts no step (failures). The derivatives are
the op's own gradient (`newton_cg.GRADIENT_OPTION`), as scipy is given them.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.implicit import varying_leaves_like, varying_like
from gpubackend.dispatch.jax.newton_cg import flat_value_gradient
from gpubackend.dispatch.jax.scipy_status import status_verdict

RUNNING, CONVERGED, OUT_OF_ITERATIONS, OUT_OF_EVALUATIONS, NO_STEP = range(-1, 4)
"""The solve's status once it ends: success, or which budget or search stopped it."""

# The Numba solver's constants (`gpubackend.solvers.projected_lbfgs`).
_ARMIJO = 1e-4
_CURVATURE_EPS = 2.2e-16


class _History(eqx.Module):
    """The L-BFGS pairs: a ring buffer whose newest pair is at ``newest``, ``count`` of them
    filled."""

    steps: jax.Array
    gradient_changes: jax.Array
    rho: jax.Array
    count: jax.Array
    newest: jax.Array


class _ProjectedLBFGSState(eqx.Module):
    f: jax.Array
    gradient: jax.Array
    """At the iterate, flattened."""
    history: _History
    evaluations: jax.Array
    iterations: jax.Array
    status: jax.Array


def _two_loop(q, history: _History) -> jax.Array:
    """``H q`` for the L-BFGS inverse-Hessian approximation of ``history``."""
    memory = history.rho.shape[0]

    def newest_first(k, carry):
        r, alpha = carry
        i = (history.newest - k) % memory
        a = jnp.where(k < history.count, history.rho[i] * jnp.dot(history.steps[i], r), 0.0)
        return r - a * history.gradient_changes[i], alpha.at[i].set(a)

    no_alpha = varying_like(jnp.zeros_like(history.rho), (q,))
    r, alpha = jax.lax.fori_loop(0, memory, newest_first, (q, no_alpha))
    newest_step = history.steps[history.newest]
    newest_change = history.gradient_changes[history.newest]
    filled = history.count > 0
    change_size = jnp.where(filled, jnp.dot(newest_change, newest_change), 1.0)
    r = r * jnp.where(filled, jnp.dot(newest_step, newest_change) / change_size, 1.0)

    def oldest_first(j, r):
        k = memory - 1 - j
        i = (history.newest - k) % memory
        beta = history.rho[i] * jnp.dot(history.gradient_changes[i], r)
        return jnp.where(k < history.count, r + history.steps[i] * (alpha[i] - beta), r)

    return jax.lax.fori_loop(0, memory, oldest_first, r)


def _remembered(history: _History, step, gradient_change) -> _History:
    """``history`` with the pair added where its curvature is safely positive."""
    curvature = jnp.dot(step, gradient_change)
    kept = curvature > _CURVATURE_EPS * jnp.dot(gradient_change, gradient_change)
    newest = jnp.where(kept, (history.newest + 1) % history.rho.shape[0], history.newest)
    return _History(
        steps=jnp.where(kept, history.steps.at[newest].set(step), history.steps),
        gradient_changes=jnp.where(
            kept, history.gradient_changes.at[newest].set(gradient_change), history.gradient_changes
        ),
        rho=jnp.where(kept, history.rho.at[newest].set(1.0 / curvature), history.rho),
        count=jnp.where(kept, jnp.minimum(history.count + 1, history.rho.shape[0]), history.count),
        newest=newest,
    )


class ProjectedLBFGS(optx.AbstractMinimiser):
    """The Numba solver's projected L-BFGS inside ``lower <= x <= upper``."""

    ftol: float
    gtol: float
    lower: jax.Array
    upper: jax.Array
    # optimistix reads these off any minimiser; the verdicts above replace them.
    rtol: float
    atol: float
    norm: Callable
    maxcor: int = eqx.field(static=True)
    max_iterations: int = eqx.field(static=True)
    max_evaluations: int = eqx.field(static=True)
    max_line_search: int = eqx.field(static=True)

    def _box(self, y) -> tuple[jax.Array, jax.Array]:
        return self.lower.astype(y.dtype), self.upper.astype(y.dtype)

    def _status_before_iteration(self, x, gradient, lower, upper, iterations) -> jax.Array:
        """Out of iterations, converged (projected gradient within ``gtol``) or running."""
        projected = jnp.clip(x - gradient, lower, upper) - x
        return jnp.where(
            iterations >= self.max_iterations,
            OUT_OF_ITERATIONS,
            jnp.where(jnp.max(jnp.abs(projected)) <= self.gtol, CONVERGED, RUNNING),
        )

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _ProjectedLBFGSState:
        lower, upper = self._box(y)
        x = jnp.clip(y.reshape(-1), lower, upper)
        f, gradient = flat_value_gradient(y, args, options)(x)
        history = _History(
            steps=jnp.zeros((self.maxcor, x.size), y.dtype),
            gradient_changes=jnp.zeros((self.maxcor, x.size), y.dtype),
            rho=jnp.zeros(self.maxcor, y.dtype),
            count=jnp.array(0),
            newest=jnp.array(self.maxcor - 1),
        )
        iterations = jnp.array(0)
        state = _ProjectedLBFGSState(
            f=f,
            gradient=gradient,
            history=history,
            evaluations=jnp.array(1),
            iterations=iterations,
            status=self._status_before_iteration(x, gradient, lower, upper, iterations),
        )
        return varying_leaves_like(state, (f, gradient))

    def step(self, fn, y, args, options, state: _ProjectedLBFGSState, tags):
        evaluate = flat_value_gradient(y, args, options)
        lower, upper = self._box(y)
        # The start was clipped into the box in `init`; every later iterate is inside it.
        x = jnp.clip(y.reshape(-1), lower, upper)
        f, gradient = state.f, state.gradient
        held = ((x <= lower) & (gradient > 0)) | ((x >= upper) & (gradient < 0))
        free_gradient = jnp.where(held, 0.0, gradient)
        direction = jnp.where(held, 0.0, -_two_loop(free_gradient, state.history))
        # Not a descent direction: the history is dropped for steepest descent on the free
        # variables.
        restart = jnp.dot(gradient, direction) >= 0.0
        history = eqx.tree_at(
            lambda h: h.count, state.history, jnp.where(restart, 0, state.history.count)
        )
        direction = jnp.where(restart, -free_gradient, direction)
        first_step = jnp.minimum(1.0, 1.0 / jnp.linalg.norm(direction))
        step = jnp.where(history.count > 0, 1.0, first_step).astype(y.dtype)

        def backtrack(carry):
            searched, step, _, _, _, evaluations, _ = carry
            x_new = jnp.clip(x + step * direction, lower, upper)
            decrease = jnp.dot(gradient, x_new - x)
            f_new, gradient_new = evaluate(x_new)
            finite = jnp.isfinite(f_new)
            accepted = finite & (f_new <= f + _ARMIJO * decrease)
            evaluations = evaluations + 1
            # Minimiser of the quadratic through f, the slope and f_new, kept in [0.1, 0.5] of the
            # step.
            curvature = f_new - f - decrease
            interpolated = jnp.clip(-decrease / (2.0 * curvature), 0.1, 0.5)
            shrink = jnp.where(finite & (curvature > 0.0), interpolated, 0.5)
            step = jnp.where(accepted, step, step * shrink)
            stop = accepted | (evaluations >= self.max_evaluations)
            return searched + 1, step, x_new, f_new, gradient_new, evaluations, (accepted, stop)

        def searching(carry):
            searched, *_, (_, stop) = carry
            return ~stop & (searched < self.max_line_search)

        _, _, x_new, f_new, gradient_new, evaluations, (accepted, _) = jax.lax.while_loop(
            searching,
            backtrack,
            varying_leaves_like(
                (
                    jnp.array(0),
                    step,
                    x,
                    f,
                    gradient,
                    state.evaluations,
                    (jnp.array(False), jnp.array(False)),
                ),
                (f, gradient),
            ),
        )
        history = _remembered(history, x_new - x, gradient_new - gradient)
        relative_decrease = (f - f_new) / jnp.maximum(jnp.maximum(jnp.abs(f), jnp.abs(f_new)), 1.0)
        iterations = state.iterations + 1
        status = jnp.where(
            ~accepted,
            NO_STEP,
            jnp.where(
                relative_decrease <= self.ftol,
                CONVERGED,
                jnp.where(
                    evaluations >= self.max_evaluations,
                    OUT_OF_EVALUATIONS,
                    self._status_before_iteration(x_new, gradient_new, lower, upper, iterations),
                ),
            ),
        )
        new_state = _ProjectedLBFGSState(
            f=jnp.where(accepted, f_new, f),
            gradient=jnp.where(accepted, gradient_new, gradient),
            history=jax.tree.map(
                lambda new, old: jnp.where(accepted, new, old), history, state.history
            ),
            evaluations=evaluations,
            iterations=iterations,
            status=status,
        )
        new_y = jnp.where(accepted, x_new, x).reshape(y.shape).astype(y.dtype)
        return new_y, new_state, None

    def terminate(self, fn, y, args, options, state: _ProjectedLBFGSState, tags):
        return status_verdict(
            state.status,
            RUNNING,
            state.status == CONVERGED,
            (state.status == OUT_OF_ITERATIONS) | (state.status == OUT_OF_EVALUATIONS),
        )

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        # A solve that ends before its first step returns the start clipped into the box, as the
        # Numba solver does.
        lower, upper = self._box(y)
        return jnp.clip(y, lower.reshape(y.shape), upper.reshape(y.shape)), aux, {}
