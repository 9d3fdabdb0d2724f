"""Lowerings of PyTensor ops, one module per op family and backend.

Importing this package registers them on PyTensor's ``jax_funcify`` and
``numba_funcify``.
"""

from gpubackend.dispatch import jax_optimize  # noqa: E402, F401
from gpubackend.dispatch import jax_assert, jax_blockwise, jax_fgraph, jax_ifelse, jax_ofg, jax_scalar_loop, jax_scan, jax_shape, jax_subtensor  # noqa: E402, F401
from gpubackend.dispatch import numba_optimize  # noqa: E402,F401
