"""The backends the suite runs on, and which devices each pairs with."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import jax
from pytensor.compile.mode import Mode, get_mode

from gpubackend.devices import resolve_device
from gpubackend.mode import jax_gpu_mode, stock_jax_mode


@dataclass(frozen=True)
class Backend:
    name: str
    make_mode: Callable[[str], Mode]
    host_only: bool
    """Runs on the host whatever the device string; paired once with ``cpu``."""
    device_resident: bool
    """Outputs must stay on the target device, and warm calls must not transfer."""
    bakes_inplace: bool
    """Its baking rules destroy internal buffers of inner graphs (checked by ``baked``)."""
    device_scope: Callable[[str], AbstractContextManager]


def _no_scope(device: str) -> AbstractContextManager:
    return contextlib.nullcontext()


def _default_device_scope(device: str) -> AbstractContextManager:
    return jax.default_device(resolve_device(device))


BACKENDS: dict[str, Backend] = {
    "numba": Backend("numba", lambda device: get_mode("NUMBA"), True, False, True, _no_scope),
    "jax": Backend("jax", jax_gpu_mode, False, True, False, _no_scope),
    # PyTensor's own JAX mode on the same device, none of gpubackend's lowerings or rewrites: the
    # baseline.
    "jax-stock": Backend(
        "jax-stock", lambda device: stock_jax_mode(), False, False, False, _default_device_scope
    ),
    # mode="JAX" as a user gets it: gpubackend's lowerings in it unless
    # $GPUBACKEND_REGISTER=jax_gpu.
    "jax-registered": Backend(
        "jax-registered", lambda device: get_mode("JAX"), False, False, False, _default_device_scope
    ),
}

HOST_DEVICE = "cpu"


def distinct_devices(devices: Sequence[str]) -> list[str]:
    """The device strings naming distinct devices (``cpu`` and ``cpu:0`` are one), first spelling
    kept.

    Raises `DeviceNotFoundError` for a device that does not exist: one clear
    error rather than a column of failed cases.
    """
    seen: dict[jax.Device, str] = {}
    for spec in devices:
        seen.setdefault(resolve_device(spec), spec)
    return list(seen.values())


def name_device_pairs(
    names: Sequence[str], host_only: Mapping[str, bool], devices: Sequence[str], what: str
) -> list[tuple[str, str]]:
    """Every (name, device) to run. A host-only name (``host_only[name]``) runs once, on ``cpu``, if
    any cpu device is asked for; the others on every distinct device. An unknown name is a
    ValueError naming ``what`` it is."""
    unknown = [name for name in names if name not in host_only]
    if unknown:
        raise ValueError(f"Unknown {what} {unknown}; expected some of {sorted(host_only)}")
    pairs = []
    for name in names:
        if host_only[name]:
            if any(device.split(":")[0] == HOST_DEVICE for device in devices):
                pairs.append((name, HOST_DEVICE))
        else:
            pairs.extend((name, device) for device in distinct_devices(devices))
    return pairs


def backend_device_pairs(
    backends: Sequence[str], devices: Sequence[str]
) -> list[tuple[Backend, str]]:
    """Every (backend, device) to run (`name_device_pairs`)."""
    host_only = {name: backend.host_only for name, backend in BACKENDS.items()}
    pairs = name_device_pairs(backends, host_only, devices, "conformance backend(s)")
    return [(BACKENDS[name], device) for name, device in pairs]
