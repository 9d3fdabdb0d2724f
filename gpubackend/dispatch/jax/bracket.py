"""Downhill search for an interval that holds a scalar minimum, as ``scipy.optimize.bracket`` does.

optimistix's `GoldenSearch` needs ``lower``/``upper`` around the minimum, while
``minimize_scalar(method="brent"|"golden")`` may give a two-point starting
interval or none at all. This fills that gap with golden-ratio expansion in a
``lax.while_loop``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

_GOLDEN_GROWTH = 1.618034


def expand_bracket(
    objective: Callable[[jax.Array], jax.Array], xa: jax.Array, xb: jax.Array, max_steps: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Walk downhill from ``(xa, xb)`` until the objective rises again.

    Returns ``(lower, upper, found)``: an interval holding a local minimum, and
    whether one was found within ``max_steps`` expansions.
    """
    fa, fb = objective(xa), objective(xb)
    uphill = fb > fa
    xa, xb = jnp.where(uphill, xb, xa), jnp.where(uphill, xa, xb)
    fb = jnp.minimum(fa, fb)
    xc = xb + _GOLDEN_GROWTH * (xb - xa)

    def still_descending(state):
        _, _, _, f_mid, f_far, step = state
        return (f_far < f_mid) & (step < max_steps)

    def step_further(state):
        _, x_mid, x_far, _, f_far, step = state
        x_next = x_far + _GOLDEN_GROWTH * (x_far - x_mid)
        return x_mid, x_far, x_next, f_far, objective(x_next), step + 1

    xa, _, xc, fb, fc, _ = jax.lax.while_loop(
        still_descending, step_further, (xa, xb, xc, fb, objective(xc), 0)
    )
    return jnp.minimum(xa, xc), jnp.maximum(xa, xc), fc >= fb
