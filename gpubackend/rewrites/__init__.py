"""Compile-time baking rules for inner graphs, per linker.

Registrations on PyTensor's ``rewrite_*_inner_graph`` singledispatch functions
and on ``optdb``; importing this package installs them.
"""

from gpubackend.rewrites import jax_static_lengths  # noqa: E402, F401
from gpubackend.rewrites import numba_optimize  # noqa: E402,F401
