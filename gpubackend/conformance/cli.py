"""``python -m gpubackend conformance ...``: run the suite, or merge runners' reports."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape

from gpubackend.conformance.backends import BACKENDS
from gpubackend.conformance.reports import load_report, merge_reports, write_reports
from gpubackend.conformance.results import STATUSES, Report
from gpubackend.devices import DeviceNotFoundError


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpubackend conformance",
        description="Run the conformance catalogue on backends and devices. "
        "Use 'python -m gpubackend conformance merge A.json B.json --out DIR' to merge runners.",
    )
    parser.add_argument("--backend", nargs="+", default=["numba", "jax"], choices=sorted(BACKENDS))
    parser.add_argument("--device", nargs="+", default=["cpu"], help="cpu, cpu:N, gpu or gpu:N (several allowed)")
    parser.add_argument("--out", required=True, help="directory for conformance.{json,xml,md,html}")
    parser.add_argument("--label", default="", help="runner label stored in the report, e.g. 'gpu-leg'")
    parser.add_argument("--cases", default=None, help="only cases whose name contains this (comma-separated)")
    parser.add_argument("--generated", type=int, default=0, help="also run N Hypothesis-generated graphs")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _merge_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpubackend conformance merge", description="Merge several runners' conformance.json"
    )
    parser.add_argument("reports", nargs="+", help="conformance.json files")
    parser.add_argument("--out", required=True)
    return parser


def _print_summary(report: Report, paths: dict, console: Console) -> None:
    for column, counts in report.summary()["per_column"].items():
        parts = ", ".join(f"{counts[status]} {status}" for status in STATUSES)
        console.print(f"[bold]{escape(column)}[/bold]: {parts}")
    for result in report.results:
        if result.status != "pass":
            colour = "red" if result.status == "fail" else "yellow"
            line = escape(f"{result.case} on {result.column}: {result.summary_line()}")
            console.print(f"  [{colour}]{result.status}[/{colour}] {line}")
    console.print("reports: " + ", ".join(str(path) for path in paths.values()))


def main(argv: list[str]) -> int:
    console = Console(stderr=True, soft_wrap=True)
    if argv[:1] == ["merge"]:
        args = _merge_parser().parse_args(argv[1:])
        report = merge_reports([load_report(path) for path in args.reports])
        paths = write_reports(report, args.out, junit=False)
    else:
        from gpubackend.conformance.runner import run_suite

        args = _run_parser().parse_args(argv)
        try:
            report = run_suite(
                args.backend,
                args.device,
                label=args.label,
                cases=args.cases,
                generated=args.generated,
                progress=not args.no_progress,
            )
        except (DeviceNotFoundError, ValueError) as error:
            console.print(f"[red]conformance: {escape(str(error))}[/red]")
            return 2
        paths = write_reports(report, args.out)
    _print_summary(report, paths, console)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
