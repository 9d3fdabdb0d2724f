"""JAX's floating-point precision follows PyTensor's ``floatX`` from the moment jax is loaded.

PyTensor's JAX dispatch sets ``jax_enable_x64`` from ``floatX`` when it loads,
which is at the first JAX compile. Arrays made with JAX before that (say
``jax.device_put(np.ones(3), device)`` right after the imports) would get
JAX's 32-bit default and then be refused by a float64 function. gpubackend
makes the same setting earlier, as soon as jax itself is imported (or at once,
if it already is), without importing jax: so every array gets ``floatX``
precision, and the first compile changes nothing.
"""

from __future__ import annotations

import pytensor

from gpubackend.import_hooks import when_imported


def jax_precision_from_floatx() -> None:
    import jax

    jax.config.update("jax_enable_x64", pytensor.config.floatX == "float64")


def follow_floatx() -> None:
    when_imported("jax", jax_precision_from_floatx)
