"""JAX lowerings of the random variables whose stock draws are not the distribution's, or fail.

- ``CategoricalRV``: PyTensor passes ``logit(p) = log(p / (1 - p))`` to
  ``jax.random.categorical``, which takes log-probabilities (it draws from
  ``softmax(logits)``): with ``p = (0.6, 0.4)`` category 1 came up 31% of the time. Here the
  logits are ``log(p)``. A correction, not a superset: stock mode="JAX" gets it too, unless
  ``$GPUBACKEND_REGISTER=jax_gpu``.
- ``BinomialRV``: PyTensor calls numpyro's ``binomial``, whose ``lax.cond`` branches differ in
  dtype for an integer count (a ``TypeError``, for the usual integer ``n``). Here
  ``jax.random.binomial`` draws with the count as a float, cast back to the RV's dtype.

PyTensor's RandomVariable lowering looks its sampler up (``jax_sample_fn``) while JAX traces,
after the linker's selection of lowerings has ended, so these replace the lowering of the RV
types themselves (`replaces`), which is chosen while the graph is lowered; the draw is threaded
through the generator as PyTensor's lowering threads it.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import pytensor.tensor.random.basic as ptr
from pytensor.graph.basic import Constant
from pytensor.link.jax.dispatch.random import assert_size_argument_jax_compatible
from pytensor.tensor.type_other import NoneTypeT

from gpubackend.dispatch.jax.replacements import replaces

Draw = Callable[..., jax.Array]
"""``draw(key, size, dtype, *parameters)``: the RV's draws, ``size`` None or a shape."""


def rv_lowering(op: ptr.RandomVariable, node, draw: Draw) -> Callable:
    """``fn(rng, size, *parameters) -> (rng, draws)``: one key split off the generator's per call.

    The size is passed statically where the RV's type or a constant size gives it, as PyTensor's
    lowering does; otherwise JAX must be able to trace it (PyTensor's check says so if not).
    """
    known_size = node.outputs[1].type.shape[: op.batch_ndim(node)]
    size_param = op.size_param(node)
    if None in known_size and isinstance(size_param, Constant):
        if not isinstance(size_param.type, NoneTypeT):
            known_size = tuple(size_param.data)
    static_size = None if None in known_size else known_size
    if static_size is None:
        assert_size_argument_jax_compatible(node)
    dtype = node.outputs[1].type.dtype

    def sample_fn(rng, size, *parameters):
        rng_key, sampling_key = jax.random.split(rng["jax_state"], 2)
        rng["jax_state"] = rng_key
        return rng, draw(
            sampling_key, size if static_size is None else static_size, dtype, *parameters
        )

    return sample_fn


def draw_categorical(key, size, dtype, p) -> jax.Array:
    # log(0) = -inf: a category of probability 0 is never drawn, as numpy's.
    return jax.random.categorical(key, logits=jnp.log(p), shape=size).astype(dtype)


def draw_binomial(key, size, dtype, n, p) -> jax.Array:
    p = jnp.asarray(p)
    counts = jnp.asarray(n).astype(jnp.result_type(p.dtype, jnp.float32))
    return jax.random.binomial(key, counts, p, shape=size).astype(dtype)


@replaces(ptr.CategoricalRV)
def jax_funcify_CategoricalRV(op, node, **kwargs) -> Callable:
    return rv_lowering(op, node, draw_categorical)


@replaces(ptr.BinomialRV)
def jax_funcify_BinomialRV(op, node, **kwargs) -> Callable:
    return rv_lowering(op, node, draw_binomial)
