"""Lowerings of PyTensor ops, one module per op family and backend.

Importing this package arranges for them to be registered as soon as PyTensor
loads the registry (its JAX or Numba dispatch package), which it does when a
function is first compiled for that backend: ``import gpubackend`` imports
neither jax nor numba. The Numba ones go on ``numba_funcify``. The JAX ones go
on PyTensor's global ``jax_funcify`` unless ``$GPUBACKEND_REGISTER`` is
``jax_gpu``; then only mode="JAX_GPU" uses them (see `jax_replacements`).
"""

from gpubackend.import_hooks import when_imported
from gpubackend.registration import registers_globally


def register_jax_lowerings() -> None:
    # The optimize ops are recorded by op type here; optimistix loads with the first one lowered.
    from gpubackend.dispatch import jax_assert, jax_blockwise, jax_fgraph, jax_ifelse, jax_ofg  # noqa: F401
    from gpubackend.dispatch import jax_optimize_registration, jax_scalar_loop, jax_scan, jax_shape, jax_subtensor  # noqa: F401
    from gpubackend.dispatch.jax_replacements import keep_stock_lowerings, register_globally

    keep_stock_lowerings()
    if registers_globally():
        register_globally()


def register_numba_lowerings() -> None:
    from gpubackend.dispatch import numba_optimize  # noqa: F401


when_imported("pytensor.link.jax.dispatch", register_jax_lowerings)
when_imported("pytensor.link.numba.dispatch", register_numba_lowerings)
