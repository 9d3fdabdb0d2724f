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
from the padding, needs no rule of its own: `arrays.on_buffers` derives it
from the op's stock lowering.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import singledispatch
from typing import NamedTuple

from gpubackend.dispatch.jax.while_scan.values import Kind
from gpubackend.host_reads import RuntimeCheck


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
