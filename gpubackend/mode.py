"""The JAX_GPU compilation mode."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pytensor.compile.mode import (
    JAX,
    Mode,
    predefined_linkers,
    predefined_modes,
    register_linker,
    register_mode,
)
from pytensor.configdefaults import config

from gpubackend.devices import DeviceSpec
from gpubackend.linker import DispatchingJAXLinker, JAXGPULinker, MatmulPrecision, OutputKind
from gpubackend.registration import REWRITE_TAG

if TYPE_CHECKING:  # placement imports jax, which loads with the first compile
    from gpubackend.placement import DevicesSpec, ShardSpec

MODE_NAME = "JAX_GPU"
NUMPY_MODE_NAME = "JAX_GPU_NUMPY"
"""JAX_GPU returning numpy outputs, for host-side callers (PyMC's samplers, scipy loops)."""
LINKER_NAME = "jax_gpu"
DEFAULT_MODE_ENV = "GPUBACKEND_MODE"
"""Names the mode ``import gpubackend`` makes PyTensor's default (`set_default_mode_from_env`)."""


class JAXGPUMode(Mode):
    """A ``Mode`` whose compiled functions are `JAXGPUFunction`s (a lean positional call).

    PyTensor's ``Mode.function_maker`` is the hook (``DebugMode`` overrides it
    too); ``including``, ``excluding`` and ``clone`` keep the class.
    """

    @property
    def function_maker(self):
        from gpubackend.function import JAXGPUFunctionMaker

        return JAXGPUFunctionMaker


def jax_gpu_mode(
    device: DeviceSpec | None = None,
    *,
    devices: DevicesSpec | None = None,
    shard: ShardSpec | None = None,
    outputs: OutputKind = "device",
    matmul_precision: MatmulPrecision = "highest",
) -> Mode:
    """A Mode that runs on ``device`` ("gpu", "gpu:N", "cpu", "cpu:N" or a ``jax.Device``).

    With ``device=None`` the device is read from ``$GPUBACKEND_DEVICE`` each time
    a function is compiled, and defaults to ``"gpu"``.

    For data parallelism give ``devices`` instead: ``"gpu"`` (every local GPU),
    ``"cpu"``, or a list of device names or ``jax.Device``s. ``shard`` maps
    inputs (variables or their names) to the axis they are split along;
    every other input, and every shared variable not named, is replicated.
    Example: ``jax_gpu_mode(devices="gpu", shard={x: 0})``.

    ``outputs="device"`` (the default) returns ``jax.Array``s committed to the
    device, for callers that chain calls on it. ``outputs="numpy"`` returns
    numpy arrays, copied to the host once per call, for callers that work in
    numpy (PyMC's samplers, ``find_MAP``, scipy loops): a ``jax.Array`` would
    cost them a JAX dispatch per numpy operation. Updated shared variables stay
    on the device either way. ``mode="JAX_GPU_NUMPY"`` is
    ``jax_gpu_mode(outputs="numpy")``.

    ``matmul_precision="highest"`` (the default) computes float32 matrix
    products in float32, as the reference does. JAX's own default lets XLA use
    TensorFloat-32 on GPUs that have it (10 mantissa bits: a relative error of
    about 3e-4 in a 256-term float32 product on an H200, against 6e-7);
    ``matmul_precision="default"`` (or ``"high"``) trades that precision for
    the GPU's tensor-core speed. float64 products are the same either way.

    The graph rewrites are those of PyTensor's JAX mode and gpubackend's own.
    """
    linker = JAXGPULinker(
        device, devices=devices, shard=shard, outputs=outputs, matmul_precision=matmul_precision
    )
    return JAXGPUMode(linker=linker, optimizer=JAX.provided_optimizer.including(REWRITE_TAG))


def stock_jax_mode() -> Mode:
    """PyTensor's own JAX mode: none of gpubackend's lowerings or rewrites, whatever the default."""
    return Mode(
        linker=DispatchingJAXLinker("stock"),
        optimizer=JAX.provided_optimizer.excluding(REWRITE_TAG),
    )


def register() -> None:
    """Make ``mode="JAX_GPU"``, ``mode="JAX_GPU_NUMPY"`` and ``linker="jax_gpu"`` available by
    name."""
    if LINKER_NAME not in predefined_linkers:
        register_linker(LINKER_NAME, JAXGPULinker())
    if MODE_NAME not in predefined_modes:
        register_mode(MODE_NAME, jax_gpu_mode())
    if NUMPY_MODE_NAME not in predefined_modes:
        register_mode(NUMPY_MODE_NAME, jax_gpu_mode(outputs="numpy"))


def set_default_mode_from_env() -> None:
    """Make the mode ``$GPUBACKEND_MODE`` names (``JAX_GPU``, ``JAX_GPU_NUMPY``) the default.

    ``PYTENSOR_FLAGS=mode=JAX_GPU`` cannot: PyTensor checks the flag against its
    own mode names when it is imported, before any plugin exists, and refuses
    it. ``config.mode`` also takes a ``Mode`` instance, which is what this sets.
    """
    name = os.environ.get(DEFAULT_MODE_ENV, "")
    if not name:
        return
    if name not in (MODE_NAME, NUMPY_MODE_NAME):
        raise ValueError(
            f"${DEFAULT_MODE_ENV}={name!r}: expected {MODE_NAME!r} or {NUMPY_MODE_NAME!r} "
            "(unset it to keep PyTensor's default mode; PyTensor's own modes are set with "
            "PYTENSOR_FLAGS=mode=...)"
        )
    config.mode = predefined_modes[name]
