"""JAX lowering of Blockwise that keeps unbatched inputs out of ``jnp.vectorize``.

The stock lowering passes every input through ``jnp.vectorize``, which
broadcasts and squeezes them with staged JAX ops. An unbatched integer input
such as a scan's length or a buffer size then becomes a tracer inside the
vmapped core function, and the core lowering can no longer use it as a shape.
Inputs that have batch dimensions, all statically 1 (``vectorize_graph`` turns
a scalar length into such a ``(1,)`` vector), are instead reduced to their core
value and closed over. A concrete value is reduced while tracing
(``jax.ensure_compile_time_eval``) and stays a concrete ``jax.Array``: a length
can still be a shape, and an array can still be indexed by the core's batched
(traced) indices, which a numpy array cannot (numpy would call ``__array__`` on
the tracer). Only truly batched inputs are vectorised (vmap), and the
outputs get back the leading length-1 batch dimensions that broadcasting with
the unbatched inputs gives them. A node with no such input is the stock
lowering's.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.tensor.blockwise import Blockwise

from gpubackend.dispatch.jax.replacements import replaces, stock_lowering
from gpubackend.dispatch.jax.tracing import is_traced


def _signature(inputs_sig, outputs_sig) -> str:
    def group(dims_list):
        return ",".join(f"({','.join(dims)})" for dims in dims_list)

    return f"{group(inputs_sig)}->{group(outputs_sig)}"


def _core_value(value, batch_ndim: int):
    """``value`` without its (length-1) batch dimensions, kept concrete when it is."""
    index = (0,) * batch_ndim
    if is_traced(value):
        return value[index]
    with jax.ensure_compile_time_eval():
        return jnp.asarray(value)[index]


def _with_batch_ndim(value, batch_ndim: int, core_ndim: int):
    """``value`` with leading length-1 dimensions up to ``batch_ndim`` batch dimensions."""
    missing = batch_ndim - (jnp.ndim(value) - core_ndim)
    return jnp.reshape(value, (1,) * missing + jnp.shape(value)) if missing else value


@replaces(Blockwise)
def jax_funcify_Blockwise(op: Blockwise, node, **kwargs) -> Callable:
    batch_ndims = [
        variable.type.ndim - len(core_dims)
        for variable, core_dims in zip(node.inputs, op.inputs_sig, strict=True)
    ]
    unbatched = [
        batch_ndim > 0 and all(variable.type.broadcastable[:batch_ndim])
        for variable, batch_ndim in zip(node.inputs, batch_ndims, strict=True)
    ]
    if not any(unbatched):
        return stock_lowering(Blockwise)(op, node=node, **kwargs)

    core_node = op._create_dummy_core_node(node.inputs, propagate_unbatched_core_inputs=True)
    core_fn = jax_funcify(core_node.op, node=core_node, **kwargs)
    batched = [position for position, is_unbatched in enumerate(unbatched) if not is_unbatched]
    signature = _signature([op.inputs_sig[position] for position in batched], op.outputs_sig)
    out_batch_ndim = node.outputs[0].type.ndim - len(op.outputs_sig[0])
    core_out_ndims = [len(dims) for dims in op.outputs_sig]

    def blockwise_fn(*inputs):
        op._check_runtime_broadcast(node, inputs)
        values = [
            _core_value(value, batch_ndim) if is_unbatched else value
            for value, batch_ndim, is_unbatched in zip(inputs, batch_ndims, unbatched, strict=True)
        ]

        def core_of_batched(*batched_values):
            for position, value in zip(batched, batched_values, strict=True):
                values[position] = value
            outputs = core_fn(*values)
            # jnp.vectorize wants a tuple for several outputs; Scan's lowering gives a list.
            return tuple(outputs) if isinstance(outputs, list) else outputs

        if batched:
            outputs = jnp.vectorize(core_of_batched, signature=signature)(
                *(inputs[position] for position in batched)
            )
        else:
            outputs = core_of_batched()
        if len(core_out_ndims) == 1:
            return _with_batch_ndim(outputs, out_batch_ndim, core_out_ndims[0])
        return tuple(
            _with_batch_ndim(value, out_batch_ndim, ndim)
            for value, ndim in zip(outputs, core_out_ndims, strict=True)
        )

    return blockwise_fn
