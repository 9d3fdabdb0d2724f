"""JAX lowerings of ARange, Reshape, Split and SpecifyShape that also accept a length known only at
trace time.

The stock lowerings refuse, at compile time, any bound or shape that is not
literally a constant or read from an array's shape. With `fgraph`
evaluating shape arithmetic at trace time, such a value is often concrete when
the call is traced (``arange(x.shape[0] // 2)``), so for those nodes the check
moves to trace time: a concrete value is used, and one that is really traced
raises the stock lowering's own ``NotImplementedError``, at the first call
instead of at compile time. Every node the stock lowering accepts is lowered by
it. Split's stock lowering accepts any sizes but splits at a traced cumulative
sum, which ``jnp.split`` refuses: sizes concrete while tracing are summed on the
host instead, with the stock lowering's checks. SpecifyShape's stock lowering
compares each expected length with Python's ``!=``, which inside ``jax.jit``
stages a comparison with a concrete ``jax.Array`` (shape arithmetic evaluated
while tracing: the length of a variable packed into an optimize op's ``x``) and
fails on its traced result: such a length is read on the host first. A length
known while tracing that the array's differs from raises `ShapeMismatchError`
then: the reference's ``AssertionError``, and stock's ``ValueError``. A length
known only at run time is left to stock's check (its error for a traced value),
except at the top of a linker that reads back (JAX_GPU), which checks it at run
time (`while_scan.allocation.checked_specify_shape`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from pytensor.link.jax.dispatch.shape import SHAPE_NOT_COMPATIBLE
from pytensor.link.jax.dispatch.tensor_basic import ARANGE_CONCRETE_VALUE_ERROR
from pytensor.tensor.basic import ARange, Split, get_scalar_constant_value, get_vector_length
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.shape import Reshape, SpecifyShape

from gpubackend.dispatch.jax.replacements import replaces, stock_lowering
from gpubackend.dispatch.jax.tracing import is_traced
from gpubackend.errors import ShapeMismatchError


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


def _constant_sizes(node) -> bool:
    """Whether ``node``'s split sizes are graph constants, which the stock lowering splits at."""
    sizes = node.inputs[1]
    try:
        for i in range(get_vector_length(sizes)):
            get_scalar_constant_value(sizes[i])
    except (ValueError, NotScalarConstantError):
        return False
    return True


@replaces(Split)
def jax_funcify_Split(op: Split, node=None, **kwargs) -> Callable:
    if node is None or _constant_sizes(node):
        return stock_lowering(Split)(op, node=node, **kwargs)
    axis = op.axis

    def split(x, sizes):
        if len(sizes) != op.len_splits:
            raise ValueError("Length of splits is not equal to n_splits")
        if is_traced(sizes):
            # The stock lowering's split, and its error.
            return jnp.split(x, jnp.cumsum(sizes[:-1]), axis=axis)
        sizes = np.asarray(sizes)
        if (sizes < 0).any():
            raise ValueError("Split sizes cannot be negative")
        if sizes.sum() != x.shape[axis]:
            raise ValueError(
                f"Split sizes do not sum up to input length along axis: {x.shape[axis]}"
            )
        return jnp.split(x, np.cumsum(sizes[:-1]), axis=axis)

    return split


def specified_lengths(shape) -> tuple:
    """SpecifyShape's declared lengths: a Python int where known while tracing, None for any
    length, else the traced value."""
    return tuple(
        length if length is None or is_traced(length) else int(np.asarray(length))
        for length in shape
    )


def check_known_lengths(node, x, lengths: tuple, axes: int) -> None:
    """Raise `ShapeMismatchError` where one of the first ``axes`` lengths of ``x`` differs from its
    declared length known while tracing (``lengths``, `specified_lengths`)."""
    shape = tuple(x.shape)
    if any(
        isinstance(length, int) and actual != length
        for actual, length in zip(shape[:axes], lengths[:axes], strict=True)
    ):
        specified = tuple("?" if is_traced(length) else length for length in lengths)
        legend = [
            meaning
            for mark, meaning in ((None, "None: any length"), ("?", "?: known only at run time"))
            if mark in specified
        ]
        raise ShapeMismatchError(
            f"{node.op}: {node.inputs[0]} has shape {shape}, expected {specified}"
            + (f" ({', '.join(legend)})" if legend else "")
        )


@replaces(SpecifyShape)
def jax_funcify_SpecifyShape(op: SpecifyShape, node=None, **kwargs) -> Callable:
    stock_specify_shape = stock_lowering(SpecifyShape)(op, node=node, **kwargs)

    def specify_shape(x, *shape):
        lengths = specified_lengths(shape)
        traced = [axis for axis, length in enumerate(lengths) if is_traced(length)]
        # Stock checks the axes in order: up to the first length known only at run time, here.
        check_known_lengths(node, x, lengths, traced[0] if traced else len(lengths))
        if traced:
            # That length: stock's check, and its error for a traced length (a linker that reads
            # back checks it at run time instead: `while_scan.allocation.checked_specify_shape`).
            return stock_specify_shape(x, *lengths)
        return x

    return specify_shape
