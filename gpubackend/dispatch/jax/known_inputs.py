"""Inputs of an inner graph whose values are known while tracing, kept known where a JAX
transformation between the lowering and the inner graph would make them tracers.

A lowering that hands a concrete value to an inner graph through a JAX loop or solve loses
it: inside PyTensor's for-Scan (its non-sequences pass through ``lax.scan``'s carry), or
optimistix's solve (its ``args`` pass through ``jit`` and ``custom_jvp``), it is a tracer, and
a graph that needs it while tracing (``jnp.split`` at sizes from input shapes, a reshape) fails
with a ``ConcretizationTypeError``. Two ways keep it known, neither rebuilding a graph:

- where the stock lowering passes the value (the for-Scan), the lowering names the values
  around the loop (`known_inputs`) and the graph's function (`with_known_inputs`) reads its
  own while it traces and uses them instead of the loop's tracers;
- where gpubackend's lowering passes it (the optimize ops), the value travels as static data
  of the pytree it is passed in (`static_where_known`, a `KnownValue` with no leaves), which no
  transformation traces, and the inner graph's function is given the value itself
  (`known_values`), however late its derivative rule is traced.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

import jax
import numpy as np

from gpubackend.dispatch.jax.tracing import is_traced

_KNOWN: ContextVar[Mapping[Any, Mapping[int, Any]]] = ContextVar(
    "known_inputs", default=MappingProxyType({})
)


def is_shape_value(value) -> bool:
    """A concrete integer or boolean scalar or vector: shape arithmetic, small enough to be a
    constant of the graph that receives it."""
    return not is_traced(value) and np.ndim(value) <= 1 and np.asarray(value).dtype.kind in "iub"


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


@jax.tree_util.register_static
class KnownValue:
    """A shape value as a pytree without leaves: JAX keeps it, as the pytree's static data,
    out of every trace. Equal (and hashed) by value, as JAX's trace caches compare static data."""

    def __init__(self, value) -> None:
        self.value = value
        host = np.asarray(value)
        self._key = (host.dtype.str, host.shape, host.tobytes())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KnownValue) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)


def static_where_known(values: Sequence) -> tuple:
    """``values``, each shape value known while tracing as a `KnownValue`."""
    return tuple(KnownValue(value) if is_shape_value(value) else value for value in values)


def known_values(values: Sequence) -> tuple:
    """``values`` with each `KnownValue` given back as its value."""
    return tuple(value.value if isinstance(value, KnownValue) else value for value in values)
