"""JAX lowering of OpFromGraph, funcified once per distinct op within one lowering.

The memo lives in the keyword arguments that every nested ``jax_funcify`` call
passes on, so it is created by the outermost FunctionGraph lowering
(`jax_fgraph`) and shared by inner graphs (scan bodies, other OFGs) below it.
Equal ops (hash-consed on their frozen graph) share one function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytensor.compile.builders import OpFromGraph
from pytensor.link.jax.dispatch.basic import jax_funcify

from gpubackend.dispatch.jax_fgraph import OFG_MEMO_KEY


@jax_funcify.register(OpFromGraph)
def jax_funcify_OpFromGraph(op: OpFromGraph, node=None, **kwargs: Any) -> Callable:
    """One function per distinct op per lowering, however many call sites it has."""
    kwargs.pop("storage_map", None)
    memo: dict = kwargs.setdefault(OFG_MEMO_KEY, {})
    if op not in memo:
        inner_fn = jax_funcify(op.fgraph, **kwargs)
        memo[op] = (lambda *inputs: inner_fn(*inputs)[0]) if len(op.fgraph.outputs) == 1 else inner_fn
    return memo[op]
