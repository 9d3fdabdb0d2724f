"""JAX lowerings of ARange and Reshape that also accept a length known only at trace time.

The stock lowerings refuse, at compile time, any bound or shape that is not
literally a constant or read from an array's shape. With `fgraph`
evaluating shape arithmetic at trace time, such a value is often concrete when
the call is traced (``arange(x.shape[0] // 2)``), so for those nodes the check
moves to trace time: a concrete value is used, and one that is really traced
raises the stock lowering's own ``NotImplementedError``, at the first call
instead of at compile time. Every node the stock lowering accepts is lowered by
it.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from pytensor.link.jax.dispatch.shape import SHAPE_NOT_COMPATIBLE
from pytensor.link.jax.dispatch.tensor_basic import ARANGE_CONCRETE_VALUE_ERROR
from pytensor.tensor.basic import ARange
from pytensor.tensor.shape import Reshape

from gpubackend.dispatch.jax.replacements import replaces, stock_lowering
from gpubackend.dispatch.jax.tracing import is_traced


def _stock_or_none(op_type: type, op, node, kwargs) -> Callable | None:
    """The stock lowering of ``node``, or None where it refuses the node's (non-concrete-looking)
    arguments."""
    try:
        return stock_lowering(op_type)(op, node=node, **kwargs)
    except NotImplementedError:
        return None


def _concrete(value, refusal: str) -> np.ndarray:
    if is_traced(value):
        raise NotImplementedError(refusal)
    return np.asarray(value)


@replaces(ARange)
def jax_funcify_ARange(op: ARange, node=None, **kwargs) -> Callable:
    stock_arange = _stock_or_none(ARange, op, node, kwargs)
    if stock_arange is not None:
        return stock_arange

    def arange(start, stop, step):
        start, stop, step = (
            _concrete(bound, ARANGE_CONCRETE_VALUE_ERROR).astype(op.dtype)
            for bound in (start, stop, step)
        )
        return jnp.arange(start, stop, step, dtype=op.dtype)

    return arange


@replaces(Reshape)
def jax_funcify_Reshape(op: Reshape, node=None, **kwargs) -> Callable:
    stock_reshape = _stock_or_none(Reshape, op, node, kwargs)
    if stock_reshape is not None:
        return stock_reshape

    def reshape(x, shape):
        return jnp.reshape(
            x, tuple(int(size) for size in _concrete(shape, SHAPE_NOT_COMPATIBLE).reshape(-1))
        )

    return reshape
