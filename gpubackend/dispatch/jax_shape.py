"""JAX lowerings of shape-taking ops that accept any length known at trace time.

The stock ``ARange`` and ``Reshape`` lowerings refuse, at funcify time, any
bound or shape that is not literally a constant or a ``Shape``/``Shape_i``
node. With `jax_fgraph` evaluating shape arithmetic at trace time, such values
are concrete when the call is traced, so these lowerings defer the check to
JAX, which raises its own concretization error if a value really is traced.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.tensor.basic import ARange
from pytensor.tensor.shape import Reshape


@jax_funcify.register(ARange)
def jax_funcify_ARange(op: ARange, node=None, **kwargs) -> Callable:
    def arange(start, stop, step):
        return jnp.arange(*(np.asarray(bound, dtype=op.dtype) for bound in (start, stop, step)), dtype=op.dtype)

    return arange


@jax_funcify.register(Reshape)
def jax_funcify_Reshape(op: Reshape, node=None, **kwargs) -> Callable:
    def reshape(x, shape):
        return jnp.reshape(x, tuple(int(size) for size in np.asarray(shape).reshape(-1)))

    return reshape
