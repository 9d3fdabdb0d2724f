"""JAX lowering of IncSubtensor that writes a whole array without a scatter.

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
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from pytensor.tensor.subtensor import IncSubtensor, indices_from_subtensor

from gpubackend.dispatch.jax.replacements import jax_gpu_funcify, replaces


def _covers_whole_axis(index, length: int) -> bool:
    if not isinstance(index, slice):
        return False
    bounds = (index.start, index.stop, index.step)
    if any(isinstance(bound, jax.core.Tracer) for bound in bounds):
        return False
    start, stop, step = slice(*(None if bound is None else int(bound) for bound in bounds)).indices(length)
    return step == 1 and start == 0 and stop == length


@replaces(IncSubtensor)
def jax_funcify_IncSubtensor(op: IncSubtensor, node, **kwargs) -> Callable:
    scatter = jax_gpu_funcify.stock(IncSubtensor)(op, node=node, **kwargs)

    def inc_subtensor(x, y, *index_inputs):
        indices = indices_from_subtensor(index_inputs, op.idx_list)
        shape = jnp.shape(x)
        if len(indices) > len(shape) or not all(
            _covers_whole_axis(index, length) for index, length in zip(indices, shape, strict=False)
        ):
            return scatter(x, y, *index_inputs)
        update = jnp.broadcast_to(y, shape)
        return (update if op.set_instead_of_inc else x + update).astype(jnp.result_type(x))

    return inc_subtensor
