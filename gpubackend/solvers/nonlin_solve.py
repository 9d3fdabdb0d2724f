"""scipy's ``nonlin_solve``: the inexact quasi-Newton driver behind ``root(method="broyden1")``,
``"anderson"``, ``"linearmixing"`` and the rest of its family.

Each iteration checks scipy's ``TerminationCondition`` (max-norms of ``F``,
``x`` and the last step against ``fatol``, ``ftol``, ``xatol``, ``xtol``; with
``nit`` it stops after ``nit`` steps, unsuccessfully), asks the Jacobian
approximation for ``dx = -J^-1 F`` at the forcing tolerance scipy computes,
takes it through scipy's backtracking Armijo search on ``|F|^2`` (or whole,
with ``line_search=None``) and hands the new point to the approximation. As
in scipy, running out of ``maxiter`` is a failure even where the last step
met the tolerances, and a zero step (scipy's ``ValueError``) ends it
unsuccessfully.

A Jacobian approximation is three jitted functions over its own state (one
module each, `gpubackend.solvers.broyden`, ...):

- ``setup(x, f, options) -> state``;
- ``inverse_times(state, options, f, tol) -> (state, J^-1 f)``;
- ``update(state, options, x, f, x_previous, f_previous) -> state``;

``options`` being the method's ``jac_options`` (`gpubackend.scipy_options.settings`). An
approximation that evaluates the equations itself (scipy's ``KrylovJacobian``, by finite
differences) gives ``bind_inverse_times(residual)`` instead, a jitted
``inverse_times(state, options, f, tol, args)`` (`make_matrix_free_nonlin_solver`).
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.scipy_options.settings import UNTIL_CONVERGED
from gpubackend.solvers import nonlin_maxiter
from gpubackend.solvers.small_vectors import all_finite, max_abs, norm

# scipy's forcing-term constants (Eisenstat-Walker, choice 2) and its Armijo search's smallest step.
_GAMMA, _ETA_MAX, _ETA_THRESHOLD, _ETA_START = 0.9, 0.9999, 0.1, 1e-3
_ARMIJO_C1, _ARMIJO_STEP_MIN = 1e-4, 1e-2
# TerminationCondition's verdicts.
CONTINUE, CONVERGED, EXHAUSTED = 0, 1, 2


@numba_njit(error_model="numpy")
def termination(settings, iteration, f0_norm, f, x, dx):
    """scipy's ``TerminationCondition.check`` at its ``iteration``-th call (from 1)."""
    f_norm = max_abs(f)
    if f_norm == 0.0:
        return CONVERGED
    if settings.nit != UNTIL_CONVERGED:
        return EXHAUSTED if iteration > settings.nit else CONTINUE
    dx_norm = max_abs(dx)
    met = (
        f_norm <= settings.fatol
        and f_norm / settings.ftol <= f0_norm
        and dx_norm <= settings.xatol
        and dx_norm / settings.xtol <= max_abs(x)
    )
    return CONVERGED if met else CONTINUE


@numba_njit(error_model="numpy")
def next_forcing(eta, f_norm_new, f_norm):
    """scipy's forcing term for the next inner solve."""
    eta_a = _GAMMA * f_norm_new**2 / f_norm**2
    if _GAMMA * eta**2 < _ETA_THRESHOLD:
        return min(_ETA_MAX, eta_a)
    return min(_ETA_MAX, max(eta_a, _GAMMA * eta**2))


@numba_njit(error_model="numpy")
def armijo_next(phi0, alpha0, phi_a0, alpha1, phi_a1):
    """The next trial of scipy's ``scalar_search_armijo`` (derivative ``-phi0`` at 0) after
    ``alpha1`` failed: the minimiser of the cubic through both, pulled back to ``alpha1 / 2`` if
    it moved too far or too little."""
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
    return (-b + np.sqrt(abs(b**2 - 3 * a * derphi0))) / (3.0 * a)


@numba_njit(error_model="numpy")
def armijo_holds(phi0, alpha, phi_alpha):
    """Sufficient decrease of ``phi = |F|^2`` along ``dx`` (slope ``-phi0``)."""
    return phi_alpha <= phi0 - _ARMIJO_C1 * alpha * phi0


@numba_njit(error_model="numpy")
def armijo_quadratic(phi0, phi_1):
    """scipy's second trial: the minimiser of the quadratic through ``phi(0)``, its slope and
    ``phi(1)``."""
    return phi0 / 2.0 / (phi_1 - phi0 + phi0)


@numba_njit
def squared_norm_or_inf(f):
    """scipy's ``_safe_norm(f) ** 2``: infinite where ``f`` is not finite."""
    return norm(f) ** 2 if all_finite(f) else np.inf


def make_nonlin_solver(setup: Callable, inverse_times: Callable, update: Callable) -> Callable:
    """``make(residual)`` for one Jacobian approximation: ``solve(x0, args, settings:
    NonlinSettings) -> (x, converged)``, ``residual(x, args)`` returning ``F``."""

    def bind_inverse_times(residual: Callable) -> Callable:
        @numba_njit(error_model="numpy")
        def inverse_times_without_residual(state, options, f, tol, args):
            return inverse_times(state, options, f, tol)

        return inverse_times_without_residual

    return make_matrix_free_nonlin_solver(setup, bind_inverse_times, update)


def make_matrix_free_nonlin_solver(
    setup: Callable, bind_inverse_times: Callable, update: Callable
) -> Callable:
    """`make_nonlin_solver` for an approximation whose ``inverse_times`` evaluates the equations:
    ``bind_inverse_times(residual)`` returns it, taking the equations' ``args`` last."""

    def make(residual: Callable) -> Callable:
        inverse_times = bind_inverse_times(residual)

        @numba_njit(error_model="numpy")
        def armijo_search(x, fx, dx, args):
            """scipy's ``_nonlin_line_search(..., 'armijo')``: ``(x + s dx, F there)``, the full
            step where the search finds none."""
            phi0 = norm(fx) ** 2
            alpha0 = 1.0
            f_trial = residual(x + dx, args)
            phi_a0 = squared_norm_or_inf(f_trial)
            if armijo_holds(phi0, alpha0, phi_a0):
                return x + dx, f_trial
            alpha1 = armijo_quadratic(phi0, phi_a0)
            f_trial = residual(x + alpha1 * dx, args)
            phi_a1 = squared_norm_or_inf(f_trial)
            if armijo_holds(phi0, alpha1, phi_a1):
                return x + alpha1 * dx, f_trial
            while alpha1 > _ARMIJO_STEP_MIN:
                alpha2 = armijo_next(phi0, alpha0, phi_a0, alpha1, phi_a1)
                f_trial = residual(x + alpha2 * dx, args)
                phi_a2 = squared_norm_or_inf(f_trial)
                if armijo_holds(phi0, alpha2, phi_a2):
                    return x + alpha2 * dx, f_trial
                if (alpha1 - alpha2) > alpha1 / 2.0 or (1 - alpha2 / alpha1) < 0.96:
                    alpha2 = alpha1 / 2.0
                alpha0, alpha1 = alpha1, alpha2
                phi_a0, phi_a1 = phi_a1, phi_a2
            # No step found: scipy takes the full one.
            x_new = x + dx
            return x_new, residual(x_new, args)

        @numba_njit(error_model="numpy")
        def solve(x0, args, settings):
            x = x0.copy()
            fx = residual(x, args)
            fx_norm = norm(fx)
            f0_norm = max_abs(fx)
            state = setup(x, fx, settings.jac_options)
            dx = np.full(x.shape[0], np.inf)
            eta = _ETA_START
            for iteration in range(
                1, nonlin_maxiter(settings.maxiter, settings.nit, x.shape[0]) + 1
            ):
                verdict = termination(settings, iteration, f0_norm, fx, x, dx)
                if verdict != CONTINUE:
                    return x, verdict == CONVERGED
                state, inverse_f = inverse_times(
                    state, settings.jac_options, fx, min(eta, eta * fx_norm), args
                )
                dx = -inverse_f
                if norm(dx) == 0.0:
                    return x, False
                if settings.line_search == "armijo":
                    x_new, f_new = armijo_search(x, fx, dx, args)
                else:
                    x_new = x + dx
                    f_new = residual(x_new, args)
                f_norm_new = norm(f_new)
                state = update(state, settings.jac_options, x_new, f_new, x, fx)
                eta = next_forcing(eta, f_norm_new, fx_norm)
                x, fx, fx_norm = x_new, f_new, f_norm_new
            return x, False

        return solve

    return make


@numba_njit(error_model="numpy")
def initial_alpha(alpha, x, f):
    """scipy's ``GenericBroyden.setup``: ``alpha`` as given, else ``0.5 max(|x0|, 1) / |F(x0)|``
    (1 where ``F(x0) = 0``)."""
    if not np.isnan(alpha):
        return alpha
    f_norm = norm(f)
    return 0.5 * max(norm(x), 1.0) / f_norm if f_norm != 0.0 else 1.0
