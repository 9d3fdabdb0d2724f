"""Integer arithmetic on lengths: what PyTensor computes from a trace's shape, with the bounds of
each result.

A `BoundedInt`'s bounds follow it through the integer ops PyTensor puts
between a trace's shape and its uses (``Shape_i``, ``Shape``, arithmetic,
comparisons, ``Switch``, ``MakeVector``, ``ExpandDims``, conversions). An op
that is monotone in each argument on a box (or multilinear) takes its extremes
at the box's corners; any other op gives exact bounds when its arguments are
exact, ``[0, 1]`` when it returns a boolean, and no bounds otherwise, which is
fine until the value is used as a buffer size.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
import pytensor.scalar as ps
from pytensor.graph.basic import Constant
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.raise_op import CheckAndRaise
from pytensor.tensor.basic import ARange, MakeVector, ScalarFromTensor, TensorFromScalar
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.shape import Shape, Shape_i

from gpubackend.dispatch.jax.while_scan.checks import NodeResult
from gpubackend.dispatch.jax.while_scan.rules import BoundedLowering, bounded_jax_funcify
from gpubackend.dispatch.jax.while_scan.values import (
    Bounded,
    BoundedInt,
    Table,
    as_bounded_int,
    bounds_of,
    common_tables,
    holds_always,
    kinds,
    length_between,
    tabulated,
    value_of,
)
from gpubackend.host_reads import RuntimeCheck

# Monotone in each argument on the boxes lengths live in, or multilinear: the
# extremes over a box are at its corners. Computed in float64, so infinities
# (unknown bounds) propagate and a NaN means the bounds are lost.
_CORNER_UFUNCS: dict[type, Callable] = {
    # Add and Mul take any number of operands (a third would be numpy's ``out``).
    ps.Add: lambda *operands: functools.reduce(np.add, operands),
    ps.Sub: np.subtract,
    ps.Mul: lambda *operands: functools.reduce(np.multiply, operands),
    ps.Neg: np.negative,
    ps.Maximum: np.maximum,
    ps.Minimum: np.minimum,
    ps.IntDiv: np.floor_divide,
    ps.Identity: lambda x: x,
    ps.LT: np.less,
    ps.GT: np.greater,
    ps.LE: np.less_equal,
    ps.GE: np.greater_equal,
    ps.Switch: np.where,
}


def _is_integral(variable) -> bool:
    return np.dtype(variable.type.dtype).kind in "iub"


def _corner_bounds(
    ufunc: Callable, boxes: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        corners = np.stack(
            [np.asarray(ufunc(*corner), dtype=np.float64) for corner in itertools.product(*boxes)]
        )
    if np.isnan(corners).any():
        unknown = np.full(corners.shape[1:], np.inf)
        return -unknown, unknown
    return corners.min(axis=0), corners.max(axis=0)


def _exact_bounds(scalar_op, boxes) -> tuple[np.ndarray, np.ndarray]:
    exact = np.asarray(np.vectorize(scalar_op.impl)(*(low for low, _ in boxes)), dtype=np.float64)
    return exact, exact


def integer_bounds(scalar_op, boxes, boolean: bool) -> tuple[np.ndarray, np.ndarray]:
    """The interval of ``scalar_op`` over the boxes of its integer arguments."""
    if isinstance(scalar_op, ps.Cast) and np.dtype(scalar_op.o_type.dtype).kind != "b":
        ufunc: Callable | None = _CORNER_UFUNCS[ps.Identity]
    else:
        ufunc = _CORNER_UFUNCS.get(type(scalar_op))
    if ufunc is not None:
        low, high = _corner_bounds(ufunc, boxes)
    elif all(np.array_equal(low, high) and np.isfinite(low).all() for low, high in boxes):
        low, high = _exact_bounds(scalar_op, boxes)
    else:
        shape = np.broadcast_shapes(*(np.shape(low) for low, _ in boxes))
        low, high = np.full(shape, -np.inf), np.full(shape, np.inf)
    if boolean:
        low, high = np.clip(low, 0, 1), np.clip(high, 0, 1)
    return low, high


def _logical(ufunc: Callable) -> Callable:
    return lambda *arrays: ufunc(*(array.astype(np.int64) for array in arrays))


# NumPy over the tables of int64 values, for the ops PyTensor computes lengths with (any other: its
# impl, vectorised).
_TABLE_UFUNCS: dict[type, Callable] = {
    **_CORNER_UFUNCS,
    ps.EQ: np.equal,
    ps.NEQ: np.not_equal,
    ps.Mod: np.mod,
    ps.Abs: np.abs,
    ps.Switch: lambda condition, yes, no: np.where(condition != 0, yes, no),
    ps.AND: _logical(np.bitwise_and),
    ps.OR: _logical(np.bitwise_or),
    ps.XOR: _logical(np.bitwise_xor),
}


def _tabulated_result(scalar_op, inputs, value, boolean: bool) -> BoundedInt | None:
    """The result for every value of the one length its inputs are computed from, where they are."""
    common = common_tables(inputs)
    if common is None:
        return None
    table, listed = common
    ufunc = _TABLE_UFUNCS.get(type(scalar_op))
    if isinstance(scalar_op, ps.Cast):
        ufunc = (
            (lambda x: x != 0)
            if np.dtype(scalar_op.o_type.dtype).kind == "b"
            else _CORNER_UFUNCS[ps.Identity]
        )
    with np.errstate(all="ignore"):
        result = (ufunc or np.vectorize(scalar_op.impl, otypes=[np.int64]))(*listed)
    result = np.asarray(result)
    if boolean:
        result = result != 0
    return tabulated(value, Table(table.atom, table.first, result.astype(np.int64)))


def integer_elemwise(op: Elemwise, node, **kwargs) -> BoundedLowering:
    """An Elemwise over lengths and other integers; a non-integer result (a mean's divisor) is a
    plain value."""
    return _integer_scalar_op(op.scalar_op, jax_funcify(op, node=node, **kwargs), node)


@bounded_jax_funcify.register(ps.ScalarOp)
def _scalar_op(op: ps.ScalarOp, node, input_kinds, **kwargs) -> BoundedLowering:
    """A scalar op of PyTensor's scalar graphs (``ScalarFromTensor`` then ``add``), as its
    Elemwise."""
    return _integer_scalar_op(op, jax_funcify(op, node=node, **kwargs), node)


def _integer_scalar_op(scalar_op, fn, node) -> BoundedLowering:
    if not all(_is_integral(output) for output in node.outputs):
        return BoundedLowering(
            lambda *inputs: fn(*(value_of(x) for x in inputs)), (None,) * len(node.outputs)
        )
    booleans = [output.type.dtype == "bool" for output in node.outputs]

    def bounded_integers(*inputs):
        value = fn(*(value_of(x) for x in inputs))
        boxes = [bounds_of(x) for x in inputs]
        if len(node.outputs) == 1:
            tabulated_value = _tabulated_result(scalar_op, inputs, value, booleans[0])
            return tabulated_value or BoundedInt(
                value, *integer_bounds(scalar_op, boxes, booleans[0])
            )
        return [as_bounded_int(output) for output in value]

    return BoundedLowering(bounded_integers, kinds("int", len(node.outputs)))


@bounded_jax_funcify.register(Shape_i)
def _shape_i(op: Shape_i, node, input_kinds, **kwargs) -> BoundedLowering:
    if op.i == 0 and input_kinds[0] == "array":
        return BoundedLowering(lambda x: x.length, ("int",))
    return BoundedLowering(
        lambda x: jnp.shape(x.buffer if isinstance(x, Bounded) else x)[op.i], (None,)
    )


@bounded_jax_funcify.register(Shape)
def _shape(op: Shape, node, input_kinds, **kwargs) -> BoundedLowering:
    def shape_of_bounded(x: Bounded):
        sizes = [x.length, *x.buffer.shape[1:]]
        return _stacked(jnp.stack([jnp.asarray(value_of(size), "int64") for size in sizes]), sizes)

    return BoundedLowering(shape_of_bounded, ("int",))


@bounded_jax_funcify.register(ScalarFromTensor)
@bounded_jax_funcify.register(TensorFromScalar)
def _same_integer(op, node, input_kinds, **kwargs) -> BoundedLowering:
    return BoundedLowering(as_bounded_int, ("int",))


@bounded_jax_funcify.register(MakeVector)
def _make_vector(op: MakeVector, node, input_kinds, **kwargs) -> BoundedLowering:
    fn = jax_funcify(op, node=node, **kwargs)
    if not _is_integral(node.outputs[0]):
        return BoundedLowering(lambda *inputs: fn(*(value_of(x) for x in inputs)), (None,))

    def make_vector(*inputs):
        return _stacked(fn(*(value_of(x) for x in inputs)), inputs)

    return BoundedLowering(make_vector, ("int",))


def _stacked(value, entries) -> BoundedInt:
    """A vector of integers with the bounds, and the table where there is one, of its entries."""
    common = common_tables(entries)
    if common is not None:
        table, listed = common
        return tabulated(value, Table(table.atom, table.first, np.stack(listed, axis=1)))
    boxes = [bounds_of(x) for x in entries]
    return BoundedInt(
        value,
        np.asarray([low for low, _ in boxes], np.float64),
        np.asarray([high for _, high in boxes], np.float64),
    )


def dimshuffled_bounds(op: DimShuffle, bound: np.ndarray, leading: int = 0) -> np.ndarray:
    """``bound`` rearranged as ``op`` rearranges the value (the rule of ``DimShuffle.perform``),
    after ``leading`` axes."""
    kept = tuple(range(leading))
    rearranged = np.transpose(bound, kept + tuple(axis + leading for axis in op.shuffle + op.drop))
    shape = list(rearranged.shape[: leading + len(op.shuffle)])
    for axis in op.augment:
        shape.insert(leading + axis, 1)
    return rearranged.reshape(shape)


def integer_dimshuffle(op: DimShuffle, node, **kwargs) -> BoundedLowering:
    fn = jax_funcify(op, node=node, **kwargs)

    def dimshuffle(x: BoundedInt):
        if x.table is not None:
            table = x.table
            return tabulated(
                fn(x.value),
                Table(table.atom, table.first, dimshuffled_bounds(op, table.values, leading=1)),
            )
        return BoundedInt(
            fn(x.value), dimshuffled_bounds(op, x.low), dimshuffled_bounds(op, x.high)
        )

    return BoundedLowering(dimshuffle, ("int",))


def checks_data_at_run_time(op: CheckAndRaise) -> bool:
    """Whether gpubackend lowers ``op``: not so where a library registered its own lowering (PyMC's
    pass-through Assert)."""
    return jax_funcify.dispatch(type(op)) is jax_funcify.dispatch(CheckAndRaise)


@bounded_jax_funcify.register(CheckAndRaise)
def _check_and_raise(op: CheckAndRaise, node, input_kinds, **kwargs) -> BoundedLowering:
    """Conditions only the run settles are checked at run time, raising the op's own error.

    PyTensor's stock JAX lowering skips every condition it cannot evaluate
    while tracing. In a graph with a while-Scan, which stock JAX refuses
    whole, the reference's checks stand: a condition on a trace's length
    always, and one on the data where gpubackend lowers the op (a library
    that registered its own lowering, as PyMC does for ``Assert``, keeps it).
    """
    check = jax_funcify(op, node=node, **kwargs)
    checks_data = checks_data_at_run_time(op)
    checked_positions = [
        position
        for position, (kind, condition) in enumerate(
            zip(input_kinds[1:], node.inputs[1:], strict=True), start=1
        )
        if kind == "int" or (checks_data and not isinstance(condition, Constant))
    ]
    checks = tuple(RuntimeCheck(op.exc_type, op.msg) for _ in checked_positions)

    def checked(x, *conditions):
        check(
            x.buffer if isinstance(x, Bounded) else value_of(x),
            *(value_of(condition) for condition in conditions),
        )
        oks = [
            True
            if holds_always(conditions[position - 1])
            else jnp.all(value_of(conditions[position - 1]))
            for position in checked_positions
        ]
        return NodeResult(x, tuple(oks))

    return BoundedLowering(checked, (input_kinds[0],), checks)


def _arange_count(start, stop, step, xp):
    """How many entries ``arange(start, stop, step)`` has: ``ceil((stop - start) / step)``, at least
    0."""
    return xp.maximum(0, -((start - stop) // step))


@bounded_jax_funcify.register(ARange)
def _arange(op: ARange, node, input_kinds, **kwargs) -> BoundedLowering:
    """``arange`` with a run-time bound: room for as many entries as the bounds allow, ``length`` of
    them meaningful."""

    def arange(start, stop, step):
        (start_low, start_high), (stop_low, stop_high), (step_low, step_high) = (
            bounds_of(x) for x in (start, stop, step)
        )
        if not (step_low == step_high and np.isfinite(step_low) and step_low != 0):
            raise NotImplementedError(f"{op}: a step known only at run time")
        step_value = int(step_low)
        # The count grows with stop and shrinks with start for a positive step, the other way for a
        # negative one.
        fewest, most = (
            ((start_high, stop_low), (start_low, stop_high))
            if step_value > 0
            else ((start_low, stop_high), (start_high, stop_low))
        )
        with np.errstate(all="ignore"):
            low, high = (_arange_count(*ends, step_value, np) for ends in (fewest, most))
        if not np.isfinite(high):
            raise NotImplementedError(f"{op}: a run-time length with no bound")
        start, stop = value_of(start), value_of(stop)
        buffer = (start + step_value * jnp.arange(int(high))).astype(op.dtype)
        count = _arange_count(start, stop, step_value, jnp)
        return Bounded(buffer, length_between(count, low if np.isfinite(low) else 0.0, high))

    return BoundedLowering(arange, ("array",))
