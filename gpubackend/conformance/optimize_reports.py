"""The optimize differential run's reports: counts per method and mode, refusals and fallbacks
(rich, Markdown), every verdict (JSON)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpubackend.conformance.differential import PASS
from gpubackend.conformance.optimize_differential import (
    FAILING,
    FALLBACK,
    STATUSES,
    OptimizeReport,
    OptimizeResult,
    run_optimize_differential,
)
from gpubackend.conformance.optimize_graphs import draw_optimize_specs, select_methods
from gpubackend.conformance.reports import (
    ReportsNotWrittenError,
    environment_lines,
    write_or_save,
)

BASENAME = "optimize_differential"
LEGEND = (
    "reference-off: differs from scipy, but within the tolerance of the problem solved tightly "
    "(scipy is the one off); refused: NotImplementedError (UnsupportedMethod, UnsupportedOption); "
    "fallback: NUMBA ran scipy in object mode (ObjectModeFallbackWarning), its values still "
    "judged; success-differs, silent-wrong (another value, or a value where scipy raises), "
    "wrong-error (another error type), raw-error (an error where scipy returns), crash: failures"
)
COLUMNS = (*STATUSES, FALLBACK)
SHOWN_FAILURES = 40


def _graph_counts(report: OptimizeReport) -> str:
    valid = len(report.results) - len(report.invalid)
    return f"{valid} graphs ({len(report.invalid)} without a reference), {report.seconds:.0f} s"


def _methods_line(per_method: dict[str, int]) -> str:
    total = sum(per_method.values())
    named = ", ".join(f"{method} {count}" for method, count in sorted(per_method.items()))
    return f"{total}" + (f" ({named})" if named else "")


def done_when_lines(report: OptimizeReport) -> list[str]:
    """Issue 29's criterion: no JAX refusal, no NUMBA object-mode fallback, per method."""
    return [
        f"JAX refusals: {_methods_line(report.refusals())}",
        f"NUMBA object-mode fallbacks: {_methods_line(report.fallbacks())}",
    ]


def counts_tables(report: OptimizeReport) -> list[Table]:
    """One table per column (mode and device): a row per method, a count per status and
    fallbacks."""
    counts = report.counts()
    tables = []
    for column in report.columns:
        table = Table(title=column, title_justify="left")
        table.add_column("method")
        for status in COLUMNS:
            table.add_column(status, justify="right")
        for method in sorted(counts):
            per_status = counts[method][column]
            table.add_row(method, *[str(per_status.get(status, "")) for status in COLUMNS])
        tables.append(table)
    return tables


def _not_passing(report: OptimizeReport) -> list[tuple[OptimizeResult, str, str, str]]:
    """(result, column, status, detail) of every verdict other than pass, failures first."""
    lines = [
        (result, column, verdict.status, verdict.detail)
        for result in report.results
        for column, verdict in result.verdicts.items()
        if verdict.status != PASS
    ]
    return sorted(lines, key=lambda line: line[2] not in FAILING)


def to_markdown(report: OptimizeReport) -> str:
    counts = report.counts()
    lines = ["# gpubackend optimize differential", ""]
    lines += [f"- {line}" for line in environment_lines(report.environment)]
    lines += [f"- {_graph_counts(report)}"]
    lines += [f"- {line}" for line in done_when_lines(report)]
    for column in report.columns:
        lines += ["", f"## {column}", "", "| method | " + " | ".join(COLUMNS) + " |"]
        lines.append("|---|" + "---|" * len(COLUMNS))
        lines += [
            f"| {method} | "
            + " | ".join(str(counts[method][column].get(status, "")) for status in COLUMNS)
            + " |"
            for method in sorted(counts)
        ]
    lines += ["", LEGEND]
    if report.invalid:
        lines += ["", "## Graphs without a reference", ""]
        lines += [
            f"- **{result.name}** `{result.spec}`: {result.invalid}" for result in report.invalid
        ]
    not_passing = _not_passing(report)
    if not_passing:
        lines += ["", "## Not passing", ""]
        for result, column, status, detail in not_passing:
            lines.append(f"- **{result.name}** on {column}: {status} — {detail}")
            lines.append(f"  expected: {result.expected}; spec: `{result.spec}`")
    return "\n".join(lines) + "\n"


def write_optimize_reports(report: OptimizeReport, out_dir: str | Path) -> dict[str, Path]:
    """Write DIR/optimize_differential.{json,md}; return the paths by format."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{BASENAME}.json", "md": out / f"{BASENAME}.md"}
    paths["json"].write_text(json.dumps(report.to_json(), indent=2, default=str))
    paths["md"].write_text(to_markdown(report))
    return paths


def print_optimize_summary(
    report: OptimizeReport, paths: dict[str, Path], console: Console
) -> None:
    """The counts per mode and method, issue 29's two counts, the first failing verdicts, and
    where the reports are."""
    console.print(f"[bold]optimize differential[/bold]: {_graph_counts(report)}")
    for table in counts_tables(report):
        console.print(table)
    console.print(escape(LEGEND), highlight=False)
    for line in done_when_lines(report):
        console.print(f"[bold]{escape(line)}[/bold]")
    for result in report.invalid:
        console.print(f"  [red]no reference[/red] {escape(result.name)}: {escape(result.invalid)}")
    failing = [line for line in _not_passing(report) if line[2] in FAILING]
    for result, column, status, detail in failing[:SHOWN_FAILURES]:
        console.print(f"  [red]{status}[/red] {escape(f'{result.name} on {column}: {detail}')}")
    if len(failing) > SHOWN_FAILURES:
        console.print(f"  ... {len(failing) - SHOWN_FAILURES} more failing verdicts")
    console.print("reports: " + ", ".join(str(path) for path in paths.values()))


def run_optimize_and_report(
    count: int,
    modes: Sequence[str],
    devices: Sequence[str],
    out_dir: str | Path,
    methods: list[str] | None = None,
    label: str = "",
    console: Console | None = None,
    progress: bool = True,
) -> OptimizeReport:
    """Draw ``count`` optimize graphs over the methods ``methods`` names (all: None), run them
    differentially, write and print the reports.

    When the reports cannot be written, the summary is printed all the same
    and `ReportsNotWrittenError` names the temporary file the results were
    saved to.
    """
    specs = draw_optimize_specs(count, select_methods(methods))
    report = run_optimize_differential(specs, modes, devices, label=label, progress=progress)
    console = console or Console(stderr=True, soft_wrap=True)
    try:
        paths = write_or_save(
            lambda: write_optimize_reports(report, out_dir), report.to_json, out_dir, BASENAME
        )
    except ReportsNotWrittenError as error:
        print_optimize_summary(report, {"json": error.saved}, console)
        raise
    print_optimize_summary(report, paths, console)
    return report
