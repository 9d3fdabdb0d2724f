"""scipy's Newton-Krylov (``root(method="krylov")``, its ``KrylovJacobian``) as a
`MatrixFreeInverseJacobian` for the optimistix `NonlinSolve`: the iteration of the Numba solver in
`gpubackend.solvers.krylov`, whose docstring describes it.

``J^-1 f`` is one cycle of the inner solver (`gpubackend.dispatch.jax.krylov_inner`: lgmres,
scipy's default, or gmres) whose products ``J v`` are forward differences of the equations the
driver hands in, at the last accepted point ``x0``: ``(F(x0 + sc v) - F(x0)) / sc`` with
``sc = omega / |v|``, ``omega = rdiff max(1, |x0|_inf) / max(1, |F(x0)|_inf)``. lgmres's outer
directions are carried from one nonlinear step to the next in the state, as scipy carries its
``outer_v`` list.

Where scipy raises (a non-finite product from a finite ``v``, a non-finite right-hand side) the
direction here is zero: the driver ends the solve unsuccessfully at the last finite iterate, as
it does on scipy's zero-direction ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from gpubackend.dispatch.jax import krylov_inner
from gpubackend.dispatch.jax.nonlin_solve import MatrixFreeInverseJacobian, max_norm, norm


class KrylovState(eqx.Module):
    """The point the products are taken at, their step scale, and lgmres's kept directions (the
    first ``kept`` rows of ``outer``, oldest first)."""

    x0: jax.Array
    f0: jax.Array
    omega: jax.Array
    outer: jax.Array
    kept: jax.Array


class KrylovJacobian(MatrixFreeInverseJacobian):
    """``jac_options`` as `gpubackend.scipy_options.settings.KrylovJacobianOptions` spells them
    (``inner_M``, refused unless ``None``, left out)."""

    rdiff: float
    """NaN: scipy's ``None``, ``sqrt(eps)`` of the dtype."""
    method: str = eqx.field(static=True)
    inner_maxiter: int = eqx.field(static=True)
    outer_k: int = eqx.field(static=True)
    inner_inner_m: int = eqx.field(static=True)
    inner_restart: int = eqx.field(static=True)
    inner_rtol: float
    """NaN: the driver's forcing term."""
    inner_atol: float

    def __check_init__(self):
        # scipy's own solvers fail here, on a cycle without a product.
        if self.method == "lgmres" and self.inner_inner_m < 1:
            raise ValueError(
                "root(method='krylov') jac_options 'inner_inner_m' must be at least 1 for "
                f"lgmres, got {self.inner_inner_m}"
            )
        if self.method == "gmres" and self._restart < 1:
            named = "inner_restart" if self.inner_restart >= 0 else "inner_maxiter"
            raise ValueError(
                f"root(method='krylov') jac_options '{named}' must be at least 1 for gmres, "
                f"got {getattr(self, named)}"
            )

    @property
    def _restart(self) -> int:
        return self.inner_maxiter if self.inner_restart < 0 else self.inner_restart

    def _at(self, x, f, outer, kept) -> KrylovState:
        """scipy's ``_update_diff_step`` at ``(x, F(x))``."""
        rdiff = math.sqrt(jnp.finfo(x.dtype).eps) if math.isnan(self.rdiff) else self.rdiff
        omega = rdiff * jnp.maximum(1.0, max_norm(x)) / jnp.maximum(1.0, max_norm(f))
        return KrylovState(x, f, omega, outer, kept)

    def init(self, x, f) -> KrylovState:
        outer_k = self.outer_k if self.method == "lgmres" else 0
        return self._at(x, f, jnp.zeros((outer_k, x.shape[0]), x.dtype), jnp.array(0))

    def inverse_times(self, state: KrylovState, f, tol, residual: Callable):
        """scipy's ``KrylovJacobian.solve``."""

        def jacobian_times(v):
            """scipy's ``KrylovJacobian.matvec``: zero, without an evaluation, at ``v = 0``."""
            v_norm = norm(v)

            def difference():
                scale = state.omega / v_norm
                return (residual(state.x0 + scale * v) - state.f0) / scale

            return jax.lax.cond(v_norm == 0.0, lambda: 0.0 * v, difference)

        rtol = tol if math.isnan(self.inner_rtol) else self.inner_rtol
        if self.method == "gmres":
            x = krylov_inner.gmres(jacobian_times, f, rtol, self.inner_atol, self._restart)
        else:
            x, outer, kept = krylov_inner.lgmres(
                jacobian_times,
                f,
                rtol,
                self.inner_atol,
                self.inner_inner_m,
                state.outer,
                state.kept,
            )
            state = KrylovState(state.x0, state.f0, state.omega, outer, kept)
        # A non-finite product (scipy's ValueError) ends the solve: a zero step.
        return state, jnp.where(jnp.all(jnp.isfinite(x)), x, 0.0)

    def update(self, state: KrylovState, x, f, x_previous, f_previous) -> KrylovState:
        return self._at(x, f, state.outer, state.kept)


def krylov_jacobian(*, inner_M: None, **options) -> KrylovJacobian:
    """`KrylovJacobian` from ``jac_options``; the option resolution has refused a preconditioner
    ``inner_M`` other than ``None``."""
    return KrylovJacobian(**options)
