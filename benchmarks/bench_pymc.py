"""What a PyMC user asks before moving to JAX: compile time, logp+gradient cost, ESS per second.

For each model of tests/pymc_models.py that stock JAX cannot lower, and that
every timed path can run, this prints:

- compile time of the logp+gradient: numpyro's path (``get_jaxified_logp``,
  jitted ``jax.value_and_grad``, lowered by gpubackend's registrations), PyMC's
  NUMBA ``logp_dlogp_function``, and nutpie's ``compile_pymc_model`` (numba);
- the warm logp+gradient evaluation time of the first two;
- ESS per second (ArviZ bulk ESS, smallest over the variables, divided by the
  wall time of the whole ``pm.sample`` call, compilation included, as a user
  meets it: numpyro jits its loops again on every call) for numpyro with the
  plugin (``chain_method="vectorized"``), PyMC's NUTS on NUMBA (the baseline)
  and nutpie on numba.

Every figure is a median over repeats; ratios are against the baselines
measured in the same run. With a GPU, the GPU rows run numpyro vectorized on
it with 4 to 1024 chains and compare ESS/s with the same chains on the CPU;
without one they are reported as skipped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("GPUBACKEND_DEVICE", "cpu:1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import arviz  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
from _timing import format_seconds, median_seconds  # noqa: E402
from pymc.sampling.jax import get_jaxified_logp  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import gpubackend  # noqa: E402
from tests.pymc_models import CASES  # noqa: E402

# The while-Scan trace model needs a stock JAX linker to hold a data-dependent trace: not timed here.
BENCHMARKED = ["ofg_reused", "scan_length_from_data", "while_scan_last", "optimize_starts", "minimize_blockwise", "censored_gamma"]
GPU_CHAINS = (4, 16, 64, 256, 1024)
SEED = 1


def min_bulk_ess(posterior) -> float:
    ess = arviz.ess(posterior, method="bulk")
    return float(min(np.min(np.asarray(ess[name])) for name in ess.data_vars))


def sample_run(model: pm.Model, draws: int, seed: int, chains: int = 2, device: jax.Device | None = None, **how):
    """(wall seconds, min bulk ESS) of one ``pm.sample`` call, compilation included, as a user meets it."""
    with jax.default_device(device or jax.devices()[0]):
        began = time.perf_counter()
        idata = pm.sample(
            draws=draws, tune=draws, chains=chains, model=model, random_seed=seed, progressbar=False,
            compute_convergence_checks=False, **how,
        )
        seconds = time.perf_counter() - began
    return seconds, min_bulk_ess(idata.posterior)


NUMPYRO_VECTORIZED = {"nuts_sampler": "numpyro", "nuts": {"chain_method": "vectorized"}}
PYMC_NUMBA = {"nuts_sampler": "pymc", "cores": 1, "compile_kwargs": {"mode": "NUMBA"}}
NUTPIE_NUMBA = {"nuts_sampler": "nutpie", "compile_kwargs": {"mode": "NUMBA"}}


def ess_per_second(run, repeats: int) -> float:
    return statistics.median(ess / seconds for seconds, ess in (run(SEED + r) for r in range(repeats)))


def timed(build):
    began = time.perf_counter()
    built = build()
    return built, time.perf_counter() - began


def model_row(name: str, draws: int, repeats: int, eval_repeat: int) -> list[str]:
    model = CASES[name].build()
    point = model.initial_point()

    def jax_logp_grad():
        negative_logp = get_jaxified_logp(model, negative_logp=False)
        value_and_grad = jax.jit(jax.value_and_grad(negative_logp))
        values = [np.asarray(point[v.name]) for v in model.value_vars]
        jax.block_until_ready(value_and_grad(values))
        return lambda: jax.block_until_ready(value_and_grad(values))

    def numba_logp_grad():
        fn = model.logp_dlogp_function(ravel_inputs=True, mode="NUMBA")
        flat = np.concatenate([np.ravel(point[v.name]) for v in model.value_vars])
        fn(flat)
        return lambda: fn(flat)

    def nutpie_compiled():
        import nutpie

        return nutpie.compile_pymc_model(model, backend="numba")

    jax_eval, jax_compile = timed(jax_logp_grad)
    numba_eval, numba_compile = timed(numba_logp_grad)
    _, nutpie_compile = timed(nutpie_compiled)
    jax_seconds = median_seconds(jax_eval, number=20, repeat=eval_repeat)
    numba_seconds = median_seconds(numba_eval, number=20, repeat=eval_repeat)

    numpyro_ess = ess_per_second(lambda seed: sample_run(model, draws, seed, **NUMPYRO_VECTORIZED), repeats)
    pymc_ess = ess_per_second(lambda seed: sample_run(model, draws, seed, **PYMC_NUMBA), repeats)
    nutpie_ess = ess_per_second(lambda seed: sample_run(model, draws, seed, **NUTPIE_NUMBA), repeats)
    return [
        name,
        format_seconds(jax_compile), format_seconds(numba_compile), format_seconds(nutpie_compile),
        format_seconds(jax_seconds), format_seconds(numba_seconds), f"{jax_seconds / numba_seconds:.2f}x",
        f"{numpyro_ess:.0f}", f"{pymc_ess:.0f}", f"{nutpie_ess:.0f}",
        f"{numpyro_ess / pymc_ess:.2f}x", f"{nutpie_ess / pymc_ess:.2f}x",
    ]


def gpu_rows(names: list[str], draws: int, repeats: int, console: Console) -> None:
    gpus = gpubackend.devices.platform_devices("gpu")
    if not gpus:
        console.print("GPU rows skipped: JAX sees no GPU on this machine.")
        return
    cpu = jax.devices("cpu")[0]
    table = Table(title=f"numpyro vectorized on {gpubackend.devices.describe_device(gpus[0])} vs the CPU: ESS/s")
    for column in ("model", "chains", "GPU ESS/s", "CPU ESS/s", "GPU / CPU"):
        table.add_column(column)
    for name in names:
        model = CASES[name].build()
        for chains in GPU_CHAINS:
            rates = []
            for device in (gpus[0], cpu):
                run = lambda seed: sample_run(model, draws, seed, chains, device, **NUMPYRO_VECTORIZED)  # noqa: E731
                rates.append(ess_per_second(run, repeats))
            table.add_row(name, str(chains), f"{rates[0]:.0f}", f"{rates[1]:.0f}", f"{rates[0] / rates[1]:.2f}x")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer draws and repeats")
    parser.add_argument("--models", default=",".join(BENCHMARKED), help="comma-separated model names")
    args = parser.parse_args()
    draws, repeats, eval_repeat = (300, 1, 5) if args.quick else (1000, 3, 21)
    names = args.models.split(",")
    warnings.simplefilter("ignore")
    import logging

    logging.getLogger("pymc").setLevel(logging.ERROR)
    console = Console(width=200)
    console.print(f"CPU cores: {os.cpu_count()}; {draws} draws + {draws} tune, 2 chains; medians of {repeats} runs")
    table = Table(title="PyMC on CPU: numpyro + gpubackend vs PyMC NUTS on NUMBA (baseline) vs nutpie (numba)")
    columns = (
        "model", "compile jax", "compile numba", "compile nutpie", "logp+grad jax", "logp+grad numba",
        "jax/numba", "ESS/s numpyro", "ESS/s pymc", "ESS/s nutpie", "numpyro/pymc", "nutpie/pymc",
    )
    for column in columns:
        table.add_column(column)
    for name in names:
        table.add_row(*model_row(name, draws, repeats, eval_repeat))
    console.print(table)
    gpu_rows(names, draws, repeats, console)


if __name__ == "__main__":
    main()
