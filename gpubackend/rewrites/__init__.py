"""Compile-time baking rules for inner graphs, one module per linker, and graph rewrites.

Registrations on PyTensor's ``rewrite_*_inner_graph`` singledispatch functions
and on ``optdb``; importing this package installs them.
"""

from gpubackend.rewrites import jax, numba, scan_lengths  # noqa: F401
