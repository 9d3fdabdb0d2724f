"""scipy's diagonal Jacobian approximations (``root(method="diagbroyden" | "linearmixing" |
"excitingmixing")``) as `InverseJacobian`s for the optimistix `NonlinSolve`: the iterations of the
Numba solvers in `gpubackend.solvers.diagonal_jacobians`, whose docstring describes them.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from gpubackend.dispatch.jax.nonlin_solve import InverseJacobian, initial_alpha, norm


class LinearMixing(InverseJacobian):
    """``J^-1 = -alpha I``; its state is ``alpha``."""

    alpha: float
    """NaN: scipy's ``None`` (scaled from ``x0`` and ``F(x0)``)."""

    def init(self, x, f):
        return initial_alpha(self.alpha, x, f)

    def inverse_times(self, alpha, f, tol):
        return alpha, -alpha * f

    def update(self, alpha, x, f, x_previous, f_previous):
        return alpha


class ExcitingSteps(eqx.Module):
    """Exciting mixing's ``J^-1 = -diag(beta)``; ``alpha`` is the increment and the reset value."""

    alpha: jax.Array
    beta: jax.Array


class ExcitingMixing(InverseJacobian):
    alpha: float
    """NaN: scipy's ``None`` (scaled from ``x0`` and ``F(x0)``)."""
    alphamax: float

    def init(self, x, f) -> ExcitingSteps:
        alpha = initial_alpha(self.alpha, x, f)
        return ExcitingSteps(alpha, jnp.full(x.shape, alpha, x.dtype))

    def inverse_times(self, steps: ExcitingSteps, f, tol):
        return steps, -f * steps.beta

    def update(self, steps: ExcitingSteps, x, f, x_previous, f_previous) -> ExcitingSteps:
        """scipy's ``ExcitingMixing._update``: the sign of ``F`` held, the step grows."""
        beta = jnp.where(f * f_previous > 0, steps.beta + steps.alpha, steps.alpha)
        return ExcitingSteps(steps.alpha, jnp.clip(beta, 0.0, self.alphamax))


class DiagonalBroyden(InverseJacobian):
    """``J = -diag(d)``; its state is ``d``, ``1 / alpha`` to start."""

    alpha: float
    """NaN: scipy's ``None`` (scaled from ``x0`` and ``F(x0)``)."""

    def init(self, x, f):
        return jnp.full(x.shape, 1.0 / initial_alpha(self.alpha, x, f), x.dtype)

    def inverse_times(self, d, f, tol):
        return d, -f / d

    def update(self, d, x, f, x_previous, f_previous):
        """scipy's ``DiagBroyden._update``: the diagonal of Broyden's first update of ``J``."""
        dx, df = x - x_previous, f - f_previous
        return d - (df + d * dx) * dx / norm(dx) ** 2
