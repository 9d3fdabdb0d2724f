"""Lowerings of PyTensor ops, one module per op family and backend.

Importing this package arranges for them to be registered on PyTensor's
``jax_funcify`` and ``numba_funcify`` as soon as PyTensor loads that registry
(its JAX or Numba dispatch package), which it does when a function is first
compiled for that backend: ``import gpubackend`` imports neither jax nor numba.
"""

from gpubackend.import_hooks import when_imported


def register_jax_lowerings() -> None:
    # The optimize ops register by op type here; optimistix loads with the first one lowered.
    from gpubackend.dispatch import jax_assert, jax_blockwise, jax_fgraph, jax_ifelse, jax_ofg  # noqa: F401
    from gpubackend.dispatch import jax_optimize_registration, jax_scalar_loop, jax_scan, jax_shape  # noqa: F401


def register_numba_lowerings() -> None:
    from gpubackend.dispatch import numba_optimize  # noqa: F401


when_imported("pytensor.link.jax.dispatch", register_jax_lowerings)
when_imported("pytensor.link.numba.dispatch", register_numba_lowerings)
