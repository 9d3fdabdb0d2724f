"""gpubackend's ``jax_funcify`` lowerings, one module per op family, as in ``pytensor/link/jax/dispatch/``.

Importing this package imports no module of it (and so not jax):
`register_lowerings` does, once PyTensor has loaded its JAX dispatch.
"""


def register_lowerings() -> None:
    """Record every lowering, keep the stock ones they replace, and install ours globally unless scoped to JAX_GPU."""
    # The optimize ops are recorded by op type here; optimistix loads with the first one lowered.
    from gpubackend.dispatch.jax import blockwise, check_and_raise, fgraph, ifelse, ofg  # noqa: F401
    from gpubackend.dispatch.jax import optimize, scalar_loop, scan, shape, subtensor  # noqa: F401
    from gpubackend.dispatch.jax.replacements import take_over_registry
    from gpubackend.registration import registers_globally

    take_over_registry(install_globally=registers_globally())
