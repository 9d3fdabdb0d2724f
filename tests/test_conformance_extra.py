"""The conformance suite is an optional extra: ``gpubackend[conformance]`` holds rich and
hypothesis.

The metadata is built from this checkout's pyproject.toml (the installed copy
may be an older one). The commands are run in fresh interpreters in which the
extra's packages cannot be imported, as on a machine without the extra.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from gpubackend.__main__ import EXTRA_MISSING_STATUS
from gpubackend.extras import CONFORMANCE_EXTRA

REPO = Path(__file__).resolve().parents[1]
INSTALL_HINT = "pip install 'gpubackend[conformance]'"


@pytest.fixture(scope="module")
def requirements() -> dict[str, set[Requirement]]:
    """This checkout's ``Requires-Dist`` entries, as setuptools writes them into a wheel, per extra
    ("" for none)."""
    if (
        importlib.util.find_spec("setuptools") is None
    ):  # the test extra installs it; a provisioned Python may lack it
        pytest.skip(
            "setuptools (the build backend) is not installed, so this checkout's metadata cannot "
            "be built"
        )
    script = """
import importlib.metadata, json, pathlib, tempfile
from setuptools import build_meta
out = tempfile.mkdtemp()
dist = importlib.metadata.PathDistribution(pathlib.Path(out) /
build_meta.prepare_metadata_for_build_wheel(out))
print(json.dumps({"extras": dist.metadata.get_all("Provides-Extra"), "requires": dist.requires}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metadata = json.loads(result.stdout.splitlines()[-1])
    parsed = [Requirement(line) for line in metadata["requires"]]
    return {
        extra: {
            req for req in parsed if req.marker is None or req.marker.evaluate({"extra": extra})
        }
        for extra in ("", *metadata["extras"])
    }


def names(requirements: set[Requirement]) -> set[str]:
    return {requirement.name for requirement in requirements}


def test_core_requirements_hold_neither_rich_nor_hypothesis(requirements):
    core = names(requirements[""])
    assert {"pytensor", "jax", "numba"} <= core
    assert core.isdisjoint(CONFORMANCE_EXTRA)


def test_conformance_extra_holds_what_the_commands_check_for(requirements):
    assert (
        names(requirements["conformance"] - requirements[""])
        == set(CONFORMANCE_EXTRA)
        == {"rich", "hypothesis"}
    )


def test_test_extra_installs_the_conformance_extra(requirements):
    assert any(
        req.name == "gpubackend" and req.extras == {"conformance"} for req in requirements["test"]
    )


HIDE_EXTRA = f"""
import runpy, sys
for name in {CONFORMANCE_EXTRA!r}:
    sys.modules[name] = None  # as if not installed: importing it raises ImportError
sys.argv = ["gpubackend", *sys.argv[1:]]
runpy.run_module("gpubackend", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    "arguments",
    [
        ["conformance", "--help"],
        ["conformance", "--backend", "numba", "--device", "cpu", "--out", "unused"],
        ["conformance", "merge", "a.json", "--out", "unused"],
        ["run", "--skip-conformance"],
    ],
    ids=["conformance-help", "conformance-run", "conformance-merge", "run"],
)
def test_commands_without_the_extra_print_how_to_install_it_and_exit_2(arguments, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", HIDE_EXTRA, *arguments],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        },
    )
    assert result.returncode == EXTRA_MISSING_STATUS == 2, result.stderr[-3000:]
    assert INSTALL_HINT in result.stderr and "rich, hypothesis" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert not any(tmp_path.iterdir()), "nothing may run without the extra"


def test_importing_compiling_and_running_load_neither_rich_nor_hypothesis():
    script = f"""
import json, sys
import numpy as np
import gpubackend, pytensor, pytensor.tensor as pt
loaded = {{"import": [m for m in {CONFORMANCE_EXTRA!r} if m in sys.modules]}}
x = pt.vector("x")
total = pytensor.scan(
    lambda prev, xi: prev + xi, sequences=[x], outputs_info=[pt.zeros(())], return_updates=False
)[-1]
results = [
    float(np.asarray(pytensor.function([x], total, mode=mode)(np.arange(4.0))))
    for mode in ("JAX_GPU", "NUMBA")
]
loaded["compile and run"] = [m for m in {CONFORMANCE_EXTRA!r} if m in sys.modules]
modules = {{"jax": "jax" in sys.modules, "numba": "numba" in sys.modules}}
print(json.dumps({{"loaded": loaded, "results": results, **modules}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["jax"] and seen["numba"], "both backends must have run"
    assert seen["results"] == [6.0, 6.0]
    assert seen["loaded"] == {"import": [], "compile and run": []}


def test_importing_the_suite_without_the_extra_says_how_to_install_it():
    script = f"""
import sys
for name in {CONFORMANCE_EXTRA!r}:
    sys.modules[name] = None
try:
    import gpubackend.conformance
except ImportError as error:
    print(error)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "gpubackend.conformance: needs the conformance extra" in result.stdout
    assert INSTALL_HINT in result.stdout and "rich, hypothesis" in result.stdout
