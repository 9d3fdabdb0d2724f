"""What a JAX lowering hands every lowering below it, as one typed keyword argument.

Lowerings reach the ones below them through ``jax_funcify(..., **kwargs)``, and
PyTensor's stock lowerings (a for-Scan's, Blockwise's) pass on keywords they do
not know. So what the linker decides once for a whole function travels as one
frozen `LoweringContext` under `CONTEXT_KEYWORD`, never as loose keys that a
lowering reads if present. Its one mutable member is private to one lowering
of one graph: a cache of the functions of the OpFromGraph ops met so far
(`ofg`). Nothing flows back through it: what the linker needs from the lowering
is what the lowering returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

CONTEXT_KEYWORD = "gpubackend_context"


@dataclass(frozen=True)
class LoweringContext:
    reads_back: bool = False
    """The linker owns the call and reads back what only the data settle (JAX_GPU): the top graph
    lowers to a `gpubackend.host_reads.LoweredGraph`, its function and how to call it
    (`fgraph.lowered_graph`). False for an inner graph."""

    nested: bool = False
    """The graph being lowered is the inner graph of another op."""

    jax_differentiable: bool = True
    """JAX may differentiate the lowered function. JAX_GPU's never is: PyTensor's gradients are
    graphs of their own."""

    inner_index_checks: bool = False
    """The inner graphs of the function check their integer indices known only at run time with
    ``checkify.check``, and the linker reads the failures (JAX_GPU, where a Scan or OpFromGraph
    indexes so: `index_checks`)."""

    ofg_functions: dict[Any, Callable] = field(default_factory=dict, compare=False, repr=False)
    """One function per distinct OpFromGraph op within this lowering."""

    def for_inner_graphs(self) -> LoweringContext:
        """The context of the graphs inside this one.

        Same function, same cache, nothing read back.
        """
        return replace(self, reads_back=False, nested=True)


def lowering_context(kwargs: dict[str, Any]) -> LoweringContext:
    """The context in a lowering's keyword arguments; a default one, stored there, at the top of a
    stock linker's lowering."""
    return kwargs.setdefault(CONTEXT_KEYWORD, LoweringContext())
