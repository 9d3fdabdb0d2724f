"""Which lowerings serve the JAX op types gpubackend replaces: gpubackend's or PyTensor's own.

PyTensor's global ``jax_funcify`` holds, for each op type gpubackend replaces,
one entry that chooses between the two (`gpubackend.dispatch.jax.replacements`).
It asks `selected_lowerings`, which answers

- what the linker lowering the graph selected with `using_lowerings`
  (JAX_GPU: gpubackend's; the conformance suite's stock baseline: stock), for
  the whole of its lowering, inner graphs included;
- otherwise (stock ``mode="JAX"``, PyMC's ``get_jaxified_graph``, nutpie)
  `DEFAULT_LOWERINGS`, from ``$GPUBACKEND_REGISTER``: ``global`` (the default)
  gives gpubackend's, ``jax_gpu`` PyTensor's own, so stock mode="JAX" stays stock.

The switch is read once, when this module is imported (by ``import gpubackend``,
which must not load jax: hence a module apart from the lowerings).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

REGISTER_ENV = "GPUBACKEND_REGISTER"
GLOBAL, JAX_GPU_ONLY = "global", "jax_gpu"
REWRITE_TAG = "gpubackend"
"""Tag of gpubackend's JAX graph rewrites: JAX_GPU includes it, the stock baseline excludes it."""

Lowerings = Literal["gpubackend", "stock"]
"""gpubackend's lowerings of the op types it replaces, or PyTensor's own."""


def _default_lowerings() -> Lowerings:
    value = os.environ.get(REGISTER_ENV, "") or GLOBAL
    if value not in (GLOBAL, JAX_GPU_ONLY):
        raise ValueError(
            f"${REGISTER_ENV}={value!r}: expected {GLOBAL!r} (gpubackend's JAX lowerings serve "
            f"every JAX mode, the default) or {JAX_GPU_ONLY!r} (only mode='JAX_GPU' uses them; "
            "stock mode='JAX' stays PyTensor's own)"
        )
    return "gpubackend" if value == GLOBAL else "stock"


DEFAULT_LOWERINGS: Lowerings = _default_lowerings()
"""The lowerings used where no linker selected any, from ``$GPUBACKEND_REGISTER``."""

_SELECTED: ContextVar[Lowerings] = ContextVar("gpubackend_selected_lowerings")


def selected_lowerings() -> Lowerings:
    """The lowerings selected here: a linker's while it lowers, else `DEFAULT_LOWERINGS`."""
    return _SELECTED.get(DEFAULT_LOWERINGS)


@contextmanager
def using_lowerings(lowerings: Lowerings) -> Iterator[None]:
    """Select ``lowerings`` for the ``jax_funcify`` calls inside the block (this thread or task)."""
    token = _SELECTED.set(lowerings)
    try:
        yield
    finally:
        _SELECTED.reset(token)
