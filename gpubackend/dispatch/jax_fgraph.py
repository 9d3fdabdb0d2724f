"""JAX lowering of a whole (frozen or mutable) FunctionGraph, with shape arithmetic kept concrete.

Inside ``jax.jit`` every input shape is a Python int, but PyTensor routes shapes
through ordinary ops (``Shape_i -> Assert -> maximum -> ARange``, scan lengths,
``Alloc`` shapes, buffer sizes of a scan's gradient). Stock JAX stages those ops,
so their results become tracers and ``arange``/``reshape``/``scan(length=...)``
fail with "Shapes must be 1D sequences of concrete values".

Here every node whose outputs are small integer or boolean tensors (the shape
arithmetic) runs under `jax.ensure_compile_time_eval` when its inputs are
concrete: it is evaluated at trace time, so each length is a Python value that
``jax.jit`` specialises on, exactly as it already specialises on input shapes.
A new length means a new input shape, hence a new trace; a stale length can
never be reused. Nodes that see a tracer are staged as usual.

It also starts the memo that `jax_ofg` threads through one lowering, and it
returns every output with the dtype of the graph's type: some stock lowerings
return their accumulator dtype (a float32 ``Sum`` with ``acc_dtype=float64``
comes back as float64 under x64), and an output folded to a constant can be a
Python float. The casts happen at trace time and only where dtypes differ.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from pytensor.graph.basic import Apply
from pytensor.graph.fg import FrozenFunctionGraph, FunctionGraph
from pytensor.graph.op import HasInnerGraph
from pytensor.link.jax.dispatch.basic import jax_typify
from pytensor.link.utils import fgraph_to_python

from gpubackend.dispatch.jax_replacements import jax_gpu_funcify, replaces

OFG_MEMO_KEY = "gpubackend_ofg_memo"

_SHAPE_DTYPE_KINDS = frozenset("iub")


def _is_shape_arithmetic(node: Apply) -> bool:
    """Integer/boolean scalars or vectors computed by an op without an inner graph."""
    if isinstance(node.op, HasInnerGraph):
        return False
    for output in node.outputs:
        dtype = getattr(output.type, "dtype", None)
        ndim = getattr(output.type, "ndim", 0)
        if dtype is None or np.dtype(dtype).kind not in _SHAPE_DTYPE_KINDS or ndim > 1:
            return False
    return True


def _evaluated_when_concrete(fn: Callable) -> Callable:
    def shape_arithmetic(*inputs):
        if any(isinstance(value, jax.core.Tracer) for value in inputs):
            return fn(*inputs)
        with jax.ensure_compile_time_eval():
            return fn(*inputs)

    return shape_arithmetic


def _funcify_node(op, node: Apply | None = None, **kwargs) -> Callable:
    fn = jax_gpu_funcify(op, node=node, **kwargs)
    if node is not None and _is_shape_arithmetic(node):
        return _evaluated_when_concrete(fn)
    return fn


@replaces(FunctionGraph, FrozenFunctionGraph)
def jax_funcify_FunctionGraph(
    fgraph, node=None, fgraph_name: str = "jax_funcified_fgraph", **kwargs: Any
) -> Callable:
    kwargs.setdefault(OFG_MEMO_KEY, {})
    graph_fn = fgraph_to_python(
        fgraph,
        _funcify_node,
        type_conversion_fn=jax_typify,
        fgraph_name=fgraph_name,
        **kwargs,
    )
    return _with_graph_dtypes(graph_fn, fgraph.outputs, squeezed=kwargs.get("squeeze_output", False) and len(fgraph.outputs) == 1)


def _with_graph_dtypes(graph_fn: Callable, outputs, squeezed: bool) -> Callable:
    dtypes = [getattr(output.type, "dtype", None) for output in outputs]
    if not any(dtypes):
        return graph_fn

    def typed(value, dtype):
        if dtype is None or getattr(value, "dtype", None) == dtype:
            return value
        return jnp.asarray(value, dtype=dtype)

    # The wrapper keeps the graph function's name, which jax.jit shows in the jaxpr as stock's does.
    if squeezed:
        [dtype] = dtypes

        @functools.wraps(graph_fn)
        def typed_output(*args):
            return typed(graph_fn(*args), dtype)

        return typed_output

    @functools.wraps(graph_fn)
    def typed_outputs(*args):
        return tuple(typed(value, dtype) for value, dtype in zip(graph_fn(*args), dtypes, strict=True))

    return typed_outputs
