"""Write a `Report` as JSON, JUnit XML, Markdown and static HTML; merge several runners' JSON."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from gpubackend.conformance.results import (
    CRASH,
    FAIL,
    FAILING,
    OBJECT_MODE,
    PASS,
    STATUSES,
    UNSUPPORTED,
    CaseResult,
    Report,
)

BASENAME = "conformance"

_STATUS_MARK = {
    PASS: "✅ pass",
    FAIL: "❌ fail",
    UNSUPPORTED: "⚪ unsupported",
    OBJECT_MODE: "🟡 object-mode",
    CRASH: "💥 crash",
}


def write_reports(report: Report, out_dir: str | Path, junit: bool = True) -> dict[str, Path]:
    """Write DIR/conformance.{json,xml,md,html}; return the paths by format."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / f"{BASENAME}.json",
        "md": out / f"{BASENAME}.md",
        "html": out / f"{BASENAME}.html",
    }
    paths["json"].write_text(json.dumps(report.to_json(), indent=2, default=str))
    paths["md"].write_text(to_markdown(report))
    paths["html"].write_text(to_html(report))
    if junit:
        paths["xml"] = out / f"{BASENAME}.xml"
        ET.ElementTree(to_junit(report)).write(paths["xml"], encoding="utf-8", xml_declaration=True)
    return paths


def write_and_summarise(
    report: Report, out_dir: str | Path, console: Console, junit: bool = True
) -> None:
    """`write_reports`, then `print_summary`. When the reports cannot be written, the summary is
    printed all the same, and `ReportsNotWrittenError` names the file the results were saved to."""
    try:
        paths = write_or_save(
            lambda: write_reports(report, out_dir, junit=junit), report.to_json, out_dir, BASENAME
        )
    except ReportsNotWrittenError as error:
        print_summary(report, {"json": error.saved}, console)
        raise
    print_summary(report, paths, console)


def print_summary(report: Report, paths: dict[str, Path], console: Console) -> None:
    """Counts per column, one line per case that does not pass, and where the reports are."""
    for column, counts in report.summary()["per_column"].items():
        parts = ", ".join(f"{counts[status]} {status}" for status in STATUSES)
        console.print(f"[bold]{escape(column)}[/bold]: {parts}")
    for result in report.results:
        if result.status != PASS:
            colour = "red" if result.status in FAILING else "yellow"
            line = escape(f"{result.case} on {result.column}: {result.summary_line()}")
            console.print(f"  [{colour}]{result.status}[/{colour}] {line}")
            if result.log_tail:
                console.print(escape(_indented(result.log_tail)), highlight=False)
    console.print("reports: " + ", ".join(str(path) for path in paths.values()))
    if report.interrupted:
        # Their folder; the one file the results were saved to when the reports could not be.
        where = paths["json"].parent if len(paths) > 1 else paths["json"]
        console.print(
            f"[bold red]{escape(report.interruption())}; reports written to "
            f"{escape(str(where))} (marked interrupted)[/bold red]"
        )


def load_report(path: str | Path) -> Report:
    """The report a run wrote as JSON; a ValueError naming the file when it cannot be read or is
    not one."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ValueError(f"cannot read {str(path)!r}: {error.strerror or error}") from error
    expected = f"expected the {BASENAME}.json that 'python -m gpubackend conformance' writes"
    try:
        report = Report.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"{str(path)!r} is not a conformance report ({type(error).__name__}: {error}); "
            f"{expected}"
        ) from error
    unknown = sorted({result.status for result in report.results} - set(STATUSES))
    if unknown:
        raise ValueError(
            f"{str(path)!r} is not a conformance report (unknown statuses {unknown}); {expected}"
        )
    return report


class ReportsNotWrittenError(Exception):
    """Writing a run's reports failed; its results were saved to `saved` instead."""

    def __init__(self, out_dir: str | Path, error: OSError, saved: Path):
        super().__init__(
            f"could not write the reports to {str(out_dir)!r} ({error}); "
            f"the results are saved in {saved}"
        )
        self.saved = saved


def write_or_save(
    write: Callable[[], dict[str, Path]],
    results: Callable[[], dict],
    out_dir: str | Path,
    basename: str,
) -> dict[str, Path]:
    """``write()`` a run's reports into ``out_dir``; when that fails, save ``results()`` (the JSON
    report) to a temporary file and raise `ReportsNotWrittenError` naming it, so that a failed
    write never loses a run."""
    try:
        return write()
    except OSError as error:
        descriptor, name = tempfile.mkstemp(prefix=f"{basename}-", suffix=".json")
        with os.fdopen(descriptor, "w") as file:
            json.dump(results(), file, indent=2, default=str)
        raise ReportsNotWrittenError(out_dir, error, Path(name)) from error


def merge_reports(reports: Sequence[Report]) -> Report:
    """One matrix from several runners; each runner's columns keep its label (``runnerN`` when it
    had none). Interrupted when any of them is."""
    environment = {"merged_from": [report.environment for report in reports]}
    merged = Report(
        environment,
        interrupted=any(report.interrupted for report in reports),
        planned=sum(report.expected for report in reports),
    )
    for index, report in enumerate(reports, start=1):
        for result in report.results:
            merged.results.append(
                dataclasses.replace(result, runner=result.runner or f"runner{index}")
            )
    return merged


def _matrix(report: Report) -> tuple[list[str], list[str], dict[tuple[str, str], CaseResult]]:
    cells = {(result.case, result.column): result for result in report.results}
    return report.cases(), report.columns(), cells


def _indented(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


def to_junit(report: Report) -> ET.Element:
    """One testsuite per column, one testcase per case; fail -> <failure>, crash -> <error>,
    unsupported/object-mode -> <skipped>. An interrupted run adds a testsuite ``interrupted``
    whose one testcase is an <error>: what reads JUnit sees no pass in an incomplete run."""
    suites = ET.Element("testsuites", name="gpubackend conformance")
    if report.interrupted:
        suite = ET.SubElement(
            suites, "testsuite", name="interrupted", tests="1", failures="0", errors="1"
        )
        case = ET.SubElement(suite, "testcase", classname="conformance", name="run complete")
        ET.SubElement(case, "error", message=report.interruption(), type="interrupted")
    for column in report.columns():
        results = [result for result in report.results if result.column == column]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=column,
            tests=str(len(results)),
            failures=str(sum(r.status == FAIL for r in results)),
            skipped=str(sum(r.status in (UNSUPPORTED, OBJECT_MODE) for r in results)),
            errors=str(sum(r.status == CRASH for r in results)),
            time=f"{sum(r.seconds for r in results):.3f}",
        )
        for result in results:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"conformance.{result.family}",
                name=f"{result.case}[{column}]",
                time=f"{result.seconds:.3f}",
            )
            if result.status == FAIL:
                failure = ET.SubElement(
                    case, "failure", message=result.summary_line()[:500], type="conformance"
                )
                failure.text = "\n".join(
                    f"{c.name}: {'ok' if c.ok else 'FAILED'} - {c.detail}" for c in result.checks
                )
            elif result.status == CRASH:
                error = ET.SubElement(
                    case, "error", message=result.summary_line()[:500], type="crash"
                )
                error.text = result.log_tail
            elif result.status in (UNSUPPORTED, OBJECT_MODE):
                ET.SubElement(
                    case, "skipped", message=f"{result.status}: {result.summary_line()[:500]}"
                )
    return suites


def environment_lines(environment: dict) -> list[str]:
    runners = environment.get("merged_from", [environment])
    lines = []
    for env in runners:
        devices = ", ".join(
            f"{spec} = {info['device']}" for spec, info in env.get("devices", {}).items()
        )
        versions = ", ".join(
            f"{name} {env.get(name)}"
            for name in ("python", "pytensor", "jax", "numba", "gpubackend")
        )
        lines.append(f"{env.get('label') or 'runner'}: {versions}; devices: {devices}")
    return lines


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} {status}" for status, count in counts.items() if count)


def to_markdown(report: Report) -> str:
    cases, columns, cells = _matrix(report)
    lines = ["# gpubackend conformance", ""]
    if report.interrupted:
        lines += [f"> **{report.interruption()}**: this report is incomplete, not a pass.", ""]
    lines += [f"- {line}" for line in environment_lines(report.environment)]
    lines += ["", f"Summary: {report.summary_line()}", ""]
    lines.append("| case | " + " | ".join(columns) + " |")
    lines.append("|---|" + "---|" * len(columns))
    for case in cases:
        row = [
            _STATUS_MARK[cells[(case, c)].status] if (case, c) in cells else "—" for c in columns
        ]
        lines.append(f"| {case} | " + " | ".join(row) + " |")
    per_column = report.summary()["per_column"]
    lines.append("| **total** | " + " | ".join(_counts_text(per_column[c]) for c in columns) + " |")
    lines += _host_reads_lines(report)
    details = [result for result in report.results if result.status != PASS]
    if details:
        lines += ["", "## Not passing", ""]
        for r in details:
            lines.append(f"- **{r.case}** on {r.column}: {r.status} — {r.summary_line()}")
            if r.log_tail:
                lines += [
                    "",
                    "  ```text",
                    *(f"  {line}" for line in r.log_tail.splitlines()),
                    "  ```",
                    "",
                ]
    return "\n".join(lines) + "\n"


def _host_reads_lines(report: Report) -> list[str]:
    """Per column of device-resident results: explicit device-to-host reads per warm call, by
    count."""
    per_column: dict[str, dict[int, list[str]]] = {}
    for result in report.results:
        if (reads := result.host_reads_per_call) is not None:
            per_column.setdefault(result.column, {}).setdefault(reads, []).append(result.case)
    if not per_column:
        return []
    lines = ["", "## Host reads per call", ""]
    for column, by_count in per_column.items():
        parts = [
            f"{count} in {len(cases)} cases" if count == 0 else f"{count} in {', '.join(cases)}"
            for count, cases in sorted(by_count.items())
        ]
        lines.append(f"- {column}: " + "; ".join(parts))
    return lines


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; vertical-align: top; text-align: left; }
th { background: #f3f3f3; }
td.pass { background: #dff5df; } td.fail { background: #f8d4d4; }
td.unsupported { background: #eeeeee; color: #555; } td.object-mode { background: #fff3c4; }
td.crash { background: #f0b0b0; } pre.log { font-size: 0.8em; max-width: 40em; overflow-x: auto; }
p.interrupted { background: #f0b0b0; border: 2px solid #c00; padding: 0.5em; font-weight: bold; }
.detail { font-size: 0.8em; color: #333; max-width: 28em; }
details summary { cursor: pointer; }
"""


def to_html(report: Report) -> str:
    cases, columns, cells = _matrix(report)
    esc = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>gpubackend conformance</title>",
        f"<style>{_CSS}</style></head><body><h1>gpubackend conformance</h1>",
        (
            f"<p class='interrupted'>{esc(report.interruption())}: this report is incomplete, "
            "not a pass.</p>"
            if report.interrupted
            else ""
        ),
        "<ul>",
        *[f"<li>{esc(line)}</li>" for line in environment_lines(report.environment)],
        f"</ul><p><strong>Summary:</strong> {esc(report.summary_line())}</p>",
        "<table><tr><th>case</th>" + "".join(f"<th>{esc(c)}</th>" for c in columns) + "</tr>",
    ]
    for case in cases:
        parts.append(f"<tr><th>{esc(case)}</th>")
        for column in columns:
            result = cells.get((case, column))
            parts.append("<td>—</td>" if result is None else _html_cell(result))
        parts.append("</tr>")
    per_column = report.summary()["per_column"]
    totals = "".join(f"<td>{esc(_counts_text(per_column[column]))}</td>" for column in columns)
    parts.append(f"<tr><th>total</th>{totals}</tr></table></body></html>")
    return "".join(parts)


def _html_cell(result: CaseResult) -> str:
    esc = html.escape
    lines = [f"<b>{esc(result.status)}</b>"]
    if result.status != PASS:
        shown = [check for check in result.failed_checks if check.detail not in result.detail]
        items = f"<li>{esc(result.detail)}</li>" if result.detail else ""
        items += "".join(f"<li><b>{esc(c.name)}</b>: {esc(c.detail)}</li>" for c in shown)
        lines.append(f"<ul class='detail'>{items}</ul>")
        if result.log_tail:
            lines.append(
                "<details class='detail'><summary>worker log (tail)</summary><pre "
                f"class='log'>{esc(result.log_tail)}</pre></details>"
            )
    all_checks = "".join(
        f"<li>{'✔' if c.ok else '✘'} {esc(c.name)}: {esc(c.detail)}</li>" for c in result.checks
    )
    summary = f"<summary>checks ({result.seconds:.1f} s)</summary>"
    lines.append(f"<details class='detail'>{summary}<ul>{all_checks}</ul></details>")
    return f"<td class='{esc(result.status)}'>{''.join(lines)}</td>"
