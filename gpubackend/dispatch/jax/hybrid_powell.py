"""Powell's hybrid method as an optimistix root finder: MINPACK's ``hybrj``, the solver behind
scipy's ``root(method="hybr")``.

Each optimistix step is one trial point of ``hybrj``: the dogleg step inside
the trust region scaled by the Jacobian's column norms (`scaled_dogleg`), the
trust-region update, and Broyden's rank-one correction of the factored
Jacobian, which is evaluated afresh (``jax.jacfwd``) only at the start and
after two failed steps in a row. The verdicts are ``hybrj``'s: converged when
the trust region is below ``xtol`` relative to the scaled iterate (or the
residual is zero); failed at ``maxfev`` evaluations, when ``xtol`` is too
small, or after slow progress. So a budget of a few evaluations ends where
scipy's does, with the same ``success`` (optimistix's ``Dogleg`` counts, moves
and stops otherwise). The Broyden update refactors ``R + u v^T`` by
Householder reflections (``jnp.linalg.qr``) where MINPACK rotates by Givens
rotations: the same factors up to rounding and the signs of ``R``'s rows, on
which no step depends. The Numba solver (`gpubackend.solvers.hybrid_powell`)
follows MINPACK's rotations exactly.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

from gpubackend.dispatch.jax.minpack import (
    CONVERGED,
    FAILED,
    RUNNING,
    MinpackRootFinder,
    initial_scaling,
    norm,
)


class _HybridState(eqx.Module):
    f: jax.Array
    """The residual at the iterate."""
    fnorm: jax.Array
    r: jax.Array
    """``R`` of the factored (Broyden-corrected) Jacobian ``Q R``."""
    q: jax.Array
    qtf: jax.Array
    """``Q^T F``."""
    diag: jax.Array
    """The scaling of the variables: the largest column norms of the Jacobians seen."""
    delta: jax.Array
    """The trust region's radius, in scaled variables."""
    xnorm: jax.Array
    evaluations: jax.Array
    successes: jax.Array
    failures: jax.Array
    slow_steps: jax.Array
    """Steps in a row that reduced the residual by less than 0.1 %."""
    slow_jacobians: jax.Array
    """Fresh Jacobians in a row whose first step reduced it by less than 10 %."""
    fresh_jacobian: jax.Array
    refactor: jax.Array
    """The next step starts by evaluating and factoring the Jacobian at the iterate."""
    first: jax.Array
    """No step has been accepted yet."""
    status: jax.Array


def scaled_dogleg(r, diag, qtb, delta):
    """MINPACK's ``dogleg``: the minimiser of ``|R x - Q^T F|`` over ``|diag * x| <= delta`` along
    the dogleg from the scaled gradient to the Gauss-Newton point (``x`` is minus the step).

    A zero pivot of ``R`` is replaced by ``eps`` times its column's largest entry, as MINPACK does.
    """
    eps = jnp.finfo(r.dtype).eps
    pivots = jnp.diagonal(r)
    column_largest = jnp.max(jnp.abs(jnp.triu(r)), axis=0)
    stand_in = jnp.where(column_largest == 0, eps, eps * column_largest)
    safe_r = r + jnp.diag(jnp.where(pivots == 0, stand_in, 0.0))
    gauss_newton = solve_triangular(safe_r, qtb, lower=False)
    gauss_newton_norm = norm(diag * gauss_newton)
    gradient = (r.T @ qtb) / diag
    gradient_norm = norm(gradient)
    has_gradient = gradient_norm != 0
    direction = jnp.where(has_gradient, gradient / jnp.where(has_gradient, gradient_norm, 1), 0)
    direction = direction / diag
    image_norm = norm(r @ direction)
    cauchy_norm = jnp.where(
        has_gradient, (gradient_norm / image_norm) / jnp.where(has_gradient, image_norm, 1), 0
    )
    ratio = delta / gauss_newton_norm
    shrink = cauchy_norm / delta
    residual_norm = norm(qtb)
    temp = (residual_norm / gradient_norm) * (residual_norm / gauss_newton_norm) * shrink
    temp = (
        temp - ratio * shrink**2 + jnp.sqrt((temp - ratio) ** 2 + (1 - ratio**2) * (1 - shrink**2))
    )
    dogleg_alpha = (ratio * (1 - shrink**2)) / temp
    alpha = jnp.where(has_gradient, jnp.where(cauchy_norm < delta, dogleg_alpha, 0.0), ratio)
    step = (1 - alpha) * jnp.minimum(cauchy_norm, delta) * direction + alpha * gauss_newton
    return jnp.where(gauss_newton_norm <= delta, gauss_newton, step)


class HybridPowell(MinpackRootFinder):  # type: ignore[misc]
    """MINPACK's ``hybrj``."""

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _HybridState:
        f, _ = fn(y, args)
        n = y.shape[0]
        zero, zeros = jnp.zeros((), y.dtype), jnp.zeros((n,), y.dtype)
        count = jnp.array(0)
        finite = jnp.all(jnp.isfinite(f))
        return _HybridState(
            f=f,
            fnorm=norm(f),
            r=jnp.zeros((n, n), y.dtype),
            q=jnp.eye(n, dtype=y.dtype),
            qtf=zeros,
            diag=jnp.ones((n,), y.dtype),
            delta=zero,
            xnorm=zero,
            evaluations=jnp.array(1),
            successes=count,
            failures=count,
            slow_steps=count,
            slow_jacobians=count,
            fresh_jacobian=jnp.array(True),
            refactor=jnp.array(True),
            first=jnp.array(True),
            status=jnp.where(finite, RUNNING, FAILED),
        )

    def _factored(self, fn, y, args, state: _HybridState) -> _HybridState:
        """The Jacobian at the iterate, factored; on the first, the scaling and trust region."""
        jacobian = self.jacobian(fn, y, args)
        q, r = jnp.linalg.qr(jacobian)
        column_norms = jnp.sqrt(jnp.sum(jacobian * jacobian, axis=0))
        first_diag, first_xnorm, first_delta = initial_scaling(column_norms, y, self.factor)
        diag = jnp.where(state.first, first_diag, state.diag)
        xnorm = jnp.where(state.first, first_xnorm, state.xnorm)
        delta = jnp.where(state.first, first_delta, state.delta)
        finite = jnp.all(jnp.isfinite(jacobian))
        return eqx.tree_at(
            lambda s: (s.r, s.q, s.qtf, s.diag, s.xnorm, s.delta, s.fresh_jacobian, s.status),
            state,
            (
                r,
                q,
                q.T @ state.f,
                jnp.maximum(diag, column_norms),
                xnorm,
                delta,
                jnp.array(True),
                jnp.where(finite, state.status, FAILED),
            ),
        )

    def step(
        self, fn, y, args, options, state: _HybridState, tags
    ) -> tuple[Any, _HybridState, Any]:
        state = jax.lax.cond(
            state.refactor,
            lambda s: self._factored(fn, y, args, s),
            lambda s: s,
            state,
        )
        eps = jnp.finfo(y.dtype).eps
        p = -scaled_dogleg(state.r, state.diag, state.qtf, state.delta)
        x_new = y + p
        pnorm = norm(state.diag * p)
        delta = jnp.where(state.first, jnp.minimum(state.delta, pnorm), state.delta)
        f_new, aux = fn(x_new, args)
        evaluations = state.evaluations + 1
        finite = jnp.all(jnp.isfinite(f_new))
        fnorm_new = jnp.where(finite, norm(f_new), jnp.inf)
        actual = jnp.where(fnorm_new < state.fnorm, 1 - (fnorm_new / state.fnorm) ** 2, -1.0)
        predicted_qtf = state.qtf + state.r @ p
        predicted_norm = norm(predicted_qtf)
        predicted = jnp.where(
            predicted_norm < state.fnorm, 1 - (predicted_norm / state.fnorm) ** 2, 0.0
        )
        ratio = jnp.where(predicted > 0, actual / jnp.where(predicted > 0, predicted, 1), 0.0)
        failed_step = ratio < 0.1
        successes = jnp.where(failed_step, 0, state.successes + 1)
        failures = jnp.where(failed_step, state.failures + 1, 0)
        grown = jnp.where((ratio >= 0.5) | (successes > 1), jnp.maximum(delta, pnorm / 0.5), delta)
        grown = jnp.where(jnp.abs(ratio - 1) <= 0.1, pnorm / 0.5, grown)
        delta = jnp.where(failed_step, 0.5 * delta, grown)
        accepted = ratio >= 1e-4
        x = jnp.where(accepted, x_new, y)
        f = jnp.where(accepted, f_new, state.f)
        fnorm = jnp.where(accepted, fnorm_new, state.fnorm)
        xnorm = jnp.where(accepted, norm(state.diag * x_new), state.xnorm)
        slow_steps = jnp.where(actual >= 0.001, 0, state.slow_steps + 1)
        slow_jacobians = jnp.where(
            actual >= 0.1,
            0,
            state.slow_jacobians + state.fresh_jacobian.astype(state.slow_jacobians.dtype),
        )
        converged = (delta <= self.xtol * xnorm) | (fnorm == 0)
        gave_up = (
            (evaluations >= self.maxfev)
            | (0.1 * jnp.maximum(0.1 * delta, pnorm) <= eps * xnorm)
            | (slow_jacobians == 5)
            | (slow_steps == 10)
        )
        status = jnp.where(
            state.status != RUNNING,
            state.status,
            jnp.where(converged, CONVERGED, jnp.where(gave_up, FAILED, RUNNING)),
        )
        refactor = failures == 2
        # Broyden's update of the factored Jacobian, with the new Q^T F where the iterate moved.
        qt_f_new = state.q.T @ f_new
        qt_change = (qt_f_new - predicted_qtf) / pnorm
        scaled_step = state.diag * ((state.diag * p) / pnorm)
        qtf = jnp.where(accepted, qt_f_new, state.qtf)
        rotation, r_updated = jnp.linalg.qr(state.r + jnp.outer(qt_change, scaled_step))
        keep = refactor | (status != RUNNING)
        new_state = _HybridState(
            f=f,
            fnorm=fnorm,
            r=jnp.where(keep, state.r, r_updated),
            q=jnp.where(keep, state.q, state.q @ rotation),
            qtf=jnp.where(keep, qtf, rotation.T @ qtf),
            diag=state.diag,
            delta=delta,
            xnorm=xnorm,
            evaluations=evaluations,
            successes=successes,
            failures=failures,
            slow_steps=slow_steps,
            slow_jacobians=slow_jacobians,
            fresh_jacobian=jnp.array(False),
            refactor=refactor,
            first=state.first & ~accepted,
            status=status,
        )
        return x, new_state, aux
