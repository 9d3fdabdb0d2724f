"""scipy's trust-region minimisation (``_minimize_trust_region``) as an optimistix minimiser: the
outer loop of ``trust-exact``, ``trust-krylov``, ``trust-ncg`` and ``dogleg``.

Each optimistix step is one scipy iteration: the subproblem's step inside the
radius (`trust_subproblems`), the objective at the trial point, the radius
quartered where the model predicted the decrease badly (``rho < 0.25``) and
doubled (up to ``max_trust_radius``) where it predicted it well on the
boundary, and the trial point accepted where ``rho > eta``. The verdicts are
scipy's ``warnflag``: converged once ``|grad|_2 < gtol`` (before any
iteration too), out of iterations after ``maxiter`` of them (rejected trial
points count, as in scipy), and failed where the model predicts no decrease
or the subproblem's factorization fails.

The derivatives are the op's own (its gradient and Hessian outputs: these
methods need ``hess=True``, as scipy does), which the lowering passes as the
option `DERIVATIVES_OPTION`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.scipy_status import status_verdict
from gpubackend.dispatch.jax.trust_subproblems import Subproblem

DERIVATIVES_OPTION = "value_gradient_hessian"
"""optimistix option: ``(y, args) -> (f, grad, hess)``, the objective's own derivatives."""

RUNNING, CONVERGED, OUT_OF_ITERATIONS, NO_PREDICTED_DECREASE, LINALG_ERROR = -1, 0, 1, 2, 3
"""The solve's status: scipy's ``warnflag`` once it ends."""


def scipy_verdict(status: jax.Array) -> tuple[jax.Array, optx.RESULTS]:
    """optimistix's ``terminate`` for a solve whose ``status`` is scipy's ``warnflag`` (or
    `RUNNING`): any flag but converged and out of iterations is a failure."""
    return status_verdict(status, RUNNING, status == CONVERGED, status == OUT_OF_ITERATIONS)


Derivatives = Callable[[jax.Array, Any], tuple[jax.Array, jax.Array, jax.Array]]


def _as_vectors(derivatives: Derivatives, n: int) -> Derivatives:
    """Derivatives in ``y``'s shape (a 0-d ``x`` included) as a vector and a matrix."""

    def flat(y, args):
        f, gradient, hessian = derivatives(y, args)
        dtype = y.dtype
        return (
            jnp.asarray(f, dtype),
            jnp.reshape(gradient, (n,)).astype(dtype),
            jnp.reshape(hessian, (n, n)).astype(dtype),
        )

    return flat


class _TrustRegionState(eqx.Module):
    f: jax.Array
    gradient: jax.Array
    hessian: jax.Array
    """At the iterate, flattened."""
    radius: jax.Array
    iterations: jax.Array
    status: jax.Array


class ScipyTrustRegion(optx.AbstractMinimiser):
    """scipy's ``_minimize_trust_region`` with one of its subproblems."""

    gtol: float
    initial_trust_radius: float
    max_trust_radius: float
    eta: float
    # optimistix reads these off any minimiser; the verdicts above replace them.
    rtol: float
    atol: float
    subproblem: Subproblem = eqx.field(static=True)
    max_iterations: int = eqx.field(static=True)
    norm: Callable

    def _derivatives(self, fn, y, options) -> Derivatives:
        return _as_vectors(options[DERIVATIVES_OPTION], y.size)

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _TrustRegionState:
        f, gradient, hessian = self._derivatives(fn, y, options)(y, args)
        converged = jnp.linalg.norm(gradient) < self.gtol
        return _TrustRegionState(
            f=f,
            gradient=gradient,
            hessian=hessian,
            radius=jnp.array(self.initial_trust_radius, y.dtype),
            iterations=jnp.array(0),
            status=jnp.where(converged, CONVERGED, RUNNING),
        )

    def step(self, fn, y, args, options, state: _TrustRegionState, tags):
        derivatives = self._derivatives(fn, y, options)
        step, hits_boundary, factored = self.subproblem(state.gradient, state.hessian, state.radius)
        predicted = -(jnp.dot(state.gradient, step) + 0.5 * jnp.dot(step, state.hessian @ step))
        trial = y + step.reshape(y.shape).astype(y.dtype)
        f_trial, gradient_trial, hessian_trial = derivatives(trial, args)
        rho = (state.f - f_trial) / predicted
        radius = jnp.where(
            rho < 0.25,
            0.25 * state.radius,
            jnp.where(
                (rho > 0.75) & hits_boundary,
                jnp.minimum(2 * state.radius, self.max_trust_radius),
                state.radius,
            ),
        )
        # scipy breaks off before moving where the subproblem or the prediction fails. A NaN
        # prediction (a NaN parameter) ends the solve too, where scipy would go on to maxiter
        # without moving: under vmap every lane would wait for it.
        no_decrease = ~(predicted > 0)
        broken = ~factored | no_decrease
        accepted = (rho > self.eta) & ~broken
        iterations = state.iterations + 1
        gradient = jnp.where(accepted, gradient_trial, state.gradient)
        status = jnp.where(
            ~factored,
            LINALG_ERROR,
            jnp.where(
                no_decrease,
                NO_PREDICTED_DECREASE,
                jnp.where(
                    jnp.linalg.norm(gradient) < self.gtol,
                    CONVERGED,
                    jnp.where(iterations >= self.max_iterations, OUT_OF_ITERATIONS, RUNNING),
                ),
            ),
        )
        new_state = _TrustRegionState(
            f=jnp.where(accepted, f_trial, state.f),
            gradient=gradient,
            hessian=jnp.where(accepted, hessian_trial, state.hessian),
            radius=jnp.where(broken, state.radius, radius),
            iterations=iterations,
            status=status,
        )
        return jnp.where(accepted, trial, y), new_state, None

    def terminate(self, fn, y, args, options, state: _TrustRegionState, tags):
        return scipy_verdict(state.status)

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}
