"""Naming and finding the JAX device a function runs on.

jax is imported when a device is first resolved, not with this module:
``import gpubackend`` must not load JAX (see the README, "Importing gpubackend").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from gpubackend.errors import DeviceNotFoundError

if TYPE_CHECKING:
    import jax

DEVICE_ENV_VAR = "GPUBACKEND_DEVICE"
DEFAULT_DEVICE = "gpu"

DeviceSpec = Union[str, "jax.Device"]

_SPEC_PATTERN = re.compile(r"^(?P<platform>gpu|cpu)(?::(?P<index>\d+))?$")

HOST_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
"""The XLA flag that makes JAX simulate several host devices (read once, when JAX starts)."""


@dataclass(frozen=True)
class DeviceSource:
    """Where a device name was given, which is where the user changes it: a device error words its
    advice for that place (a Python argument, the environment variable, a command-line flag)."""

    given: str
    """How a message says where the name came from (``from $GPUBACKEND_DEVICE``); empty where
    the caller says it (argparse's ``argument --device:``)."""
    forms: str
    """The device names it accepts."""
    choose_cpu: str
    """How to ask for the CPU there."""
    argument: str = "device"
    """The Python argument a device of the wrong type was passed as."""


_NAMES = "'gpu', 'gpu:N', 'cpu', 'cpu:N'"
DEVICE_ARGUMENT = DeviceSource(
    "given as device=", f"{_NAMES} or a jax.Device", "pass device='cpu' to jax_gpu_mode"
)
DEVICES_ARGUMENT = DeviceSource(
    "in devices=",
    f"{_NAMES} or a jax.Device",
    "pass devices='cpu' to jax_gpu_mode (every CPU device)",
    argument="devices",
)
DEVICE_ENVIRONMENT = DeviceSource(
    f"from ${DEVICE_ENV_VAR}", "'gpu', 'gpu:N', 'cpu' or 'cpu:N'", f"set {DEVICE_ENV_VAR}=cpu"
)


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


def resolve_device(
    device: DeviceSpec | None = None, *, source: DeviceSource | None = None
) -> jax.Device:
    """Turn ``"gpu"``, ``"gpu:N"``, ``"cpu"``, ``"cpu:N"`` or a ``jax.Device`` into a device.

    Raises `DeviceNotFoundError` when the device does not exist, and
    `ValueError` when the string is not one of the accepted forms. ``source``
    says where the name was given, for the errors' advice: by default the
    ``device`` argument, or ``$GPUBACKEND_DEVICE`` when ``device`` is None.
    """
    if source is None:
        source = DEVICE_ARGUMENT if device is not None else DEVICE_ENVIRONMENT
    check_device_spec(device, source.argument)
    spec = requested_device_spec(device)
    if not isinstance(spec, str):
        return spec
    match = _SPEC_PATTERN.match(spec.strip().lower())
    if match is None:
        raise ValueError(
            f"Device {spec!r} is not understood{_given(source)}: expected {source.forms}."
        )
    platform = match["platform"]
    index = int(match["index"] or 0)
    candidates = platform_devices(platform)
    if index >= len(candidates):
        raise DeviceNotFoundError(_not_found_message(spec, platform, index, source))
    return candidates[index]


def device_name(device: DeviceSpec) -> str:
    """The name that `resolve_device` turns back into ``device`` (``"gpu:0"``, ``"cpu:1"``): what
    a pickled function keeps, since a ``jax.Device`` does not pickle. A name stays as it is."""
    if isinstance(device, str):
        return device
    return f"{device.platform}:{platform_devices(device.platform).index(device)}"


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


def _not_found_message(spec: str, platform: str, index: int, source: DeviceSource) -> str:
    seen = ", ".join(describe_device(d) for d in visible_devices()) or "none"
    message = f"gpubackend: the requested device {spec!r}{_given(source)} does not exist. "
    message += f"JAX sees: {seen}. "
    if platform == "cpu":
        # JAX always has a host device, so only an index past the simulated ones gets here.
        flag = f"{HOST_DEVICE_COUNT_FLAG}={index + 1}"
        current = os.environ.get("XLA_FLAGS", "").strip()
        setting = f"XLA_FLAGS={flag}"
        if current:
            setting = f"XLA_FLAGS to include {flag} (now {current!r})"
        return message + (
            f"To simulate {index + 1} host devices, set {setting} in the environment before JAX "
            f"starts. To run on the CPU as it is, {source.choose_cpu}."
        )
    if n_gpus := len(platform_devices("gpu")):
        return message + f"Name one of the {n_gpus} GPUs there are, gpu:0 to gpu:{n_gpus - 1}."
    return message + (
        "For NVIDIA GPUs install the CUDA extra: pip install "
        "'gpubackend[cuda13]' (or 'gpubackend[cuda12]' for CUDA 12 drivers). "
        f"To run on the CPU on purpose, {source.choose_cpu}."
    )


def _given(source: DeviceSource) -> str:
    return f" ({source.given})" if source.given else ""
