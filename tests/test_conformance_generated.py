"""Hypothesis-generated Scan and OpFromGraph graphs through the conformance checks."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from gpubackend.conformance.backends import BACKENDS
from gpubackend.conformance.results import PASS
from gpubackend.conformance.runner import prepare, run_on
from gpubackend.conformance.strategies import OFGSpec, ScanSpec, draw_specs, graph_specs, spec_case
from gpubackend.conformance.while_scan_graphs import draw_while_specs
from gpubackend.devices import DEVICE_ENV_VAR

CHECKED = {"numerics", "canonical_intact", "rewrite_free"}
BACKEND_DEVICES = {"numba": "cpu", "jax": os.environ.get(DEVICE_ENV_VAR, "cpu:1")}
# Numba compiles each new graph (seconds each), JAX traces in milliseconds.
EXAMPLES = {"numba": 2, "jax": 5}


def _check(spec: ScanSpec | OFGSpec, backend: str) -> None:
    result = run_on(prepare(spec_case(spec, 0)), BACKENDS[backend], BACKEND_DEVICES[backend])
    assert result.status == PASS, f"{spec}\n{result.status}: {result.summary_line()}"
    assert CHECKED <= {check.name for check in result.checks}


@pytest.mark.parametrize("backend", sorted(BACKEND_DEVICES))
def test_generated_graphs_conform(backend: str) -> None:
    @settings(
        max_examples=EXAMPLES[backend],
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(graph_specs())
    def generated(spec: ScanSpec | OFGSpec) -> None:
        _check(spec, backend)

    generated()


def test_draw_specs_is_reproducible_and_distinct() -> None:
    first, second = draw_specs(4), draw_specs(4)
    assert first == second
    assert len(set(first)) == 4


@pytest.mark.parametrize("draw", [draw_specs, draw_while_specs])
def test_a_negative_number_of_graphs_is_refused_by_name(draw) -> None:
    # Not Hypothesis's "max_examples=-3 must be at least one".
    with pytest.raises(
        ValueError, match=r"count=-1: expected a number of graphs to draw, 0 or more"
    ):
        draw(-1)
    assert draw(0) == []
