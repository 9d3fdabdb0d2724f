"""A backtracking Armijo search that does not stall where the rounding of ``f`` hides the decrease,
and the BFGS that uses it.

optimistix's `BacktrackingArmijo` accepts a step once ``f(y + p) - f(y) <= slope * grad . p``.
Close to a minimum the decrease a good step brings, about ``|grad|^2 / H``, falls below the
rounding of ``f`` itself, ``eps |f|``: the test then compares rounding noise, rejects every step
and halves it until the iterate stands still, although the gradient, which is computed
accurately, is still far above ``gtol``. scipy's line search reads the gradient at the trial point
as well and gets further: optimistix's BFGS and CG stopped at ``max|grad|`` 3e-8 where scipy
reached 2e-10, at ``f`` near 100 (issue 27), and on a GPU, whose rounding differs, even at the
tests' ``f`` near 1. Where the predicted decrease is below the rounding of ``f``, this search
accepts a step that raises ``f`` by no more than that rounding; elsewhere it is optimistix's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import optimistix as optx
from equinox.internal import ω

ROUNDING_ULPS = 16
"""How many units of ``f``'s last place its evaluation may be off: sums of a few terms."""


class _SearchState(eqx.Module):
    step_size: jax.Array


class NoiseAwareArmijo(optx.AbstractSearch):
    """Backtracking Armijo (optimistix's defaults) that accepts, where the predicted decrease is
    below ``f``'s rounding, a step that raises ``f`` by no more than that rounding."""

    decrease_factor: float = 0.5
    slope: float = 0.1
    step_init: float = 1.0

    def init(self, y, f_info_struct) -> _SearchState:
        del y, f_info_struct
        return _SearchState(step_size=jnp.array(self.step_init))

    def step(
        self,
        first_step: jax.Array,
        y: Any,
        y_eval: Any,
        f_info: Any,
        f_eval_info: Any,
        state: _SearchState,
    ) -> tuple[jax.Array, jax.Array, Any, _SearchState]:
        predicted = f_info.compute_grad_dot((y_eval**ω - y**ω).ω)
        f, f_eval = f_info.as_min(), f_eval_info.as_min()
        difference = f_eval - f
        eps = jnp.finfo(jnp.result_type(difference)).eps
        # From the accepted value alone: a trial value of inf must not widen its own allowance.
        rounding = ROUNDING_ULPS * eps * jnp.abs(f)
        armijo = difference <= self.slope * predicted
        hidden_by_rounding = (-self.slope * predicted <= rounding) & (difference <= rounding)
        accept = first_step | ((predicted <= 0) & (armijo | hidden_by_rounding))
        step_size = jnp.where(accept, self.step_init, self.decrease_factor * state.step_size)
        return step_size, accept, optx.RESULTS.successful, _SearchState(step_size=step_size)


def _silent(**_: Any) -> None:
    """optimistix's ``verbose=False``: report nothing."""


class NoiseAwareBFGS(optx.AbstractBFGS):
    """optimistix's BFGS (inverse Hessian, Newton descent) with `NoiseAwareArmijo` as its search."""

    rtol: float
    atol: float
    norm: Callable = optx.max_norm
    use_inverse: bool = True
    descent: optx.NewtonDescent = optx.NewtonDescent(linear_solver=lx.Cholesky())
    search: NoiseAwareArmijo = NoiseAwareArmijo()
    verbose: Callable[..., None] = _silent
