"""The ``njit`` flavour used by every solver."""

from pytensor.link.numba.dispatch.basic import numba_njit

# Solvers are only called from other jitted code (the lowerings), so they skip
# the CPython wrapper like PyTensor's own kernels; PyTensor's fastmath setting
# applies to them as it does to the rest of the compiled graph.
solver_njit = numba_njit
