"""Lengths known only at run time, carried as a maximum-size buffer plus its length.

A while-Scan's trace is as long as the steps its ``until`` condition allows,
which ``jax.jit`` cannot return as a shape. Inside one lowered graph it need
not be a shape at all: the trace is carried as `Bounded` (the buffer at its
maximum length, whose first ``length`` entries are meaningful), each length
computed from it as `BoundedInt` (a traced integer with bounds known while
tracing), and the consumers PyTensor puts after a while-Scan (its gradient's
Scan, reversals, slices, joins, allocations, reductions, elementwise ops)
honour the length. Nothing leaves the device, so a graph whose outputs all
have static shapes (``xs.sum()``, ``xs[-3]``, gradients through the loop)
needs no step count on the host and works in any JAX linker.

`bounded_jax_funcify` holds these length-aware lowerings, per op type. Each
returns the function and, per output, whether it is `Bounded` ("array"), a
`BoundedInt` ("int") or an ordinary value (None); `while_steps` plans a
graph with them. An op with no rule here (or a case a rule refuses with
NotImplementedError) means the graph needs the step count after all.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from functools import singledispatch
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytensor.scalar as ps
from pytensor.raise_op import CheckAndRaise
from pytensor.tensor.basic import Alloc, AllocEmpty, Join, ScalarFromTensor, TensorFromScalar
from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
from pytensor.tensor.shape import Shape_i
from pytensor.tensor.subtensor import IncSubtensor, Subtensor, indices_from_subtensor

from gpubackend.dispatch.jax.replacements import jax_gpu_funcify

Kind = Literal["array", "int"] | None


class Bounded(NamedTuple):
    """An array whose leading axis has ``length`` meaningful entries out of ``buffer.shape[0]``."""

    buffer: jax.Array
    length: Any


class BoundedInt(NamedTuple):
    """An integer known only at run time, between ``low`` and ``high`` (known while tracing)."""

    value: Any
    low: int
    high: int


BoundedLowering = tuple[Callable, tuple[Kind, ...]]


@singledispatch
def bounded_jax_funcify(op, node, input_kinds: Sequence[Kind], **kwargs) -> BoundedLowering:
    raise NotImplementedError(f"{op} has no lowering for lengths known only at run time")


def value_of(value):
    """The plain JAX value (traced length, or buffer) inside a possibly bounded value."""
    if isinstance(value, BoundedInt):
        return value.value
    return value


def as_bounded(value) -> Bounded:
    """``value`` as a `Bounded` array: a plain array is all meaningful entries."""
    if isinstance(value, Bounded):
        return value
    value = jnp.asarray(value)
    return Bounded(value, value.shape[0])


def as_kind(value, kind: Kind):
    """``value`` in the form its plan declared: a length may turn out static while tracing."""
    if kind == "array":
        return as_bounded(value)
    if kind == "int" and not isinstance(value, BoundedInt):
        if isinstance(value, jax.core.Tracer):
            raise NotImplementedError("a length known only at run time has no bounds")
        concrete = int(np.asarray(value))
        return BoundedInt(value, concrete, concrete)
    return value


def as_output(value, static_length: int | None):
    """A graph output: plain values pass, bounded ones are cut to the static length their type declares."""
    if isinstance(value, BoundedInt):
        return value.value
    if isinstance(value, Bounded):
        return value.buffer[:static_length]
    return value


def _valid(length, size: int, ndim: int) -> jax.Array:
    return (jnp.arange(size) < length).reshape((size,) + (1,) * (ndim - 1))


def padded(value: Bounded, size: int) -> jax.Array:
    buffer = value.buffer
    extra = size - buffer.shape[0]
    return buffer if extra <= 0 else jnp.concatenate([buffer, jnp.zeros((extra, *buffer.shape[1:]), buffer.dtype)])


# --- lengths ---------------------------------------------------------------------


@bounded_jax_funcify.register(Shape_i)
def _shape_i(op: Shape_i, node, input_kinds, **kwargs) -> BoundedLowering:
    if op.i != 0:
        return (lambda x: jnp.shape(x.buffer)[op.i]), (None,)
    return (lambda x: BoundedInt(x.length, 0, x.buffer.shape[0])), ("int",)


@bounded_jax_funcify.register(CheckAndRaise)
def _check_and_raise(op: CheckAndRaise, node, input_kinds, **kwargs) -> BoundedLowering:
    """The checked value passes through, bounds kept; a condition on a run-time length is skipped, as stock does."""
    check = jax_gpu_funcify(op, node=node, **kwargs)

    def checked(x, *conditions):
        check(x.buffer if isinstance(x, Bounded) else value_of(x), *(value_of(condition) for condition in conditions))
        return x

    return checked, (input_kinds[0],)


@bounded_jax_funcify.register(ScalarFromTensor)
@bounded_jax_funcify.register(TensorFromScalar)
def _same_scalar(op, node, input_kinds, **kwargs) -> BoundedLowering:
    return (lambda x: x), ("int",)


# Ops monotone in each argument on the boxes they see (or multilinear): their
# bounds over a box of inputs are reached at its corners.
_CORNER_BOUNDED_SCALAR_OPS = (
    ps.Add, ps.Sub, ps.Mul, ps.Neg, ps.Maximum, ps.Minimum, ps.Switch, ps.IntDiv, ps.Identity, ps.Cast,
    ps.LT, ps.GT, ps.LE, ps.GE,
)  # fmt: skip


def _bounds(value) -> tuple[int, int]:
    if isinstance(value, BoundedInt):
        return value.low, value.high
    concrete = int(np.asarray(value))
    return concrete, concrete


def _integer_elemwise(op: Elemwise, fn: Callable, boolean: bool) -> Callable:
    """``boolean``: the result is a bool, so 0 or 1 whatever the op (==, !=, or, ...), exact when every input is."""
    if not boolean and not isinstance(op.scalar_op, _CORNER_BOUNDED_SCALAR_OPS):
        raise NotImplementedError(f"{op}: no bounds for a run-time length through this scalar op")

    def bounded_integer(*inputs):
        boxes = [sorted(set(_bounds(x))) for x in inputs]
        value = fn(*(value_of(x) for x in inputs))
        if boolean and any(len(box) > 1 for box in boxes):
            return BoundedInt(value, 0, 1)
        corners = [op.scalar_op.impl(*corner) for corner in itertools.product(*boxes)]
        return BoundedInt(value, int(min(corners)), int(max(corners)))

    return bounded_integer


def _array_elemwise(fn: Callable) -> Callable:
    def bounded_elementwise(*inputs):
        bounded = [x for x in inputs if isinstance(x, Bounded)]
        size = max(x.buffer.shape[0] for x in bounded)
        values = [padded(x, size) if isinstance(x, Bounded) else value_of(x) for x in inputs]
        return Bounded(fn(*values), bounded[0].length)

    return bounded_elementwise


@bounded_jax_funcify.register(Elemwise)
def _elemwise(op: Elemwise, node, input_kinds, **kwargs) -> BoundedLowering:
    fn = jax_gpu_funcify(op, node=node, **kwargs)
    if "array" in input_kinds:
        ndim = node.outputs[0].type.ndim
        plain_lengths = [
            value.type.shape[0] for kind, value in zip(input_kinds, node.inputs, strict=True)
            if kind is None and value.type.ndim == ndim
        ]  # fmt: skip
        if any(length != 1 for length in plain_lengths):
            raise NotImplementedError(f"{op}: a run-time length meets an input of another length")
        return _array_elemwise(fn), ("array",) * len(node.outputs)
    if any(np.dtype(output.type.dtype).kind not in "iub" for output in node.outputs):
        # A value computed from a length (a mean's divisor) is no length: it needs no bounds.
        return (lambda *inputs: fn(*(value_of(x) for x in inputs))), (None,) * len(node.outputs)
    boolean = all(output.type.dtype == "bool" for output in node.outputs)
    return _integer_elemwise(op, fn, boolean), ("int",) * len(node.outputs)


@bounded_jax_funcify.register(DimShuffle)
def _dimshuffle(op: DimShuffle, node, input_kinds, **kwargs) -> BoundedLowering:
    if not op.new_order or op.new_order[0] != 0:
        raise NotImplementedError(f"{op} moves the axis whose length is known only at run time")
    fn = jax_gpu_funcify(op, node=node, **kwargs)
    return (lambda x: Bounded(fn(x.buffer), x.length)), ("array",)


@bounded_jax_funcify.register(CAReduce)
def _careduce(op: CAReduce, node, input_kinds, **kwargs) -> BoundedLowering:
    fn = jax_gpu_funcify(op, node=node, **kwargs)
    axes = range(node.inputs[0].type.ndim) if op.axis is None else op.axis
    if 0 not in axes:
        return (lambda x: Bounded(fn(x.buffer), x.length)), ("array",)
    identity = getattr(op.scalar_op, "identity", None)
    if identity is None:
        raise NotImplementedError(f"{op} has no identity to fill entries beyond a run-time length with")

    def reduce_meaningful_entries(x: Bounded):
        buffer = x.buffer
        return fn(jnp.where(_valid(x.length, buffer.shape[0], buffer.ndim), buffer, jnp.asarray(identity, buffer.dtype)))

    return reduce_meaningful_entries, (None,)


# --- allocation and joining --------------------------------------------------------


def _allocated(op, node, input_kinds, fill: Callable[[Any, tuple[int, ...]], jax.Array], n_shape: int):
    shape_kinds = input_kinds[-n_shape:]
    if "array" in input_kinds or "int" in shape_kinds[1:]:
        raise NotImplementedError(f"{op}: only the leading length may be known only at run time")

    def allocate(*inputs):
        values, (length, *rest) = inputs[: len(inputs) - n_shape], inputs[len(inputs) - n_shape :]
        shape = (max(length.high, 0), *(int(np.asarray(size)) for size in rest))
        return Bounded(fill(values, shape), length.value)

    return allocate, ("array",)


@bounded_jax_funcify.register(Alloc)
def _alloc(op: Alloc, node, input_kinds, **kwargs) -> BoundedLowering:
    dtype = node.outputs[0].type.dtype
    return _allocated(op, node, input_kinds, lambda values, shape: jnp.broadcast_to(jnp.asarray(values[0], dtype), shape), len(node.inputs) - 1)


@bounded_jax_funcify.register(AllocEmpty)
def _alloc_empty(op: AllocEmpty, node, input_kinds, **kwargs) -> BoundedLowering:
    return _allocated(op, node, input_kinds, lambda values, shape: jnp.zeros(shape, op.dtype), len(node.inputs))


@bounded_jax_funcify.register(Join)
def _join(op: Join, node, input_kinds, **kwargs) -> BoundedLowering:
    if op.axis != 0:
        raise NotImplementedError(f"{op}: joining along another axis than the run-time length's")

    def join(*parts):
        parts = [as_bounded(part) for part in parts]
        size = sum(part.buffer.shape[0] for part in parts)
        first = parts[0].buffer
        buffer = jnp.zeros((size, *first.shape[1:]), jnp.result_type(*(part.buffer for part in parts)))
        offset = 0
        for part in parts:
            # Entries beyond a part's length are overwritten by the next part or lie beyond the total.
            buffer = jax.lax.dynamic_update_slice_in_dim(buffer, part.buffer.astype(buffer.dtype), offset, 0)
            offset = offset + part.length
        return Bounded(buffer, offset)

    return join, ("array",)


# --- indexing ----------------------------------------------------------------------


def _slice_positions(index: slice, length, size: int):
    """Positions and count of ``range(length)[index]`` for a run-time length, in at most ``size`` entries."""
    step = 1 if index.step is None else int(np.asarray(index.step))
    if step == 0:
        raise ValueError("slice step cannot be zero")

    def bound(value, default, low, high):
        if value is None:
            return default
        value = jnp.where(value < 0, value + length, value)
        return jnp.clip(value, low, high)

    if step > 0:
        start, stop = bound(index.start, 0, 0, length), bound(index.stop, length, 0, length)
        count = jnp.maximum(0, (stop - start + step - 1) // step)
    else:
        start, stop = bound(index.start, length - 1, -1, length - 1), bound(index.stop, -1, -1, length - 1)
        count = jnp.maximum(0, (start - stop - step - 1) // -step)
    return start + step * jnp.arange(size), count


def _index_parts(op, index_inputs) -> tuple[Any, tuple]:
    first, *rest = indices_from_subtensor([value_of(index) for index in index_inputs], op.idx_list)
    return first, tuple(rest)


def _per_position(y, size: int, target_shape: tuple[int, ...]) -> jax.Array:
    """The values written at ``size`` leading positions: y padded to them, or broadcast over them."""
    if isinstance(y, Bounded):
        return padded(y, size)[:size]
    y = jnp.asarray(y)
    if y.ndim < len(target_shape) or y.shape[0] == 1:
        return jnp.broadcast_to(y, target_shape)
    return padded(as_bounded(y), size)[:size]


def _check_indices(op, input_kinds: Sequence[Kind], first_index_input: int) -> None:
    """Refuse run-time lengths anywhere but in the array's leading axis and its leading index."""
    leading = op.idx_list[0] if op.idx_list else None
    if leading is None:
        raise NotImplementedError(f"{op}: no index on the leading axis")
    if isinstance(leading, slice):
        leading_inputs = sum(isinstance(bound, int) for bound in (leading.start, leading.stop, leading.step))
    else:
        leading_inputs = 1
    if any(kind is not None for kind in input_kinds[first_index_input + leading_inputs :]):
        raise NotImplementedError(f"{op}: a run-time length may only index the leading axis")


@bounded_jax_funcify.register(Subtensor)
def _subtensor(op: Subtensor, node, input_kinds, **kwargs) -> BoundedLowering:
    _check_indices(op, input_kinds, 1)
    is_slice = isinstance(op.idx_list[0], slice)

    def subtensor(x, *index_inputs):
        buffer, length = as_bounded(x)
        first, rest = _index_parts(op, index_inputs)
        if not is_slice:
            position = jnp.where(first < 0, first + length, first)
            return buffer[(position, *rest)]
        positions, count = _slice_positions(first, length, buffer.shape[0])
        taken = buffer[jnp.clip(positions, 0, buffer.shape[0] - 1)]
        return Bounded(taken[(slice(None), *rest)], count)

    return subtensor, ("array" if is_slice else None,)


@bounded_jax_funcify.register(IncSubtensor)
def _inc_subtensor(op: IncSubtensor, node, input_kinds, **kwargs) -> BoundedLowering:
    _check_indices(op, input_kinds, 2)
    if input_kinds[1] == "array" and not isinstance(op.idx_list[0], slice):
        raise NotImplementedError(f"{op}: a run-time length in the value written at one position")
    is_slice = isinstance(op.idx_list[0], slice)

    def inc_subtensor(x, y, *index_inputs):
        buffer, length = as_bounded(x)
        first, rest = _index_parts(op, index_inputs)
        size = buffer.shape[0]
        if is_slice:
            positions, count = _slice_positions(first, length, size)
            positions = jnp.where(jnp.arange(size) < count, positions, size)  # dropped
            values = _per_position(y, size, buffer[(positions, *rest)].shape)
        else:
            positions = jnp.where(first < 0, first + length, first)
            values = y
        where = buffer.at[(positions, *rest)]
        values = jnp.asarray(values).astype(buffer.dtype)
        updated = where.set(values, mode="drop") if op.set_instead_of_inc else where.add(values, mode="drop")
        return Bounded(updated, x.length) if isinstance(x, Bounded) else updated

    return inc_subtensor, (input_kinds[0],)
