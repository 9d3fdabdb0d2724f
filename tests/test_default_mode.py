"""JAX_GPU as PyTensor's default mode, from the environment (issue 43, README "Making JAX_GPU the
default mode").

``PYTENSOR_FLAGS=mode=JAX_GPU`` is refused by PyTensor itself when it is imported; ``import
gpubackend`` with ``GPUBACKEND_MODE=JAX_GPU`` makes it the default. Each check runs in a fresh
interpreter, because the flag and the variable are read when the modules are imported.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.test_import import HEAVY, REPO, run_fresh

COMPILE_WITHOUT_A_MODE = f"""
import json, sys
import numpy as np
import gpubackend
import pytensor, pytensor.tensor as pt

loaded_by_import = [m for m in {HEAVY!r} if m in sys.modules]
x = pt.dvector("x")
fn = pytensor.function([x], (x**2).sum() + x)
reference = pytensor.function([x], (x**2).sum() + x, mode="FAST_COMPILE")
value = np.array([1.0, -2.0, 0.5])
print(json.dumps({{
    "loaded_by_import": loaded_by_import,
    "linker": type(fn.maker.linker).__name__,
    "outputs": fn.maker.linker.outputs,
    "output_type": type(fn(value)).__module__.split(".")[0],
    "equal": bool(np.array_equal(np.asarray(fn(value)), reference(value))),
}}))
"""


def environment(**variables: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("GPUBACKEND_MODE", "PYTENSOR_FLAGS")
    }
    return env | variables


@pytest.mark.parametrize(
    "name, outputs, output_type",
    [("JAX_GPU", "device", "jaxlib"), ("JAX_GPU_NUMPY", "numpy", "numpy")],
)
def test_gpubackend_mode_variable_makes_the_default_mode(name, outputs, output_type):
    seen = run_fresh(COMPILE_WITHOUT_A_MODE, environment(GPUBACKEND_MODE=name))
    assert seen == {
        "loaded_by_import": [],
        "linker": "JAXGPULinker",
        "outputs": outputs,
        "output_type": output_type,
        "equal": True,
    }


def import_error(**variables: str) -> str:
    """The standard error of ``import gpubackend`` in a fresh interpreter with ``variables`` set,
    which must fail."""
    result = subprocess.run(
        [sys.executable, "-c", "import gpubackend"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=environment(**variables),
    )
    assert result.returncode != 0
    return result.stderr


def test_an_unknown_gpubackend_mode_is_refused_at_import_by_name():
    assert "ValueError: $GPUBACKEND_MODE='JAX_CPU'" in import_error(GPUBACKEND_MODE="JAX_CPU")


def test_pytensor_flags_cannot_name_jax_gpu():
    """Why the variable exists: PyTensor checks ``mode`` against its own names when it is
    imported, before gpubackend can register one."""
    assert "Instead got: JAX_GPU" in import_error(PYTENSOR_FLAGS="mode=JAX_GPU")
