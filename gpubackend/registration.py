"""Where gpubackend's JAX lowerings are registered: the ``$GPUBACKEND_REGISTER`` switch.

Kept apart from `gpubackend.dispatch.jax.replacements` because it is read at
``import gpubackend`` (by the rewrites and the mode), which must not load jax.
"""

from __future__ import annotations

import os
from typing import Literal

REGISTER_ENV = "GPUBACKEND_REGISTER"
GLOBAL, JAX_GPU_ONLY = "global", "jax_gpu"
REWRITE_TAG = "gpubackend"
"""Tag of gpubackend's JAX graph rewrites: JAX_GPU includes it, the stock baseline excludes it."""

DispatchName = Literal["gpubackend", "stock"]
"""The dispatchers of `gpubackend.dispatch.jax.replacements.DISPATCHERS`: gpubackend's lowerings, or PyTensor's own."""


def registers_globally() -> bool:
    """Whether ``$GPUBACKEND_REGISTER`` asks for gpubackend's lowerings on PyTensor's global registry."""
    value = os.environ.get(REGISTER_ENV, "") or GLOBAL
    if value not in (GLOBAL, JAX_GPU_ONLY):
        raise ValueError(
            f"${REGISTER_ENV}={value!r}: expected {GLOBAL!r} (gpubackend's JAX lowerings serve every JAX mode, the "
            f"default) or {JAX_GPU_ONLY!r} (only mode='JAX_GPU' uses them; stock mode='JAX' stays PyTensor's own)"
        )
    return value == GLOBAL
