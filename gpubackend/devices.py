"""Naming and finding the JAX device a function runs on.

jax is imported when a device is first resolved, not with this module:
``import gpubackend`` must not load JAX (see the README, "Importing gpubackend").
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import jax

DEVICE_ENV_VAR = "GPUBACKEND_DEVICE"
DEFAULT_DEVICE = "gpu"

DeviceSpec = Union[str, "jax.Device"]

_SPEC_PATTERN = re.compile(r"^(?P<platform>gpu|cpu)(?::(?P<index>\d+))?$")


class DeviceNotFoundError(RuntimeError):
    """The requested device does not exist; gpubackend never falls back silently."""


class InputDeviceError(ValueError):
    """An input array lives on a device other than the function's target device."""


def check_device_spec(device: object, argument: str = "device") -> None:
    """Refuse, by argument name, a device that is neither None, a device name nor a
    ``jax.Device``."""
    if device is None or isinstance(device, str):
        return
    # A non-string device can only be a jax.Device, so jax is loaded already when it is one.
    import jax

    if not isinstance(device, jax.Device):
        raise TypeError(
            f"{argument}={device!r}: expected 'gpu', 'gpu:N', "
            "'cpu', 'cpu:N', a jax.Device or None, "
            f"got a {type(device).__name__}."
        )


def requested_device_spec(device: DeviceSpec | None) -> DeviceSpec:
    """The device asked for: the argument, else ``$GPUBACKEND_DEVICE`` (unless empty), else
    ``"gpu"``."""
    if device is not None:
        return device
    return os.environ.get(DEVICE_ENV_VAR, "").strip() or DEFAULT_DEVICE


def resolve_device(device: DeviceSpec | None = None) -> jax.Device:
    """Turn ``"gpu"``, ``"gpu:N"``, ``"cpu"``, ``"cpu:N"`` or a ``jax.Device`` into a device.

    Raises `DeviceNotFoundError` when the device does not exist, and
    `ValueError` when the string is not one of the accepted forms.
    """
    check_device_spec(device)
    spec = requested_device_spec(device)
    if not isinstance(spec, str):
        return spec
    match = _SPEC_PATTERN.match(spec.strip().lower())
    if match is None:
        raise ValueError(
            f"Device {spec!r} is not understood: expected 'gpu', 'gpu:N', 'cpu', "
            f"'cpu:N' or a jax.Device (set via the device argument or ${DEVICE_ENV_VAR})."
        )
    platform = match["platform"]
    index = int(match["index"] or 0)
    candidates = platform_devices(platform)
    if index >= len(candidates):
        raise DeviceNotFoundError(_not_found_message(spec, platform))
    return candidates[index]


def platform_devices(platform: str) -> list[jax.Device]:
    """JAX's devices for ``platform``, or an empty list when it has no such backend."""
    import jax

    try:
        return jax.devices(platform)
    except RuntimeError:
        return []


def visible_devices() -> list[jax.Device]:
    """Every device JAX sees, across the backends it could initialise."""
    return platform_devices("gpu") + platform_devices("cpu")


def is_simulated(device: jax.Device) -> bool:
    """True for the extra host devices that ``--xla_force_host_platform_device_count`` makes."""
    return device.platform == "cpu" and len(platform_devices("cpu")) > 1


def describe_device(device: jax.Device) -> str:
    kind = "simulated" if is_simulated(device) else "real"
    return f"{device.platform}:{device.id} ({device.device_kind}, {kind})"


def _not_found_message(spec: str, platform: str) -> str:
    seen = ", ".join(describe_device(d) for d in visible_devices()) or "none"
    return (
        f"gpubackend: the requested device {spec!r} does not exist. "
        f"JAX sees: {seen}. "
        + (
            "For NVIDIA GPUs install the CUDA extra: pip install "
            "'gpubackend[cuda13]' (or 'gpubackend[cuda12]' for CUDA 12 drivers). "
            if platform == "gpu"
            else ""
        )
        + f"To run on the CPU on purpose, set {DEVICE_ENV_VAR}=cpu "
        "(or pass device='cpu' to jax_gpu_mode)."
    )
