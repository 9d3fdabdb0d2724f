"""DF-SANE, the derivative-free spectral residual method, as an optimistix root finder: scipy's
``root(method="df-sane")`` (``_root_df_sane``).

Each optimistix step is one scipy iteration: a nonmonotone backtracking search
along ``±alpha d``, ``d = -sigma F`` (La Cruz, Martinez and Raydan's, or Cheng
and Li's), one evaluation of the equations per trial point, then the spectral
coefficient ``sigma = s.s / s.y`` from the step taken. The verdicts are scipy's:
converged once ``|F| < ftol |F(x0)| + fatol``, failed once ``maxfev``
evaluations (the first included) are spent, the iterate then the last
accepted one. Only the equations are evaluated, never a Jacobian. The Numba
solver (`gpubackend.solvers.df_sane`) is the same port.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.minpack import CONVERGED, FAILED, RUNNING, norm
from gpubackend.solvers.df_sane import GAMMA, NU, TAU_MAX, TAU_MIN


class _SpectralState(eqx.Module):
    residuals: jax.Array
    merit: jax.Array
    """``|F|**2`` at the iterate."""
    first_merit: jax.Array
    sigma: jax.Array
    window: jax.Array
    """The last ``M`` merits (a ring, for La Cruz's search); ``recent`` of them are filled."""
    recent: jax.Array
    newest: jax.Array
    average: jax.Array
    """Cheng and Li's averaged merit, and its weight."""
    weight: jax.Array
    iterations: jax.Array
    evaluations: jax.Array
    status: jax.Array


class _Search(eqx.Module):
    """The line search between trial points: the next one is at ``+alpha_plus`` (``plus_next``)
    or ``-alpha_minus``."""

    alpha_plus: jax.Array
    alpha_minus: jax.Array
    next_plus: jax.Array
    plus_next: jax.Array
    trial: jax.Array
    residuals: jax.Array
    merit: jax.Array
    evaluations: jax.Array
    accepted: jax.Array


def _next_trial_length(alpha, merit, trial_merit):
    trial = alpha * alpha * merit / (trial_merit + (2 * alpha - 1) * merit)
    return jnp.clip(trial, TAU_MIN * alpha, TAU_MAX * alpha)


class SpectralResidual(optx.AbstractRootFinder):
    """scipy's DF-SANE; ``cheng`` selects Cheng and Li's line search over La Cruz's."""

    # mypy reads a default into optimistix's abstract fields: these have none, as in optimistix.
    ftol: float  # type: ignore[misc]
    fatol: float  # type: ignore[misc]
    sigma_eps: float  # type: ignore[misc]
    sigma_0: float  # type: ignore[misc]
    maxfev: int = eqx.field(static=True)  # type: ignore[misc]
    memory: int = eqx.field(static=True)  # type: ignore[misc]
    """scipy's ``M``."""
    cheng: bool = eqx.field(static=True)  # type: ignore[misc]
    # optimistix reads these off any root finder; the verdicts above replace them.
    rtol: float
    atol: float
    norm: Callable = optx.max_norm

    def _status(self, merit, first_merit):
        converged = jnp.sqrt(merit) < self.ftol * jnp.sqrt(first_merit) + self.fatol
        return jnp.where(converged, CONVERGED, RUNNING)

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _SpectralState:
        residuals, _ = fn(y, args)
        merit = norm(residuals) ** 2
        return _SpectralState(
            residuals=residuals,
            merit=merit,
            first_merit=merit,
            sigma=jnp.asarray(self.sigma_0, merit.dtype),
            window=jnp.zeros(self.memory, merit.dtype).at[0].set(merit),
            recent=jnp.array(1),
            newest=jnp.array(0),
            average=merit,
            weight=jnp.ones((), merit.dtype),
            iterations=jnp.array(0),
            evaluations=jnp.array(1),
            status=self._status(merit, merit),
        )

    def step(self, fn, y, args, options, state: _SpectralState, tags):
        sigma = state.sigma
        sigma = jnp.where(
            jnp.abs(sigma) > 1 / self.sigma_eps,
            jnp.sign(sigma) / self.sigma_eps,
            jnp.where(jnp.abs(sigma) < self.sigma_eps, self.sigma_eps, sigma),
        )
        direction = -sigma * state.residuals
        eta = state.first_merit / (1 + state.iterations) ** 2
        filled = jnp.arange(self.memory) < state.recent
        window_largest = jnp.max(jnp.where(filled, state.window, -jnp.inf))
        reference = state.average if self.cheng else window_largest
        merit = state.merit

        def try_point(search: _Search) -> _Search:
            alpha = jnp.where(search.plus_next, search.alpha_plus, search.alpha_minus)
            trial = y + jnp.where(search.plus_next, alpha, -alpha) * direction
            residuals, _ = fn(trial, args)
            trial_merit = norm(residuals) ** 2
            accepted = trial_merit <= reference + eta - GAMMA * alpha**2 * merit
            length = _next_trial_length(alpha, merit, trial_merit)
            return _Search(
                alpha_plus=jnp.where(search.plus_next, search.alpha_plus, search.next_plus),
                alpha_minus=jnp.where(search.plus_next, search.alpha_minus, length),
                next_plus=jnp.where(search.plus_next, length, search.next_plus),
                plus_next=~search.plus_next,
                trial=trial,
                residuals=residuals,
                merit=trial_merit,
                evaluations=search.evaluations + 1,
                accepted=accepted,
            )

        one = jnp.ones((), merit.dtype)
        start = _Search(
            one,
            one,
            one,
            jnp.array(True),
            y,
            state.residuals,
            merit,
            state.evaluations,
            jnp.array(False),
        )
        search = jax.lax.while_loop(
            lambda search: ~search.accepted & (search.evaluations < self.maxfev), try_point, start
        )
        accepted = search.accepted
        step, change = search.trial - y, search.residuals - state.residuals
        next_weight = NU * state.weight + 1
        average = (NU * state.weight * (state.average + eta) + search.merit) / next_weight
        newest = (state.newest + 1) % self.memory

        def kept(new, old):
            return jnp.where(accepted, new, old)

        new_state = _SpectralState(
            residuals=kept(search.residuals, state.residuals),
            merit=kept(search.merit, merit),
            first_merit=state.first_merit,
            sigma=kept(jnp.vdot(step, step) / jnp.vdot(step, change), sigma),
            window=kept(state.window.at[newest].set(search.merit), state.window),
            recent=kept(jnp.minimum(state.recent + 1, self.memory), state.recent),
            newest=kept(newest, state.newest),
            average=kept(average, state.average) if self.cheng else state.average,
            weight=kept(next_weight, state.weight) if self.cheng else state.weight,
            iterations=state.iterations + 1,
            evaluations=search.evaluations,
            status=jnp.where(accepted, self._status(search.merit, state.first_merit), FAILED),
        )
        return kept(search.trial, y), new_state, None

    def terminate(self, fn, y, args, options, state: _SpectralState, tags):
        result = optx.RESULTS.where(
            state.status == FAILED, optx.RESULTS.nonlinear_divergence, optx.RESULTS.successful
        )
        return state.status != RUNNING, result

    def postprocess(self, fn, y, aux, args, options, state, tags, result) -> tuple[Any, Any, dict]:
        return y, aux, {}
