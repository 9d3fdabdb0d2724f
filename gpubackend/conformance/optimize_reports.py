"""The optimize differential run's reports: counts per method and mode, refusals and fallbacks
(rich, Markdown), every verdict (JSON)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpubackend.conformance.differential import PASS, REFUSED
from gpubackend.conformance.differential_reports import (
    graph_counts,
    markdown_findings,
    print_failures,
    write_and_summarise,
    write_json_and_markdown,
)
from gpubackend.conformance.optimize_differential import (
    FALLBACK,
    STATUSES,
    OptimizeReport,
    run_optimize_differential,
)
from gpubackend.conformance.optimize_graphs import draw_optimize_specs, select_methods
from gpubackend.conformance.reports import environment_lines

BASENAME = "optimize_differential"
LEGEND = (
    "off (reference-off): differs from scipy, but within the tolerance of the problem solved "
    "tightly or no further from it than scipy (scipy is the one off); "
    "unstable (reference-unstable): what scipy itself gives from a start moved by rounding; "
    "refused: NotImplementedError (UnsupportedMethod, UnsupportedOption); "
    "fallback: NUMBA ran scipy in object mode (ObjectModeFallbackWarning), its values still "
    "judged; the failures: SD success-differs, SW silent-wrong (another value, or a value where "
    "scipy raises), WE wrong-error (another error type), RE raw-error (an error where scipy "
    "returns), CRASH (the worker died)"
)
COLUMNS = (*STATUSES, FALLBACK)
SHORT = {
    "pass": "pass",
    "reference-off": "off",
    "reference-unstable": "unstable",
    "refused": "refused",
    "n/a": "n/a",
    "success-differs": "SD",
    "silent-wrong": "SW",
    "wrong-error": "WE",
    "raw-error": "RE",
    "crash": "CRASH",
    "fallback": "fallback",
}
"""The printed tables' headers, narrow enough for a CI log (the Markdown report spells them out)."""


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
    fallbacks; of the statuses, those seen in the run besides pass and refused (narrow enough for a
    CI log)."""
    counts = report.counts()
    seen = {status for per_column in counts.values() for c in per_column.values() for status in c}
    shown = [status for status in COLUMNS if status in {PASS, REFUSED, FALLBACK} | seen]
    tables = []
    for column in report.columns:
        table = Table(title=column, title_justify="left")
        table.add_column("method", no_wrap=True)
        for status in shown:
            table.add_column(SHORT[status], justify="right", no_wrap=True)
        for method in sorted(counts):
            per_status = counts[method][column]
            table.add_row(method, *[str(per_status.get(status, "")) for status in shown])
        tables.append(table)
    return tables


def to_markdown(report: OptimizeReport) -> str:
    counts = report.counts()
    lines = ["# gpubackend optimize differential", ""]
    lines += [f"- {line}" for line in environment_lines(report.environment)]
    lines += [f"- {graph_counts(report)}"]
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
    lines += markdown_findings(report, lambda result: f"{result.name}**", "expected")
    return "\n".join(lines) + "\n"


def write_optimize_reports(report: OptimizeReport, out_dir: str | Path) -> dict[str, Path]:
    """Write DIR/optimize_differential.{json,md}; return the paths by format."""
    return write_json_and_markdown(report.to_json(), to_markdown(report), out_dir, BASENAME)


def print_optimize_summary(
    report: OptimizeReport, paths: dict[str, Path], console: Console
) -> None:
    """The counts per mode and method, issue 29's two counts, the first failing verdicts, and
    where the reports are."""
    console.print(f"[bold]optimize differential[/bold]: {graph_counts(report)}")
    for table in counts_tables(report):
        console.print(table)
    console.print(escape(LEGEND), highlight=False)
    for line in done_when_lines(report):
        console.print(f"[bold]{escape(line)}[/bold]")
    print_failures(report, console)
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
    return write_and_summarise(
        report, write_optimize_reports, print_optimize_summary, out_dir, BASENAME, console
    )
