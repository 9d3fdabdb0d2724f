"""JAX sampler of PyMC's truncated normal (``TruncatedNormalRV``, behind ``pm.TruncatedNormal``
and ``pm.Truncated(pm.Normal.dist(...))``), which stock JAX lacks: a plain addition.

It is registered on PyTensor's ``jax_sample_fn`` once both PyTensor's JAX dispatch and
PyMC's ``pymc.distributions.continuous`` are loaded, whichever loads last: gpubackend never
imports PyMC itself.

The draw is an inverse-CDF one, ``ndtri(Phi(a) + u * (Phi(b) - Phi(a)))`` on the standardised
bounds. ``jax.random.truncated_normal`` computes the same through ``erf``, whose values round to
1 a few standard deviations out, so a truncation in the right tail (``lower=6``) would come back
as a point mass on the bound. Here the interval is first reflected so that its centre lies at or
left of 0: the CDF is then evaluated where its values keep their relative precision (down to
``Phi(-37)``), and ``ndtri`` inverts it there to float64 accuracy.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr, ndtri
from pytensor.link.jax.dispatch.random import jax_sample_fn

from gpubackend.import_hooks import when_imported


def standard_truncated_normal(key: jax.Array, lower, upper, shape, dtype) -> jax.Array:
    """Draws of N(0, 1) truncated to ``[lower, upper]`` (broadcast to ``shape``)."""
    lower, upper = jnp.broadcast_arrays(jnp.asarray(lower, dtype), jnp.asarray(upper, dtype))
    # Reflect X -> -X when the interval's centre is right of 0 (see the module docstring).
    reflect = lower + upper > 0
    left = jnp.where(reflect, -upper, lower)
    right = jnp.where(reflect, -lower, upper)
    uniform = jax.random.uniform(key, shape, dtype)
    cdf_left = ndtr(left)
    draw = ndtri(cdf_left + uniform * (ndtr(right) - cdf_left))
    # Rounding may step just outside the interval; the truncation holds exactly.
    draw = jnp.clip(draw, left, right)
    return jnp.where(reflect, -draw, draw)


def jax_sample_fn_truncated_normal(op, node) -> Callable:
    def sample_fn(rng_key, size, dtype, mu, sigma, lower, upper):
        if size is None:
            size = jnp.broadcast_shapes(*(jnp.shape(p) for p in (mu, sigma, lower, upper)))
        standard = standard_truncated_normal(
            rng_key, (lower - mu) / sigma, (upper - mu) / sigma, size, dtype
        )
        return (mu + sigma * standard).astype(dtype)

    return sample_fn


def _register_on_pymc() -> None:
    from pymc.distributions.continuous import TruncatedNormalRV

    jax_sample_fn.register(TruncatedNormalRV, jax_sample_fn_truncated_normal)


when_imported("pymc.distributions.continuous", _register_on_pymc)
