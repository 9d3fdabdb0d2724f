"""Levenberg-Marquardt as an optimistix root finder: MINPACK's ``lmder``, the solver behind scipy's
``root(method="lm")``.

Each optimistix step is one trial point of ``lmder``: the damping whose step
fills the trust region (`levenberg_marquardt_parameter`, MINPACK's ``lmpar``),
the trust-region update and, where the point is accepted, the Jacobian there
(``jax.jacfwd``) factored with column pivoting (`minpack`). The verdicts
are ``lmder``'s: converged on small actual and predicted reductions
(``ftol``), a trust region below ``xtol`` relative to the scaled iterate, or a
gradient cosine at most ``gtol`` (an exact root has cosine 0); failed at
``maxfev`` evaluations or on tolerances below what the arithmetic resolves. So
a budget of a few evaluations ends where scipy's does, with the same
``success`` (optimistix's ``LevenbergMarquardt`` damps, counts and stops
otherwise). The damped least-squares problems are solved by a QR factorization
of the stacked system where MINPACK eliminates the damping by Givens rotations
(``qrsolv``): the same solution up to rounding. The Numba solver
(`gpubackend.solvers.levenberg_marquardt`) follows MINPACK's rotations.
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
    apply_qt,
    initial_scaling,
    norm,
    pivoted_householder_qr,
)
from gpubackend.scipy_options.settings import MINPACK_XTOL


class _Factored(eqx.Module):
    """The Jacobian at the iterate, ``J P = Q R``, and what the steps read from it."""

    r: jax.Array
    permutation: jax.Array
    column_norms: jax.Array
    qtf: jax.Array
    """The first ``n`` entries of ``Q^T F``."""
    gradient_cosine: jax.Array


class _LMState(eqx.Module):
    f: jax.Array
    fnorm: jax.Array
    factored: _Factored
    diag: jax.Array
    delta: jax.Array
    xnorm: jax.Array
    par: jax.Array
    evaluations: jax.Array
    first: jax.Array
    """No step has been accepted yet."""
    status: jax.Array


def _factor(jacobian, f, fnorm) -> _Factored:
    n = jacobian.shape[1]
    factored, rdiag, column_norms, permutation = pivoted_householder_qr(jacobian)
    qtf = apply_qt(factored, f)[:n]
    r = jnp.triu(factored[:n], 1) + jnp.diag(rdiag)
    cosines = (r.T @ (qtf / jnp.where(fnorm != 0, fnorm, 1.0))) / column_norms[permutation]
    cosines = jnp.where(column_norms[permutation] != 0, jnp.abs(cosines), 0.0)
    gradient_cosine = jnp.where(fnorm != 0, jnp.max(cosines), 0.0)
    return _Factored(r, permutation, column_norms, qtf, gradient_cosine)


def _gauss_newton(r, qtb):
    """``R x = Q^T F`` on the leading non-singular block (MINPACK's rank rule: the entries from the
    first zero pivot on are zero)."""
    n = r.shape[0]
    singular_from = jnp.argmax(jnp.append(jnp.diagonal(r) == 0, True))
    kept = jnp.arange(n) < singular_from
    block = jnp.where(kept[:, None] & kept[None, :], r, jnp.eye(n, dtype=r.dtype))
    return solve_triangular(block, jnp.where(kept, qtb, 0.0), lower=False), singular_from == n


def _unpermuted(permutation, values):
    return jnp.zeros_like(values).at[permutation].set(values)


def levenberg_marquardt_parameter(factored: _Factored, diag, delta, par):
    """MINPACK's ``lmpar``: ``(par, x)``, the damping whose step (``-x``) has ``|diag * x|`` within
    10 % of ``delta``, or the Gauss-Newton step inside it (``par = 0``); at most 10 solves."""
    r, permutation, qtb = factored.r, factored.permutation, factored.qtf
    n = r.shape[0]
    dwarf = jnp.finfo(r.dtype).tiny
    permuted_diag = diag[permutation]
    gauss_newton, full_rank = _gauss_newton(r, qtb)
    x = _unpermuted(permutation, gauss_newton)
    dxnorm = norm(diag * x)
    fp = dxnorm - delta

    def newton_denominator(triangular, scaled):
        """``|w|`` with ``T^T w = diag * (diag * x) / |diag * x|`` (permuted)."""
        rhs = permuted_diag * (scaled[permutation] / dxnorm)
        return norm(solve_triangular(triangular, rhs, lower=False, trans="T"))

    lower_at_newton = ((fp / delta) / newton_denominator(r, diag * x)) / newton_denominator(
        r, diag * x
    )
    lower = jnp.where(full_rank, lower_at_newton, 0.0)
    gnorm = norm((r.T @ qtb) / permuted_diag)
    upper = gnorm / delta
    upper = jnp.where(upper == 0, dwarf / jnp.minimum(delta, 0.1), upper)
    par = jnp.minimum(jnp.maximum(par, lower), upper)
    par = jnp.where(par == 0, gnorm / dxnorm, par)

    def damped(carry):
        iteration, par, lower, upper, fp, x, _ = carry
        par = jnp.where(par == 0, jnp.maximum(dwarf, 0.001 * upper), par)
        stacked = jnp.concatenate([r, jnp.diag(jnp.sqrt(par) * permuted_diag)])
        q, triangular = jnp.linalg.qr(stacked)
        z = solve_triangular(triangular, q[:n].T @ qtb, lower=False)
        x = _unpermuted(permutation, z)
        scaled = diag * x
        dxnorm = norm(scaled)
        previous, fp = fp, dxnorm - delta
        iteration = iteration + 1
        done = (
            (jnp.abs(fp) <= 0.1 * delta)
            | ((lower == 0) & (fp <= previous) & (previous < 0))
            | (iteration == 10)
        )
        rhs = permuted_diag * (scaled[permutation] / dxnorm)
        denominator = norm(solve_triangular(triangular, rhs, lower=False, trans="T"))
        correction = ((fp / delta) / denominator) / denominator
        new_lower = jnp.where(fp > 0, jnp.maximum(lower, par), lower)
        new_upper = jnp.where(fp < 0, jnp.minimum(upper, par), upper)
        new_par = jnp.maximum(new_lower, par + correction)
        return (
            iteration,
            jnp.where(done, par, new_par),
            new_lower,
            new_upper,
            fp,
            x,
            done,
        )

    gauss_newton_fits = fp <= 0.1 * delta
    start = (jnp.array(0), par, lower, upper, fp, x, gauss_newton_fits)
    _, par, _, _, _, x, _ = jax.lax.while_loop(lambda carry: ~carry[-1], damped, start)
    return jnp.where(gauss_newton_fits, 0.0, par), x


class MinpackLevenbergMarquardt(MinpackRootFinder):  # type: ignore[misc]
    """MINPACK's ``lmder``."""

    # scipy's defaults.
    ftol: float = MINPACK_XTOL
    gtol: float = 0.0

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _LMState:
        f, _ = fn(y, args)
        fnorm = norm(f)
        jacobian = self.jacobian(fn, y, args)
        factored = _factor(jacobian, f, fnorm)
        column_norms = factored.column_norms
        diag, xnorm, delta = initial_scaling(column_norms, y, self.factor)
        finite = jnp.all(jnp.isfinite(f)) & jnp.all(jnp.isfinite(jacobian))
        status = jnp.where(factored.gradient_cosine <= self.gtol, CONVERGED, RUNNING)
        return _LMState(
            f=f,
            fnorm=fnorm,
            factored=factored,
            diag=jnp.maximum(diag, column_norms),
            delta=delta,
            xnorm=xnorm,
            par=jnp.zeros((), y.dtype),
            evaluations=jnp.array(1),
            first=jnp.array(True),
            status=jnp.where(finite, status, FAILED),
        )

    def step(self, fn, y, args, options, state: _LMState, tags) -> tuple[Any, _LMState, Any]:
        eps = jnp.finfo(y.dtype).eps
        factored = state.factored
        par, step = levenberg_marquardt_parameter(factored, state.diag, state.delta, state.par)
        p = -step
        x_new = y + p
        pnorm = norm(state.diag * p)
        delta = jnp.where(state.first, jnp.minimum(state.delta, pnorm), state.delta)
        f_new, aux = fn(x_new, args)
        evaluations = state.evaluations + 1
        # NaN where the equations are: no reduction, as MINPACK's comparisons read it.
        fnorm_new = norm(f_new)
        fnorm = state.fnorm
        actual = jnp.where(0.1 * fnorm_new < fnorm, 1 - (fnorm_new / fnorm) ** 2, -1.0)
        temp1 = norm(factored.r @ p[factored.permutation]) / fnorm
        temp2 = (jnp.sqrt(par) * pnorm) / fnorm
        predicted = temp1**2 + temp2**2 / 0.5
        directional = -(temp1**2 + temp2**2)
        ratio = jnp.where(predicted != 0, actual / jnp.where(predicted != 0, predicted, 1), 0.0)
        shrink = jnp.where(actual >= 0, 0.5, 0.5 * directional / (directional + 0.5 * actual))
        shrink = jnp.where((0.1 * fnorm_new >= fnorm) | (shrink < 0.1), 0.1, shrink)
        widen = (par == 0) | (ratio >= 0.75)
        delta, par = (
            jnp.where(
                ratio <= 0.25,
                shrink * jnp.minimum(delta, pnorm / 0.1),
                jnp.where(widen, pnorm / 0.5, delta),
            ),
            jnp.where(ratio <= 0.25, par / shrink, jnp.where(widen, 0.5 * par, par)),
        )
        accepted = ratio >= 1e-4
        x = jnp.where(accepted, x_new, y)
        xnorm = jnp.where(accepted, norm(state.diag * x_new), state.xnorm)
        small_reduction = (jnp.abs(actual) <= self.ftol) & (predicted <= self.ftol) & (ratio <= 2)
        converged = small_reduction | (delta <= self.xtol * xnorm)
        gave_up = (
            (evaluations >= self.maxfev)
            | ((jnp.abs(actual) <= eps) & (predicted <= eps) & (ratio <= 2))
            | (delta <= eps * xnorm)
            | (factored.gradient_cosine <= eps)
        )
        status = jnp.where(converged, CONVERGED, jnp.where(gave_up, FAILED, RUNNING))
        f = jnp.where(accepted, f_new, state.f)
        fnorm = jnp.where(accepted, fnorm_new, fnorm)

        def refactored(_):
            jacobian = self.jacobian(fn, x_new, args)
            new = _factor(jacobian, f_new, fnorm_new)
            finite = jnp.all(jnp.isfinite(jacobian))
            cosine_converged = new.gradient_cosine <= self.gtol
            new_status = jnp.where(finite, jnp.where(cosine_converged, CONVERGED, RUNNING), FAILED)
            return new, jnp.maximum(state.diag, new.column_norms), new_status

        factored, diag, status = jax.lax.cond(
            accepted & (status == RUNNING),
            refactored,
            lambda _: (factored, state.diag, status),
            None,
        )
        new_state = _LMState(
            f=f,
            fnorm=fnorm,
            factored=factored,
            diag=diag,
            delta=delta,
            xnorm=xnorm,
            par=par,
            evaluations=evaluations,
            first=state.first & ~accepted,
            status=status,
        )
        return x, new_state, aux
