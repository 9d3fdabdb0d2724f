"""What a JAX lowering hands every lowering below it, as one typed keyword argument.

Lowerings reach the ones below them through ``jax_funcify(..., **kwargs)``, and
PyTensor's stock lowerings (a for-Scan's, Blockwise's) pass on keywords they do
not know. So what the linker decides once for a whole function travels as one
frozen `LoweringContext` under `CONTEXT_KEYWORD`, never as loose keys that a
lowering reads if present. Its mutable members are private to one lowering of
one graph: a cache of the functions of the OpFromGraph ops met so far (`ofg`),
and, for a linker that reads back, the `ReadBack` where the top graph's lowering
leaves how its function is called (the linker created the context, and reads it
when it compiles that function).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # host imports jax; the linker builds contexts from `import gpubackend` on
    from gpubackend.dispatch.jax.while_scan.host import HostReadPlan

CONTEXT_KEYWORD = "gpubackend_context"


@dataclass
class ReadBack:
    """What the top graph's lowering tells a linker that reads back (JAX_GPU) about its function."""

    plan: HostReadPlan | None = None
    """How a call of the function reads back what only the data settle (`while_scan.host`). None
    where the graph has nothing to read back: the function is then the graph's plain one."""


@dataclass(frozen=True)
class LoweringContext:
    read_back: ReadBack | None = field(default=None, compare=False)
    """Given where the linker owns the call and reads back what only the data settle (JAX_GPU):
    the top graph's lowering records there how its function is called. None for an inner graph."""

    nested: bool = False
    """The graph being lowered is the inner graph of another op."""

    split_ladder: bool = False
    """A while-Scan graph's capacity ladder runs as two computations, the first rung and the rest
    (`while_scan.interpreter.LadderedGraph`): JAX_GPU on the CPU, where XLA maps large temporaries
    afresh on every call."""

    jax_differentiable: bool = True
    """JAX may differentiate the lowered function. JAX_GPU's never is: PyTensor's gradients are
    graphs of their own."""

    inner_index_checks: bool = False
    """The inner graphs of the function check their integer indices known only at run time with
    ``checkify.check``, and the linker reads the failures (JAX_GPU, where a Scan or OpFromGraph
    indexes so: `while_scan.index_checks`)."""

    ofg_functions: dict[Any, Callable] = field(default_factory=dict, compare=False, repr=False)
    """One function per distinct OpFromGraph op within this lowering."""

    def for_inner_graphs(self) -> LoweringContext:
        """The context of the graphs inside this one.

        Same function, same cache, nothing read back.
        """
        return replace(self, read_back=None, nested=True, split_ladder=False)


def lowering_context(kwargs: dict[str, Any]) -> LoweringContext:
    """The context in a lowering's keyword arguments; a default one, stored there, at the top of a
    stock linker's lowering."""
    return kwargs.setdefault(CONTEXT_KEYWORD, LoweringContext())
