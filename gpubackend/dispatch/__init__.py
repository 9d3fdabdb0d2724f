"""Lowerings of PyTensor ops, one module per op family and backend.

Importing this package registers the Numba ones on ``numba_funcify``, and the
JAX ones on PyTensor's global ``jax_funcify`` unless ``$GPUBACKEND_REGISTER``
is ``jax_gpu`` (then only mode="JAX_GPU" uses them; see `jax_replacements`).
"""

from gpubackend.dispatch import jax_optimize  # noqa: E402, F401
from gpubackend.dispatch import jax_assert, jax_blockwise, jax_fgraph, jax_ifelse, jax_ofg, jax_scalar_loop, jax_scan, jax_shape  # noqa: E402, F401
from gpubackend.dispatch import numba_optimize  # noqa: E402,F401
from gpubackend.dispatch.jax_replacements import register_globally, registers_globally

if registers_globally():
    register_globally()
