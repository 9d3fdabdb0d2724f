"""Hypothesis-generated Scan and OpFromGraph graphs through the conformance checks."""

from __future__ import annotations

import dataclasses
import json
import os
import warnings

import numpy as np
import pytensor
import pytest
from hypothesis import HealthCheck, given, settings

from gpubackend.conformance.backends import BACKENDS
from gpubackend.conformance.cli import main as conformance_main
from gpubackend.conformance.differential import (
    RAW_ERROR,
    REFUSED,
    SILENT_WRONG,
    WRONG_ERROR,
    Outcome,
    column_name,
)
from gpubackend.conformance.optimize_differential import (
    FAILING,
    REFERENCE_OFF,
    REFERENCE_UNSTABLE,
    SUCCESS_DIFFERS,
    TOLERANCE_FACTOR,
    OptimizeObservation,
    OptimizeReport,
    OptimizeResult,
    accuracy,
    check_in_process,
    classify,
    observe_optimize_reference,
    perturbed_reference_outputs,
)
from gpubackend.conformance.optimize_graphs import (
    OptimizeSpec,
    build_optimize,
    draw_optimize_specs,
    input_variants,
    optimize_specs,
    scipy_methods,
    solve_tightly,
    table_method,
)
from gpubackend.conformance.optimize_reports import write_optimize_reports
from gpubackend.conformance.results import PASS
from gpubackend.conformance.runner import prepare, run_on
from gpubackend.conformance.strategies import OFGSpec, ScanSpec, draw_specs, graph_specs, spec_case
from gpubackend.conformance.while_scan_graphs import draw_while_specs
from gpubackend.devices import DEVICE_ENV_VAR
from gpubackend.errors import UnsupportedMethod

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


# --- Generated optimize graphs --------------------------------------------------------------------


def test_optimize_specs_cover_every_scipy_method_reproducibly() -> None:
    methods = scipy_methods()
    first = draw_optimize_specs(len(methods))
    assert [(spec.kind, spec.method) for spec in first] == methods
    assert draw_optimize_specs(len(methods)) == first
    twice = draw_optimize_specs(2 * len(methods))
    assert len(set(twice)) == 2 * len(methods)


def _fast_compile(spec: OptimizeSpec) -> list:
    graph = build_optimize(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's warnings about the small budgets drawn
        return pytensor.function(graph.inputs, graph.outputs, mode="FAST_COMPILE")(*graph.values)


@settings(max_examples=10, deadline=None, database=None, derandomize=True)
@given(optimize_specs())
def test_generated_problems_are_well_posed_and_refused_inputs_are_refused_by_scipy(
    spec: OptimizeSpec,
) -> None:
    # What the differential's verdicts rest on: scipy raises on exactly the drawn refused inputs,
    # and a converged solution (and gradient) is the tight solution's, within the tolerance.
    if spec.refused:
        with pytest.raises(ValueError):
            _fast_compile(spec)
        return
    x, success, *gradient = _fast_compile(spec)
    assert len(gradient) == spec.smooth
    if success and spec.tol_bounds_error:
        tight = solve_tightly(spec)
        tolerance = accuracy(spec)
        np.testing.assert_allclose(x, tight.x, rtol=tolerance, atol=tolerance)
        if tight.gradient is not None:
            tolerance *= TOLERANCE_FACTOR
            np.testing.assert_allclose(gradient[0], tight.gradient, rtol=tolerance, atol=tolerance)


OPTIMIZE_MODES = [("jax", BACKEND_DEVICES["jax"]), ("numba", "cpu")]


def _spec(kind: str, method: str, **fields) -> OptimizeSpec:
    (spec,) = draw_optimize_specs(1, [(kind, method)])
    return dataclasses.replace(spec, **fields)


@pytest.fixture(scope="module")
def optimize_runs() -> list[tuple[OptimizeSpec, OptimizeResult, dict]]:
    """A few graphs on JAX and NUMBA, in this process: a well-posed one, one scipy refuses, and
    one of the first method the table lowers on neither backend, where there is one."""
    specs = [
        _spec("root_scalar", "brentq", variant="bracket", tol=None, budget=None),
        _spec("root_scalar", "brentq", variant="no-bracket"),
    ]
    specs += [
        _spec(kind, method, variant=input_variants(kind, method)[0][0])
        for kind, method in scipy_methods()
        if table_method(kind, method) is None
    ][:1]
    return [(spec, *check_in_process(spec, OPTIMIZE_MODES)) for spec in specs]


def test_optimize_report_counts_refusals_and_fallbacks_per_method(optimize_runs, tmp_path) -> None:
    columns = [column_name(*mode) for mode in OPTIMIZE_MODES]
    report = OptimizeReport({"label": "test"}, columns, [result for _, result, _ in optimize_runs])
    well_posed, refused_input = report.results[:2]
    assert well_posed.expected == "value" and refused_input.expected == "ValueError"
    for spec, result, _ in optimize_runs:
        entry = table_method(spec.kind, spec.method)
        jax, numba = (result.verdicts[column] for column in columns)
        # A method the table gives no JAX solver is refused by name; no native Numba solver: the
        # object-mode fallback is counted, and its values are still judged.
        assert (jax.status == REFUSED) == (entry is None or entry.jax is None), jax
        assert bool(result.fallbacks.get(columns[1])) == (entry is None or entry.numba is None)
        assert numba.status in (PASS, REFERENCE_OFF), numba
    counts = report.counts()
    assert set(counts) == {result.method for result in report.results}
    refusals = {
        result.method: 1
        for result in report.results
        if result.verdicts[columns[0]].status == REFUSED
    }
    assert report.refusals() == refusals
    assert report.fallbacks() == {
        method: 1 for method in {r.method for r in report.results if r.fallbacks}
    }
    paths = write_optimize_reports(report, tmp_path)
    saved = json.loads(paths["json"].read_text())
    assert saved["refusals"] == report.refusals() and saved["fallbacks"] == report.fallbacks()
    markdown = paths["md"].read_text()
    assert f"JAX refusals: {sum(refusals.values())}" in markdown
    assert f"## {columns[1]}" in markdown and "| root_scalar:brentq |" in markdown


def _with_values(
    observation: OptimizeObservation, x=None, success=None, gradient=None
) -> OptimizeObservation:
    assert observation.outcome is not None and observation.outcome.values is not None
    values = list(observation.outcome.values)
    values[0] = values[0] if x is None else np.asarray(x, dtype=values[0].dtype)
    values[1] = values[1] if success is None else np.asarray(success)
    values[2:] = values[2:] if gradient is None else [np.asarray(gradient, dtype=values[2].dtype)]
    return dataclasses.replace(observation, outcome=Outcome.returned(values))


def test_an_injected_mismatch_is_detected_and_checked_against_the_tight_solution(
    optimize_runs,
) -> None:
    spec, _, observations = optimize_runs[0]
    column = column_name(*OPTIMIZE_MODES[0])
    reference = observe_optimize_reference(spec)
    mode = observations[column]
    assert classify(spec, reference, mode).status == PASS
    x = mode.outcome.values[0]
    off = x + 100 * accuracy(spec)
    wrong = classify(spec, reference, _with_values(mode, x=off))
    assert wrong.status == SILENT_WRONG and "tight" in wrong.detail
    # scipy off, the mode on the tight solution: the reference is the one wrong
    assert classify(spec, _with_values(reference, x=off), mode).status == REFERENCE_OFF
    assert classify(spec, reference, _with_values(mode, success=False)).status == SUCCESS_DIFFERS
    raising = dataclasses.replace(mode, outcome=Outcome.raised(ValueError("no"), "call"))
    assert classify(spec, reference, raising).status == RAW_ERROR
    refused_spec = optimize_runs[1][0]
    refused_reference = observe_optimize_reference(refused_spec)
    assert classify(refused_spec, refused_reference, mode).status == SILENT_WRONG
    wrong_type = dataclasses.replace(mode, outcome=Outcome.raised(TypeError("no"), "call"))
    assert classify(refused_spec, refused_reference, wrong_type).status == WRONG_ERROR
    refusal = Outcome.raised(UnsupportedMethod("no such solver"), "compile")
    assert classify(spec, reference, dataclasses.replace(mode, outcome=refusal)).status == REFUSED


ROUNDING_SENSITIVE = OptimizeSpec(
    kind="root", method="krylov", size=3, seed=0, variant="free", tol=1e-05, budget=None
)
"""optimize_22 of the differential: scipy's Newton-Krylov stops on its step test alone
(``tol`` is its ``xtol``), and the directions of its first two steps are antiparallel, so at
the fourth step lgmres's least-squares system rests on a pivot of 4e-8: the size of the rounding
in its finite-difference products (numpy's and XLA's equations give products 3.5e-8 apart)."""


def test_what_scipy_gives_from_a_start_moved_by_rounding_is_unstable_not_wrong() -> None:
    reference = observe_optimize_reference(ROUNDING_SENSITIVE)
    tight = solve_tightly(ROUNDING_SENSITIVE)
    assert np.allclose(reference.outcome.values[0], tight.x, rtol=1e-8)
    # From some moved starts scipy ends with success far from the root (up to 7e-2 off); one of
    # those is what the mode returns.
    far = next(
        outputs
        for outputs in perturbed_reference_outputs(ROUNDING_SENSITIVE)
        if outputs[1] and not np.allclose(outputs[0], tight.x, rtol=1e-4)
    )
    mode = _with_values(reference, x=far[0], gradient=far[2])
    unstable = classify(ROUNDING_SENSITIVE, reference, mode)
    assert unstable.status == REFERENCE_UNSTABLE and "moved by" in unstable.detail
    # Further off than scipy gets from any moved start: the mode's fault.
    wrong = _with_values(reference, x=tight.x + 0.5, gradient=far[2])
    assert classify(ROUNDING_SENSITIVE, reference, wrong).status == SILENT_WRONG


def test_command_line_prints_the_refusal_and_fallback_counts(tmp_path, capsys) -> None:
    argv = [
        "--no-catalogue",
        "--generated-optimize",
        "2",
        "--optimize-methods",
        "root_scalar:brentq",
    ]
    argv += ["--optimize-modes", "jax", "--device", BACKEND_DEVICES["jax"], "--out", str(tmp_path)]
    status = conformance_main([*argv, "--no-progress"])
    saved = json.loads((tmp_path / "optimize_differential.json").read_text())
    assert [result["method"] for result in saved["results"]] == ["root_scalar:brentq"] * 2
    assert status == (
        1
        if any(v["status"] in FAILING for r in saved["results"] for v in r["verdicts"].values())
        else 0
    )
    err = capsys.readouterr().err
    assert "JAX refusals:" in err and "NUMBA object-mode fallbacks:" in err
