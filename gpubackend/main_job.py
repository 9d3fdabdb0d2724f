"""The main job: compile and run a demonstration graph on every usable backend and device.

For each one it prints what was compiled, what ran, and where the data lived,
and it says plainly which devices are real and which are simulated. Then it
runs the conformance suite on every usable (backend, device) pair: by default
a quick subset (`QUICK_CASES`), with ``--full`` the whole catalogue.

Why a subset: a new user starts with a cold compile cache, and the whole
catalogue's cold Numba compiles alone take minutes (the optimize solvers and
Scan gradients dominate), while the main job should finish within a minute.

It needs the ``conformance`` extra (rich prints its tables; half of it is the
suite). Without it, ``python -m gpubackend run`` runs nothing and says how to
install it (``gpubackend/__main__.py``): a demo printed without rich would need
a second renderer of the same table.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpubackend.conformance.arguments import OneLineParser, output_dir
from gpubackend.conformance.reports import ReportsNotWrittenError
from gpubackend.devices import describe_device, visible_devices
from gpubackend.introspection import compiled_graph
from gpubackend.mode import jax_gpu_mode

QUICK_CASES = (
    "scan_while_until",
    "scan_last_value",
    "ofg_basic",
    "composite_explicit",
    "scalar_loop_while",
    "root_scalar_grad",
    "minimize_scalar_grad",
    "scan_in_ofg",
    "root_scalar_newton",
)
"""At least one case of every catalogue family, each cheap to compile cold on every backend."""


@dataclass
class DemoRun:
    backend: str
    device: str
    compiled: str
    result: float
    output_location: str
    shared_location: str
    resident_call: str
    seconds: float


def demo_graph():
    """A scan-driven update of a shared state: inner graphs, shared data and donation at once."""
    x = pt.vector("x")
    state = pytensor.shared(np.linspace(0.0, 1.0, 8), name="state")
    steps = pytensor.scan(
        lambda prev, inp: 0.5 * prev + pt.tanh(inp),
        sequences=[x[:, None] * pt.ones(8)],
        outputs_info=[state],
        return_updates=False,
    )
    total = steps[-1].sum()
    return [x], total, {state: steps[-1]}, state


def _where(value) -> str:
    if isinstance(value, jax.Array):
        return ", ".join(describe_device(d) for d in value.devices())
    return f"host ({type(value).__module__}.{type(value).__name__})"


def run_demo(backend: str, mode: Mode, device: jax.Device | None) -> DemoRun:
    inputs, total, updates, state = demo_graph()
    start = time.perf_counter()
    fn = pytensor.function(inputs, total, updates=updates, mode=mode)
    x_value = np.arange(4.0)
    fn(x_value)
    if device is not None:
        x_value = jax.device_put(x_value, device)
        try:
            with jax.transfer_guard("disallow_explicit"):
                out = fn(x_value)
            resident_call = "no transfer (checked with transfer_guard)"
        except Exception as error:  # noqa: BLE001  the guard's error type differs across JAX versions
            out = fn(x_value)
            resident_call = f"transferred: {str(error).splitlines()[0][:60]}"
    else:
        out = fn(x_value)
        resident_call = "host backend"
    elapsed = time.perf_counter() - start
    graph = compiled_graph(fn)
    inner_graph_ops = sorted(
        {type(n.op).__name__ for n in graph.apply_nodes if hasattr(n.op, "fgraph")}
    )
    return DemoRun(
        backend=backend,
        device=describe_device(device) if device is not None else "cpu (host, real)",
        compiled=f"{len(graph.apply_nodes)} nodes, inner "
        f"graphs: {', '.join(inner_graph_ops) or 'none'}",
        result=float(np.asarray(out)),
        output_location=_where(out),
        shared_location=_where(state.get_value(borrow=True)),
        resident_call=resident_call,
        seconds=elapsed,
    )


def usable_targets() -> list[tuple[str, jax.Device | None]]:
    return [("numba", None)] + [("jax", device) for device in visible_devices()]


def print_runs(console: Console, runs: list[DemoRun]) -> None:
    table = Table(title="Demo graph: scan over a shared state, with an update")
    for column in (
        "backend",
        "device",
        "compiled",
        "result",
        "output lives on",
        "shared state lives on",
        "resident call",
        "s",
    ):
        table.add_column(column, overflow="fold")
    for run in runs:
        table.add_row(
            run.backend,
            run.device,
            run.compiled,
            f"{run.result:.6f}",
            run.output_location,
            run.shared_location,
            run.resident_call,
            f"{run.seconds:.2f}",
        )
    console.print(table)


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="gpubackend run", description=__doc__)
    parser.add_argument("--out", default="reports", help="directory for the conformance reports")
    parser.add_argument("--skip-conformance", action="store_true")
    parser.add_argument(
        "--full", action="store_true", help="the whole conformance catalogue, not the quick subset"
    )
    args = parser.parse_args(argv)
    if not args.skip_conformance:
        # Before the demo and the suite run, whose results it would lose.
        try:
            output_dir(args.out)
        except argparse.ArgumentTypeError as error:
            parser.error(f"argument --out: {error}")
    console = Console(width=max(Console().width, 150))

    console.rule("gpubackend main job")
    console.print(f"pytensor {pytensor.__version__}, jax {jax.__version__}")
    for device in visible_devices():
        console.print(f"  JAX device {describe_device(device)}")
    if not any(d.platform == "gpu" for d in visible_devices()):
        console.print(
            escape(
                "  No GPU is visible: JAX runs on host devices only (install "
                "gpubackend[cuda13], or [cuda12], on a CUDA machine)."
            )
        )

    runs = []
    for backend, device in usable_targets():
        mode = "NUMBA" if backend == "numba" else jax_gpu_mode(device)
        runs.append(run_demo(backend, mode, device))
    print_runs(console, runs)
    if not np.allclose([run.result for run in runs], runs[0].result, rtol=1e-9):
        console.print("[red]Backends disagree on the demo result.[/red]")
        return 1

    if args.skip_conformance:
        return 0
    from gpubackend.conformance.catalogue import CATALOGUE
    from gpubackend.conformance.runner import run_and_report
    from gpubackend.conformance.worker import INTERRUPTED_STATUS

    devices = ["cpu", *(f"{d.platform}:{d.id}" for d in visible_devices())]
    cases = list(CATALOGUE.values()) if args.full else [CATALOGUE[name] for name in QUICK_CASES]
    try:
        status = run_and_report(
            backends=["numba", "jax"],
            devices=devices,
            out_dir=Path(args.out),
            label="main job",
            console=console,
            cases=cases,
        )
    except ReportsNotWrittenError as error:
        console.print(f"[red]{escape(str(error))}[/red]")
        return 1
    if status == INTERRUPTED_STATUS:
        return status  # the reports and the summary say what finished
    if not args.full:
        console.print(
            f"Conformance ran the quick subset: {len(cases)} "
            f"of the catalogue's {len(CATALOGUE)} cases, "
            "every family represented. For all of them: python -m gpubackend run --full. "
            "With generated graphs too: python -m gpubackend conformance --backend numba jax "
            f"--device {' '.join(devices)} --generated 20 --out {args.out}/full",
            highlight=False,
        )
    return status
