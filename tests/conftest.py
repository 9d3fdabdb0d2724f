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

# The files whose tests compile the most (PyMC samplers, Numba solvers), by their share of a cold
# run: started first, so that under xdist's work stealing the cheap tests fill in at the end
# instead of one worker finishing a long sampler test alone.
HEAVIEST_FIRST = (
    "test_pymc.py",
    "test_kalman.py",
    "test_bench_models.py",
    "test_scipy_options.py",
    "test_numba_optimize.py",
    "test_conformance.py",
)


def _cost_rank(item) -> int:
    name = item.path.name
    return HEAVIEST_FIRST.index(name) if name in HEAVIEST_FIRST else len(HEAVIEST_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_cost_rank)  # stable: each file keeps its own order
    if gpubackend.devices.platform_devices("gpu"):
        return
    skip_gpu = pytest.mark.skip(reason="needs a real CUDA GPU; JAX sees none on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def target_device() -> jax.Device:
    return gpubackend.resolve_device()
