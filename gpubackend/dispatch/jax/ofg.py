"""JAX lowering of OpFromGraph, funcified once per distinct op within one lowering.

The memo is the `LoweringContext` of the lowering (`lowering_context`), so it is
shared by every inner graph (scan bodies, other OFGs) of one function.
Equal ops (hash-consed on their frozen graph) share one function. When no
input can carry a length (all are float or complex) that function is a nested
``jax.jit``, so JAX also traces the body once per input signature rather than
once per call site.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from pytensor.compile.builders import OpFromGraph
from pytensor.link.jax.dispatch.basic import jax_funcify

from gpubackend.dispatch.jax.lowering_context import lowering_context
from gpubackend.dispatch.jax.replacements import replaces


def _only_array_data(op: OpFromGraph) -> bool:
    """No input that could carry a length: a nested jit would turn it into a tracer."""
    return all(
        np.dtype(getattr(variable.type, "dtype", "int64")).kind in "fc"
        for variable in op.fgraph.inputs
    )


@replaces(OpFromGraph)
def jax_funcify_OpFromGraph(op: OpFromGraph, node=None, **kwargs: Any) -> Callable:
    """One function per distinct op per lowering, however many call sites it has."""
    kwargs.pop("storage_map", None)
    memo = lowering_context(kwargs).ofg_functions
    if op not in memo:
        inner_fn = jax_funcify(op.fgraph, **kwargs)
        fn = (lambda *inputs: inner_fn(*inputs)[0]) if len(op.fgraph.outputs) == 1 else inner_fn
        memo[op] = jax.jit(fn) if _only_array_data(op) else fn
    return memo[op]
