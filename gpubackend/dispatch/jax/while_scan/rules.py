"""The registry of length-aware lowerings: how an op computes on values whose length is known only
at run time.

`bounded_jax_funcify(op, node, input_kinds, **kwargs)` returns a
`BoundedLowering` for a node some of whose inputs are `Bounded` or
`BoundedInt` (the kinds say which), or raises ``NotImplementedError`` when it
has none for that case: the graph then needs the traces at their exact length
(`plan`). The rules live with the op families they serve: `lengths` (integer
arithmetic on lengths), `arrays` (elementwise ops, reductions, products),
`indexing`, `allocation`, and `loop` (Scan itself).

An op whose outputs' leading axis is the one its traces share, each entry
computed from the same entry of each trace (or from those before it), never
from the padding, needs no rule of its own: `on_buffers` derives it from the
op's stock lowering.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import singledispatch
from typing import Any, NamedTuple

import jax.numpy as jnp
from pytensor.link.jax.dispatch.basic import jax_funcify

from gpubackend.dispatch.jax.while_scan.checks import NodeResult, RuntimeCheck
from gpubackend.dispatch.jax.while_scan.values import (
    Bounded,
    BoundedInt,
    Kind,
    kinds,
    known_equal,
    value_of,
    with_capacity,
)

LENGTHS_DIFFER = (
    "operands of run-time lengths that differ (PyTensor does not broadcast at run time)"
)


class BoundedLowering(NamedTuple):
    fn: Callable
    """The node's function. It returns a `NodeResult` when it declares checks or is
    capacity-limited."""

    output_kinds: tuple[Kind, ...]

    checks: tuple[RuntimeCheck, ...] = ()
    """The run-time checks the function may need, in the order of its `NodeResult.oks`."""

    capacity_limited: bool = False
    """A Scan: it takes ``capacity`` (its buffers' room, None for its bound) and ``resume`` (the
    `NodeResult.state` of a run with less room that overflowed), and reports overflow."""


@singledispatch
def bounded_jax_funcify(op, node, input_kinds: Sequence[Kind], **kwargs) -> BoundedLowering:
    raise NotImplementedError(f"{op} has no lowering for lengths known only at run time")


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
