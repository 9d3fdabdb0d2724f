"""JAX lowering of Blockwise that keeps unbatched inputs out of ``jnp.vectorize``.

The stock lowering passes every input through ``jnp.vectorize``, which
broadcasts and squeezes them with staged JAX ops. An unbatched integer input
such as a scan's length or a buffer size then becomes a tracer inside the
vmapped core function, and the core lowering can no longer use it as a shape.
Inputs whose batch dimensions are all statically 1 (``vectorize_graph`` turns a
scalar length into such a ``(1,)`` vector) are instead reduced to their core
value, with numpy when the value is concrete, and closed over; so a concrete
length stays concrete. Only truly batched inputs are vectorised (vmap).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.tensor.blockwise import Blockwise


def _signature(inputs_sig, outputs_sig) -> str:
    def group(dims_list):
        return ",".join(f"({','.join(dims)})" for dims in dims_list)

    return f"{group(inputs_sig)}->{group(outputs_sig)}"


def _core_value(value, batch_ndim: int):
    """``value`` without its (length-1) batch dimensions, kept concrete when it is."""
    if batch_ndim == 0:
        return value
    index = (0,) * batch_ndim
    return value[index] if isinstance(value, jax.core.Tracer) else np.asarray(value)[index]


@jax_funcify.register(Blockwise)
def jax_funcify_Blockwise(op: Blockwise, node, **kwargs) -> Callable:
    core_node = op._create_dummy_core_node(node.inputs, propagate_unbatched_core_inputs=True)
    core_fn = jax_funcify(core_node.op, node=core_node, **kwargs)
    batch_ndims = [variable.type.ndim - len(core_dims) for variable, core_dims in zip(node.inputs, op.inputs_sig, strict=True)]
    batched = [
        position
        for position, (variable, batch_ndim) in enumerate(zip(node.inputs, batch_ndims, strict=True))
        if not all(variable.type.broadcastable[:batch_ndim])
    ]
    signature = _signature([op.inputs_sig[position] for position in batched], op.outputs_sig)

    def blockwise_fn(*inputs):
        op._check_runtime_broadcast(node, inputs)

        unbatched = [_core_value(value, batch_ndim) for value, batch_ndim in zip(inputs, batch_ndims, strict=True)]

        def core_of_batched(*batched_values):
            values = list(unbatched)
            for position, value in zip(batched, batched_values, strict=True):
                values[position] = value
            outputs = core_fn(*values)
            # jnp.vectorize wants a tuple for several outputs; Scan's lowering gives a list.
            return tuple(outputs) if isinstance(outputs, list) else outputs

        return jnp.vectorize(core_of_batched, signature=signature)(*(inputs[position] for position in batched))

    return blockwise_fn
