"""gpubackend's ``jax_funcify`` lowerings, one module per op family, as in
``pytensor/link/jax/dispatch/``.

Importing this package imports no module of it (and so not jax):
`register_lowerings` does, once PyTensor has loaded its JAX dispatch.
"""


def register_lowerings() -> None:
    """Import every lowering module: each registers its lowerings on ``jax_funcify`` on import.

    Also installs the warning for a fork after JAX started (`gpubackend.fork_safety`): from here
    on, PyTensor functions may start XLA's threads.

    A lowering module imported before PyTensor's JAX dispatch loads that
    dispatch itself, which runs this while the module is still importing: it
    registers its own lowerings when it goes on, so none is lost either way.
    """
    from gpubackend.fork_safety import warn_on_fork_after_jax

    warn_on_fork_after_jax()
    # The optimize ops are registered by op type here; optimistix loads with the first one lowered.
    # truncated_normal registers on PyMC's op once PyMC is loaded, and never loads PyMC itself.
    from gpubackend.dispatch.jax import (  # noqa: F401
        blockwise,
        check_and_raise,
        fgraph,
        ifelse,
        incomplete_inverse,
        ofg,
        optimize,
        random,
        scalar_loop,
        scan,
        shape,
        subtensor,
        truncated_normal,
    )
