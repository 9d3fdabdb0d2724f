"""The differential run of generated plain index graphs (`index_graphs`): every JAX path and NUMBA
against ``FAST_COMPILE``, error type included.

Each spec is built, compiled once per mode and called once per entry of its
``lengths``. The verdicts are the while-Scan differential's
(`differential.call_verdict`): the expected outcome is numpy's (an index out of
range raises IndexError), a value where it raises is `silent-wrong`, another
error type `wrong-error`; where FAST_COMPILE or the FAST_RUN-rewritten graph
disagrees with numpy, a mode doing what PyTensor does is `upstream`
(`UPSTREAM_BUGS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpubackend.conformance.backends import HOST_DEVICE
from gpubackend.conformance.checks import error_summary
from gpubackend.conformance.differential import (
    _SEVERITY,
    CRASH,
    DEFAULT_MODES,
    DIFFERENTIAL_MODES,
    NOT_APPLICABLE,
    RAW_ERROR,
    REFERENCE_MODE,
    REWRITTEN_MODE,
    DifferentialReport,
    Observation,
    Outcome,
    ReferenceObservation,
    SpecResult,
    Verdict,
    _call_each,
    _compile_and_call_each,
    _mode_crash,
    _pytensor_function,
    _quiet,
    _reference_crash,
    call_verdict,
    column_name,
    mode_device_pairs,
    run_against_reference,
)
from gpubackend.conformance.differential_reports import (
    LEGEND,
    cell,
    graph_counts,
    markdown_findings,
    print_failures,
    write_and_summarise,
    write_json_and_markdown,
)
from gpubackend.conformance.environment import environment
from gpubackend.conformance.index_graphs import (
    POSITIONS,
    IndexSpec,
    draw_index_specs,
    index_graph,
    truth,
)
from gpubackend.conformance.reports import environment_lines

BASENAME = "index_differential"
UPSTREAM_BUGS = {
    "index-array-as-slice": "PyTensor's rewrites (local_adv_idx_to_slice) turn a literal index "
    "array in arithmetic progression into a slice checked by SpecifyShape: past the end, "
    "FAST_COMPILE raises SpecifyShape's AssertionError where numpy raises IndexError",
}
"""PyTensor bugs the oracles tell apart in these graphs."""


def spec_name(spec: IndexSpec, index: int) -> str:
    return f"index_{index}_{spec.operation}_{spec.position.replace(' ', '_')}"


def describe(spec: IndexSpec) -> str:
    """``take x[4,2] (static) at 9``: the operation, the array and the literal."""
    shape = [spec.length, spec.width] if spec.width else [spec.length]
    return f"{spec.operation} x{shape} ({'static' if spec.static else 'run-time'}) at {spec.index}"


def observe_index_reference(spec: IndexSpec) -> ReferenceObservation:
    try:
        graph = index_graph(spec)
        with _quiet():
            reference_fn = _pytensor_function(graph, REFERENCE_MODE)
    except Exception as error:  # noqa: BLE001 - reported as the spec's missing reference
        failure = f"building the graph or compiling its reference failed: {error_summary(error)}"
        return ReferenceObservation(invalid=failure)
    with _quiet():
        reference = _call_each(reference_fn, graph)
        rewritten = _compile_and_call_each(
            partial(_pytensor_function, graph, REWRITTEN_MODE), graph
        )
    return ReferenceObservation(
        reference,
        rewritten,
        [_truth_outcome(spec, *values) for values in graph.calls],
        tuple(output.type.dtype for output in graph.outputs),
    )


def _truth_outcome(spec: IndexSpec, *values) -> Outcome:
    try:
        return Outcome.returned([truth(spec, *values)])
    except IndexError as error:
        return Outcome.raised(error, "call")


def observe_index_mode(mode_name: str, device: str, spec: IndexSpec) -> Observation:
    mode = DIFFERENTIAL_MODES[mode_name]
    if reason := mode.missing():
        return Observation(not_applicable=reason)
    try:
        graph = index_graph(spec)
    except Exception as error:  # noqa: BLE001 - the generator's fault, reported as such
        return Observation(invalid=f"building the graph failed: {error_summary(error)}")
    with _quiet(), mode.device_scope(device):
        return Observation(_compile_and_call_each(partial(mode.compile, graph, device), graph))


def _upstream_bug(spec: IndexSpec) -> str:
    if isinstance(spec.index, tuple):
        return UPSTREAM_BUGS["index-array-as-slice"]
    return "a PyTensor bug not listed in index_differential.UPSTREAM_BUGS"


def classify_index(
    spec: IndexSpec, oracles: ReferenceObservation, observation: Observation
) -> Verdict:
    """A mode's verdict on a spec: its worst call's."""
    if observation.crash:
        return Verdict(CRASH, observation.crash)
    if observation.not_applicable:
        return Verdict(NOT_APPLICABLE, observation.not_applicable)
    if observation.invalid:
        return Verdict(RAW_ERROR, observation.invalid)
    verdicts = [
        call_verdict(
            f"call {index + 1} (len(x) = {spec.lengths[index]})",
            got,
            oracles.reference[index],
            oracles.rewritten[index],
            oracles.truth[index],
            oracles.dtypes,
            _upstream_bug(spec),
        )
        for index, got in enumerate(observation.outcomes)
    ]
    return min(verdicts, key=lambda verdict: _SEVERITY.index(verdict.status))


def index_result(
    name: str, spec: IndexSpec, oracles: ReferenceObservation, observations: dict[str, Observation]
) -> SpecResult:
    result = SpecResult(name, repr(spec), spec.position, describe(spec), invalid=oracles.invalid)
    if not oracles.invalid:
        result.expected = ", ".join(
            "value" if outcome.values is not None else outcome.error
            for outcome in (
                truth or reference
                for truth, reference in zip(oracles.truth, oracles.reference, strict=True)
            )
        )
        result.verdicts = {
            column: classify_index(spec, oracles, seen) for column, seen in observations.items()
        }
    return result


def run_index_differential(
    specs: Sequence[IndexSpec],
    modes: Sequence[str] = DEFAULT_MODES,
    devices: Sequence[str] = (HOST_DEVICE,),
    label: str = "",
    progress: bool = True,
) -> DifferentialReport:
    """Every spec on the reference and on every (mode, device) pair, in worker processes; then the
    verdicts, counted per position (`POSITIONS`)."""
    pairs = mode_device_pairs(modes, devices)
    report = DifferentialReport(environment(devices, label), [column_name(*p) for p in pairs])
    return run_against_reference(
        specs,
        report,
        pairs,
        ("reference", observe_index_reference, _reference_crash),
        observe_index_mode,
        _mode_crash,
        lambda index, spec, oracles, seen: index_result(
            spec_name(spec, index), spec, oracles, seen
        ),
        progress,
    )


def check_index_in_process(
    spec: IndexSpec, modes: Sequence[tuple[str, str]]
) -> tuple[ReferenceObservation, dict[str, Verdict]]:
    """One spec's oracles and verdicts, in this process (tests: no worker start)."""
    oracles = observe_index_reference(spec)
    if oracles.invalid:
        return oracles, {}
    return oracles, {
        column_name(mode, device): classify_index(
            spec, oracles, observe_index_mode(mode, device, spec)
        )
        for mode, device in modes
    }


# --- Reports --------------------------------------------------------------------------------------


def _rows(report: DifferentialReport) -> list[tuple[str, list[str]]]:
    counts = report.counts()
    return [
        (position, [cell(counts[position][column]) for column in report.columns])
        for position in POSITIONS
        if position in counts
    ]


def to_markdown(report: DifferentialReport) -> str:
    lines = ["# gpubackend index differential", ""]
    lines += [f"- {line}" for line in environment_lines(report.environment)]
    lines += [f"- {graph_counts(report)}", "", "| literal | " + " | ".join(report.columns) + " |"]
    lines.append("|---|" + "---|" * len(report.columns))
    lines += [f"| {position} | " + " | ".join(cells) + " |" for position, cells in _rows(report)]
    lines += ["", LEGEND, "", "## Upstream PyTensor bugs the oracles tell apart", ""]
    lines += [f"- `{key}`: {text}" for key, text in UPSTREAM_BUGS.items()]
    lines += markdown_findings(
        report, lambda result: f"{result.name}** ({result.family})", "expected per call"
    )
    return "\n".join(lines) + "\n"


def write_index_reports(report: DifferentialReport, out_dir: str | Path) -> dict[str, Path]:
    """Write DIR/index_differential.{json,md}; return the paths by format."""
    data = {**report.to_json(), "upstream_bugs": UPSTREAM_BUGS}
    return write_json_and_markdown(data, to_markdown(report), out_dir, BASENAME)


def print_index_summary(
    report: DifferentialReport, paths: dict[str, Path], console: Console
) -> None:
    console.print(f"[bold]index differential[/bold]: {graph_counts(report)}")
    table = Table("literal", *report.columns, title="plain index graphs per literal and mode")
    for position, cells in _rows(report):
        table.add_row(position, *cells)
    console.print(table)
    console.print(escape(LEGEND), highlight=False)
    print_failures(report, console)
    console.print("reports: " + ", ".join(str(path) for path in paths.values()))


def run_index_differential_and_report(
    count: int,
    modes: Sequence[str],
    devices: Sequence[str],
    out_dir: str | Path,
    label: str = "",
    console: Console | None = None,
    progress: bool = True,
) -> DifferentialReport:
    """Draw ``count`` index graphs, run them differentially, write and print the reports (when they
    cannot be written, `ReportsNotWrittenError` names the file the results were saved to)."""
    report = run_index_differential(
        draw_index_specs(count), modes, devices, label=label, progress=progress
    )
    return write_and_summarise(
        report, write_index_reports, print_index_summary, out_dir, BASENAME, console
    )
