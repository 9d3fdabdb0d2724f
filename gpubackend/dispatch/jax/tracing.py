"""Whether JAX is tracing a value: the one spelling of the check that decides, while a lowering
traces, between work done now (on a concrete value) and work left to the computation."""

from __future__ import annotations

import jax


def is_traced(value) -> bool:
    """True for a tracer (inside ``jit``, ``vmap``, ``grad``...), whose value only the computation
    knows; False for a concrete value."""
    return isinstance(value, jax.core.Tracer)
