"""Elementwise ops, rearrangements and reductions over traces of run-time length.

An op that maps each entry of the leading axis to the same entry of its
output (elementwise ops, a ``DimShuffle`` that keeps the axis first, a matrix
product's rows), or to the entries after it (a cumulative sum), computes on the
whole buffer with its stock lowering (`on_buffers`): entries past the length
stay meaningless. PyTensor never broadcasts at run time, so operands of the
same rank must have the same length, a run-time check unless the bounds prove
it. A reduction over the leading axis masks the entries past the length with
the value that leaves the reduction unchanged in the input's own dtype (the
smallest int64 for ``max``, ``False`` for a boolean ``max``), and an empty
``max``/``min``/``argmax`` raises NumPy's ``ValueError`` as the reference does.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pytensor.scalar as ps
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
from pytensor.tensor.extra_ops import CumOp
from pytensor.tensor.math import Argmax, Dot

from gpubackend.dispatch.jax.while_scan.checks import NodeResult
from gpubackend.dispatch.jax.while_scan.lengths import integer_dimshuffle, integer_elemwise
from gpubackend.dispatch.jax.while_scan.rules import BoundedLowering, bounded_jax_funcify
from gpubackend.dispatch.jax.while_scan.values import (
    Bounded,
    BoundedInt,
    Kind,
    kinds,
    known_array,
    same_length,
    valid_rows,
    value_of,
    with_capacity,
)
from gpubackend.host_reads import RuntimeCheck

LENGTHS_DIFFER = (
    "operands of run-time lengths that differ (PyTensor does not broadcast at run time)"
)


def on_buffers(
    op, node, input_kinds: Sequence[Kind], sized: Sequence[int] = (), **kwargs
) -> BoundedLowering:
    """The op's stock lowering on its traces' buffers, each output `Bounded` at the first trace's
    length.

    Traces of other capacities are padded to the largest. PyTensor never
    broadcasts at run time, so the traces must have the same length, as must
    the plain inputs at positions ``sized`` (padded likewise): run-time checks,
    unless the bounds prove them.
    """
    fn = jax_funcify(op, node=node, **kwargs)
    traces = [position for position, kind in enumerate(input_kinds) if kind == "array"]
    checks = tuple(
        RuntimeCheck(ValueError, f"{op}: {LENGTHS_DIFFER}") for _ in (*traces[1:], *sized)
    )

    def on_padded_buffers(*inputs):
        capacity = max(inputs[position].capacity for position in traces)
        length = inputs[traces[0]].length
        values = [value_of(value) for value in inputs]
        oks = [same_length(length, inputs[position].length) for position in traces[1:]]
        for position in traces:
            values[position] = with_capacity(inputs[position].buffer, capacity)
        for position in sized:
            oks.append(same_length(length, jnp.shape(values[position])[0]))
            values[position] = with_capacity(values[position], capacity)
        outputs = fn(*values)
        if len(node.outputs) == 1:
            return NodeResult(Bounded(outputs, length), tuple(oks))
        return NodeResult([Bounded(output, length) for output in outputs], tuple(oks))

    return BoundedLowering(on_padded_buffers, kinds("array", len(node.outputs)), checks)


@bounded_jax_funcify.register(Elemwise)
def _elemwise(op: Elemwise, node, input_kinds, **kwargs) -> BoundedLowering:
    if "array" not in input_kinds:
        return integer_elemwise(op, node, **kwargs)
    ndim = node.outputs[0].type.ndim
    traces = [
        value for value, kind in zip(node.inputs, input_kinds, strict=True) if kind == "array"
    ]
    if any(trace.type.ndim != ndim for trace in traces):
        raise NotImplementedError(
            f"{op}: a run-time length on another axis than the result's leading one"
        )
    sized = [
        position
        for position, (kind, variable) in enumerate(zip(input_kinds, node.inputs, strict=True))
        if kind != "array" and variable.type.ndim == ndim and variable.type.shape[0] != 1
    ]
    return on_buffers(op, node, input_kinds, sized, **kwargs)


@bounded_jax_funcify.register(DimShuffle)
def _dimshuffle(op: DimShuffle, node, input_kinds, **kwargs) -> BoundedLowering:
    if input_kinds[0] == "int":
        return integer_dimshuffle(op, node, **kwargs)
    if not op.new_order or op.new_order[0] != 0:
        raise NotImplementedError(f"{op} moves the axis whose length is known only at run time")
    return on_buffers(op, node, input_kinds, **kwargs)


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


def _has_an_entry(x: Bounded):
    return True if x.length.low >= 1 else x.length.value >= 1


def _over_meaningful_entries(
    op, node, input_kinds, scalar_op, empty: RuntimeCheck | None, **kwargs
) -> BoundedLowering:
    """A reduction along the trace's axis, over its meaningful entries: the padding is filled with
    the value that leaves ``scalar_op`` unchanged (``empty``: what an empty trace raises)."""
    if 0 not in _reduced_axes(op.axis, node.inputs[0].type.ndim):
        return on_buffers(op, node, input_kinds, **kwargs)
    fill = _padding_fill(scalar_op, np.dtype(node.inputs[0].type.dtype))
    if fill is None:
        raise NotImplementedError(
            f"{op} has no value to fill the entries beyond a run-time length with"
        )
    fn = jax_funcify(op, node=node, **kwargs)
    checks = () if empty is None else (empty,)

    def reduce_meaningful_entries(x: Bounded):
        reduced = fn(jnp.where(valid_rows(x), x.buffer, fill))
        return NodeResult(reduced, tuple(_has_an_entry(x) for _ in checks))

    return BoundedLowering(reduce_meaningful_entries, (None,), checks)


@bounded_jax_funcify.register(CAReduce)
def _careduce(op: CAReduce, node, input_kinds, **kwargs) -> BoundedLowering:
    if input_kinds[0] == "int":
        return integer_elemwise_like_reduction(jax_funcify(op, node=node, **kwargs), node)
    empty = None
    if isinstance(op.scalar_op, ps.Maximum | ps.Minimum):
        name = type(op.scalar_op).__name__.lower()
        empty = RuntimeCheck(
            ValueError, f"zero-size array to reduction operation {name} which has no identity"
        )
    return _over_meaningful_entries(op, node, input_kinds, op.scalar_op, empty, **kwargs)


def integer_elemwise_like_reduction(fn, node) -> BoundedLowering:
    """A reduction of a shape vector: exact when its entries are, otherwise without bounds
    (``[0, 1]`` for booleans)."""
    boolean = node.outputs[0].type.dtype == "bool"

    def reduce_integers(x: BoundedInt):
        value = fn(x.value)
        known = known_array(x)
        if known is None:
            low, high = (0.0, 1.0) if boolean else (-np.inf, np.inf)
            return BoundedInt(value, np.asarray(low), np.asarray(high))
        # The bounds are numpy: evaluated now, not staged into the trace (or a cond's branch).
        with jax.ensure_compile_time_eval():
            exact = np.asarray(fn(known), dtype=np.float64)
        return BoundedInt(value, exact, exact)

    return BoundedLowering(reduce_integers, ("int",))


@bounded_jax_funcify.register(Argmax)
def _argmax(op: Argmax, node, input_kinds, **kwargs) -> BoundedLowering:
    """Ties go to the first position, and every padding entry comes after the meaningful ones."""
    empty = RuntimeCheck(ValueError, "attempt to get argmax of an empty sequence")
    return _over_meaningful_entries(op, node, input_kinds, ps.maximum, empty, **kwargs)


@bounded_jax_funcify.register(CumOp)
def _cumulative(op: CumOp, node, input_kinds, **kwargs) -> BoundedLowering:
    """A cumulative sum or product down the trace: each entry depends only on those before it, never
    on the padding."""
    ndim = node.inputs[0].type.ndim
    if not (op.axis == 0 or (op.axis is None and ndim == 1)):
        raise NotImplementedError(
            f"{op}: accumulating across the axis whose length is known only at run time"
        )
    return on_buffers(op, node, input_kinds, **kwargs)


@bounded_jax_funcify.register(Dot)
def _dot(op: Dot, node, input_kinds, **kwargs) -> BoundedLowering:
    """A matrix product whose left operand's rows are a trace: its rows are the product's rows."""
    if input_kinds[1] is not None or node.inputs[0].type.ndim != 2:
        raise NotImplementedError(f"{op}: a run-time length on an axis the product sums over")
    return on_buffers(op, node, input_kinds, **kwargs)
