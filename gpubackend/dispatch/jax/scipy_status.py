"""optimistix's verdict from a scipy status that a minimiser keeps in its state."""

from __future__ import annotations

import jax
import optimistix as optx


def status_verdict(
    status: jax.Array, running: int, succeeded: jax.Array, out_of_iterations: jax.Array
) -> tuple[jax.Array, optx.RESULTS]:
    """``(done, result)`` for ``terminate``: done once ``status`` is no longer ``running``.

    optimistix goes on while the result is successful: so it is, too, while running.
    """
    result = optx.RESULTS.where(
        succeeded | (status == running),
        optx.RESULTS.successful,
        optx.RESULTS.where(
            out_of_iterations,
            optx.RESULTS.nonlinear_max_steps_reached,
            optx.RESULTS.nonlinear_divergence,
        ),
    )
    return status != running, result
