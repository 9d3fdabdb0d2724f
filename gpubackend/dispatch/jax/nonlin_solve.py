"""scipy's ``nonlin_solve`` as an optimistix root finder: the driver of ``root(method="broyden1")``,
``"anderson"``, ``"linearmixing"`` and the rest of its family.

Each optimistix step is one scipy iteration: the Jacobian approximation's
``dx = -J^-1 F`` at scipy's forcing tolerance, scipy's backtracking Armijo
search on ``|F|^2`` (`armijo_search`; or the whole step with
``line_search=None``), the approximation's update, and scipy's
``TerminationCondition`` at the new point. The verdicts are scipy's: converged
once the max-norms of ``F`` and of the last direction meet ``fatol``, ``ftol``
(relative to the first ``F``), ``xatol`` and ``xtol`` (relative to ``x``), or
``F`` is zero; failed after ``maxiter`` iterations (even where the last met the
tolerances, as scipy's loop ends before checking it), after ``nit`` iterations
(scipy's ``iter``), or on a zero direction (scipy's ``ValueError``). The Numba
solver (`gpubackend.solvers.nonlin_solve`) is the same iteration.

A Jacobian approximation is an `InverseJacobian`; one module holds each family
(`gpubackend.dispatch.jax.broyden`, ...). One that evaluates the equations
itself (scipy's ``KrylovJacobian``, by finite differences:
`gpubackend.dispatch.jax.krylov`) is a `MatrixFreeInverseJacobian`, whose
``inverse_times`` is handed them, as the Numba driver's
``make_matrix_free_nonlin_solver`` hands its approximation the residual.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.implicit import varying_leaves_like

RUNNING, CONVERGED, FAILED = 0, 1, 2
"""A solve's status, carried in its state."""

# scipy's forcing-term constants (Eisenstat-Walker, choice 2) and its Armijo search's smallest step.
_GAMMA, _ETA_MAX, _ETA_THRESHOLD, _ETA_START = 0.9, 0.9999, 0.1, 1e-3
_ARMIJO_C1, _ARMIJO_STEP_MIN = 1e-4, 1e-2


def norm(v):
    return jnp.sqrt(jnp.sum(v * v))


def max_norm(v):
    """scipy's ``maxnorm``: NaN where ``v`` holds one."""
    return jnp.max(jnp.abs(v))


def squared_norm_or_inf(f):
    """scipy's ``_safe_norm(f) ** 2``: infinite where ``f`` is not finite."""
    return jnp.where(jnp.all(jnp.isfinite(f)), jnp.sum(f * f), jnp.inf)


def initial_alpha(alpha: float, x, f):
    """scipy's ``GenericBroyden.setup``: ``alpha`` as given (not NaN), else
    ``0.5 max(|x0|, 1) / |F(x0)|`` (1 where ``F(x0) = 0``)."""
    f_norm = norm(f)
    scaled = 0.5 * jnp.maximum(norm(x), 1.0) / jnp.where(f_norm != 0, f_norm, 1.0)
    autoscaled = jnp.where(f_norm != 0, scaled, 1.0)
    return autoscaled if math.isnan(alpha) else jnp.asarray(alpha, x.dtype)


class InverseJacobian(eqx.Module):
    """A Jacobian approximation of scipy's ``nonlin`` module, on flat vectors."""

    def init(self, x, f) -> Any:
        raise NotImplementedError

    def inverse_times(self, state, f, tol) -> tuple[Any, jax.Array]:
        """``(state, J^-1 f)``; ``tol`` is the inner solve's relative tolerance."""
        raise NotImplementedError

    def update(self, state, x, f, x_previous, f_previous) -> Any:
        raise NotImplementedError


class MatrixFreeInverseJacobian(eqx.Module):
    """A Jacobian approximation that evaluates the equations: `InverseJacobian`'s interface, with
    the equations handed to ``inverse_times`` as ``residual(x) -> F(x)`` on flat vectors."""

    def init(self, x, f) -> Any:
        raise NotImplementedError

    def inverse_times(self, state, f, tol, residual: Callable) -> tuple[Any, jax.Array]:
        raise NotImplementedError

    def update(self, state, x, f, x_previous, f_previous) -> Any:
        raise NotImplementedError


class _SearchState(eqx.Module):
    stage: jax.Array
    """0: trying the full step; 1: the quadratic's; 2 on: the cubic's."""
    alpha0: jax.Array
    phi_a0: jax.Array
    alpha1: jax.Array
    phi_a1: jax.Array
    trial: jax.Array
    f_trial: jax.Array
    found: jax.Array
    finished: jax.Array


def _cubic_next(phi0, alpha0, phi_a0, alpha1, phi_a1):
    derphi0 = -phi0
    factor = alpha0**2 * alpha1**2 * (alpha1 - alpha0)
    a = alpha0**2 * (phi_a1 - phi0 - derphi0 * alpha1) - alpha1**2 * (
        phi_a0 - phi0 - derphi0 * alpha0
    )
    a = a / factor
    b = -(alpha0**3) * (phi_a1 - phi0 - derphi0 * alpha1) + alpha1**3 * (
        phi_a0 - phi0 - derphi0 * alpha0
    )
    b = b / factor
    return (-b + jnp.sqrt(jnp.abs(b**2 - 3 * a * derphi0))) / (3.0 * a)


def armijo_search(residual: Callable, x, fx, dx):
    """scipy's ``_nonlin_line_search(..., 'armijo')``: ``scalar_search_armijo`` on ``|F|^2`` with
    slope ``-|F|^2`` and smallest step 0.01; ``(x + s dx, F there)``, the full step where the
    search finds none."""
    phi0 = jnp.sum(fx * fx)

    def trial_point(s: _SearchState) -> _SearchState:
        f = residual(x + s.trial * dx)
        phi = squared_norm_or_inf(f)
        holds = phi <= phi0 - _ARMIJO_C1 * s.trial * phi0
        first, second = s.stage == 0, s.stage == 1
        # The cubic's trial, pulled back to alpha1 / 2 where it moved too far or too little.
        halved = ((s.alpha1 - s.trial) > s.alpha1 / 2.0) | ((1 - s.trial / s.alpha1) < 0.96)
        shifted = jnp.where(halved, s.alpha1 / 2.0, s.trial)
        alpha0 = jnp.where(first, s.trial, jnp.where(second, s.alpha0, s.alpha1))
        phi_a0 = jnp.where(first, phi, jnp.where(second, s.phi_a0, s.phi_a1))
        alpha1 = jnp.where(first, s.alpha1, jnp.where(second, s.trial, shifted))
        phi_a1 = jnp.where(first, s.phi_a1, phi)
        quadratic = phi0 / 2.0 / (phi - phi0 + phi0)
        cubic = _cubic_next(phi0, alpha0, phi_a0, alpha1, phi_a1)
        gave_up = ~first & ~(alpha1 > _ARMIJO_STEP_MIN)
        return _SearchState(
            stage=s.stage + 1,
            alpha0=alpha0,
            phi_a0=phi_a0,
            alpha1=alpha1,
            phi_a1=phi_a1,
            trial=jnp.where(holds, s.trial, jnp.where(first, quadratic, cubic)),
            f_trial=f,
            found=holds,
            finished=holds | gave_up,
        )

    zero = jnp.zeros((), x.dtype)
    start = _SearchState(
        stage=jnp.array(0),
        alpha0=zero,
        phi_a0=zero,
        alpha1=zero,
        phi_a1=zero,
        trial=jnp.ones((), x.dtype),
        f_trial=fx,
        found=jnp.array(False),
        finished=jnp.array(False),
    )
    # Inside pmap/shard_map the carry must start as varying over the mesh as the trials make it.
    start = varying_leaves_like(start, (x, fx, dx))
    end = jax.lax.while_loop(lambda s: ~s.finished, trial_point, start)
    x_new = x + jnp.where(end.found, end.trial, 1.0) * dx
    f_new = jax.lax.cond(end.found, lambda: end.f_trial, lambda: residual(x_new))
    return x_new, f_new


class _NonlinState(eqx.Module):
    f: jax.Array
    """The residual at the iterate, flattened."""
    f_norm: jax.Array
    f0_norm: jax.Array
    """The max-norm of the first residual (``ftol`` is relative to it)."""
    eta: jax.Array
    """The forcing term: the inner solve's relative tolerance, scaled by ``|F|``."""
    iterations: jax.Array
    jacobian: Any
    status: jax.Array


class NonlinSolve(optx.AbstractRootFinder):
    """scipy's ``nonlin_solve`` with one Jacobian approximation; ``maxiter`` resolved (scipy's
    ``nit + 1`` or ``100 (n + 1)`` where not given); ``nit`` < 0 is scipy's ``None``."""

    # mypy reads a default into optimistix's abstract fields: these have none, as in optimistix.
    jacobian: InverseJacobian | MatrixFreeInverseJacobian  # type: ignore[misc]
    maxiter: int = eqx.field(static=True)  # type: ignore[misc]
    nit: int = eqx.field(static=True)  # type: ignore[misc]
    line_search: bool = eqx.field(static=True)  # type: ignore[misc]
    ftol: float  # type: ignore[misc]
    fatol: float  # type: ignore[misc]
    xtol: float  # type: ignore[misc]
    xatol: float  # type: ignore[misc]
    # optimistix reads these off any root finder; the verdicts above replace them.
    rtol: float
    atol: float
    norm: Callable = optx.max_norm

    def _verdict(self, iterations, f, f0_norm, x, dx):
        """scipy's ``TerminationCondition.check`` at its ``iterations + 1``-th call, after
        ``iterations`` steps, with ``dx`` the last direction; `FAILED` where ``maxiter`` leaves no
        call."""
        f_norm = max_norm(f)
        if self.nit >= 0:  # scipy's ``iter``: stop after it, unsuccessfully
            verdict = jnp.where(iterations >= self.nit, FAILED, RUNNING)
        else:
            dx_norm = max_norm(dx)
            met = (
                (f_norm <= self.fatol)
                & (f_norm / self.ftol <= f0_norm)
                & (dx_norm <= self.xatol)
                & (dx_norm / self.xtol <= max_norm(x))
            )
            verdict = jnp.where(met, CONVERGED, RUNNING)
        verdict = jnp.where(f_norm == 0, CONVERGED, verdict)
        return jnp.where(iterations >= self.maxiter, FAILED, verdict)

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _NonlinState:
        f, _ = fn(y, args)
        f, x = jnp.ravel(f), jnp.ravel(y)
        f0_norm = max_norm(f)
        return _NonlinState(
            f=f,
            f_norm=norm(f),
            f0_norm=f0_norm,
            eta=jnp.asarray(_ETA_START, y.dtype),
            iterations=jnp.array(0),
            jacobian=self.jacobian.init(x, f),
            status=self._verdict(0, f, f0_norm, x, jnp.full_like(x, jnp.inf)),
        )

    def step(self, fn, y, args, options, state: _NonlinState, tags):
        x = jnp.ravel(y)

        def residual(point):
            return jnp.ravel(fn(jnp.reshape(point, y.shape), args)[0])

        tol = jnp.minimum(state.eta, state.eta * state.f_norm)
        if isinstance(self.jacobian, MatrixFreeInverseJacobian):
            jacobian, inverse_f = self.jacobian.inverse_times(
                state.jacobian, state.f, tol, residual
            )
        else:
            jacobian, inverse_f = self.jacobian.inverse_times(state.jacobian, state.f, tol)
        dx = -inverse_f
        if self.line_search:
            x_new, f_new = armijo_search(residual, x, state.f, dx)
        else:
            x_new = x + dx
            f_new = residual(x_new)
        f_norm_new = norm(f_new)
        jacobian = self.jacobian.update(jacobian, x_new, f_new, x, state.f)
        eta_a = _GAMMA * f_norm_new**2 / state.f_norm**2
        small = _GAMMA * state.eta**2 < _ETA_THRESHOLD
        eta = jnp.where(
            small,
            jnp.minimum(_ETA_MAX, eta_a),
            jnp.minimum(_ETA_MAX, jnp.maximum(eta_a, _GAMMA * state.eta**2)),
        )
        iterations = state.iterations + 1
        zero_direction = norm(dx) == 0
        status = jnp.where(
            zero_direction, FAILED, self._verdict(iterations, f_new, state.f0_norm, x_new, dx)
        )
        new_state = _NonlinState(
            f=jnp.where(zero_direction, state.f, f_new),
            f_norm=jnp.where(zero_direction, state.f_norm, f_norm_new),
            f0_norm=state.f0_norm,
            eta=eta,
            iterations=iterations,
            jacobian=jacobian,
            status=status,
        )
        x_out = jnp.where(zero_direction, x, x_new)
        return jnp.reshape(x_out, y.shape), new_state, None

    def terminate(self, fn, y, args, options, state: _NonlinState, tags):
        result = optx.RESULTS.where(
            state.status == FAILED, optx.RESULTS.nonlinear_divergence, optx.RESULTS.successful
        )
        return state.status != RUNNING, result

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}
