"""gpubackend's ``numba_funcify`` lowerings, one module per op family, as in
``pytensor/link/numba/dispatch/``.

Importing this package imports no module of it (and so not numba):
`register_lowerings` does, once PyTensor has loaded its Numba dispatch.
"""


def register_lowerings() -> None:
    """Register the native lowerings of the optimize ops and the bounds-checked integer-array
    indexing on ``numba_funcify``, and Numba's typing of the ``jax.Array`` a JAX update leaves in a
    shared variable (once jax is imported)."""
    from gpubackend.dispatch.numba import optimize, scan, subtensor  # noqa: F401
    from gpubackend.dispatch.numba.jax_arrays import register_jax_array_typing
    from gpubackend.import_hooks import when_imported

    when_imported("jax", register_jax_array_typing)
