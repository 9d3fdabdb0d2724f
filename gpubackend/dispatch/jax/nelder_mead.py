"""scipy's Nelder-Mead (``_minimize_neldermead``) as an optimistix minimiser.

Each optimistix step is one scipy iteration: the reflection, then the
expansion or a contraction, then the shrink, each trial point clipped into
``bounds`` as scipy clips it; the simplex is re-sorted by value (stably, as
numpy sorts arrays this small). The budgets are scipy's: an evaluation past
``maxfev`` is refused and ends the solve where scipy's wrapper raises, keeping
what the interrupted iteration changed (a shrink's moved vertices), and an
interrupted iteration is not counted. The verdicts are scipy's ``warnflag``:
converged once the simplex spans at most ``xatol`` and its values at most
``fatol``, checked before each iteration, and failed once either budget runs
out first. optimistix's own ``NelderMead`` is not used: it reported success at
points that were not minima (its start simplex collapses).

The Numba solver (`gpubackend.solvers.nelder_mead`) is the same algorithm in
loops.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

RUNNING, CONVERGED, OUT_OF_BUDGET = -1, 0, 1
"""The solve's status: scipy's ``warnflag`` once it ends (maxfev and maxiter alike)."""

_NONZERO_DELTA, _ZERO_DELTA = 0.05, 0.00025
"""scipy's start simplex: each vertex moves one coordinate by 5%, or to 0.00025 from zero."""


def box_bounds(
    lower: tuple[float, ...], upper: tuple[float, ...], n: int, dtype
) -> tuple[jax.Array, jax.Array]:
    """The settings' bound tuples as ``(lower, upper)`` arrays of ``n``, checked as scipy checks
    them."""
    if len(lower) not in (1, n) or len(upper) != len(lower):
        raise ValueError("`bounds` must hold one (lower, upper) pair per element of x")
    return (
        jnp.broadcast_to(jnp.asarray(lower, dtype), (n,)),
        jnp.broadcast_to(jnp.asarray(upper, dtype), (n,)),
    )


def flat_objective(fn, y, args) -> Callable[[jax.Array], jax.Array]:
    """The objective of a flat point (a vertex, a line search's point), in ``y``'s dtype."""
    return lambda point: jnp.asarray(fn(point.reshape(y.shape), args)[0], y.dtype)


class _SimplexState(eqx.Module):
    simplex: jax.Array
    """``(n + 1, n)`` vertices, sorted by value."""
    values: jax.Array
    evaluations: jax.Array
    iterations: jax.Array
    """scipy's count, which starts at 1."""
    status: jax.Array


def coefficients(adaptive: bool, n: int) -> tuple[float, float, float, float]:
    """``(rho, chi, psi, sigma)``: scipy's, adapted to the dimension with ``adaptive`` (Gao and
    Han)."""
    if adaptive:
        return 1.0, 1.0 + 2.0 / n, 0.75 - 1.0 / (2.0 * n), 1.0 - 1.0 / n
    return 1.0, 2.0, 0.5, 0.5


class ScipyNelderMead(optx.AbstractMinimiser):
    """scipy's ``_minimize_neldermead``; ``lower`` and ``upper`` are the settings' bound tuples."""

    xatol: float
    fatol: float
    adaptive: bool = eqx.field(static=True)
    max_iterations: int = eqx.field(static=True)
    max_evaluations: int = eqx.field(static=True)
    lower: tuple[float, ...] = eqx.field(static=True)
    upper: tuple[float, ...] = eqx.field(static=True)
    # optimistix reads these off any minimiser; the verdicts above replace them.
    rtol: float
    atol: float
    norm: Callable

    def _status(self, state_values, simplex, evaluations, iterations) -> jax.Array:
        # scipy's loop tests its budgets first, then the simplex's size.
        within_budget = (evaluations < self.max_evaluations) & (iterations < self.max_iterations)
        spans = jnp.max(jnp.abs(simplex[1:] - simplex[0]), initial=0.0)
        spread = jnp.max(jnp.abs(state_values[0] - state_values[1:]), initial=0.0)
        converged = (spans <= self.xatol) & (spread <= self.fatol)
        return jnp.where(~within_budget, OUT_OF_BUDGET, jnp.where(converged, CONVERGED, RUNNING))

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _SimplexState:
        n = y.size
        lower, upper = box_bounds(self.lower, self.upper, n, y.dtype)
        start = jnp.clip(jnp.ravel(y), lower, upper)
        moved = jnp.where(start != 0, (1 + _NONZERO_DELTA) * start, _ZERO_DELTA)
        simplex = jnp.concatenate([start[None], jnp.where(jnp.eye(n, dtype=bool), moved, start)])
        # Vertices past an upper bound are reflected inside it, so clipping keeps them apart.
        simplex = jnp.clip(jnp.where(simplex > upper, 2 * upper - simplex, simplex), lower, upper)
        allowed = jnp.arange(n + 1) < self.max_evaluations
        values = jnp.where(allowed, jax.vmap(flat_objective(fn, y, args))(simplex), jnp.inf)
        order = jnp.argsort(values, stable=True)
        simplex, values = simplex[order], values[order]
        evaluations = jnp.array(min(n + 1, self.max_evaluations))
        iterations = jnp.array(1)
        return _SimplexState(
            simplex=simplex,
            values=values,
            evaluations=evaluations,
            iterations=iterations,
            status=self._status(values, simplex, evaluations, iterations),
        )

    def step(self, fn, y, args, options, state: _SimplexState, tags):
        n = y.size
        rho, chi, psi, sigma = coefficients(self.adaptive, n)
        lower, upper = box_bounds(self.lower, self.upper, n, y.dtype)
        value_of = flat_objective(fn, y, args)
        simplex, values = state.simplex, state.values
        worst = simplex[n]

        def along(coefficient):
            # scipy's reflection (rho), expansion (rho chi), outside (psi rho) and inside (-psi)
            # contraction: (1 + c) xbar - c worst, clipped.
            xbar = jnp.sum(simplex[:n], axis=0) / n
            return jnp.clip((1 + coefficient) * xbar - coefficient * worst, lower, upper)

        reflected = along(rho)
        f_reflected = value_of(reflected)
        evaluations = state.evaluations + 1

        expands = f_reflected < values[0]
        takes_reflected = ~expands & (f_reflected < values[n - 1])
        outside = f_reflected < values[n]
        coefficient = jnp.where(expands, rho * chi, jnp.where(outside, psi * rho, -psi))
        trial = along(coefficient)
        needs_trial = ~takes_reflected
        trial_allowed = evaluations < self.max_evaluations
        f_trial = jax.lax.cond(
            needs_trial & trial_allowed, value_of, lambda _: jnp.array(jnp.nan, y.dtype), trial
        )
        evaluations = evaluations + (needs_trial & trial_allowed)

        expansion_better = f_trial < f_reflected
        contraction_accepted = jnp.where(outside, f_trial <= f_reflected, f_trial < values[n])
        new_worst, f_new_worst = (
            jnp.where(expands & expansion_better, trial, reflected),
            jnp.where(expands & expansion_better, f_trial, f_reflected),
        )
        contracts = ~expands & ~takes_reflected
        new_worst = jnp.where(contracts, trial, new_worst)
        f_new_worst = jnp.where(contracts, f_trial, f_new_worst)
        replaces_worst = trial_allowed & ~(contracts & ~contraction_accepted) | takes_reflected
        shrinks = trial_allowed & contracts & ~contraction_accepted

        # The shrink evaluates its vertices in order until maxfev refuses one, which has moved.
        remaining = self.max_evaluations - evaluations
        shrunk = jnp.clip(simplex[0] + sigma * (simplex - simplex[0]), lower, upper)
        vertex = jnp.arange(n + 1)
        shrunk_values = jax.lax.cond(
            shrinks,
            lambda points: jnp.where(vertex <= remaining, jax.vmap(value_of)(points), values),
            lambda _: values,
            shrunk,
        )
        moves = shrinks & (vertex >= 1) & (vertex <= remaining + 1)
        simplex = jnp.where(moves[:, None], shrunk, simplex)
        values = jnp.where(shrinks & (vertex >= 1), shrunk_values, values)
        evaluations = evaluations + jnp.where(shrinks, jnp.minimum(n, remaining), 0)

        simplex = simplex.at[n].set(jnp.where(replaces_worst, new_worst, simplex[n]))
        values = values.at[n].set(jnp.where(replaces_worst, f_new_worst, values[n]))
        completed = (takes_reflected | trial_allowed) & ~(shrinks & (remaining < n))
        iterations = state.iterations + completed

        order = jnp.argsort(values, stable=True)
        simplex, values = simplex[order], values[order]
        new_state = _SimplexState(
            simplex=simplex,
            values=values,
            evaluations=evaluations,
            iterations=iterations,
            status=self._status(values, simplex, evaluations, iterations),
        )
        return simplex[0].reshape(y.shape), new_state, None

    def terminate(self, fn, y, args, options, state: _SimplexState, tags):
        # optimistix goes on while the result is successful: so it is, too, while running.
        result = optx.RESULTS.where(
            state.status == OUT_OF_BUDGET,
            optx.RESULTS.nonlinear_max_steps_reached,
            optx.RESULTS.successful,
        )
        return state.status != RUNNING, result

    def postprocess(self, fn, y, aux, args, options, state: _SimplexState, tags, result):
        # The best vertex, also where no iteration ran (a budget spent on the start simplex).
        return state.simplex[0].reshape(y.shape), aux, {}
