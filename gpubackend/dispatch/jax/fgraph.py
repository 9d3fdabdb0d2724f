"""JAX lowering of a whole (frozen or mutable) FunctionGraph, with shape arithmetic kept concrete.

Inside ``jax.jit`` every input shape is a Python int, but PyTensor routes shapes
through ordinary ops (``Shape_i -> Assert -> maximum -> ARange``, scan lengths,
``Alloc`` shapes, buffer sizes of a scan's gradient). Stock JAX stages those ops,
so their results become tracers and ``arange``/``reshape``/``scan(length=...)``
fail with "Shapes must be 1D sequences of concrete values".

Here every node whose outputs are small integer or boolean tensors (the shape
arithmetic: scalars and vectors, also with length-1 batch dimensions) runs
under `jax.ensure_compile_time_eval` when its inputs are concrete: it is
evaluated at trace time, so each length is a Python value that ``jax.jit``
specialises on, exactly as it already specialises on input shapes. A new
length means a new input shape, hence a new trace; a stale length can never be
reused. Nodes that see a tracer are staged as usual.

A write through a boolean mask known only at run time whose result keeps its shape is
lowered from its place in the graph (`boolean_masks`): the graph decides whether the
selections it reads feed nothing else.

A graph with a while-Scan whose trace PyTensor may trim to the steps taken is
lowered by `while_scan` after the plan it makes for the graph: bounded traces
with their checks, or for a linker that reads back (JAX_GPU), step counts.
`lowered_graph` gives the graph's function and how the call reads back
(`gpubackend.host_reads.LoweredGraph`): ``jax_funcify`` of a FunctionGraph
returns that whole only at the top of a linker that reads back
(`LoweringContext.reads_back`), whose ``fgraph_convert`` reaches it through
PyTensor's; every other graph, nested or under a stock linker, is lowered to its
plain function.

At the top of a stock linker's lowering it starts the `LoweringContext` that
every lowering below shares (with a linker's own, it is given one). It
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
from pytensor.link.jax.dispatch.basic import jax_funcify, jax_typify
from pytensor.link.utils import fgraph_to_python

from gpubackend.dispatch.jax.boolean_masks import shape_keeping_lowerings
from gpubackend.dispatch.jax.index_checks import (
    checkified_indexing,
    constant_indices_checked,
    index_checked_nodes,
)
from gpubackend.dispatch.jax.known_inputs import with_known_inputs
from gpubackend.dispatch.jax.lowering_context import CONTEXT_KEYWORD, lowering_context
from gpubackend.dispatch.jax.replacements import replaces
from gpubackend.dispatch.jax.tracing import is_traced
from gpubackend.dispatch.jax.while_scan.graph import lowered_while_scan_graph
from gpubackend.dispatch.jax.while_scan.plan import plan_graph
from gpubackend.host_reads import LoweredGraph

_SHAPE_DTYPE_KINDS = frozenset("iub")

_GRAPH_ONLY_KWARGS = frozenset(
    {"order", "squeeze_output", "global_env", "local_env", "get_name_for_object"}
)


def _is_shape_arithmetic(node: Apply) -> bool:
    """Integer/boolean scalars or vectors computed by an op without an inner graph.

    A vector may have leading length-1 (broadcastable) dimensions: ``vectorize_graph`` turns a
    shape vector built from a (1,)-batched length into a (1, k) matrix, which the Blockwise
    lowering reduces to its core vector when it is concrete.
    """
    if isinstance(node.op, HasInnerGraph):
        return False
    for output in node.outputs:
        dtype = getattr(output.type, "dtype", None)
        broadcastable = getattr(output.type, "broadcastable", ())
        if (
            dtype is None
            or np.dtype(dtype).kind not in _SHAPE_DTYPE_KINDS
            or sum(not length_one for length_one in broadcastable) > 1
        ):
            return False
    return True


def _evaluated_when_concrete(fn: Callable) -> Callable:
    def shape_arithmetic(*inputs):
        if any(is_traced(value) for value in inputs):
            return fn(*inputs)
        with jax.ensure_compile_time_eval():
            return fn(*inputs)

    return shape_arithmetic


def _integers_not_masks(fn: Callable, node: Apply) -> Callable:
    """``fn`` with each output its node types as an integer returned as that integer where the
    lowering gives a bool array (PyTensor's JAX Bernoulli does): JAX would read it as a mask in an
    index (``sigma[is_outlier]`` would select instead of gather) and add it as logical or."""
    integer_dtypes = [
        dtype if dtype is not None and np.dtype(dtype).kind in "iu" else None
        for dtype in _graph_dtypes(node.outputs)
    ]
    if not any(integer_dtypes):
        return fn

    def as_integer(value, dtype):
        if dtype is not None and isinstance(value, jax.Array) and value.dtype == np.bool_:
            return value.astype(dtype)
        return value

    if len(node.outputs) == 1:
        return lambda *inputs: as_integer(fn(*inputs), integer_dtypes[0])

    def integer_outputs(*inputs):
        outputs = fn(*inputs)
        return type(outputs)(
            as_integer(value, dtype) for value, dtype in zip(outputs, integer_dtypes, strict=True)
        )

    return integer_outputs


def _funcify_node(
    op, node: Apply | None = None, *, fgraph, graph_lowerings: dict[Apply, Callable], **kwargs
) -> Callable:
    """The node's lowering: ``jax_funcify``'s, unless the graph gives it its own (`boolean_masks`
    lowers writes through a boolean mask from their place in the graph)."""
    fn = graph_lowerings.get(node) if node is not None else None
    if fn is None:
        fn = jax_funcify(op, node=node, **kwargs)
    if node is None:
        return fn
    fn = constant_indices_checked(fn, node)
    context = lowering_context(kwargs)
    if context.nested and context.inner_index_checks and index_checked_nodes([node]):
        fn = checkified_indexing(fn, node, fgraph)
    fn = _integers_not_masks(fn, node)
    if _is_shape_arithmetic(node):
        return _evaluated_when_concrete(fn)
    return fn


@replaces(FunctionGraph, FrozenFunctionGraph)
def jax_funcify_FunctionGraph(
    fgraph, node=None, fgraph_name: str = "jax_funcified_fgraph", **kwargs: Any
) -> Callable | LoweredGraph:
    """The graph's function; at the top of a linker that reads back, its `LoweredGraph`."""
    context = lowering_context(kwargs)
    lowered = lowered_graph(fgraph, fgraph_name, **kwargs)
    return lowered if context.reads_back else lowered.fn


def lowered_graph(fgraph, fgraph_name: str, **kwargs: Any) -> LoweredGraph:
    """The graph's function, and for a linker that reads back how to call it."""
    context = lowering_context(kwargs)
    squeezed = kwargs.get("squeeze_output", False) and len(fgraph.outputs) == 1
    # Every lowering below this graph lowers an inner graph: none of them is read back.
    kwargs[CONTEXT_KEYWORD] = context.for_inner_graphs()
    # What fgraph_to_python hands each node's lowering: everything but its own parameters.
    node_kwargs = {key: value for key, value in kwargs.items() if key not in _GRAPH_ONLY_KWARGS}
    # The order fgraph_to_python would compute, computed once for it and the plan.
    if kwargs.get("order") is None:
        kwargs["order"] = fgraph.toposort()
    order = kwargs["order"]
    plan = plan_graph(fgraph, order, index_checks=context.reads_back, **node_kwargs)
    graph_lowerings = shape_keeping_lowerings(fgraph)
    if plan is None:
        graph_fn = fgraph_to_python(
            fgraph,
            functools.partial(_funcify_node, fgraph=fgraph, graph_lowerings=graph_lowerings),
            type_conversion_fn=jax_typify,
            fgraph_name=fgraph_name,
            **kwargs,
        )
        graph_fn = with_known_inputs(graph_fn, fgraph)
        return LoweredGraph(_with_graph_dtypes(graph_fn, fgraph.outputs, squeezed))

    def default_fn(node: Apply) -> Callable:
        return _funcify_node(
            node.op, node=node, fgraph=fgraph, graph_lowerings=graph_lowerings, **node_kwargs
        )

    def constant(value):
        return jax_typify(value.data, variable=value)

    dtypes = _graph_dtypes(fgraph.outputs)

    def typed(values: list):
        values = [_typed(value, dtype) for value, dtype in zip(values, dtypes, strict=True)]
        return values[0] if squeezed else values

    return lowered_while_scan_graph(
        fgraph, order, plan, context, default_fn, constant, typed, **node_kwargs
    )


def _graph_dtypes(outputs) -> list[str | None]:
    return [getattr(output.type, "dtype", None) for output in outputs]


def _typed(value, dtype):
    if dtype is None or getattr(value, "dtype", None) == dtype:
        return value
    return jnp.asarray(value, dtype=dtype)


def _with_graph_dtypes(graph_fn: Callable, outputs, squeezed: bool) -> Callable:
    dtypes = _graph_dtypes(outputs)
    if not any(dtypes):
        return graph_fn

    # The wrapper keeps the graph function's name, which jax.jit shows in the jaxpr as stock's does.
    if squeezed:
        [dtype] = dtypes

        @functools.wraps(graph_fn)
        def typed_output(*args):
            return _typed(graph_fn(*args), dtype)

        return typed_output

    @functools.wraps(graph_fn)
    def typed_outputs(*args):
        return tuple(
            _typed(value, dtype) for value, dtype in zip(graph_fn(*args), dtypes, strict=True)
        )

    return typed_outputs
