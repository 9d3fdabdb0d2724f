"""Writes through a boolean mask known only at run time, lowered with ``jnp.where``.

``x[mask]`` has as many entries as ``mask`` has True ones, a shape ``jax.jit`` cannot trace,
so `subtensor` refuses it (`BooleanMaskLengthError`). A write through the mask does not have
that shape: ``set_subtensor(x[mask], v)`` is ``x`` again, whatever the mask. Two kinds of value
are written here exactly, without forming the selection:

- a value computed entry by entry from reads through the same mask,
  ``set_subtensor(x[mask], y[mask])`` (PyMC's rejection sampling of truncated distributions
  writes this) or ``set_subtensor(x[mask], 2 * x[mask] + 1)``: the reads pass their arrays
  through whole, the elementwise ops compute every entry, and the write keeps the selected ones,
  ``where(mask, value, x)``. This is sound only where the selections feed nothing else, so
  the graph must show that every client of every read and elementwise result involved is
  another of them or such a write;
- a value that does not depend on the count, as it is broadcast along the selected entries
  (``set_subtensor(x[mask], 0.0)``): ``where(mask, value, x)``.

``inc_subtensor`` is ``x + where(mask, value, 0)`` (a boolean mask selects each entry once).
Any other read through such a mask keeps its refusal. Only the plain form ``x[mask]``, one
boolean index on the leading axes, is recognised.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
from pytensor.graph.basic import Apply, Variable
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedSubtensor


def _boolean_mask(node: Apply) -> Variable | None:
    """The mask of an advanced index node of the form ``x[mask]`` with a boolean array ``mask``."""
    if not isinstance(node.op, AdvancedSubtensor | AdvancedIncSubtensor):
        return None
    if node.op.idx_list != (0,):
        return None
    mask = node.inputs[-1]
    is_array_mask = getattr(mask.type, "dtype", None) == "bool" and mask.type.ndim > 0
    return mask if is_array_mask else None


def _broadcast_along_selection(value: Variable, selection_ndim: int) -> bool:
    """Whether ``value`` is the same for every selected entry of a selection of ``selection_ndim``
    axes (the first of them the count): it has no axis of the count's length."""
    ndim = value.type.ndim
    return ndim < selection_ndim or (ndim == selection_ndim and value.type.shape[0] == 1)


def _entrywise_region(value: Variable, mask: Variable) -> set[Apply] | None:
    """The reads through ``mask`` and the elementwise nodes between them and ``value``, if
    ``value`` is computed entry by entry from such reads (and values broadcast along them)."""
    node = value.owner
    if node is None:
        return None
    if isinstance(node.op, AdvancedSubtensor):
        return {node} if _boolean_mask(node) is mask else None
    if not isinstance(node.op, Elemwise):
        return None
    region = {node}
    reads_found = False
    for operand in node.inputs:
        operand_region = _entrywise_region(operand, mask)
        if operand_region is not None:
            region |= operand_region
            reads_found = True
        elif not _broadcast_along_selection(operand, value.type.ndim):
            return None
    return region if reads_found else None


def _masked_writes(fgraph) -> list[tuple[Apply, Variable]]:
    """Each write ``x[mask] = value`` (or ``+=``) of ``fgraph``, with its mask."""
    writes = []
    for node in fgraph.apply_nodes:
        mask = _boolean_mask(node)
        if mask is not None and isinstance(node.op, AdvancedIncSubtensor):
            writes.append((node, mask))
    return writes


def _closed(region: set[Apply], writes: set[Apply], fgraph) -> bool:
    """Whether every client of the region's results is in the region or one of ``writes``, at the
    value's place."""
    for node in region:
        for output in node.outputs:
            for client, position in fgraph.clients[output]:
                if client not in region and not (client in writes and position == 1):
                    return False
    return True


def _check_mask_shape(mask, shape: tuple[int, ...], op) -> None:
    if tuple(jnp.shape(mask)) != tuple(shape[: jnp.ndim(mask)]):
        # The reference (NumPy) refuses a mask of another shape with an IndexError too.
        raise IndexError(
            f"{op}: boolean index of shape {jnp.shape(mask)} does not match the indexed "
            f"array's shape {shape}"
        )


def _whole_read(op: AdvancedSubtensor) -> Callable:
    def read(source, mask):
        _check_mask_shape(mask, jnp.shape(source), op)
        return source

    return read


def _masked_write(op: AdvancedIncSubtensor, drop_count_axis: bool) -> Callable:
    def write(x, value, mask):
        _check_mask_shape(mask, jnp.shape(x), op)
        value = jnp.asarray(value)
        if drop_count_axis:
            value = jnp.reshape(value, jnp.shape(value)[1:])
        # Trailing axes of length 1, so that the mask selects whole rows of x.
        selected = jnp.reshape(mask, jnp.shape(mask) + (1,) * (jnp.ndim(x) - jnp.ndim(mask)))
        value = value.astype(jnp.result_type(x))
        if op.set_instead_of_inc:
            return jnp.where(selected, value, x)
        return x + jnp.where(selected, value, jnp.zeros((), jnp.result_type(x)))

    return write


def shape_keeping_lowerings(fgraph) -> dict[Apply, Callable]:
    """The lowerings of the nodes of ``fgraph`` that the rules above cover: the writes, and the
    reads through the mask that feed them. Elementwise nodes between them keep their own."""
    lowerings: dict[Apply, Callable] = {}
    regions: dict[Variable, list[tuple[Apply, set[Apply]]]] = {}
    for write, mask in _masked_writes(fgraph):
        x, value = write.inputs[:2]
        selection_ndim = 1 + x.type.ndim - mask.type.ndim
        if _broadcast_along_selection(value, selection_ndim):
            drop = value.type.ndim == selection_ndim
            lowerings[write] = _masked_write(write.op, drop_count_axis=drop)
            continue
        region = _entrywise_region(value, mask)
        if region is not None:
            regions.setdefault(mask, []).append((write, region))
    # All the writes through one mask, or none: a region shared by two writes holds for both.
    for found in regions.values():
        writes = {write for write, _ in found}
        region = set().union(*(region for _, region in found))
        if not _closed(region, writes, fgraph):
            continue
        for write in writes:
            lowerings[write] = _masked_write(write.op, drop_count_axis=False)
        for node in region:
            if isinstance(node.op, AdvancedSubtensor):
                lowerings[node] = _whole_read(node.op)
    return lowerings
