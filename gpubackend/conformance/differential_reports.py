"""The while-Scan differential run's reports: counts per class and mode (rich, Markdown), every
verdict (JSON)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpubackend.conformance.differential import (
    PASS,
    STATUSES,
    DifferentialReport,
    VerdictReport,
    run_differential,
)
from gpubackend.conformance.reports import (
    ReportsNotWrittenError,
    environment_lines,
    write_or_save,
)
from gpubackend.conformance.while_scan_graphs import CLASSES, UPSTREAM_BUGS, draw_while_specs

BASENAME = "while_scan_differential"
SHORT = {
    "pass": "pass",
    "checked": "checked",
    "refused": "refused",
    "upstream": "upstream",
    "n/a": "n/a",
    "silent-wrong": "SW",
    "wrong-error": "WE",
    "raw-error": "RE",
    "crash": "CRASH",
}
LEGEND = (
    "SW silent-wrong (a value where the reference raises, or "
    "another value), WE wrong-error (another error type), "
    "RE raw-error (an error where the reference returns a value, or at compile time anything but "
    "DataDependentLengthError), CRASH (the worker died); "
    "refused: DataDependentLengthError; checked: raised inside "
    "the computation, JAX's runtime error naming the "
    "reference's error type (paths that do not own the call); "
    "upstream: a PyTensor bug, the mode doing what PyTensor does"
)
SHOWN_FAILURES = 40
"""How many failing verdicts the printed summary lists; the Markdown report lists every verdict but
passes."""


def cell(counts: dict[str, int]) -> str:
    """``12 pass, 2 refused, 1 SW``: the non-zero counts, in `STATUSES` order."""
    return (
        ", ".join(f"{counts[status]} {SHORT[status]}" for status in STATUSES if counts.get(status))
        or "—"
    )


def _rows(report: DifferentialReport) -> list[tuple[str, list[str]]]:
    counts = report.counts()
    rows = [
        (case_class, [cell(counts[case_class][column]) for column in report.columns])
        for case_class in CLASSES
        if case_class in counts
    ]
    totals = report.totals()
    rows.append(("total", [cell(totals[column]) for column in report.columns]))
    return rows


def graph_counts(report: VerdictReport) -> str:
    valid = len(report.results) - len(report.invalid)
    return f"{valid} graphs ({len(report.invalid)} without a reference), {report.seconds:.0f} s"


def counts_tables(report: DifferentialReport) -> list[Table]:
    """One table per column (mode and device): a row per class, a count per status; narrow enough
    for a CI log."""
    counts, totals = report.counts(), report.totals()
    tables = []
    for column in report.columns:
        table = Table(title=column, title_justify="left")
        table.add_column("class")
        for status in STATUSES:
            table.add_column(SHORT[status], justify="right")
        rows = [
            (case_class, counts[case_class][column])
            for case_class in CLASSES
            if case_class in counts
        ]
        for case_class, per_status in [*rows, ("total", totals[column])]:
            cells = [str(per_status.get(status, "")) for status in STATUSES]
            table.add_row(case_class, *cells, style="bold" if case_class == "total" else None)
        tables.append(table)
    return tables


def not_passing(report: VerdictReport) -> list[tuple[Any, str, str, str]]:
    """(result, column, status, detail) of every verdict other than pass, failures first."""
    lines = [
        (result, column, verdict.status, verdict.detail)
        for result in report.results
        for column, verdict in result.verdicts.items()
        if verdict.status != PASS
    ]
    return sorted(lines, key=lambda line: line[2] not in report.failing)


def to_markdown(report: DifferentialReport) -> str:
    lines = ["# gpubackend while-Scan differential", ""]
    lines += [f"- {line}" for line in environment_lines(report.environment)]
    lines += [f"- {graph_counts(report)}", "", "| class | " + " | ".join(report.columns) + " |"]
    lines.append("|---|" + "---|" * len(report.columns))
    lines += [
        f"| {case_class} | " + " | ".join(cells) + " |" for case_class, cells in _rows(report)
    ]
    lines += ["", LEGEND, "", "## Upstream PyTensor bugs the oracles tell apart", ""]
    lines += [f"- `{key}`: {text}" for key, text in UPSTREAM_BUGS.items()]
    lines += markdown_findings(
        report, lambda result: f"{result.name}** ({result.family})", "expected per call"
    )
    return "\n".join(lines) + "\n"


def markdown_findings(
    report: VerdictReport, title: Callable[[Any], str], expected: str
) -> list[str]:
    """The Markdown report's sections listing the specs without a reference and every verdict but
    a pass, each with its spec; ``title(result)`` names a result (after the opening ``**``)."""
    lines = []
    if report.invalid:
        lines += ["", "## Graphs without a reference", ""]
        lines += [
            f"- **{result.name}** `{result.spec}`: {result.invalid}" for result in report.invalid
        ]
    listed = not_passing(report)
    if listed:
        lines += ["", "## Not passing", ""]
        for result, column, status, detail in listed:
            lines.append(f"- **{title(result)} on {column}: {status} — {detail}")
            lines.append(f"  {expected}: {result.expected}; spec: `{result.spec}`")
    return lines


def write_json_and_markdown(
    data: dict[str, Any], markdown: str, out_dir: str | Path, basename: str
) -> dict[str, Path]:
    """Write DIR/BASENAME.{json,md}; return the paths by format."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{basename}.json", "md": out / f"{basename}.md"}
    paths["json"].write_text(json.dumps(data, indent=2, default=str))
    paths["md"].write_text(markdown)
    return paths


def write_differential_reports(report: DifferentialReport, out_dir: str | Path) -> dict[str, Path]:
    """Write DIR/while_scan_differential.{json,md}; return the paths by format."""
    return write_json_and_markdown(report.to_json(), to_markdown(report), out_dir, BASENAME)


def print_failures(report: VerdictReport, console: Console) -> None:
    """The specs without a reference, and the first `SHOWN_FAILURES` failing verdicts."""
    for result in report.invalid:
        console.print(f"  [red]no reference[/red] {escape(result.name)}: {escape(result.invalid)}")
    failing = [line for line in not_passing(report) if line[2] in report.failing]
    for result, column, status, detail in failing[:SHOWN_FAILURES]:
        console.print(f"  [red]{status}[/red] {escape(f'{result.name} on {column}: {detail}')}")
    if len(failing) > SHOWN_FAILURES:
        console.print(f"  ... {len(failing) - SHOWN_FAILURES} more failing verdicts")


def write_and_summarise[Report: VerdictReport](
    report: Report,
    write: Callable[[Report, str | Path], dict[str, Path]],
    summarise: Callable[[Report, dict[str, Path], Console], None],
    out_dir: str | Path,
    basename: str,
    console: Console | None,
) -> Report:
    """Write the reports and print the summary; when they cannot be written, print the summary all
    the same and raise `ReportsNotWrittenError`, which names the temporary file the results were
    saved to."""
    console = console or Console(stderr=True, soft_wrap=True)
    try:
        paths = write_or_save(lambda: write(report, out_dir), report.to_json, out_dir, basename)
    except ReportsNotWrittenError as error:
        summarise(report, {"json": error.saved}, console)
        raise
    summarise(report, paths, console)
    return report


def print_differential_summary(
    report: DifferentialReport, paths: dict[str, Path], console: Console
) -> None:
    """The counts per mode, the first failing verdicts, and where the reports (with every verdict)
    are."""
    console.print(f"[bold]while-Scan differential[/bold]: {graph_counts(report)}")
    for table in counts_tables(report):
        console.print(table)
    console.print(escape(LEGEND), highlight=False)
    print_failures(report, console)
    console.print(
        "every verdict that is not a pass, refusals and "
        f"upstream bugs included, is in {paths.get('md', paths['json'])}"
    )
    console.print("reports: " + ", ".join(str(path) for path in paths.values()))


def run_differential_and_report(
    count: int,
    modes: Sequence[str],
    devices: Sequence[str],
    out_dir: str | Path,
    label: str = "",
    console: Console | None = None,
    progress: bool = True,
) -> DifferentialReport:
    """Draw ``count`` while-Scan graphs, run them differentially, write and print the reports.

    When the reports cannot be written, the summary is printed all the same
    and `ReportsNotWrittenError` names the temporary file the results were
    saved to.
    """
    report = run_differential(
        draw_while_specs(count), modes, devices, label=label, progress=progress
    )
    return write_and_summarise(
        report, write_differential_reports, print_differential_summary, out_dir, BASENAME, console
    )
