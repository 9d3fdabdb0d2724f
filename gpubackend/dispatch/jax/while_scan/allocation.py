"""Allocations and joins whose length is known only at run time.

An allocation of a run-time length (a gradient's zeros, the buffer of a
for-Scan over a trace) gets room for the largest length its bounds allow, and
NumPy's ``ValueError`` for a negative one. A join along the leading axis packs
its parts one after the other, each at the running length; along another
axis, its parts must have the same length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.tensor.basic import Alloc, AllocEmpty, Join, Split
from pytensor.tensor.shape import Shape, Shape_i, SpecifyShape
from pytensor.tensor.type_other import NoneTypeT

from gpubackend.dispatch.jax.tracing import is_traced
from gpubackend.dispatch.jax.while_scan.arrays import on_buffers
from gpubackend.dispatch.jax.while_scan.checks import NodeResult
from gpubackend.dispatch.jax.while_scan.rules import BoundedLowering, bounded_jax_funcify
from gpubackend.dispatch.jax.while_scan.values import (
    Bounded,
    BoundedInt,
    Table,
    as_bounded,
    as_bounded_int,
    bounds_of,
    common_tables,
    entry_of,
    exactly,
    kinds,
    length_between,
    same_length,
    tabulated,
    value_of,
)
from gpubackend.errors import ShapeMismatchError
from gpubackend.host_reads import RuntimeCheck

NEGATIVE_LENGTH = RuntimeCheck(ValueError, "negative dimensions are not allowed")


def _allocated(
    op, input_kinds, fill: Callable[[list, tuple[int, ...]], jax.Array], n_shape: int, **kwargs
) -> BoundedLowering:
    shape_kinds = input_kinds[len(input_kinds) - n_shape :]
    if "array" in input_kinds or "int" in shape_kinds[1:]:
        raise NotImplementedError(f"{op}: only the leading length may be known only at run time")
    if shape_kinds[0] != "int":
        # A value computed from a length, broadcast to a shape known while tracing.
        return BoundedLowering(
            lambda *inputs: fill(
                [value_of(x) for x in inputs[: len(inputs) - n_shape]],
                inputs[len(inputs) - n_shape :],
            ),
            (None,),
        )

    def allocate(*inputs):
        values, (length, *rest) = (
            [value_of(x) for x in inputs[: len(inputs) - n_shape]],
            inputs[len(inputs) - n_shape :],
        )
        if not np.isfinite(length.high):
            raise NotImplementedError(f"{op}: a run-time length with no bound")
        capacity = max(int(length.high), 0)
        buffer = fill(values, (capacity, *(int(np.asarray(size)) for size in rest)))
        if length.low >= 0:
            return NodeResult(Bounded(buffer, length), (True,))
        meaningful = length_between(jnp.maximum(length.value, 0), 0.0, capacity)
        return NodeResult(Bounded(buffer, meaningful), (length.value >= 0,))

    return BoundedLowering(allocate, ("array",), (NEGATIVE_LENGTH,))


@bounded_jax_funcify.register(Alloc)
def _alloc(op: Alloc, node, input_kinds, **kwargs) -> BoundedLowering:
    dtype = node.outputs[0].type.dtype

    def filled(values, shape):
        return jnp.broadcast_to(
            jnp.asarray(values[0], dtype), tuple(value_of(size) for size in shape)
        )

    return _allocated(op, input_kinds, filled, len(node.inputs) - 1)


@bounded_jax_funcify.register(AllocEmpty)
def _alloc_empty(op: AllocEmpty, node, input_kinds, **kwargs) -> BoundedLowering:
    return _allocated(
        op,
        input_kinds,
        lambda values, shape: jnp.zeros(tuple(value_of(size) for size in shape), op.dtype),
        len(node.inputs),
    )


@bounded_jax_funcify.register(Join)
def _join(op: Join, node, input_kinds, **kwargs) -> BoundedLowering:
    if op.axis == 0:
        return BoundedLowering(_join_leading, ("array",))
    if any(kind != "array" for kind in input_kinds):
        raise NotImplementedError(
            f"{op}: a run-time length joined with a length known while tracing"
        )
    return on_buffers(op, node, input_kinds, **kwargs)


def _join_leading(*given) -> Bounded:
    parts = [as_bounded(part) for part in given]
    first = parts[0].buffer
    dtype = jnp.result_type(*(part.buffer for part in parts))
    buffer = jnp.zeros((sum(part.capacity for part in parts), *first.shape[1:]), dtype)
    offset: Any = 0
    for part in parts:
        # Entries beyond a part's length are overwritten by the next part or lie beyond the total.
        buffer = jax.lax.dynamic_update_slice_in_dim(buffer, part.buffer.astype(dtype), offset, 0)
        offset = offset + part.length.value
    return Bounded(buffer, _integer_sum(offset, [part.length for part in parts]))


@bounded_jax_funcify.register(Split)
def _split(op: Split, node, input_kinds, **kwargs) -> BoundedLowering:
    """The inverse of a join along the leading axis (its gradient): each part is `Bounded` at its
    run-time size."""
    if op.axis != 0:
        raise NotImplementedError(f"{op}: splitting along another axis than the run-time length's")
    checks = (
        RuntimeCheck(ValueError, f"{op}: split sizes do not sum to the length of the axis"),
        RuntimeCheck(ValueError, "Split sizes cannot be negative"),
    )

    def split(x, splits):
        buffer, length = as_bounded(x)
        sizes = [entry_of(as_bounded_int(splits), index) for index in range(op.len_splits)]
        if not all(np.isfinite(size.high) for size in sizes):
            raise NotImplementedError(f"{op}: a split size known only at run time, with no bound")
        parts, offset = [], 0
        for size in sizes:
            room = min(int(size.high), buffer.shape[0])
            positions = jnp.clip(offset + jnp.arange(room), 0, buffer.shape[0] - 1)
            parts.append(Bounded(buffer[positions], size))
            offset = offset + size.value
        total = _integer_sum(offset, sizes)
        non_negative = (
            True if all(size.low >= 0 for size in sizes) else jnp.all(value_of(splits) >= 0)
        )
        return NodeResult(parts, (same_length(length, total), non_negative))

    return BoundedLowering(split, kinds("array", op.len_splits), checks)


def _integer_sum(value, terms) -> BoundedInt:
    """``value``, the sum of ``terms``, with their table summed, or their bounds."""
    common = common_tables(terms)
    if common is not None:
        table, listed = common
        return tabulated(
            value, Table(table.atom, table.first, np.sum(listed, axis=0).astype(np.int64))
        )
    low, high = (
        sum(float(bound) for bound in bounds)
        for bounds in zip(*(bounds_of(term) for term in terms), strict=True)
    )
    return length_between(value, low, high)


@bounded_jax_funcify.register(SpecifyShape)
def _specify_shape(op: SpecifyShape, node, input_kinds, **kwargs) -> BoundedLowering:
    """Each declared dimension of a trace is checked, the leading one at run time."""
    if input_kinds[0] != "array":
        raise NotImplementedError(f"{op}: a run-time length in the shape it specifies")
    declared = [
        axis for axis, size in enumerate(node.inputs[1:]) if not isinstance(size.type, NoneTypeT)
    ]
    checks = tuple(
        RuntimeCheck(AssertionError, f"{op}: the shape differs from the one specified")
        for _ in declared
    )

    def specified(x: Bounded, *shape):
        sizes = [x.length, *(exactly(size) for size in x.buffer.shape[1:])]
        return NodeResult(x, tuple(same_length(sizes[axis], shape[axis]) for axis in declared))

    return BoundedLowering(specified, ("array",), checks)


def _from_shapes(length: Variable) -> bool:
    """Whether ``length`` is computed from constants and input shapes alone (which `fgraph`
    evaluates while tracing)."""
    pending, seen = [length], set()
    while pending:
        variable = pending.pop()
        if variable in seen or isinstance(variable, Constant):
            continue
        seen.add(variable)
        if variable.owner is None:
            return False
        if not isinstance(variable.owner.op, Shape | Shape_i):
            pending.extend(variable.owner.inputs)
    return True


def run_time_specified_shapes(order) -> set[Apply]:
    """The SpecifyShape nodes among ``order`` declaring a length computed from an input's value,
    known only at run time."""
    return {
        node
        for node in order
        if isinstance(node.op, SpecifyShape)
        and not all(_from_shapes(length) for length in node.inputs[1:])
    }


def checked_specify_shape(op: SpecifyShape, node: Apply, **kwargs) -> BoundedLowering:
    """The top graph's check of a length known only at run time (for a linker that reads back);
    lengths known while tracing are checked then."""
    lengths = ", ".join(str(length) for length in node.inputs[1:])
    checks = (
        RuntimeCheck(
            ShapeMismatchError,
            f"{op}: the shape of {node.inputs[0]} differs from the one specified, ({lengths})",
        ),
    )

    # Imported here: `shape` loads PyTensor's JAX dispatch, whose hook imports this module.
    from gpubackend.dispatch.jax.shape import check_known_lengths, specified_lengths

    def specify_shape(x, *shape):
        lengths = specified_lengths(shape)
        check_known_lengths(node, x, lengths, len(lengths))
        traced = [
            actual == length
            for actual, length in zip(jnp.shape(x), lengths, strict=True)
            if is_traced(length)
        ]
        return NodeResult(x, (jnp.all(jnp.stack(traced)) if traced else True,))

    return BoundedLowering(specify_shape, (None,), checks)
