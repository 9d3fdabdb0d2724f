"""Index bounds as the reference checks them, for JAX_GPU's top graph: integer positions that are
out of range raise ``IndexError`` instead of being clamped.

NumPy, PyTensor's C and Python code and Numba raise ``IndexError`` for an
integer index (a scalar or an integer array, in ``Subtensor``,
``IncSubtensor``, ``AdvancedSubtensor`` or ``AdvancedIncSubtensor``) outside
``-size..size-1``. JAX clamps reads and drops writes there, silently. Slices
never raise (they clip, as Python's do), and a boolean mask's shape is
checked while tracing.

A position known while tracing (a constant, or integer arithmetic that
`fgraph` evaluates at trace time: ``arange`` of a length, a length minus one)
is checked then and costs nothing at run time; one out of range raises the
reference's message while the call traces. A position known only at run time
becomes a run-time check (`checks`): its condition is computed in the
computation and read back in the call's one read (`host`). Only a linker that
reads back asks for these checks (`plan.plan_graph`): stock ``mode="JAX"``
keeps JAX's semantics, as a check there would cost a host callback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from pytensor.graph.basic import Apply, Constant
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.tensor.subtensor import (
    AdvancedIncSubtensor,
    AdvancedSubtensor,
    IncSubtensor,
    Subtensor,
)

from gpubackend.dispatch.jax.while_scan.checks import NodeResult, RuntimeCheck
from gpubackend.dispatch.jax.while_scan.rules import BoundedLowering

_INDEXING_OPS = (Subtensor, IncSubtensor, AdvancedSubtensor, AdvancedIncSubtensor)


def _first_index_input(op) -> int:
    """Where the index inputs start: after ``x``, and after ``y`` for a write."""
    return 2 if isinstance(op, IncSubtensor | AdvancedIncSubtensor) else 1


def _positions(node: Apply) -> list[tuple[int, int]]:
    """Per integer index (scalar or array) of the node: the axis of ``x`` it indexes, and its
    position among the node's inputs (a slice's bounds and a boolean mask index nothing that
    raises)."""
    first_index_input = _first_index_input(node.op)
    positions = []
    axis = 0
    for entry in node.op.idx_list:
        if isinstance(entry, slice):
            axis += 1
            continue
        position = first_index_input + entry
        index_type = node.inputs[position].type
        if np.dtype(index_type.dtype).kind == "b":
            axis += index_type.ndim
            continue
        positions.append((axis, position))
        axis += 1
    return positions


def index_checked_nodes(order: Sequence[Apply]) -> set[Apply]:
    """The indexing nodes with an integer index that is not a constant."""
    return {
        node
        for node in order
        if isinstance(node.op, _INDEXING_OPS)
        and any(not isinstance(node.inputs[position], Constant) for _, position in _positions(node))
    }


def _in_range(index, size: int, axis: int) -> Any:
    """True where ``-size <= index < size`` holds while tracing, else the traced condition; a
    concrete index out of range raises the reference's error now."""
    if isinstance(index, jax.core.Tracer):
        index = jnp.asarray(index)
        above = index < size
        if jnp.issubdtype(index.dtype, jnp.unsignedinteger):
            return jnp.all(above)
        return jnp.all((index >= -size) & above)
    values = np.asarray(index)
    outside = (values < -size) | (values >= size)
    if np.any(outside):
        raise IndexError(
            f"index {values[outside].flat[0]} is out of bounds for axis {axis} with size {size}"
        )
    return True


def checked_indexing(op, node: Apply, **kwargs) -> BoundedLowering:
    """The op's lowering, with one check per integer index that is not a constant."""
    fn = jax_funcify(op, node=node, **kwargs)
    checked = [
        (axis, position)
        for axis, position in _positions(node)
        if not isinstance(node.inputs[position], Constant)
    ]
    x_name = node.inputs[0].name or "the indexed array"
    checks = tuple(
        RuntimeCheck(IndexError, f"{op}: an index is out of bounds for axis {axis} of {x_name}")
        for axis, _ in checked
    )

    def indexing(*inputs):
        shape = jnp.shape(inputs[0])
        oks = tuple(_in_range(inputs[position], shape[axis], axis) for axis, position in checked)
        return NodeResult(fn(*inputs), oks)

    return BoundedLowering(indexing, (None,), checks)
