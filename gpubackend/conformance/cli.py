"""``python -m gpubackend conformance ...``: run the suite, or merge runners' reports."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial

from rich.console import Console
from rich.markup import escape

from gpubackend.conformance.arguments import (
    OneLineParser,
    case_pattern,
    count,
    device,
    output_dir,
    report_file,
)
from gpubackend.conformance.backends import BACKENDS, backend_device_pairs
from gpubackend.conformance.differential import (
    DEFAULT_MODES,
    DIFFERENTIAL_MODES,
    VerdictReport,
    mode_device_pairs,
)
from gpubackend.conformance.differential_reports import run_differential_and_report
from gpubackend.conformance.index_differential import run_index_differential_and_report
from gpubackend.conformance.optimize_graphs import select_methods
from gpubackend.conformance.optimize_reports import run_optimize_and_report
from gpubackend.conformance.reports import (
    ReportsNotWrittenError,
    merge_reports,
    write_and_summarise,
)
from gpubackend.conformance.runner import run_and_report
from gpubackend.conformance.stock_superset import run_stock_superset_and_report
from gpubackend.conformance.worker import INTERRUPTED_STATUS
from gpubackend.errors import DeviceNotFoundError


def _run_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m gpubackend conformance",
        description="Run the conformance catalogue on backends and devices. "
        "Use 'python -m gpubackend conformance merge A.json B.json --out DIR' to merge runners.",
    )
    parser.add_argument("--backend", nargs="+", default=["numba", "jax"], choices=sorted(BACKENDS))
    parser.add_argument(
        "--device",
        nargs="+",
        type=device,
        default=["cpu"],
        help="cpu, cpu:N, gpu or gpu:N (several allowed)",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=output_dir,
        help="directory for conformance.{json,xml,md,html}",
    )
    parser.add_argument(
        "--label", default="", help="runner label stored in the report, e.g. 'gpu-leg'"
    )
    parser.add_argument(
        "--cases",
        type=case_pattern,
        default=None,
        help="only cases whose name contains this, or of this family (comma-separated)",
    )
    parser.add_argument(
        "--generated",
        type=count,
        default=0,
        metavar="N",
        help="also run N Hypothesis-generated graphs",
    )
    parser.add_argument(
        "--no-catalogue", action="store_true", help="skip the catalogue (run only generated graphs)"
    )
    parser.add_argument(
        "--generated-while",
        type=count,
        default=0,
        metavar="N",
        help="also run N generated while-Scan graphs "
        "differentially (each mode against FAST_COMPILE); "
        "writes while_scan_differential.{json,md}",
    )
    _add_differential_options(
        parser,
        "while",
        "while-Scan",
        "the modes the while-Scan graphs run on, each JAX mode on every --device, numba on cpu: "
        + "; ".join(f"{name}: {mode.description}" for name, mode in DIFFERENTIAL_MODES.items()),
    )
    parser.add_argument(
        "--generated-index",
        type=count,
        default=0,
        metavar="N",
        help="also run N generated plain graphs indexing at literal positions (in range, past "
        "the end, negative, index arrays; read, take, set, inc; static and run-time lengths, "
        "empty arrays) differentially, each mode against numpy and FAST_COMPILE; writes "
        "index_differential.{json,md}",
    )
    _add_differential_options(
        parser, "index", "index", "the modes the index graphs run on (as --while-modes)"
    )
    parser.add_argument(
        "--generated-optimize",
        type=count,
        default=0,
        metavar="N",
        help="also run N generated optimize graphs (minimize, root, minimize_scalar, root_scalar, "
        "spread over every method scipy knows) differentially, each mode against FAST_COMPILE; "
        "prints JAX refusals and NUMBA object-mode fallbacks per method; "
        "writes optimize_differential.{json,md}",
    )
    parser.add_argument(
        "--optimize-methods",
        nargs="+",
        default=None,
        metavar="PATTERN",
        help="only the methods whose 'kind:method' contains a pattern, e.g. 'minimize:bfgs' or "
        "'root:'",
    )
    _add_differential_options(
        parser, "optimize", "optimize", "the modes the optimize graphs run on (as --while-modes)"
    )
    parser.add_argument(
        "--stock-superset",
        type=int,
        default=0,
        metavar="N",
        help="also run N generated graphs with PyTensor's JAX lowerings and gpubackend's, "
        "on the first --device, on every path (pytensor.function, jax_funcify under jit, vmap "
        "and grad): counts per family and verdict in stock_superset.txt; a violation makes the "
        "exit status non-zero",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _add_differential_options(
    parser: argparse.ArgumentParser, option: str, differential: str, modes_help: str
) -> None:
    """``--OPTION-modes`` and ``--OPTION-report-only``, a differential's modes and whether its
    failures leave the exit status alone."""
    parser.add_argument(
        f"--{option}-modes",
        nargs="+",
        default=list(DEFAULT_MODES),
        choices=sorted(DIFFERENTIAL_MODES),
        help=modes_help,
    )
    parser.add_argument(
        f"--{option}-report-only",
        action="store_true",
        help=f"report the {differential} differential's failures without making the exit status "
        "non-zero",
    )


def _merge_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m gpubackend conformance merge",
        description="Merge several runners' conformance.json",
    )
    parser.add_argument("reports", nargs="+", type=report_file, help="conformance.json files")
    parser.add_argument("--out", required=True, type=output_dir)
    return parser


def _merge(argv: list[str], console: Console) -> int:
    args = _merge_parser().parse_args(argv)
    report = merge_reports(args.reports)
    write_and_summarise(report, args.out, console, junit=False)
    # An interrupted runner's report is incomplete: the merge of it is no pass.
    return 1 if report.failed or report.interrupted else 0


def _check_run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What the arguments ask for together runs something (each alone is checked by its type=)."""
    runs_suite = not args.no_catalogue or args.generated
    if (
        not runs_suite
        and not args.generated_while
        and not args.generated_index
        and not args.generated_optimize
        and not args.stock_superset
    ):
        parser.error(
            "--no-catalogue with none of --generated N, --generated-while N, "
            "--generated-index N, --generated-optimize N or --stock-superset N runs nothing"
        )
    devices = " ".join(args.device)
    try:
        if runs_suite and not backend_device_pairs(args.backend, args.device):
            parser.error(
                f"--backend {' '.join(args.backend)} has nothing to run on --device {devices}: "
                "numba runs on the host, so add --device cpu, or add a JAX backend"
            )
        for option, wanted, modes in (
            ("--while-modes", args.generated_while, args.while_modes),
            ("--index-modes", args.generated_index, args.index_modes),
            ("--optimize-modes", args.generated_optimize, args.optimize_modes),
        ):
            if wanted and not mode_device_pairs(modes, args.device):
                parser.error(
                    f"{option} {' '.join(modes)} has nothing to run on --device {devices}: "
                    "numba runs on the host, so add --device cpu, or add a JAX mode"
                )
        select_methods(args.optimize_methods)
    except (DeviceNotFoundError, ValueError) as error:
        parser.error(str(error))


def _run(argv: list[str], console: Console) -> int:
    parser = _run_parser()
    args = parser.parse_args(argv)
    _check_run(parser, args)
    status = 0
    if not args.no_catalogue or args.generated:
        status = run_and_report(
            args.backend,
            args.device,
            args.out,
            label=args.label,
            console=console,
            cases=[] if args.no_catalogue else args.cases,
            generated=args.generated,
            progress=not args.no_progress,
        )
        if status == INTERRUPTED_STATUS:
            return status  # the catalogue's reports say so; the rest of the run is not started
    differentials: list[tuple[int, Callable[..., VerdictReport], list[str], bool]] = [
        (
            args.generated_while,
            run_differential_and_report,
            args.while_modes,
            args.while_report_only,
        ),
        (
            args.generated_index,
            run_index_differential_and_report,
            args.index_modes,
            args.index_report_only,
        ),
        (
            args.generated_optimize,
            partial(run_optimize_and_report, methods=args.optimize_methods),
            args.optimize_modes,
            args.optimize_report_only,
        ),
    ]
    for graphs, run_and_report_differential, modes, report_only in differentials:
        if graphs:
            report = run_and_report_differential(
                graphs,
                modes,
                args.device,
                args.out,
                label=args.label,
                console=console,
                progress=not args.no_progress,
            )
            if report.failed and not report_only:
                status = 1
    if args.stock_superset:
        superset = run_stock_superset_and_report(
            args.stock_superset,
            args.out,
            console,
            device=args.device[0],
            progress=not args.no_progress,
        )
        if superset.violations:
            status = 1
    return status


def main(argv: list[str]) -> int:
    """Run or merge; 1 when a case fails, a merged report is interrupted or the reports could not
    be written (the message names the file the results were saved to instead), 130 when Ctrl-C
    stopped the run, else 0. Usage errors exit with status 2 before anything runs."""
    console = Console(stderr=True, soft_wrap=True)
    try:
        if argv[:1] == ["merge"]:
            return _merge(argv[1:], console)
        return _run(argv, console)
    except ReportsNotWrittenError as error:
        console.print(f"[red]conformance: {escape(str(error))}[/red]")
        return 1
    except KeyboardInterrupt as interrupt:
        # A catalogue run stopped by Ctrl-C returns with its reports; this is any other part.
        reason = str(interrupt) or "no report written for the part that was running"
        console.print(f"[bold red]Interrupted: {escape(reason)}[/bold red]")
        return INTERRUPTED_STATUS


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
