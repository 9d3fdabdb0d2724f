"""Lowerings of PyTensor ops, one module per op family and backend.

Importing this package registers them on PyTensor's ``jax_funcify`` and
``numba_funcify``.
"""

from gpubackend.dispatch import numba_optimize  # noqa: E402,F401
