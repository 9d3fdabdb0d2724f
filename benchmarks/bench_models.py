"""Whole sampling runs of models that are slow on a CPU, per size and path, against NUMBA.

The models (benchmarks/_large_models.py) scale with one size each: a
hierarchical regression (n observations), a local-level model whose Kalman
filter is a Scan (T steps) and a Laplace-marginalised Poisson model with a
``minimize`` in its logp (G groups). The paths (benchmarks/_sampling_paths.py):
PyMC's NUTS on NUMBA (the baseline), on ``JAX_GPU_NUMPY`` and on stock
``mode="JAX"``; nutpie on its Numba and JAX backends where installed; numpyro's
NUTS with chains vectorized on JAX's default device, and with one chain per
device (pmap) where there are several.

For each model, size and path, from one run: compile time (building the path
and its first calls), sampling time, ESS per second of sampling (ArviZ bulk
ESS, smallest over the free variables), and both against NUMBA's. The check:
every free variable's posterior mean agrees with NUMBA's within ``Z_SCORE``
Monte Carlo standard errors of the two, ``|m - m_NUMBA| <= z * hypot(mcse,
mcse_NUMBA)``. Printed as a table, written as JSON (``bench_models.json``) and
drawn as an SVG (``bench_models.svg``: sampling time against size, log-log, one
line per path, a panel per model) under ``--out``. Exits 1 when a check fails.

``--budget-seconds`` bounds the run: each model gets an equal share, its sizes
run smallest first, and a path skips a size when its previous size's compile
time and sampling time scaled by the size ratio would overrun the model's
share, or once the whole budget is spent.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
# OpenBLAS on one thread, before numpy loads it (see bench_pymc.py).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("GPUBACKEND_DEVICE", "cpu:1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import arviz
import jax
import numpy as np
import pymc as pm
import xarray as xr
from _large_models import MODELS
from _sampling_paths import (
    SamplingPath,
    failure_text,
    min_bulk_ess,
    numpyro_nuts,
    nutpie_path,
    pymc_nuts,
)
from _svg_plot import log_log_panels
from _timing import format_seconds
from rich.console import Console
from rich.table import Table

import gpubackend

BASELINE = "pymc NUTS, NUMBA"
# Five standard errors: a correct path is flagged with probability 6e-7 per variable.
Z_SCORE = 5.0
SEED = 20261129


@dataclass(frozen=True)
class Settings:
    sizes: dict[str, list[int]]
    draws: int
    chains: int
    paths: list[str] | None  # None: every path


QUICK = Settings(
    {"hierarchical": [1000], "local_level": [100], "laplace": [10]},
    draws=150,
    chains=2,
    paths=[BASELINE, "pymc NUTS, JAX_GPU_NUMPY", "numpyro vectorized"],
)
MODERATE = Settings(
    {"hierarchical": [1000, 10_000, 100_000], "local_level": [100, 1000], "laplace": [10, 100]},
    draws=300,
    chains=2,
    paths=None,
)
FULL = Settings(
    {
        "hierarchical": [1000, 10_000, 100_000, 1_000_000],
        "local_level": [100, 1000, 10_000],
        "laplace": [10, 100, 1000],
    },
    draws=500,
    chains=4,
    paths=None,
)


def sampling_paths(model: pm.Model, draws: int, chains: int) -> dict[str, SamplingPath | str]:
    """Every path, the baseline first; a path that cannot run here is the reason why."""
    paths: dict[str, SamplingPath | str] = {
        BASELINE: pymc_nuts(model, "NUMBA", draws, chains),
        "pymc NUTS, JAX_GPU_NUMPY": pymc_nuts(model, "JAX_GPU_NUMPY", draws, chains),
        "pymc NUTS, stock JAX": pymc_nuts(model, "JAX", draws, chains),
    }
    try:
        import nutpie  # noqa: F401
    except ImportError:
        paths["nutpie, numba"] = paths["nutpie, jax"] = "skipped: nutpie is not installed"
    else:
        paths["nutpie, numba"] = nutpie_path(model, "numba", draws, chains)
        paths["nutpie, jax"] = nutpie_path(model, "jax", draws, chains)
    paths["numpyro vectorized"] = numpyro_nuts(model, draws, chains)
    devices = jax.local_devices()
    paths["numpyro pmap"] = (
        numpyro_nuts(model, draws, len(devices), parallel=True)
        if len(devices) > 1
        else "skipped: one device"
    )
    return paths


@dataclass
class Row:
    model: str
    size: int
    path: str
    compile_seconds: float | None = None
    sampling_seconds: float | None = None
    ess_per_second: float | None = None
    ess_per_second_vs_numba: float | None = None
    sampling_vs_numba: float | None = None
    # The posterior-mean check against NUMBA: "ok", or what differs; None where not run.
    means: str | None = None
    failure: str | None = None
    posterior: xr.Dataset | None = field(default=None, repr=False)


def run_path(model_name: str, size: int, label: str, path: SamplingPath) -> Row:
    build, sample = path
    row = Row(model_name, size, label)
    try:
        began = time.perf_counter()
        built = build()
        row.compile_seconds = time.perf_counter() - began
        began = time.perf_counter()
        row.posterior = sample(built, SEED)
        row.sampling_seconds = time.perf_counter() - began
    except Exception as error:  # noqa: BLE001 - a failing third-party sampler is a row, not the end of the run
        row.failure = failure_text(error)
        return row
    row.ess_per_second = min_bulk_ess(row.posterior) / row.sampling_seconds
    return row


def compare_means(posterior: xr.Dataset, baseline: xr.Dataset) -> str:
    """ "ok", or each free variable whose mean is more than Z_SCORE joint MCSEs from NUMBA's."""
    means, mcse = posterior.mean(("chain", "draw")), arviz.mcse(posterior, method="mean")
    base_means, base_mcse = baseline.mean(("chain", "draw")), arviz.mcse(baseline, method="mean")
    off = []
    for name in baseline.data_vars:
        distance = np.abs(np.asarray(means[name]) - np.asarray(base_means[name]))
        scale = np.hypot(np.asarray(mcse[name]), np.asarray(base_mcse[name]))
        z = float(np.max(distance / scale))
        if not z <= Z_SCORE:
            off.append(f"{name} {z:.1f} MCSE off")
    return "ok" if not off else "; ".join(off)


def against_baseline(rows: list[Row]) -> None:
    baseline = next((row for row in rows if row.path == BASELINE), None)
    if baseline is None or baseline.posterior is None:
        return
    for row in rows:
        if row.posterior is None or row is baseline:
            continue
        assert row.ess_per_second is not None and row.sampling_seconds is not None
        assert baseline.ess_per_second is not None and baseline.sampling_seconds is not None
        row.ess_per_second_vs_numba = row.ess_per_second / baseline.ess_per_second
        row.sampling_vs_numba = row.sampling_seconds / baseline.sampling_seconds
        row.means = compare_means(row.posterior, baseline.posterior)


class Budget:
    """Each model's equal share of the run's seconds; a path's next size is predicted from its
    previous size's: the same compile time, and the sampling time scaled by the size ratio."""

    def __init__(self, seconds: float | None, models: int) -> None:
        self.seconds = seconds
        self.share = None if seconds is None else seconds / models
        self.run_began = self.began = time.perf_counter()
        self.last: dict[str, tuple[int, float, float]] = {}

    def start_model(self) -> None:
        self.began, self.last = time.perf_counter(), {}

    def allows(self, path: str, size: int) -> bool:
        if self.seconds is None or self.share is None:
            return True
        now = time.perf_counter()
        if now - self.run_began > self.seconds:
            return False
        if path not in self.last:
            return True
        previous_size, compile_seconds, sampling_seconds = self.last[path]
        predicted = compile_seconds + sampling_seconds * size / previous_size
        return now - self.began + predicted <= self.share

    def record(self, row: Row) -> None:
        if row.compile_seconds is not None and row.sampling_seconds is not None:
            self.last[row.path] = (row.size, row.compile_seconds, row.sampling_seconds)


def run_model(
    name: str, settings: Settings, budget: Budget, progress: Callable[[str], None]
) -> list[Row]:
    _, build_model = MODELS[name]
    rows: list[Row] = []
    budget.start_model()
    for size in settings.sizes[name]:
        model = build_model(size)
        size_rows = []
        for label, path in sampling_paths(model, settings.draws, settings.chains).items():
            if settings.paths is not None and label not in settings.paths:
                continue
            if isinstance(path, str):
                size_rows.append(Row(name, size, label, failure=path))
                continue
            if not budget.allows(label, size):
                size_rows.append(Row(name, size, label, failure="skipped: over the budget"))
                continue
            row = run_path(name, size, label, path)
            budget.record(row)
            progress(
                f"{name} {size} {label}: {row.failure or format_seconds(row.sampling_seconds or 0)}"
            )
            size_rows.append(row)
        against_baseline(size_rows)
        rows += size_rows
    return rows


def ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def print_table(rows: list[Row], title: str, console: Console) -> None:
    table = Table(title=title)
    for column in (
        "model",
        "size",
        "path",
        "compile",
        "sampling",
        "ESS/s",
        "ESS/s ÷ NUMBA",
        "sampling ÷ NUMBA",
        "means vs NUMBA",
    ):
        table.add_column(column)
    for row in rows:
        if row.failure:
            table.add_row(row.model, f"{row.size:,}", row.path, row.failure, *["—"] * 5)
            continue
        table.add_row(
            row.model,
            f"{row.size:,}",
            row.path,
            format_seconds(row.compile_seconds or 0),
            format_seconds(row.sampling_seconds or 0),
            f"{row.ess_per_second:.3g}",
            ratio(row.ess_per_second_vs_numba),
            ratio(row.sampling_vs_numba),
            row.means or ("baseline" if row.path == BASELINE else "—"),
        )
    console.print(table)


def machine() -> str:
    device = gpubackend.devices.describe_device(jax.devices()[0])
    return (
        f"{platform.node()}: {os.cpu_count()} CPU cores; JAX's default device {device}; "
        f"JAX_GPU on $GPUBACKEND_DEVICE={os.environ['GPUBACKEND_DEVICE']}"
    )


def write_reports(rows: list[Row], settings: Settings, out: Path, about: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    records = [{k: v for k, v in asdict(row).items() if k != "posterior"} for row in rows]
    (out / "bench_models.json").write_text(
        json.dumps(
            {
                "machine": about,
                "draws": settings.draws,
                "tune": settings.draws,
                "chains": settings.chains,
                "z_score": Z_SCORE,
                "rows": records,
            },
            indent=1,
        )
    )
    panels = {}
    for name in dict.fromkeys(row.model for row in rows):
        lines: dict[str, list[tuple[float, float]]] = {}
        for row in rows:
            if row.model == name and row.sampling_seconds is not None:
                lines.setdefault(row.path, []).append((row.size, row.sampling_seconds))
        panels[f"{name} ({MODELS[name][0]})"] = lines
    (out / "bench_models.svg").write_text(
        log_log_panels(
            panels, title=f"Sampling time against size ({about})", y_label="sampling time (s)"
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny sizes, few draws, three paths")
    size.add_argument("--full", action="store_true", help="the GPU leg's sizes (up to 10^6)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated model names")
    parser.add_argument(
        "--budget-seconds", type=float, help="bound the run (see the module's docstring)"
    )
    parser.add_argument("--out", type=Path, default=Path("reports/bench_models"))
    args = parser.parse_args()
    settings = QUICK if args.quick else FULL if args.full else MODERATE
    names = args.models.split(",")
    warnings.simplefilter("ignore")
    logging.getLogger("pymc").setLevel(logging.ERROR)
    console = Console(width=200)
    about = machine()
    console.print(
        f"{about}; {settings.draws} draws + {settings.draws} tune, {settings.chains} chains"
    )
    budget = Budget(args.budget_seconds, len(names))
    rows = [
        row
        for name in names
        for row in run_model(name, settings, budget, lambda line: console.print(line))
    ]
    print_table(rows, f"Sampling runs: figures against {BASELINE} of the same run", console)
    write_reports(rows, settings, args.out, about)
    console.print(f"reports: {args.out}/bench_models.json, {args.out}/bench_models.svg")
    failed = [row for row in rows if row.means not in (None, "ok")]
    for row in failed:
        console.print(f"posterior means differ: {row.model} {row.size} {row.path}: {row.means}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
