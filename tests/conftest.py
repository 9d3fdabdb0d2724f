"""Test-session set-up: two simulated host devices, JAX_GPU aimed at cpu:1.

cpu:1 is not JAX's default device, so any data that silently lands on the
default device shows up as a wrong-device result or a transfer-guard error.
These variables must be set before JAX initialises its backends.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("GPUBACKEND_DEVICE", "cpu:1")

import jax
import pytest

import gpubackend


def pytest_collection_modifyitems(config, items):
    if gpubackend.devices.platform_devices("gpu"):
        return
    skip_gpu = pytest.mark.skip(reason="needs a real CUDA GPU; JAX sees none on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def target_device() -> jax.Device:
    return gpubackend.resolve_device()
