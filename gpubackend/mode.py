"""The JAX_GPU compilation mode."""

from __future__ import annotations

from pytensor.compile.mode import JAX, Mode, predefined_linkers, predefined_modes, register_linker, register_mode

from gpubackend.devices import DeviceSpec
from gpubackend.linker import JAXGPULinker

MODE_NAME = "JAX_GPU"
LINKER_NAME = "jax_gpu"


def jax_gpu_mode(device: DeviceSpec | None = None) -> Mode:
    """A Mode that runs on ``device`` ("gpu", "gpu:N", "cpu", "cpu:N" or a ``jax.Device``).

    With ``device=None`` the device is read from ``$GPUBACKEND_DEVICE`` each time
    a function is compiled, and defaults to ``"gpu"``. The graph rewrites are
    those of PyTensor's JAX mode.
    """
    return Mode(linker=JAXGPULinker(device), optimizer=JAX.provided_optimizer)


def register() -> None:
    """Make ``mode="JAX_GPU"`` and ``linker="jax_gpu"`` available by name."""
    if LINKER_NAME not in predefined_linkers:
        register_linker(LINKER_NAME, JAXGPULinker())
    if MODE_NAME not in predefined_modes:
        register_mode(MODE_NAME, jax_gpu_mode())
