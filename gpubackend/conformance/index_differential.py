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

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpubackend.conformance.backends import HOST_DEVICE
from gpubackend.conformance.differential import (
    DEFAULT_MODES,
    DIFFERENTIAL_MODES,
    DifferentialReport,
    Observation,
    Outcome,
    ReferenceObservation,
    SpecResult,
    Verdict,
    _mode_crash,
    _reference_crash,
    call_verdict,
    judged,
    observe_graph,
    observe_oracles,
    run_against_reference,
    verdicts_in_process,
    worst_call_verdict,
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
    return observe_oracles(spec, index_graph, _truth_outcome)


def _truth_outcome(spec: IndexSpec, values: list[np.ndarray]) -> Outcome:
    try:
        return Outcome.returned([truth(spec, *values)])
    except IndexError as error:
        return Outcome.raised(error, "call")


def observe_index_mode(mode_name: str, device: str, spec: IndexSpec) -> Observation:
    return observe_graph(DIFFERENTIAL_MODES[mode_name], device, partial(index_graph, spec))


def _upstream_bug(spec: IndexSpec) -> str:
    if isinstance(spec.index, tuple):
        return UPSTREAM_BUGS["index-array-as-slice"]
    return "a PyTensor bug not listed in index_differential.UPSTREAM_BUGS"


def classify_index(
    spec: IndexSpec, oracles: ReferenceObservation, observation: Observation
) -> Verdict:
    """A mode's verdict on a spec: its worst call's."""
    return worst_call_verdict(
        observation,
        lambda index, got: call_verdict(
            f"call {index + 1} (len(x) = {spec.lengths[index]})",
            got,
            oracles,
            index,
            _upstream_bug(spec),
        ),
    )


def index_result(
    name: str, spec: IndexSpec, oracles: ReferenceObservation, observations: dict[str, Observation]
) -> SpecResult:
    return judged(
        SpecResult(name, repr(spec), spec.position, describe(spec)),
        oracles,
        observations,
        lambda column, seen: classify_index(spec, oracles, seen),
    )


def run_index_differential(
    specs: Sequence[IndexSpec],
    modes: Sequence[str] = DEFAULT_MODES,
    devices: Sequence[str] = (HOST_DEVICE,),
    label: str = "",
    progress: bool = True,
) -> DifferentialReport:
    """Every spec on the reference and on every (mode, device) pair, in worker processes; then the
    verdicts, counted per position (`POSITIONS`)."""
    return run_against_reference(
        specs,
        DifferentialReport,
        modes,
        devices,
        label,
        ("reference", observe_index_reference, _reference_crash),
        observe_index_mode,
        _mode_crash,
        spec_name,
        index_result,
        progress,
    )


def check_index_in_process(
    spec: IndexSpec, modes: Sequence[tuple[str, str]]
) -> tuple[ReferenceObservation, dict[str, Verdict]]:
    """One spec's oracles and verdicts, in this process (tests: no worker start)."""
    oracles = observe_index_reference(spec)
    return oracles, verdicts_in_process(
        oracles,
        modes,
        lambda mode, device: classify_index(spec, oracles, observe_index_mode(mode, device, spec)),
    )


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
