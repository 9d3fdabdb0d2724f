"""What ``import gpubackend`` costs on top of ``import pytensor``, in fresh interpreters.

Goal (issue 11): at most 1.0 s more than ``import pytensor``. Each import is
timed inside a new interpreter (the statement alone, not the interpreter's
start), alternating the two so that a busy machine slows both alike; the
medians of ``--runs`` runs each and their difference are printed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
GOAL_SECONDS = 1.0
TIMED_IMPORT = (
    "import time; started = time.perf_counter(); "
    "import {module}; print(time.perf_counter() - started)"
)


def import_seconds(module: str) -> float:
    # Run in the repository root so that this checkout's gpubackend is the one imported.
    result = subprocess.run(
        [sys.executable, "-c", TIMED_IMPORT.format(module=module)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(result.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    modules = ("pytensor", "gpubackend")
    times: dict[str, list[float]] = {module: [] for module in modules}
    for _ in range(args.runs):
        for module in modules:
            times[module].append(import_seconds(module))
    medians = {module: statistics.median(runs) for module, runs in times.items()}
    extra = medians["gpubackend"] - medians["pytensor"]
    table = Table(title=f"Fresh-interpreter import time, median of {args.runs} runs")
    for column in ("import", "median", "runs"):
        table.add_column(column)
    for module in modules:
        table.add_row(
            module, f"{medians[module]:.3f} s", ", ".join(f"{t:.2f}" for t in times[module])
        )
    table.add_row(
        "gpubackend - pytensor", f"{extra:+.3f} s", f"goal: at most +{GOAL_SECONDS:.1f} s"
    )
    Console(width=160).print(table)
    met = extra <= GOAL_SECONDS
    print(
        f"import gpubackend costs {extra:+.3f} s over import "
        f"pytensor: goal {'met' if met else 'MISSED'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
