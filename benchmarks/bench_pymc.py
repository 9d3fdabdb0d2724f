"""What a PyMC user asks before choosing a sampling path: compile time, logp+gradient cost, ESS per
second.

For each model of tests/pymc_models.py that stock JAX cannot lower, and that
every timed path can run (the Kalman-filter models join once they exist),
this prints:

- compile time and warm evaluation time of the logp+gradient: JAX
  (``get_jaxified_logp``, jitted ``jax.value_and_grad``, lowered by
  gpubackend's registrations) and PyMC's NUMBA ``logp_dlogp_function``;
- per sampling path, compile time and sampling time apart, and ESS per second
  of sampling alone (ArviZ bulk ESS, smallest over the variables): PyMC's NUTS
  on NUMBA (the baseline) and on JAX_GPU, nutpie on Numba and on JAX, numpyro's
  NUTS with chains vectorized (its kernels compiled once, see `numpyro_nuts`:
  ``MCMC.run`` and PyMC's ``pm.sample`` re-trace the chains' set-up every run).

OpenBLAS runs on one thread (unless ``OPENBLAS_NUM_THREADS`` is set; see the
comment at its setting). Each path is built once (timed) and then sampled ``repeats + 1`` times with
the same settings and different seeds. Sampling time is the median of the runs after the first;
compile time is the build plus what the first run took beyond that median (a JIT's compilation on
first call: numpyro's loop, nutpie's JAX functions). ESS/s is the median over those runs. Ratios are
against the baseline measured in the same run. With a GPU, the GPU rows run numpyro vectorized on it
with 4 to 1024 chains and compare ESS/s with the same chains on the CPU; without one they are
reported as skipped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
# OpenBLAS on one thread, before numpy loads it: its dgetrs (PyTensor's Numba
# Solve, in every optimize op's gradient) hands even a 3x3 solve to its thread
# pool, and while the sampler's own work keeps the other core busy each such
# call waits 4-20 ms for the helper thread (minimize_blockwise's NUMBA
# logp+gradient: 45 ms instead of 30 us, 168 s of sampling).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("GPUBACKEND_DEVICE", "cpu:1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax
import numpy as np
import pymc as pm
from _sampling_paths import failure_text, min_bulk_ess, numpyro_nuts, nutpie_path, pymc_nuts
from _timing import format_seconds, median_seconds
from pymc.sampling.jax import get_jaxified_logp
from rich.console import Console
from rich.table import Table

import gpubackend
from tests.pymc_models import CASES

# The while-Scan trace model needs a stock JAX linker to hold a data-dependent trace: not timed
# here.
BENCHMARKED = [
    "ofg_reused",
    "scan_length_from_data",
    "while_scan_last",
    "optimize_starts",
    "minimize_blockwise",
    "censored_gamma",
]
# Models that join the default list as soon as tests/pymc_models.py defines them.
BENCHMARKED += [name for name in ("kalman_standard", "kalman_convergent") if name in CASES]
GPU_CHAINS = (4, 16, 64, 256, 1024)
CHAINS = 2
SEED = 1


@dataclass(frozen=True)
class PathTiming:
    compile_seconds: float
    sampling_seconds: float
    ess_per_second: float


def time_path(build: Callable[[], object], sample: Callable, repeats: int) -> PathTiming:
    """Build once, then sample ``repeats + 1`` times; ``sample(built, seed)`` returns the
    posterior."""
    began = time.perf_counter()
    built = build()
    build_seconds = time.perf_counter() - began
    runs = []
    for seed in range(SEED, SEED + repeats + 1):
        began = time.perf_counter()
        posterior = sample(built, seed)
        runs.append((time.perf_counter() - began, min_bulk_ess(posterior)))
    first_seconds = runs[0][0]
    steady = runs[1:]
    sampling = statistics.median(seconds for seconds, _ in steady)
    return PathTiming(
        build_seconds + max(first_seconds - sampling, 0.0),
        sampling,
        statistics.median(ess / seconds for seconds, ess in steady),
    )


def sampling_paths(model: pm.Model, draws: int) -> dict[str, tuple[Callable, Callable]]:
    """The timed paths; the first is the baseline."""
    return {
        "pymc NUTS, NUMBA": pymc_nuts(model, "NUMBA", draws, CHAINS),
        "pymc NUTS, JAX_GPU": pymc_nuts(model, "JAX_GPU", draws, CHAINS),
        "nutpie, numba": nutpie_path(model, "numba", draws, CHAINS),
        "nutpie, jax": nutpie_path(model, "jax", draws, CHAINS),
        "numpyro vectorized": numpyro_nuts(model, draws, CHAINS),
    }


def timed(build):
    began = time.perf_counter()
    built = build()
    return built, time.perf_counter() - began


def logp_grad_row(name: str, model: pm.Model, eval_repeat: int) -> list[str]:
    point = model.initial_point()

    def jax_logp_grad():
        potential = get_jaxified_logp(model, negative_logp=False)
        value_and_grad = jax.jit(jax.value_and_grad(potential))
        values = [np.asarray(point[v.name]) for v in model.value_vars]
        jax.block_until_ready(value_and_grad(values))
        return lambda: jax.block_until_ready(value_and_grad(values))

    def numba_logp_grad():
        fn = model.logp_dlogp_function(ravel_inputs=True, mode="NUMBA")
        flat = np.concatenate([np.ravel(point[v.name]) for v in model.value_vars])
        fn(flat)
        return lambda: fn(flat)

    jax_eval, jax_compile = timed(jax_logp_grad)
    numba_eval, numba_compile = timed(numba_logp_grad)
    jax_seconds = median_seconds(jax_eval, number=20, repeat=eval_repeat)
    numba_seconds = median_seconds(numba_eval, number=20, repeat=eval_repeat)
    return [
        name,
        format_seconds(jax_compile),
        format_seconds(numba_compile),
        format_seconds(jax_seconds),
        format_seconds(numba_seconds),
        f"{numba_seconds / jax_seconds:.2f}x",
    ]


def timing_or_failure(
    build: Callable[[], object], sample: Callable, repeats: int
) -> PathTiming | str:
    """`time_path`, or why the path fails, so that one failing path does not end the run."""
    try:
        return time_path(build, sample, repeats)
    except Exception as error:  # noqa: BLE001 - any failure of a third-party sampler is a row, not the end of the run
        return failure_text(error)


def sampling_rows(name: str, model: pm.Model, draws: int, repeats: int) -> list[list[str]]:
    timings = {
        path: timing_or_failure(build, sample, repeats)
        for path, (build, sample) in sampling_paths(model, draws).items()
    }
    baseline = next(iter(timings.values()))
    rows = []
    for path, t in timings.items():
        if isinstance(t, str):
            rows.append([name, path, t, "—", "—", "—", "—"])
            continue
        rows.append(
            [
                name,
                path,
                format_seconds(t.compile_seconds),
                format_seconds(t.sampling_seconds),
                f"{t.ess_per_second:.0f}",
                f"{t.ess_per_second / baseline.ess_per_second:.2f}x"
                if isinstance(baseline, PathTiming)
                else "—",
                f"{t.compile_seconds / baseline.compile_seconds:.2f}x"
                if isinstance(baseline, PathTiming)
                else "—",
            ]
        )
    return rows


def gpu_rows(names: list[str], draws: int, repeats: int, console: Console) -> None:
    gpus = gpubackend.devices.platform_devices("gpu")
    if not gpus:
        console.print("GPU rows skipped: JAX sees no GPU on this machine.")
        return
    cpu = jax.devices("cpu")[0]
    table = Table(
        title=f"numpyro vectorized on {gpubackend.devices.describe_device(gpus[0])} "
        "vs the CPU: ESS/s of sampling"
    )
    for column in ("model", "chains", "GPU ESS/s", "CPU ESS/s", "GPU / CPU"):
        table.add_column(column)
    for name in names:
        model = CASES[name].build()
        for chains in GPU_CHAINS:
            rates = [
                time_path(*numpyro_nuts(model, draws, chains, device), repeats).ess_per_second
                for device in (gpus[0], cpu)
            ]
            table.add_row(
                name,
                str(chains),
                f"{rates[0]:.0f}",
                f"{rates[1]:.0f}",
                f"{rates[0] / rates[1]:.2f}x",
            )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer draws and repeats")
    parser.add_argument(
        "--models", default=",".join(BENCHMARKED), help="comma-separated model names"
    )
    args = parser.parse_args()
    draws, repeats, eval_repeat = (300, 1, 5) if args.quick else (1000, 3, 21)
    names = args.models.split(",")
    warnings.simplefilter("ignore")
    import logging

    logging.getLogger("pymc").setLevel(logging.ERROR)
    console = Console(width=200)
    console.print(
        f"CPU cores: {os.cpu_count()}; OpenBLAS threads: {os.environ['OPENBLAS_NUM_THREADS']}; "
        f"{draws} draws + {draws} tune, {CHAINS} chains; "
        f"sampling medians of {repeats} runs after a first one"
    )
    models = {name: CASES[name].build() for name in names}

    logp_table = Table(
        title="logp+gradient: compile and warm evaluation, JAX (gpubackend) vs NUMBA"
    )
    for column in (
        "model",
        "compile jax",
        "compile numba",
        "logp+grad jax",
        "logp+grad numba",
        "numba / jax",
    ):
        logp_table.add_column(column)
    for name, model in models.items():
        logp_table.add_row(*logp_grad_row(name, model, eval_repeat))
    console.print(logp_table)

    table = Table(
        title="Sampling paths on CPU: compile and sampling apart; "
        "ESS/s of sampling alone (baseline: pymc NUTS, NUMBA)"
    )
    for column in (
        "model",
        "path",
        "compile",
        "sampling",
        "ESS/s",
        "ESS/s vs baseline",
        "compile vs baseline",
    ):
        table.add_column(column)
    for name, model in models.items():
        for row in sampling_rows(name, model, draws, repeats):
            table.add_row(*row)
    console.print(table)
    gpu_rows(names, draws, repeats, console)


if __name__ == "__main__":
    main()
