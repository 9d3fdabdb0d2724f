"""Lowerings of PyTensor ops: `gpubackend.dispatch.jax` and `gpubackend.dispatch.numba`, one module
per op family.

Importing this package arranges for them to be registered as soon as PyTensor
loads the registry (its JAX or Numba dispatch package), which it does when a
function is first compiled for that backend: ``import gpubackend`` imports
neither jax nor numba. The Numba ones go on ``numba_funcify``. On PyTensor's
``jax_funcify`` each JAX one sits beside the stock lowering it replaces, and
which of the two lowers a graph is chosen while it is lowered
(`gpubackend.registration`, `gpubackend.dispatch.jax.replacements`).
"""

from gpubackend.dispatch import jax, numba
from gpubackend.import_hooks import when_imported

when_imported("pytensor.link.jax.dispatch", jax.register_lowerings)
when_imported("pytensor.link.numba.dispatch", numba.register_lowerings)
