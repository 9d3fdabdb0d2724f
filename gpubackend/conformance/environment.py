"""What a report records about the machine it ran on: versions, devices and the runner's label."""

from __future__ import annotations

import platform
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version

import pytensor

from gpubackend.conformance.checks import error_summary
from gpubackend.devices import describe_device, is_simulated, resolve_device

PACKAGES = ("pytensor", "jax", "jaxlib", "numba", "numpy", "pymc", "gpubackend")
"""The packages whose versions a report records (PyMC: the while-Scan differential's jaxified
path)."""


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def environment(devices: Iterable[str], label: str) -> dict:
    described = {}
    for spec in devices:
        try:
            device = resolve_device(spec)
            described[spec] = {
                "device": describe_device(device),
                "kind": "simulated" if is_simulated(device) else "real",
            }
        except Exception as error:  # noqa: BLE001 - an absent device is reported, not fatal
            described[spec] = {"device": error_summary(error), "kind": "missing"}
    return {
        "label": label,
        "python": platform.python_version(),
        "platform": platform.platform(),
        **{name: _package_version(name) for name in PACKAGES},
        "floatX": pytensor.config.floatX,
        "devices": described,
    }
