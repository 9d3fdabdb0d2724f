"""Which inputs of an indexing node are integer indices, and which axis of the indexed array each
one indexes: what the bounds checks of both backends read (JAX's `index_checks`,
Numba's `numba.subtensor`). Imports neither backend."""

from __future__ import annotations

import numpy as np
from pytensor.graph.basic import Apply, Variable
from pytensor.tensor.subtensor import AdvancedIncSubtensor, IncSubtensor


def first_index_input(op) -> int:
    """Where the index inputs start: after ``x``, and after ``y`` for a write."""
    return 2 if isinstance(op, IncSubtensor | AdvancedIncSubtensor) else 1


def integer_indices(node: Apply) -> list[tuple[int, int]]:
    """Per integer index (scalar or array) of the node: the axis of ``x`` it indexes, and its
    position among the node's inputs (a slice's bounds and a boolean mask index nothing that
    raises; a mask spans as many axes as it has dimensions)."""
    first = first_index_input(node.op)
    positions = []
    axis = 0
    for entry in node.op.idx_list:
        if isinstance(entry, slice):
            axis += 1
            continue
        position = first + entry
        index_type = node.inputs[position].type
        if np.dtype(index_type.dtype).kind == "b":
            axis += index_type.ndim
            continue
        positions.append((axis, position))
        axis += 1
    return positions


def out_of_bounds_message(op, axis: int, array: Variable) -> str:
    """The ``IndexError`` message of both backends' checks."""
    return f"{op}: an index is out of bounds for axis {axis} of {array.name or 'the indexed array'}"
