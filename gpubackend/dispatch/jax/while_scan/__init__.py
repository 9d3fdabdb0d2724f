"""While-Scans under JAX: traces whose length depends on the data, lowered exactly or refused by
name.

PyTensor trims a while-Scan's trace to the steps its ``until`` condition
allows, a length ``jax.jit`` cannot return as a shape. The modules, in the
order a graph meets them:

- `values`: `Bounded` (a buffer and its run-time length) and `BoundedInt` (a
  traced integer with bounds known while tracing);
- `rules`: the registry of length-aware lowerings, filled by `lengths`,
  `arrays`, `indexing`, `allocation` and `traces` (Scan itself, over `loop`);
- `checks`: the reference's errors for conditions only the run settles;
- `plan`: which nodes of a graph see a run-time length, decided at lowering;
- `interpreter`: the graph as one traced function, on a ladder of capacities;
- `graph`: what each linker and path gets, and `refusals` where it gets none.

JAX_GPU's one read per call, where a graph has something to read, is the
linker's (`gpubackend.host_reads`); integer indices checked as the reference
does are `gpubackend.dispatch.jax.index_checks`'s, in graphs with or without a
while-Scan.
"""

from gpubackend.dispatch.jax.while_scan import allocation, arrays, indexing, lengths, traces  # noqa: F401  (rules)
