"""The while-Scan differential fuzzer (issue 18, item 6): generated and regression graphs against
FAST_COMPILE.

The rule (`gpubackend.conformance.differential`): a mode returns the reference's
values, or raises its error type, or refuses by name (`DataDependentLengthError`);
where PyTensor itself is wrong (an upstream bug the oracles tell apart), doing
what PyTensor does is not held against it. These tests assert that rule, which
holds once the while-Scan lowering is fixed: until then, the regression tests of
the classes it gets wrong fail, naming the call and the outcome.
"""

from __future__ import annotations

import functools
import json

import numpy as np

# The jaxified path's: importing PyMC raises the recursion limit, which hypothesis warns about
# during a test.
import pymc.sampling.jax  # noqa: F401
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpubackend.conformance import cli
from gpubackend.conformance.cli import main as conformance_main
from gpubackend.conformance.differential import (
    CHECKED,
    CRASH,
    FAILING,
    PASS,
    RAW_ERROR,
    REFUSED,
    SILENT_WRONG,
    UPSTREAM,
    WRONG_ERROR,
    DifferentialReport,
    Observation,
    Outcome,
    ReferenceObservation,
    SpecResult,
    Verdict,
    check_in_process,
    classify,
    observe_mode,
    observe_reference,
    same_outcome,
)
from gpubackend.conformance.differential_reports import to_markdown, write_differential_reports
from gpubackend.conformance.while_scan_graphs import (
    CLASSES,
    STEP_COUNT_EDGES,
    TARGETS,
    ConsumerSpec,
    LoopSpec,
    NumericOps,
    WhileGraphSpec,
    call_inputs,
    case_class,
    draw_while_specs,
    loop_traces,
    while_graph_specs,
)
from gpubackend.errors import DataDependentLengthError
from tests.differential_rule import ACCEPTED, JAX_DEVICE, JAX_PATHS, QUICK, assert_rule

IN_COMPUTATION = (
    "INTERNAL: CpuCallback error calling callback: _EquinoxRuntimeError: {}: "
    "Subtensor{{i}}: index out of bounds"
)


def _assert_rule(spec: WhileGraphSpec, modes: list[tuple[str, str]]) -> None:
    assert_rule(f"{spec} (class {case_class(spec)})", *check_in_process(spec, modes))


# --- The quick budget: a few generated graphs, as `make test` runs them
# -----------------------------------

# Each draw aims at one of the targets, so that a few draws already cover several classes.
AIMED_SPECS = st.sampled_from(TARGETS).flatmap(while_graph_specs)


@settings(QUICK, max_examples=8)
@given(AIMED_SPECS)
def test_generated_while_scans_on_every_jax_path(spec: WhileGraphSpec) -> None:
    _assert_rule(spec, [(mode, JAX_DEVICE) for mode in JAX_PATHS])


@settings(QUICK, max_examples=2)
@given(AIMED_SPECS)
def test_generated_while_scans_on_numba(spec: WhileGraphSpec) -> None:
    # Numba compiles each graph for seconds: two graphs.
    _assert_rule(spec, [("numba", "cpu")])


# --- Regression graphs: issue 18's table, one class each
# --------------------------------------------------

SIT_SOT = LoopSpec(bound=8)


def regression(consumer: ConsumerSpec, loop: LoopSpec = SIT_SOT, **structure) -> WhileGraphSpec:
    """A graph of the table: calls stopping at step 3, at the bound (8), at step 5, unless
    ``structure`` says."""
    return WhileGraphSpec(loop, consumer, **{"stops": (3, 8, 5), **structure})


REGRESSIONS = {
    "1-max-of-a-bool-trace": regression(
        ConsumerSpec("reduce", op="max"), LoopSpec("nit-sot", "bool", bound=8)
    ),
    "2-shifted-trace-plus-trace": regression(
        ConsumerSpec("with_trace", variant="shifted", summed=True)
    ),
    "2-two-traces-of-different-lengths": regression(
        ConsumerSpec("with_trace", variant="second_loop", summed=True)
    ),
    "3-constant-index-past-the-length": regression(
        ConsumerSpec("index", position=5), stops=(3, 8, 2)
    ),
    "3-negative-index-past-the-length": regression(
        ConsumerSpec("index", position=-7), stops=(3, 8, 2)
    ),
    "3-input-index-past-the-length": regression(ConsumerSpec("index", position=7, from_input=True)),
    "4-set-subtensor-past-the-length": regression(
        ConsumerSpec("set_index", position=7, variant="set", summed=True)
    ),
    "4-inc-subtensor-past-the-length": regression(
        ConsumerSpec("set_index", position=-8, variant="inc")
    ),
    "5-set-subtensor-of-a-slice-with-the-wrong-length": regression(
        ConsumerSpec("set_slice", variant="mismatch", summed=True)
    ),
    # The zero-step call reuses the first call's one-entry value: it broadcasts over the empty
    # slice, as numpy's does.
    "5-one-entry-written-over-the-slice-of-an-empty-trace": regression(
        ConsumerSpec("set_slice", variant="match", summed=True),
        LoopSpec(bound=8, n_steps="input"),
        stops=(2, 8, 5),
    ),
    "6-assert-on-the-length": regression(
        ConsumerSpec("check_length", position=5, variant="Assert", summed=True), stops=(3, 8, 6)
    ),
    "7-min-of-an-int64-trace": regression(
        ConsumerSpec("reduce", op="min"), LoopSpec(dtype="int64", bound=8)
    ),
    "7-max-of-an-int64-trace": regression(
        ConsumerSpec("reduce", op="max"), LoopSpec(dtype="int64", bound=8)
    ),
    "8-times-a-vector-of-the-trace-length": regression(
        ConsumerSpec("with_vector", variant="match", summed=True)
    ),
    "9-step-counted-loop-in-a-for-scan": regression(
        ConsumerSpec("cumsum", summed=True), wrapper="for"
    ),
    "9-step-counted-loop-in-an-opfromgraph": regression(ConsumerSpec("trace"), wrapper="ofg"),
    "9-step-counted-loop-in-a-while-scan": regression(
        ConsumerSpec("cumsum", summed=True), wrapper="while"
    ),
    "10-n-steps-from-the-first-trace": regression(ConsumerSpec("trace"), chain="n_steps"),
    "10-sequence-from-the-first-trace": regression(ConsumerSpec("trace"), chain="sequence"),
    # The for-Scan's 8 steps outrun the trace of an early stop: FAST_COMPILE's ValueError.
    "10-for-scan-past-the-end-of-the-first-trace": regression(
        ConsumerSpec("reduce", op="sum"), chain="for_sequence"
    ),
    "11-all-but-the-last-k-entries": regression(
        ConsumerSpec("drop_last", position=2, summed=True), stops=(4, 8, 6)
    ),
    "12-n-steps-computed-from-data": regression(
        ConsumerSpec("reduce", op="sum"), LoopSpec(bound=8, n_steps="data")
    ),
    "12-step-from-an-input": regression(ConsumerSpec("step_input", position=2, summed=True)),
    "13-a-vector-of-another-length": regression(
        ConsumerSpec("with_vector", variant="mismatch", summed=True)
    ),
    "12-branches-reading-a-trace-whose-bound-comes-from-data": regression(
        ConsumerSpec("length", position=0, variant="ifelse"),
        LoopSpec("nit-sot", "bool", bound=8, n_steps="data"),
    ),
    "length-three-operand-add": regression(ConsumerSpec("length", position=3, variant="add3")),
    "length-three-operand-product": regression(ConsumerSpec("length", position=2, variant="mul3")),
    "length-reduction-pinned-by-its-bounds": regression(
        ConsumerSpec("length", variant="pinned_max")
    ),
    "length-branches-reading-the-trace": regression(
        ConsumerSpec("length", position=4, variant="ifelse")
    ),
    "rng-generator-carried-through-the-loop": regression(
        ConsumerSpec("reduce", op="sum"), LoopSpec(bound=8, rng=True), seed=3
    ),
}


@functools.cache
def _oracles(name: str) -> ReferenceObservation:
    return observe_reference(REGRESSIONS[name])


@pytest.mark.parametrize("mode", JAX_PATHS)
@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression_graph_is_exact_or_refused_by_name(name: str, mode: str) -> None:
    spec, oracles = REGRESSIONS[name], _oracles(name)
    assert not oracles.invalid, oracles.invalid
    verdict = classify(spec, oracles, observe_mode(mode, JAX_DEVICE, spec))
    assert verdict.status in ACCEPTED, f"{verdict.status}: {verdict.detail}"


def test_a_for_scan_past_the_end_of_a_trace_raises_the_references_error_on_numba() -> None:
    """PyTensor's rewrites push the for-Scan out of its loop and its check with it; gpubackend's
    check stands in (the JAX paths: `test_regression_graph_is_exact_or_refused_by_name`)."""
    name = "10-for-scan-past-the-end-of-the-first-trace"
    verdict = classify(
        REGRESSIONS[name], _oracles(name), observe_mode("numba", "cpu", REGRESSIONS[name])
    )
    assert verdict.status == PASS, f"{verdict.status}: {verdict.detail}"


def test_regression_graphs_are_their_classes_and_stop_early() -> None:
    """Each regression graph is in the class its name gives, and a call stops early (the trace is
    trimmed)."""
    for name, spec in REGRESSIONS.items():
        assert case_class(spec) == name.split("-")[0], name
        assert min(spec.stops) < spec.loop.bound == max(spec.stops), name


# Issue 43: the last entry of a trace that a call of no step leaves empty (a nit-sot, whose buffer
# PyTensor's memory rewrite cuts to one entry: JAX read that unwritten entry), and literal indices
# read with take (JAX clamped them, NUMBA read past the trace). n_steps is an input: the calls after
# the planned stops take -1 and 0 steps (`STEP_COUNT_EDGES`).
LITERAL_INDEX_GRAPHS = {
    "last entry of an empty nit-sot trace": regression(
        ConsumerSpec("index", position=-1), LoopSpec("nit-sot", bound=8, n_steps="input")
    ),
    "take of the last entry of an empty nit-sot trace": regression(
        ConsumerSpec("index", position=-1, variant="take"),
        LoopSpec("nit-sot", bound=8, n_steps="input"),
    ),
    "take past the length": regression(
        ConsumerSpec("index", position=9, variant="take"), stops=(3, 8, 2)
    ),
    "take of a negative literal past the length": regression(
        ConsumerSpec("index", position=-9, variant="take"), LoopSpec("nit-sot", bound=8)
    ),
}


@pytest.mark.parametrize(
    ("mode", "device"), [*((mode, JAX_DEVICE) for mode in JAX_PATHS), ("numba", "cpu")]
)
@pytest.mark.parametrize("name", sorted(LITERAL_INDEX_GRAPHS))
def test_literal_index_graph_is_exact_or_raises_the_references_error(
    name: str, mode: str, device: str
) -> None:
    _assert_rule(LITERAL_INDEX_GRAPHS[name], [(mode, device)])


# --- Upstream PyTensor bugs: held as strict xfails, about the reference, not about gpubackend
# -----------------

UPSTREAM_GRAPHS = {
    "positive-index": regression(ConsumerSpec("index", position=5), stops=(6, 8, 3)),
    "negative-index-reads-initial-state": regression(
        ConsumerSpec("index", position=-7), stops=(6, 8, 3)
    ),
    "for-scan-past-sequence": regression(ConsumerSpec("reduce", op="sum"), chain="for_sequence"),
    "negative-zeros": regression(
        ConsumerSpec("zeros", position=5, variant="shape"), stops=(3, 8, 6)
    ),
}
UPSTREAM_REASONS = {
    "positive-index": (
        "upstream: PyTensor's rewrites (scan_save_mem) translate a constant positive index of a "
        "while-Scan trace as if the trace had n_steps entries: xs[5] of a 6-entry trace is "
        "another entry"
    ),
    "negative-index-reads-initial-state": (
        "upstream: xs[-7] of a 6-entry sit-sot trace reads the loop's initial state (xs is the "
        "buffer's [1:], and the merged index is not checked against it), in FAST_COMPILE too"
    ),
    "for-scan-past-sequence": (
        "upstream: once PyTensor's rewrites drop the length check, a for-Scan with more steps "
        "than its sequence has entries reads past the end instead of raising ValueError"
    ),
    "negative-zeros": (
        "upstream: zeros(length - 5).shape is computed without the allocation and comes back "
        "negative for a shorter trace, in FAST_COMPILE too, where numpy raises ValueError"
    ),
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=UPSTREAM_REASONS[name]))
        for name in UPSTREAM_GRAPHS
    ],
)
def test_pytensor_agrees_with_numpy(name: str) -> None:
    """FAST_COMPILE and the FAST_RUN-rewritten graph (what every compiled mode runs) do what numpy
    does."""
    oracles = observe_reference(UPSTREAM_GRAPHS[name])
    assert not oracles.invalid, oracles.invalid
    for index, expected in enumerate(oracles.truth):
        assert expected is not None, "the graph has a numpy twin"
        for run, outcome in (
            ("FAST_COMPILE", oracles.reference[index]),
            ("rewritten", oracles.rewritten[index]),
        ):
            where = f"call {index + 1}, {run}: {outcome.describe()}, numpy: {expected.describe()}"
            assert same_outcome(outcome, expected), where


# --- The generator: reproducible, every class, stops where it says
# -----------------------------------------


def test_draw_while_specs_is_reproducible_distinct_and_covers_every_numbered_class() -> None:
    first, second = draw_while_specs(2 * len(TARGETS)), draw_while_specs(2 * len(TARGETS))
    assert first == second
    assert len(set(first)) == len(first)
    drawn = {case_class(spec) for spec in first}
    assert {*map(str, range(1, 14)), "gradient", "rng"} <= drawn
    assert drawn <= set(CLASSES)


def test_call_inputs_stop_each_loop_where_the_spec_says() -> None:
    for spec in draw_while_specs(2 * len(TARGETS)):
        calls = call_inputs(spec)
        planned, edges = calls[: len(spec.stops)], calls[len(spec.stops) :]
        assert len(edges) == (
            len(STEP_COUNT_EDGES) if spec.loop.n_steps in ("input", "data") else 0
        ), spec
        for call, stop in zip(planned, spec.stops, strict=True):
            trace = loop_traces(spec, NumericOps(call), call, call["x0"], call["stop"])[0]
            assert len(trace) == stop, spec


# --- Verdicts
# ---------------------------------------------------------------------------------------------

SPEC = WhileGraphSpec(SIT_SOT, ConsumerSpec("index", position=5), stops=(3, 8, 6))
VALUE = Outcome.returned([np.float64(1.5)])
OTHER_VALUE = Outcome.returned([np.float64(2.5)])
INDEX_ERROR = Outcome.raised(IndexError("index 5 is out of bounds"), "call")


def _oracles_of(reference: Outcome, rewritten: Outcome | None = None, truth: Outcome | None = None):
    """One call's oracles: FAST_COMPILE's outcome, the rewritten graph's (the same by default),
    numpy's (or none)."""
    return ReferenceObservation([reference], [rewritten or reference], [truth], ("float64",))


@pytest.mark.parametrize(
    ("oracles", "got", "status"),
    [
        (_oracles_of(VALUE), VALUE, PASS),
        (_oracles_of(INDEX_ERROR), Outcome.raised(IndexError("out of range"), "call"), PASS),
        (
            _oracles_of(VALUE),
            Outcome.raised(DataDependentLengthError("trace length"), "compile"),
            REFUSED,
        ),
        (_oracles_of(VALUE), OTHER_VALUE, SILENT_WRONG),
        (_oracles_of(VALUE), Outcome.returned([np.float32(1.5)]), SILENT_WRONG),
        (_oracles_of(INDEX_ERROR), VALUE, SILENT_WRONG),
        (_oracles_of(INDEX_ERROR), Outcome.raised(TypeError("shapes"), "call"), WRONG_ERROR),
        # A check inside the computation comes out as JAX's runtime error, naming the reference's
        # type or not.
        (
            _oracles_of(INDEX_ERROR),
            Outcome.raised(RuntimeError(IN_COMPUTATION.format("IndexError")), "call"),
            CHECKED,
        ),
        (
            _oracles_of(INDEX_ERROR),
            Outcome.raised(RuntimeError(IN_COMPUTATION.format("ValueError")), "call"),
            WRONG_ERROR,
        ),
        (
            _oracles_of(VALUE),
            Outcome.raised(RuntimeError(IN_COMPUTATION.format("IndexError")), "call"),
            RAW_ERROR,
        ),
        (
            _oracles_of(INDEX_ERROR),
            Outcome.raised(NotImplementedError("no lowering"), "call"),
            RAW_ERROR,
        ),
        (_oracles_of(VALUE), Outcome.raised(TypeError("tracer"), "call"), RAW_ERROR),
        (_oracles_of(INDEX_ERROR), Outcome.raised(IndexError("tracer"), "compile"), PASS),
        (_oracles_of(VALUE), Outcome.raised(ValueError("tracer"), "compile"), RAW_ERROR),
        # The rewritten graph returns another value: doing what it does is upstream, a third value
        # is not.
        (_oracles_of(VALUE, OTHER_VALUE), OTHER_VALUE, UPSTREAM),
        (_oracles_of(VALUE, OTHER_VALUE), Outcome.returned([np.float64(9.0)]), SILENT_WRONG),
        # FAST_COMPILE returns a value where numpy raises: a mode doing either is fine.
        (_oracles_of(VALUE, truth=INDEX_ERROR), VALUE, UPSTREAM),
        (_oracles_of(VALUE, truth=INDEX_ERROR), INDEX_ERROR, PASS),
        # An upstream IndexError must stay an error: a value there is silent-wrong.
        (_oracles_of(VALUE, INDEX_ERROR), OTHER_VALUE, SILENT_WRONG),
    ],
)
def test_call_verdicts(oracles: ReferenceObservation, got: Outcome, status: str) -> None:
    spec = WhileGraphSpec(SIT_SOT, ConsumerSpec("index", position=5), stops=(3,))
    assert classify(spec, oracles, Observation([got])).status == status


def test_a_value_where_the_rewrites_drop_a_check_gpubackend_restores_is_silent_wrong() -> None:
    """FAST_COMPILE raises ValueError for a for-Scan past its sequence's end; the rewritten graph,
    which lost the check, returns a value, which excuses no mode (gpubackend.rewrites.scan_lengths
    puts the check back)."""
    spec = WhileGraphSpec(
        SIT_SOT, ConsumerSpec("reduce", op="sum"), chain="for_sequence", stops=(3,)
    )
    too_short = Outcome.raised(ValueError("Sequence 0 has shape (3,)"), "call")
    oracles = _oracles_of(too_short, VALUE)
    assert classify(spec, oracles, Observation([VALUE])).status == SILENT_WRONG
    assert classify(spec, oracles, Observation([too_short])).status == PASS


def test_a_graph_takes_its_worst_calls_verdict_and_a_dead_worker_is_a_crash() -> None:
    oracles = ReferenceObservation(
        [VALUE, INDEX_ERROR, VALUE], [VALUE, INDEX_ERROR, VALUE], [None] * 3, ("float64",)
    )
    refused = Outcome.raised(DataDependentLengthError("trace length"), "call")
    assert (
        classify(SPEC, oracles, Observation([VALUE, refused, OTHER_VALUE])).status == SILENT_WRONG
    )
    assert classify(SPEC, oracles, Observation([VALUE, refused, VALUE])).status == REFUSED
    verdict = classify(
        SPEC, oracles, Observation(crash="the worker process died: killed by SIGABRT")
    )
    assert verdict == Verdict(CRASH, "the worker process died: killed by SIGABRT")


# --- Reports and the command line
# ----------------------------------------------------------------------


def test_reports_count_per_class_and_mode_and_round_trip(tmp_path) -> None:
    columns = ["jax @ cpu:1", "numba @ cpu"]
    verdicts = [
        (Verdict(SILENT_WRONG, "got 0.0"), Verdict(PASS)),
        (Verdict(REFUSED, "named"), Verdict(PASS)),
    ]
    results = [
        SpecResult(
            "a", "spec a", "3", "sit-sot", "value", dict(zip(columns, verdicts[0], strict=True))
        ),
        SpecResult(
            "b",
            "spec b",
            "3",
            "sit-sot",
            "IndexError",
            dict(zip(columns, verdicts[1], strict=True)),
        ),
        SpecResult(
            "c", "spec c", "rng", "sit-sot", "value", {column: Verdict(PASS) for column in columns}
        ),
    ]
    report = DifferentialReport({"label": "test"}, columns, results, 1.0)
    assert report.counts() == {
        "3": {columns[0]: {SILENT_WRONG: 1, REFUSED: 1}, columns[1]: {PASS: 2}},
        "rng": {columns[0]: {PASS: 1}, columns[1]: {PASS: 1}},
    }
    assert report.failed
    paths = write_differential_reports(report, tmp_path)
    assert DifferentialReport.from_json(json.loads(paths["json"].read_text())) == report
    markdown = to_markdown(report)
    assert "| 3 | 1 refused, 1 SW | 2 pass |" in markdown
    assert "**a** (sit-sot) on jax @ cpu:1: silent-wrong — got 0.0" in markdown


def test_command_line_runs_the_differential_and_fails_on_failing_verdicts(tmp_path) -> None:
    argv = [
        "--no-catalogue",
        "--generated-while",
        "2",
        "--while-modes",
        "jax",
        "--device",
        JAX_DEVICE,
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    status = conformance_main(argv)
    saved = json.loads((tmp_path / "while_scan_differential.json").read_text())
    assert [result["case_class"] for result in saved["results"]] == ["1", "2"]
    assert saved["columns"] == [f"jax @ {JAX_DEVICE}"]
    failing = any(
        v["status"] in FAILING for result in saved["results"] for v in result["verdicts"].values()
    )
    assert status == (1 if failing else 0)
    assert not (tmp_path / "conformance.json").exists(), "--no-catalogue runs no catalogue"


@pytest.mark.parametrize(("report_only", "status"), [(False, 1), (True, 0)])
def test_while_report_only_keeps_failing_verdicts_out_of_the_exit_status(
    tmp_path, monkeypatch, report_only, status
):
    silent_wrong = SpecResult("a", "", "3", "", "", {"jax @ cpu": Verdict(SILENT_WRONG)})
    failing = DifferentialReport({}, ["jax @ cpu"], [silent_wrong])
    monkeypatch.setattr(cli, "run_differential_and_report", lambda *args, **kwargs: failing)
    argv = ["--no-catalogue", "--generated-while", "1", "--out", str(tmp_path)]
    assert conformance_main(argv + (["--while-report-only"] if report_only else [])) == status
