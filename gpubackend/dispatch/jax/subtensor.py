"""JAX lowerings of IncSubtensor that writes a whole array without a scatter, and of boolean masks
known only at run time.

An update whose slices cover every entry of ``x`` (``x[:] += y``, or a slice
whose bounds `fgraph` has made concrete and equal to the length) is an
elementwise add or a broadcast. The stock lowering emits it as a full-window
scatter, and XLA (jaxlib 0.11 and 0.12) aborts the process compiling such a
scatter followed by a reverse (``jnp.zeros(n).at[:].add(y)[::-1]`` fails its
check "Invalid binary instruction opcode map" in
``AlgebraicSimplifierVisitor::HandleReverse``). PyTensor's Scan gradients
produce exactly that pattern (``IncSubtensor{:stop}`` then ``[::-1]``) once
the stop is a concrete length, so second-order Scan gradients killed the
process. Every other update goes to the stock lowering unchanged.

A slice whose bound is known only at run time (``v[3:k]`` with ``k`` computed
from the data, or a Scan's step inside its body) has a data-dependent length
too: JAX raises a bare ``IndexError`` ("Array slice indices must have static
start/stop/step"). Reading or writing through one is refused with
`SliceBoundNotStaticError` saying what to write instead. A bound that is an
integer input of the function is made static by
`gpubackend.rewrites.jax.static_integer_length_inputs` and never gets here.

Advanced indexing with a boolean mask known only at run time selects as many
entries as the mask has True ones, a data-dependent shape that ``jax.jit``
cannot trace (JAX raises ``NonConcreteBooleanIndexError``). It is refused with
`DataDependentLengthError` naming the op and what to write instead;
everything the stock lowering does otherwise is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from pytensor.tensor.subtensor import (
    AdvancedIncSubtensor,
    AdvancedSubtensor,
    IncSubtensor,
    Subtensor,
    indices_from_subtensor,
)

from gpubackend.dispatch.jax.replacements import replaces, stock_lowering
from gpubackend.dispatch.jax.tracing import is_traced
from gpubackend.errors import DataDependentLengthError, SliceBoundNotStaticError


def _covers_whole_axis(index, length: int) -> bool:
    if not isinstance(index, slice):
        return False
    bounds = (index.start, index.stop, index.step)
    if any(is_traced(bound) for bound in bounds):
        return False
    start, stop, step = slice(*(None if bound is None else int(bound) for bound in bounds)).indices(
        length
    )
    return step == 1 and start == 0 and stop == length


def _static_slice_bounds(op, indices) -> None:
    """Raise `SliceBoundNotStaticError` where a slice among ``indices`` has a traced bound."""
    for index in indices:
        if isinstance(index, slice) and any(
            is_traced(bound) for bound in (index.start, index.stop, index.step)
        ):
            raise SliceBoundNotStaticError(
                f"{op}: a slice bound known only at run time (computed from the data, or a "
                "Scan's step in its body) gives a data-dependent length, which jax.jit cannot "
                "trace. Pass the bound as an integer input of the function (JAX_GPU then "
                "compiles once per value), keep the shape with a mask "
                "(pt.where(pt.arange(v.shape[0]) < k, v, 0) instead of v[:k]), or use "
                "mode='NUMBA'."
            )


@replaces(Subtensor)
def jax_funcify_Subtensor(op: Subtensor, node, **kwargs) -> Callable:
    index = stock_lowering(Subtensor)(op, node=node, **kwargs)

    def subtensor(x, *index_inputs):
        _static_slice_bounds(op, indices_from_subtensor(index_inputs, op.idx_list))
        return index(x, *index_inputs)

    return subtensor


@replaces(IncSubtensor)
def jax_funcify_IncSubtensor(op: IncSubtensor, node, **kwargs) -> Callable:
    scatter = stock_lowering(IncSubtensor)(op, node=node, **kwargs)

    def inc_subtensor(x, y, *index_inputs):
        indices = indices_from_subtensor(index_inputs, op.idx_list)
        _static_slice_bounds(op, indices)
        shape = jnp.shape(x)
        if len(indices) > len(shape) or not all(
            _covers_whole_axis(index, length) for index, length in zip(indices, shape, strict=False)
        ):
            return scatter(x, y, *index_inputs)
        update = jnp.broadcast_to(y, shape)
        return (update if op.set_instead_of_inc else x + update).astype(jnp.result_type(x))

    return inc_subtensor


class BooleanMaskLengthError(DataDependentLengthError, jax.errors.NonConcreteBooleanIndexError):
    """A boolean mask known only at run time: gpubackend's refusal, still the error stock JAX raises
    there."""

    def __init__(self, op):
        Exception.__init__(
            self,
            f"{op}: a boolean mask known only at run time selects "
            "a data-dependent number of entries, a shape "
            "jax.jit cannot trace. Keep the shape: pt.where(mask, new, x) instead of "
            "pt.set_subtensor(x[mask], new[mask]), and "
            "pt.where(mask, x, 0).sum() instead of x[mask].sum().",
        )


@replaces(AdvancedSubtensor, AdvancedIncSubtensor)
def jax_funcify_AdvancedSubtensor(op, node, **kwargs) -> Callable:
    stock = stock_lowering(type(op))(op, node=node, **kwargs)

    def advanced_indexing(*inputs):
        try:
            return stock(*inputs)
        except jax.errors.NonConcreteBooleanIndexError as error:
            raise BooleanMaskLengthError(op) from error

    return advanced_indexing
