"""Index bounds for NUMBA's integer-array indexing: ``IndexError`` where the reference raises it.

PyTensor's Numba lowering of ``AdvancedSubtensor`` and ``AdvancedIncSubtensor``
with integer-array indices (``vector_integer_advanced_indexing``) compiles
without bounds checks. An index out of range then reads memory past the
array (``x[[0, 5]]`` of a 3-vector gave ``[0, 5.3e-315]``) or writes past it
(``inc_subtensor(x[[0, 5]], 1)`` returned without error, having written
outside ``x``). NumPy, PyTensor's C and Python code and JAX_GPU raise
``IndexError``. The same holds for the indexed reads and writes that
``FusedElemwise`` fuses into its loop (``x[idx].sum()``). These lowerings are
PyTensor's, preceded by a check of every integer index against the length of
the axis it indexes (``-size <= i < size``); every call that stock accepts
computes the same thing.
"""

from __future__ import annotations

from hashlib import sha256
from typing import NamedTuple

import numpy as np
from pytensor.graph.basic import Apply, Constant
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_and_cache_key
from pytensor.link.numba.dispatch.elemwise import numba_funcify_FusedElemwise
from pytensor.link.numba.dispatch.subtensor import numba_funcify_AdvancedSubtensor
from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
from pytensor.tensor.subtensor import (
    AdvancedIncSubtensor,
    AdvancedSubtensor,
)

from gpubackend.dispatch.subtensor_indices import integer_indices, out_of_bounds_message

BOUNDS_CHECK_VERSION = 3
"""Part of the cache key: a changed check must not reuse a cached one."""


@numba_njit
def _all_in_range(index, size):
    for position in np.ravel(np.asarray(index)):
        if position < -size or position >= size:
            return False
    return True


class IndexCheck(NamedTuple):
    """One integer index to check: its position among the lowered node's inputs, the position of
    the array it indexes, the axis, and the message of the ``IndexError``."""

    index_input: int
    array_input: int
    axis: int
    message: str


def _proven_in_range(node: Apply, axis: int, position: int) -> bool:
    """Whether the index at ``position`` is a constant in range of the length the indexed array's
    type gives its axis."""
    index, size = node.inputs[position], node.inputs[0].type.shape[axis]
    if not isinstance(index, Constant) or size is None:
        return False
    values = np.asarray(index.data)
    return bool(np.all((values >= -size) & (values < size)))


def _index_checks(node: Apply) -> list[IndexCheck]:
    """The checks of an indexing node's integer indices, but for constants proven in range (a
    boolean mask is checked by Numba's own indexing)."""
    return [
        IndexCheck(position, 0, axis, out_of_bounds_message(node.op, axis, node.inputs[0]))
        for axis, position in integer_indices(node)
        if not _proven_in_range(node, axis, position)
    ]


def _fused_index_checks(node: Apply) -> list[IndexCheck]:
    """The checks of the indexed reads and writes a ``FusedElemwise`` fuses into its loop: those of
    its inner indexing nodes whose array and index are inputs of the op (its outer inputs)."""
    position = {variable: i for i, variable in enumerate(node.op.fgraph.inputs)}
    checks = []
    for inner in node.op.fgraph.apply_nodes:
        if not isinstance(inner.op, AdvancedSubtensor | AdvancedIncSubtensor):
            continue
        for check in _index_checks(inner):
            index, array = inner.inputs[check.index_input], inner.inputs[check.array_input]
            if index in position and array in position:
                outer = node.inputs[position[array]]
                checks.append(
                    IndexCheck(
                        position[index],
                        position[array],
                        check.axis,
                        out_of_bounds_message(inner.op, check.axis, outer),
                    )
                )
    return checks


def _bounds_checked(indexing, stock_key: str | None, n_inputs: int, checks: list[IndexCheck]):
    """``indexing`` preceded by ``checks``, with its cache key (stock's when there is none)."""
    if not checks or stock_key is None:
        return indexing, stock_key
    names = [f"input_{position}" for position in range(n_inputs)]
    lines = [f"def bounds_checked({', '.join(names)}):"]
    for check in checks:
        size = f"{names[check.array_input]}.shape[{check.axis}]"
        lines.append(f"    if not all_in_range({names[check.index_input]}, {size}):")
        lines.append(f"        raise IndexError({check.message!r})")
    lines.append(f"    return indexing({', '.join(names)})")
    key = sha256(
        str((stock_key, tuple(checks), BOUNDS_CHECK_VERSION, __name__)).encode()
    ).hexdigest()
    checked = compile_numba_function_src(
        "\n".join(lines),
        "bounds_checked",
        global_env={"indexing": indexing, "all_in_range": _all_in_range},
        cache_key=key,
    )
    return numba_njit(checked), key


@register_funcify_and_cache_key(AdvancedSubtensor)
@register_funcify_and_cache_key(AdvancedIncSubtensor)
def numba_funcify_bounds_checked_AdvancedSubtensor(op, node, **kwargs):
    indexing, stock_key = numba_funcify_AdvancedSubtensor(op, node, **kwargs)
    return _bounds_checked(indexing, stock_key, len(node.inputs), _index_checks(node))


@register_funcify_and_cache_key(FusedElemwise)
def numba_funcify_bounds_checked_FusedElemwise(op, node, **kwargs):
    fused, stock_key = numba_funcify_FusedElemwise(op, node, **kwargs)
    return _bounds_checked(fused, stock_key, len(node.inputs), _fused_index_checks(node))
