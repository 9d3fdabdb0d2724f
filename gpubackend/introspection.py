"""What a compiled function shows to the checks that inspect it, through PyTensor's public
attributes.

The conformance suite, the main job and the tests look into a compiled
``pytensor.function`` only through these accessors, never through linker
attributes, so the linker can change how it links without breaking them.
What they expose:

- `compiled_graph`: the graph the function runs, after rewriting and baking;
- `device_resident_inputs`: which inputs a JAX_GPU function keeps on its
  device rather than converting to numpy (gpubackend's own input filter);
- `specialised_on_step_counts`: whether a JAX_GPU function compiles once per
  distinct number of steps its while-Scans take.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytensor.compile.executor import Function
    from pytensor.graph.fg import FunctionGraph


def compiled_graph(fn: Function) -> FunctionGraph:
    """The graph ``fn`` runs: the user's graph after PyTensor's rewrites and the linker's baking."""
    return fn.maker.fgraph


def device_resident_inputs(fn: Function) -> tuple[bool, ...]:
    """Per input container of ``fn`` (its explicit inputs in order, then its shared variables): kept
    on the device.

    True where a JAX_GPU function takes a ``jax.Array`` on its device as it is
    (README, "Where data lives under JAX_GPU"); False everywhere for other modes.
    """
    # Imported here: device_inputs loads jax, and a NUMBA function needs none.
    from gpubackend.device_inputs import DeviceResidentInput

    return tuple(isinstance(container.type, DeviceResidentInput) for container in fn.input_storage)


def specialised_on_step_counts(fn: Function) -> bool:
    """Whether ``fn`` (JAX_GPU) runs its graph specialised on while-Scan step counts: one compile
    per distinct count.

    Only a graph whose trace reaches an op with no rule for a run-time length
    is (README, "Cost model of while-Scans under JAX"); False for other modes.
    """
    from gpubackend.host_reads import HostReadingFunction

    jit_fn = getattr(fn.vm, "jit_fn", None)
    jit_fn = getattr(jit_fn, "__wrapped__", jit_fn)  # under outputs="numpy", the call it wraps
    return isinstance(jit_fn, HostReadingFunction) and jit_fn.specialised
