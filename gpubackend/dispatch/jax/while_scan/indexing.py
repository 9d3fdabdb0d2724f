"""Indexing a trace of run-time length: reads and writes at a position or through a slice, with the
reference's errors.

NumPy raises ``IndexError`` for a position outside an axis, and ``ValueError``
for a slice assignment whose value has another length; JAX clamps and drops
instead. So every position that a run-time length can put out of range (a
position on a trace's leading axis, or a position computed from a length) is a
run-time check, unless the bounds prove it in range (``xs[-1]`` of a trace
with at least one entry). Slices never raise: they clip to the length, as
Python's do, and their step may be known only at run time (then a zero step is
the check).

For a linker that reads back, the top graph checks every integer index known
only at run time the same way, trace of run-time length or not
(`checked_indexing`, after `index_checks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from pytensor.graph.basic import Apply
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.tensor.subtensor import IncSubtensor, Subtensor, indices_from_subtensor

from gpubackend.dispatch.jax.index_checks import (
    constant_indices_checked,
    index_in_range,
    run_time_indices,
)
from gpubackend.dispatch.jax.while_scan.checks import NodeResult
from gpubackend.dispatch.jax.while_scan.rules import BoundedLowering, bounded_jax_funcify
from gpubackend.dispatch.jax.while_scan.values import (
    Bounded,
    BoundedInt,
    Kind,
    Table,
    as_bounded,
    bounds_of,
    common_tables,
    known_value,
    length_between,
    same_length,
    tabulated,
    value_of,
    with_capacity,
)
from gpubackend.dispatch.subtensor_indices import out_of_bounds_message
from gpubackend.host_reads import RuntimeCheck

# How many lengths a slice's entry count is worked out for, to bound it exactly (it need not be
# monotone).
_EXACT_COUNT_SPAN = 4096


def _index_kinds(op, input_kinds: Sequence[Kind], first_index_input: int) -> list[tuple[int, Kind]]:
    """Per scalar position of ``op.idx_list``: its axis, and the kind of the input that gives it."""
    return [
        (axis, input_kinds[first_index_input + entry])
        for axis, entry in enumerate(op.idx_list)
        if not isinstance(entry, slice)
    ]


def _slice_bound_kinds(entry, input_kinds: Sequence[Kind], first_index_input: int) -> list[Kind]:
    return [
        input_kinds[first_index_input + bound]
        for bound in (entry.start, entry.stop, entry.step)
        if bound is not None
    ]


def _refuse_unsupported(op, input_kinds: Sequence[Kind], first_index_input: int) -> None:
    """A run-time length may size the leading axis only: a later slice of run-time length has no JAX
    shape."""
    if input_kinds[0] == "array" and not op.idx_list:
        raise NotImplementedError(
            f"{op}: no index on the leading axis, whose length is known only at run time"
        )
    for entry in op.idx_list[1:]:
        if isinstance(entry, slice) and "int" in _slice_bound_kinds(
            entry, input_kinds, first_index_input
        ):
            raise NotImplementedError(
                f"{op}: a slice past the leading axis with a bound known only at run time"
            )


def _position_in_range(index, size) -> Any:
    """True where ``-size <= index < size`` is proven while tracing, else the traced condition."""
    index_low, index_high = bounds_of(index)
    size_low, _ = bounds_of(size)
    if (index_low >= 0 and index_high < size_low) or (index_high < 0 and index_low >= -size_low):
        return True
    common = common_tables([index, size])
    if common is not None and np.all(
        (common[1][0] >= -common[1][1]) & (common[1][0] < common[1][1])
    ):
        return True
    index, size = value_of(index), value_of(size)
    return (index >= -size) & (index < size)


def _wrapped(index, size, capacity: int):
    """A position counted from the end as from the start, kept inside the buffer (out-of-range ones
    fail their check)."""
    index, size = value_of(index), value_of(size)
    return jnp.clip(jnp.where(index < 0, index + size, index), 0, capacity - 1)


def _out_of_range(op) -> RuntimeCheck:
    return RuntimeCheck(
        IndexError, f"{op}: index out of bounds for an axis whose length is known only at run time"
    )


ZERO_STEP = RuntimeCheck(ValueError, "slice step cannot be zero")


def _slice_positions(index: slice, length, capacity: int):
    """Positions and count of ``range(length)[index]`` for a run-time length, in at most
    ``capacity`` entries.

    The step may be known only at run time, so both directions are worked out
    and the step's sign picks one.
    """
    step = value_of(1 if index.step is None else index.step)
    length = value_of(length)

    def clipped(value, default, low, high):
        if value is None:
            return default
        value = value_of(value)
        return jnp.clip(jnp.where(value < 0, value + length, value), low, high)

    upward = step > 0
    start = jnp.where(
        upward, clipped(index.start, 0, 0, length), clipped(index.start, length - 1, -1, length - 1)
    )
    stop = jnp.where(
        upward, clipped(index.stop, length, 0, length), clipped(index.stop, -1, -1, length - 1)
    )
    magnitude = jnp.maximum(jnp.abs(step), 1)
    count = jnp.where(
        upward == (stop > start), (jnp.abs(stop - start) + magnitude - 1) // magnitude, 0
    )
    return start + step * jnp.arange(capacity), count


def _count_bounds(index: slice, length, capacity: int) -> tuple[float, float]:
    """The interval of a slice's entry count, exact when its bounds and step are known while
    tracing.

    The count need not grow with the length (``[-5:7]``), so it is worked out
    for every length the bounds allow, when they allow few enough.
    """
    given = (index.start, index.stop, index.step)
    ends = [None if bound is None else known_value(bound) for bound in given]
    known = all(end is not None or bound is None for end, bound in zip(ends, given, strict=True))
    low, high = (float(bound) for bound in bounds_of(length))
    if known and np.isfinite(high) and high - low <= _EXACT_COUNT_SPAN:
        counts = [len(range(size)[slice(*ends)]) for size in range(int(low), int(high) + 1)]
        return float(min(counts)), float(min(max(counts), capacity))
    return 0.0, float(min(high, capacity, _most_entries(given, ends)))


def _most_entries(given, ends) -> float:
    """The most entries a slice can take of any length, from the ends known while tracing: a
    gradient's ``[:1]`` of a buffer as long as the bound takes one."""
    start, stop, step = (
        (0 if bound is None else None) if end is None else end
        for bound, end in zip(given, ends, strict=True)
    )
    step = 1 if given[2] is None else step
    if step is None:
        return np.inf
    # Clipped to the length, a negative end counted from it lies past position -1.
    if step > 0 and given[1] is not None and stop is not None and stop >= 0:
        first = start if start is not None and start > 0 else 0
        return float(max(0, -((first - stop) // step)))
    if step < 0 and given[0] is not None and start is not None and start >= 0:
        last = stop if given[1] is not None and stop is not None and stop >= 0 else -1
        return float(max(0, -((last - start) // -step)))
    return np.inf


def _count_table(index: slice, length) -> Table | None:
    """A slice's entry count for every value of the one length it depends on, where its ends and
    step do too."""
    given = (index.start, index.stop, index.step)
    common = common_tables([length, *(bound for bound in given if bound is not None)])
    if common is None:
        return None
    table, (lengths, *listed) = common
    columns = iter(listed)
    per_end = [None if bound is None else next(columns) for bound in given]
    if per_end[2] is not None and np.any(per_end[2] == 0):
        return None
    counts = []
    for i, size in enumerate(lengths):
        ends = (None if end is None else int(end[i]) for end in per_end)
        counts.append(len(range(max(int(size), 0))[slice(*ends)]))
    return Table(table.atom, table.first, np.asarray(counts, dtype=np.int64))


def _slice_count(count, index: slice, length, capacity: int) -> BoundedInt:
    table = _count_table(index, length)
    if table is not None:
        return tabulated(count, table)
    return length_between(count, *_count_bounds(index, length, capacity))


def _step_ok(index: slice):
    low, high = bounds_of(index.step)
    if low > 0 or high < 0:
        return True
    return value_of(index.step) != 0


def _split_indices(op, index_values) -> tuple[Any, tuple]:
    """The leading index as given (bounds kept), and the others as plain JAX indices."""
    first, *rest = indices_from_subtensor(list(index_values), op.idx_list)
    rest = tuple(
        slice(*(value_of(bound) for bound in (entry.start, entry.stop, entry.step)))
        if isinstance(entry, slice)
        else value_of(entry)
        for entry in rest
    )
    return first, rest


def _later_positions_in_range(op, index_kinds, index_values, shape) -> list:
    """Conditions for positions past the leading axis that were computed from a run-time length."""
    values = indices_from_subtensor(list(index_values), op.idx_list)
    return [
        _position_in_range(values[axis], shape[axis])
        for axis, kind in index_kinds
        if axis > 0 and kind == "int"
    ]


@bounded_jax_funcify.register(Subtensor)
def _subtensor(op: Subtensor, node, input_kinds, **kwargs) -> BoundedLowering:
    if input_kinds[0] == "int":
        return _integer_subtensor(op, jax_funcify(op, node=node, **kwargs))
    _refuse_unsupported(op, input_kinds, 1)
    index_kinds = _index_kinds(op, input_kinds, 1)
    leading = op.idx_list[0]
    later_checks = tuple(
        _out_of_range(op) for axis, kind in index_kinds if axis > 0 and kind == "int"
    )
    if isinstance(leading, slice):
        run_time_slice = input_kinds[0] == "array" or "int" in _slice_bound_kinds(
            leading, input_kinds, 1
        )
        if not run_time_slice:
            # A plain array, indexed past its leading axis at positions computed from a length.
            fn = jax_funcify(op, node=node, **kwargs)

            def checked_subtensor(x, *index_inputs):
                oks = _later_positions_in_range(op, index_kinds, index_inputs, jnp.shape(x))
                return NodeResult(fn(x, *(value_of(i) for i in index_inputs)), tuple(oks))

            return BoundedLowering(checked_subtensor, (None,), later_checks)
        checks = later_checks + ((ZERO_STEP,) if leading.step is not None else ())

        def sliced(x, *index_inputs):
            buffer, length = as_bounded(x)
            first, rest = _split_indices(op, index_inputs)
            oks = _later_positions_in_range(op, index_kinds, index_inputs, buffer.shape)
            if first.step is not None:
                oks.append(_step_ok(first))
            positions, count = _slice_positions(first, length, buffer.shape[0])
            taken_length = _slice_count(count, first, length, buffer.shape[0])
            room = int(taken_length.high)
            taken = buffer[jnp.clip(positions[:room], 0, buffer.shape[0] - 1)][(slice(None), *rest)]
            result = Bounded(taken, taken_length)
            return NodeResult(result, tuple(oks))

        return BoundedLowering(sliced, ("array",), checks)
    checks = (_out_of_range(op), *later_checks)

    def at_position(x, *index_inputs):
        buffer, length = as_bounded(x)
        first, rest = _split_indices(op, index_inputs)
        oks = [
            _position_in_range(first, length),
            *_later_positions_in_range(op, index_kinds, index_inputs, buffer.shape),
        ]
        return NodeResult(buffer[(_wrapped(first, length, buffer.shape[0]), *rest)], tuple(oks))

    return BoundedLowering(at_position, (None,), checks)


def _integer_subtensor(op: Subtensor, fn) -> BoundedLowering:
    """An entry of a shape vector: its bounds and table are the entry's when the position is known
    while tracing."""

    def integer_entry(x: BoundedInt, *index_inputs):
        value = fn(x.value, *(value_of(i) for i in index_inputs))
        positions = indices_from_subtensor([known_value(i) for i in index_inputs], op.idx_list)
        if any(position is None for position in positions if not isinstance(position, slice)):
            return BoundedInt(
                value,
                np.full(np.shape(value), np.min(x.low)),
                np.full(np.shape(value), np.max(x.high)),
            )
        if x.table is not None:
            return tabulated(
                value, Table(x.table.atom, x.table.first, x.table.values[(slice(None), *positions)])
            )
        return BoundedInt(value, x.low[tuple(positions)], x.high[tuple(positions)])

    return BoundedLowering(integer_entry, ("int",))


def _broadcasts_over_leading_axis(y_variable, target_ndim: int) -> bool:
    return y_variable.type.ndim < target_ndim or y_variable.type.shape[0] == 1


@bounded_jax_funcify.register(IncSubtensor)
def _inc_subtensor(op: IncSubtensor, node, input_kinds, **kwargs) -> BoundedLowering:
    _refuse_unsupported(op, input_kinds, 2)
    if not op.idx_list:
        raise NotImplementedError(f"{op}: no index on the leading axis")
    leading = op.idx_list[0]
    is_slice = isinstance(leading, slice)
    if input_kinds[1] == "array" and not is_slice:
        raise NotImplementedError(f"{op}: a run-time length in the value written at one position")
    if any(axis > 0 and kind == "int" for axis, kind in _index_kinds(op, input_kinds, 2)):
        raise NotImplementedError(
            f"{op}: a position computed from a run-time length past the leading axis"
        )
    target_ndim = node.inputs[0].type.ndim - sum(
        not isinstance(entry, slice) for entry in op.idx_list
    )
    y_matches_count = is_slice and not _broadcasts_over_leading_axis(node.inputs[1], target_ndim)
    checks = [] if is_slice else [_out_of_range(op)]
    if y_matches_count:
        checks.append(
            RuntimeCheck(ValueError, f"{op}: the value written has another length than the slice")
        )
    if is_slice and leading.step is not None:
        checks.append(ZERO_STEP)

    def inc_subtensor(x, y, *index_inputs):
        buffer, length = as_bounded(x)
        first, rest = _split_indices(op, index_inputs)
        capacity = buffer.shape[0]
        oks = []
        if is_slice:
            positions, count = _slice_positions(first, length, capacity)
            # A value whose one entry is known while tracing broadcasts over the slice, as numpy
            # (and the reference) broadcast it, even over an empty one.
            if y_matches_count and not _one_entry(y):
                oks.append(_same_count(_slice_count(count, first, length, capacity), y))
            if first.step is not None:
                oks.append(_step_ok(first))
            # Beyond the count: dropped.
            positions = jnp.where(jnp.arange(capacity) < count, positions, capacity)
            values = _per_position(y, capacity, buffer[(positions, *rest)].shape)
        else:
            oks.append(_position_in_range(first, length))
            positions, values = _wrapped(first, length, capacity), value_of(y)
        where = buffer.at[(positions, *rest)]
        update = where.set if op.set_instead_of_inc else where.add
        updated = update(jnp.asarray(values).astype(buffer.dtype), mode="drop")
        return NodeResult(
            Bounded(updated, x.length) if isinstance(x, Bounded) else updated, tuple(oks)
        )

    return BoundedLowering(inc_subtensor, (input_kinds[0],), tuple(checks))


def _one_entry(y) -> bool:
    return not isinstance(y, Bounded) and jnp.shape(y)[0] == 1


def _same_count(count: BoundedInt, y) -> Any:
    return same_length(count, y.length if isinstance(y, Bounded) else jnp.shape(y)[0])


def _per_position(y, capacity: int, target_shape: tuple[int, ...]):
    """The values written at ``capacity`` leading positions: y padded or cut to them, or broadcast
    over them."""
    y = jnp.asarray(y.buffer if isinstance(y, Bounded) else y)
    if y.ndim < len(target_shape) or y.shape[0] == 1:
        return jnp.broadcast_to(y, target_shape)
    return with_capacity(y, capacity)


def checked_indexing(op, node: Apply, **kwargs) -> BoundedLowering:
    """The op's lowering, with one check per integer index that is not a constant (the top graph's
    index checks, for a linker that reads back: `index_checks`); its constants are checked while
    tracing."""
    fn = constant_indices_checked(jax_funcify(op, node=node, **kwargs), node)
    checked = run_time_indices(node)
    checks = tuple(
        RuntimeCheck(IndexError, out_of_bounds_message(op, axis, node.inputs[0]))
        for axis, _ in checked
    )

    def indexing(*inputs):
        shape = jnp.shape(inputs[0])
        oks = tuple(
            index_in_range(inputs[position], shape[axis], axis) for axis, position in checked
        )
        return NodeResult(fn(*inputs), oks)

    return BoundedLowering(indexing, (None,), checks)
