"""JAX's floating-point precision follows PyTensor's ``floatX`` as it is when jax is loaded.

PyTensor's JAX dispatch sets ``jax_enable_x64`` from ``floatX`` when it loads,
which is at the first JAX compile. Arrays made with JAX before that (say
``jax.device_put(np.ones(3), device)`` right after the imports) would get
JAX's 32-bit default and then be refused by a float64 function; and a first
compile inside ``config.change_flags(floatX="float32")`` would turn 64-bit
precision off for the rest of the process. gpubackend decides once, as soon as
jax itself is imported (or at once, if it already is), without importing jax,
and keeps that decision when PyTensor's dispatch loads later.
"""

from __future__ import annotations

from functools import cache

import pytensor

from gpubackend.import_hooks import when_imported


@cache
def x64_when_jax_loaded() -> bool:
    """Whether JAX computes in 64 bits: ``floatX`` is float64 at the first call, which is when jax
    loads."""
    return pytensor.config.floatX == "float64"


def apply_decided_precision() -> None:
    import jax

    jax.config.update("jax_enable_x64", x64_when_jax_loaded())


def follow_floatx() -> None:
    when_imported("jax", apply_decided_precision)
    # PyTensor's JAX dispatch re-sets the flag from the floatX of the moment it loads.
    when_imported("pytensor.link.jax.dispatch", apply_decided_precision)
