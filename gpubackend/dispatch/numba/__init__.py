"""gpubackend's ``numba_funcify`` lowerings, one module per op family, as in
``pytensor/link/numba/dispatch/``.

Importing this package imports no module of it (and so not numba):
`register_lowerings` does, once PyTensor has loaded its Numba dispatch.
"""


def register_lowerings() -> None:
    """Register the native lowerings of the optimize ops on ``numba_funcify``."""
    from gpubackend.dispatch.numba import optimize  # noqa: F401
