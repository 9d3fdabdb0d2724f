"""Elementwise ops, rearrangements and reductions over traces of run-time length.

An op that maps each entry of the leading axis to the same entry of its
output (elementwise ops, a ``DimShuffle`` that keeps the axis first, a matrix
product's rows), or to the entries after it (a cumulative sum), computes on the
whole buffer: entries past the length stay meaningless. PyTensor never broadcasts at run time, so
operands of the same rank must have the same length, a run-time check unless the bounds prove it. A
reduction over the leading axis masks the entries past the length with the value that leaves the
reduction unchanged in the input's own dtype (the smallest int64 for ``max``, ``False`` for a
boolean ``max``), and an empty ``max``/``min``/``argmax`` raises NumPy's ``ValueError`` as the
reference does.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytensor.scalar as ps
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
from pytensor.tensor.extra_ops import CumOp
from pytensor.tensor.math import Argmax, Dot

from gpubackend.dispatch.jax.while_scan.checks import NodeResult, RuntimeCheck
from gpubackend.dispatch.jax.while_scan.lengths import integer_dimshuffle, integer_elemwise
from gpubackend.dispatch.jax.while_scan.rules import BoundedLowering, bounded_jax_funcify
from gpubackend.dispatch.jax.while_scan.values import (
    Bounded,
    BoundedInt,
    kinds,
    known_equal,
    valid_rows,
    value_of,
    with_capacity,
)

LENGTHS_DIFFER = (
    "operands of run-time lengths that differ (PyTensor does not broadcast at run time)"
)


def same_length(first: BoundedInt, other) -> Any:
    """True where ``other`` (a length, or a concrete size) is known equal to ``first`` while
    tracing, else the condition."""
    if (
        other is first
        or (isinstance(other, BoundedInt) and other.value is first.value)
        or known_equal(first, other)
    ):
        return True
    return value_of(first) == value_of(other)


@bounded_jax_funcify.register(Elemwise)
def _elemwise(op: Elemwise, node, input_kinds, **kwargs) -> BoundedLowering:
    if "array" not in input_kinds:
        return integer_elemwise(op, node, **kwargs)
    fn = jax_funcify(op, node=node, **kwargs)
    ndim = node.outputs[0].type.ndim
    traces = [position for position, kind in enumerate(input_kinds) if kind == "array"]
    if any(node.inputs[position].type.ndim != ndim for position in traces):
        raise NotImplementedError(
            f"{op}: a run-time length on another axis than the result's leading one"
        )
    sized = [
        position
        for position, (kind, variable) in enumerate(zip(input_kinds, node.inputs, strict=True))
        if kind != "array" and variable.type.ndim == ndim and variable.type.shape[0] != 1
    ]
    checks = tuple(
        RuntimeCheck(ValueError, f"{op}: {LENGTHS_DIFFER}") for _ in (*traces[1:], *sized)
    )

    def elementwise(*inputs):
        capacity = max(inputs[position].capacity for position in traces)
        length = inputs[traces[0]].length
        values = [value_of(value) for value in inputs]
        oks = []
        for position in traces:
            values[position] = with_capacity(inputs[position].buffer, capacity)
        oks += [same_length(length, inputs[position].length) for position in traces[1:]]
        for position in sized:
            oks.append(same_length(length, jnp.shape(values[position])[0]))
            values[position] = with_capacity(values[position], capacity)
        outputs = fn(*values)
        if len(node.outputs) == 1:
            return NodeResult(Bounded(outputs, length), tuple(oks))
        return NodeResult([Bounded(output, length) for output in outputs], tuple(oks))

    return BoundedLowering(elementwise, kinds("array", len(node.outputs)), checks)


@bounded_jax_funcify.register(DimShuffle)
def _dimshuffle(op: DimShuffle, node, input_kinds, **kwargs) -> BoundedLowering:
    if input_kinds[0] == "int":
        return integer_dimshuffle(op, node, **kwargs)
    if not op.new_order or op.new_order[0] != 0:
        raise NotImplementedError(f"{op} moves the axis whose length is known only at run time")
    fn = jax_funcify(op, node=node, **kwargs)
    return BoundedLowering(lambda x: Bounded(fn(x.buffer), x.length), ("array",))


def _padding_fill(scalar_op, dtype: np.dtype):
    """The value that leaves the reduction unchanged, in the dtype of what it reduces (None: there
    is none)."""
    if isinstance(scalar_op, ps.Maximum | ps.Minimum):
        largest = isinstance(scalar_op, ps.Minimum)
        if dtype.kind == "b":
            return np.bool_(largest)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            return dtype.type(info.max if largest else info.min)
        return dtype.type(np.inf if largest else -np.inf)
    identity = getattr(scalar_op, "identity", None)
    return None if identity is None else np.asarray(identity).astype(dtype)


def _reduced_axes(axis, ndim: int) -> tuple[int, ...]:
    return tuple(range(ndim)) if axis is None else tuple(axis)


def _empty_reduction(name: str) -> RuntimeCheck:
    return RuntimeCheck(
        ValueError, f"zero-size array to reduction operation {name} which has no identity"
    )


def _has_an_entry(x: Bounded):
    return True if x.length.low >= 1 else x.length.value >= 1


@bounded_jax_funcify.register(CAReduce)
def _careduce(op: CAReduce, node, input_kinds, **kwargs) -> BoundedLowering:
    fn = jax_funcify(op, node=node, **kwargs)
    if input_kinds[0] == "int":
        return integer_elemwise_like_reduction(fn, node)
    if 0 not in _reduced_axes(op.axis, node.inputs[0].type.ndim):
        return BoundedLowering(lambda x: Bounded(fn(x.buffer), x.length), ("array",))
    fill = _padding_fill(op.scalar_op, np.dtype(node.inputs[0].type.dtype))
    if fill is None:
        raise NotImplementedError(
            f"{op} has no value to fill the entries beyond a run-time length with"
        )
    needs_an_entry = isinstance(op.scalar_op, ps.Maximum | ps.Minimum)
    checks = (_empty_reduction(type(op.scalar_op).__name__.lower()),) if needs_an_entry else ()

    def reduce_meaningful_entries(x: Bounded):
        reduced = fn(jnp.where(valid_rows(x), x.buffer, fill))
        return NodeResult(reduced, (_has_an_entry(x),) if needs_an_entry else ())

    return BoundedLowering(reduce_meaningful_entries, (None,), checks)


def integer_elemwise_like_reduction(fn, node) -> BoundedLowering:
    """A reduction of a shape vector: exact when its entries are, otherwise without bounds
    (``[0, 1]`` for booleans)."""
    boolean = node.outputs[0].type.dtype == "bool"

    def reduce_integers(x: BoundedInt):
        value = fn(x.value)
        exact = np.array_equal(x.low, x.high) and np.isfinite(x.low).all()
        if exact:
            # The bounds are numpy: evaluated now, not staged into the trace (or a cond's branch).
            with jax.ensure_compile_time_eval():
                exact_value = fn(x.low.astype(np.int64))
            low = high = np.asarray(exact_value, dtype=np.float64)
        else:
            low, high = (
                (np.asarray(0.0), np.asarray(1.0))
                if boolean
                else (np.asarray(-np.inf), np.asarray(np.inf))
            )
        return BoundedInt(value, low, high)

    return BoundedLowering(reduce_integers, ("int",))


@bounded_jax_funcify.register(Argmax)
def _argmax(op: Argmax, node, input_kinds, **kwargs) -> BoundedLowering:
    fn = jax_funcify(op, node=node, **kwargs)
    if 0 not in _reduced_axes(op.axis, node.inputs[0].type.ndim):
        return BoundedLowering(lambda x: Bounded(fn(x.buffer), x.length), ("array",))
    fill = _padding_fill(ps.maximum, np.dtype(node.inputs[0].type.dtype))

    def argmax_of_meaningful_entries(x: Bounded):
        # Ties go to the first position, and every padding entry comes after the meaningful ones.
        return NodeResult(fn(jnp.where(valid_rows(x), x.buffer, fill)), (_has_an_entry(x),))

    return BoundedLowering(
        argmax_of_meaningful_entries,
        (None,),
        (RuntimeCheck(ValueError, "attempt to get argmax of an empty sequence"),),
    )


@bounded_jax_funcify.register(CumOp)
def _cumulative(op: CumOp, node, input_kinds, **kwargs) -> BoundedLowering:
    """A cumulative sum or product down the trace: each entry depends only on those before it, never
    on the padding."""
    ndim = node.inputs[0].type.ndim
    if not (op.axis == 0 or (op.axis is None and ndim == 1)):
        raise NotImplementedError(
            f"{op}: accumulating across the axis whose length is known only at run time"
        )
    fn = jax_funcify(op, node=node, **kwargs)
    return BoundedLowering(lambda x: Bounded(fn(x.buffer), x.length), ("array",))


@bounded_jax_funcify.register(Dot)
def _dot(op: Dot, node, input_kinds, **kwargs) -> BoundedLowering:
    """A matrix product whose left operand's rows are a trace: its rows are the product's rows."""
    if input_kinds[1] is not None or node.inputs[0].type.ndim != 2:
        raise NotImplementedError(f"{op}: a run-time length on an axis the product sums over")
    fn = jax_funcify(op, node=node, **kwargs)
    return BoundedLowering(lambda x, y: Bounded(fn(x.buffer, y), x.length), ("array",))
