"""The conformance catalogue under pytest: every case on NUMBA (cpu) and JAX_GPU (the test device).

A case that fails fails its test with the failing checks' details. A case the
backend cannot lower (unsupported) or runs in Numba object mode is reported as
xfail with its status and reason, so ``-ra`` lists it: visible, never a pass.
"""

from __future__ import annotations

import functools
import os

import pytest

from gpubackend.conformance.backends import BACKENDS, backend_device_pairs
from gpubackend.conformance.catalogue import CATALOGUE, select_cases
from gpubackend.conformance.results import FAIL, PASS, CaseResult
from gpubackend.conformance.runner import PreparedCase, prepare, run_on
from gpubackend.devices import DEVICE_ENV_VAR

TEST_DEVICE = os.environ.get(DEVICE_ENV_VAR, "cpu:1")
BACKEND_DEVICES = [("numba", "cpu"), ("jax", TEST_DEVICE)]


@functools.cache
def prepared(case_name: str) -> PreparedCase:
    """Each case's graph and reference, built once and shared by both backends."""
    return prepare(CATALOGUE[case_name])


def assert_conformant(result: CaseResult) -> None:
    if result.status == FAIL:
        checks = "\n".join(
            f"  {c.name}: {'ok' if c.ok else 'FAILED'} - {c.detail}" for c in result.checks
        )
        pytest.fail(
            f"{result.case} on {result.column} fails:\n{result.detail}\n{checks}", pytrace=False
        )
    if result.status != PASS:
        pytest.xfail(f"{result.status}: {result.summary_line()}")


# The per-method optimize cases run on JAX here; on NUMBA each native solver is held against scipy
# by its own tests (tests/test_numba_optimize.py, test_tnc.py, ...), and the CPU leg's conformance
# run covers them: thirty cold solver compiles (20 s to 2 min each) would double this file's time.
CASE_COLUMNS = [
    pytest.param(name, backend, device, id=f"{name}-{backend}@{device}")
    for name, case in CATALOGUE.items()
    for backend, device in BACKEND_DEVICES
    if not (backend == "numba" and case.family == "optimize-methods")
]


@pytest.mark.parametrize(("case_name", "backend", "device"), CASE_COLUMNS)
def test_case_conforms(case_name: str, backend: str, device: str) -> None:
    assert_conformant(run_on(prepared(case_name), BACKENDS[backend], device))


def test_host_only_backends_pair_once_with_the_cpu():
    pairs = backend_device_pairs(["numba", "jax"], ["cpu:1", "cpu", "cpu:0"])
    assert [(backend.name, device) for backend, device in pairs] == [
        ("numba", "cpu"),
        ("jax", "cpu:1"),
        ("jax", "cpu"),
    ]
    assert backend_device_pairs(["numba"], ["gpu:0"]) == []
    with pytest.raises(ValueError, match="cuda"):
        backend_device_pairs(["cuda"], ["gpu"])


@pytest.mark.parametrize("case_name", [name for name, case in CATALOGUE.items() if case.batch_axes])
def test_batch_axes_name_one_existing_axis_per_input(case_name: str) -> None:
    graph = prepared(case_name).graph
    axes = CATALOGUE[case_name].batch_axes
    assert len(axes) == len(graph.inputs)
    assert all(
        axis is None or axis < value.ndim for axis, value in zip(axes, graph.values, strict=True)
    )
    assert any(axis is not None for axis in axes)


def test_case_selection_by_family_or_name_fragment():
    families = {case.family for case in select_cases("scan")}
    assert families == {"scan", "mixture"}  # the scan family, plus mixtures named after scans
    assert [case.name for case in select_cases("ofg_basic,lazy")] == ["ofg_basic", "lazy_ifelse"]
