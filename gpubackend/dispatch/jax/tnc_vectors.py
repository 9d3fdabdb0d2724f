"""The vector steps and the objective that TNC's JAX lowering (`gpubackend.dispatch.jax.tnc`)
shares between its outer step, its CG direction and its line search.

As in the Numba solver (`gpubackend.solvers.tnc_vectors`), TNC works on scaled
variables ``(x - xoffset) / xscale`` and a scaled objective ``fscale * f``, and
calls the objective at the unscaled point clipped into the bounds, in float64
whatever ``x``'s dtype (scipy's TNC is C on doubles). The variables that
``bounds`` fix are left out, as scipy leaves them out: the iterates hold the free
ones, and `Objective` puts them back into the full point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

EPS = float(np.finfo(np.float64).eps)

ValueGradient = Callable[[jax.Array], tuple[jax.Array, jax.Array]]
"""``full point -> (f, gradient)``, float64."""


def scaled_norm(v: jax.Array) -> jax.Array:
    """``tnc.c``'s ``dnrm21``, the Euclidean norm relative to the largest entry (so without
    overflow), summed at once rather than as it goes: equal to rounding."""
    scale = jnp.max(jnp.abs(v), initial=0.0)
    ratio = v / jnp.where(scale > 0.0, scale, 1.0)
    return scale * jnp.sqrt(jnp.sum(ratio * ratio))


def project(v: jax.Array, pivot: jax.Array) -> jax.Array:
    """Zero the entries of the variables held at a bound (``pivot != 0``)."""
    return jnp.where(pivot != 0, 0.0, v)


def projected_norm(v: jax.Array, pivot: jax.Array) -> jax.Array:
    """The norm of ``v`` over the free variables."""
    return scaled_norm(project(v, pivot))


class Scaling(NamedTuple):
    """TNC's change of variables and the bounds (of the free variables; a zero ``scale`` moves
    a variable's bounds to its start)."""

    xscale: jax.Array
    xoffset: jax.Array
    low: jax.Array
    up: jax.Array

    def gradient(self, gradient: jax.Array, fscale: jax.Array) -> jax.Array:
        """The gradient in scaled variables and objective (``tnc.c``'s ``scaleg``)."""
        return gradient * (self.xscale * fscale)

    def slope(self, gradient: jax.Array, direction: jax.Array, fscale: jax.Array) -> jax.Array:
        """The scaled gradient's product with ``direction``."""
        return jnp.sum(direction * self.gradient(gradient, fscale))

    def point(self, x: jax.Array, step: jax.Array, direction: jax.Array) -> jax.Array:
        """``x + step * direction`` unscaled and clipped into the bounds: where TNC calls the
        objective."""
        return jnp.clip((x + step * direction) * self.xscale + self.xoffset, self.low, self.up)


class Evaluations(NamedTuple):
    """The objective's calls: ``requested`` is ``tnc.c``'s count (its ``maxfun`` budget counts
    every request), ``made`` scipy's ``nfev`` (its ``ScalarFunction`` calls the objective again
    only at a point other than ``last``)."""

    requested: jax.Array
    made: jax.Array
    last: jax.Array

    def after(self, full: jax.Array, happened: jax.Array | bool = True) -> Evaluations:
        """The counts after a request at the full point ``full``, where ``happened``."""
        new = happened & jnp.any(full != self.last)
        return Evaluations(
            self.requested + jnp.asarray(happened).astype(self.requested.dtype),
            self.made + new.astype(self.made.dtype),
            jnp.where(new, full, self.last),
        )


class Objective(NamedTuple):
    """The objective on the free variables: ``full`` holds the fixed ones at their bound."""

    value_gradient: ValueGradient
    free: np.ndarray
    full: jax.Array

    def at(self, point: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(f, gradient of the free variables, full point)`` at the free variables' ``point``."""
        full = self.full.at[self.free].set(point)
        f, gradient = self.value_gradient(full)
        return f, gradient[self.free], full
