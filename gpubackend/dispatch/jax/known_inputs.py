"""Inputs of an inner graph whose values are known while tracing, given to the graph's function in
place of the tracers its caller passes.

A lowering that hands a concrete value to an inner graph through a JAX loop (PyTensor's
for-Scan passes its non-sequences through ``lax.scan``'s carry) loses it: inside the loop
it is a tracer, and a body that needs it while tracing (``jnp.split`` at sizes from input
shapes, a reshape) fails with a ``ConcretizationTypeError``. Around the loop, the lowering
names the values (`known_inputs`); the graph's function (`with_known_inputs`) reads its own
while it traces and uses them instead. The values are the very ones the loop carries, so
nothing changes but what is known while tracing; no graph is rebuilt.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

_KNOWN: ContextVar[Mapping[Any, Mapping[int, Any]]] = ContextVar(
    "known_inputs", default=MappingProxyType({})
)


@contextmanager
def known_inputs(fgraph, values: Mapping[int, Any]) -> Iterator[None]:
    """While the block traces: ``fgraph``'s inputs at ``values``' positions are those values."""
    token = _KNOWN.set({**_KNOWN.get(), fgraph: values})
    try:
        yield
    finally:
        _KNOWN.reset(token)


def with_known_inputs(graph_fn: Callable, fgraph) -> Callable:
    """``graph_fn`` (``fgraph``'s function) taking the inputs known while it traces."""

    @functools.wraps(graph_fn)
    def graph_fn_with_known_inputs(*args):
        known = _KNOWN.get().get(fgraph)
        if known:
            args = tuple(known.get(position, arg) for position, arg in enumerate(args))
        return graph_fn(*args)

    return graph_fn_with_known_inputs
