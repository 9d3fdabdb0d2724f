"""A batch of independent BFGS problems split over 1, 2 and 4 devices under JAX_GPU.

Each problem is a Rosenbrock function with its own parameter. The batch is
a Blockwise-vectorised ``minimize``, and the parameter vector is split along
axis 0. On simulated host devices every "device" shares the same 2 cores, so
this script reports the figures without expecting a speed-up. On a multi-GPU
runner (ci/gpu runs it there) the scaling is the real figure.
"""

from __future__ import annotations

import argparse
import os
from functools import partial

# Four simulated host devices whatever the caller set: the script compares 1, 2 and 4.
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import numpy as np
import pytensor
import pytensor.tensor as pt
from _timing import format_seconds, median_seconds
from pytensor.graph.replace import vectorize_graph
from pytensor.tensor.optimize import minimize
from rich.console import Console
from rich.table import Table

import gpubackend


def batched_rosenbrock_bfgs():
    x = pt.vector("x", shape=(2,))
    a = pt.scalar("a")
    objective = (a - x[0]) ** 2 + 100.0 * (x[1] - x[0] ** 2) ** 2
    solution, success = minimize(objective, x, method="BFGS", optimizer_kwargs={"tol": 1e-10})
    a_batch = pt.vector("a_batch")
    x0_batch = pt.matrix("x0_batch")
    batched = vectorize_graph([solution, success], replace={a: a_batch, x: x0_batch})
    return [a_batch, x0_batch], batched


def _ready(fn, *args):
    """One call of ``fn``, timed until its outputs exist (JAX dispatches asynchronously)."""
    return jax.block_until_ready(fn(*args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    platform = "gpu" if gpubackend.devices.platform_devices("gpu") else "cpu"
    available = jax.devices(platform)
    sizes = [n for n in (1, 2, 4) if n <= len(available)]

    rng = np.random.default_rng(0)
    a_values = rng.uniform(0.5, 1.5, size=args.batch)
    x0_values = np.tile([-1.2, 1.0], (args.batch, 1))
    inputs, outputs = batched_rosenbrock_bfgs()

    table = Table(title=f"{args.batch} independent BFGS problems (Rosenbrock-2), median per call")
    for column in ("devices", "per call", "vs 1 device", "converged", "max |x - (a, a^2)|"):
        table.add_column(column)
    baseline = None
    for size in sizes:
        devices = available[:size]
        mode = gpubackend.jax_gpu_mode(devices=devices, shard={"a_batch": 0, "x0_batch": 0})
        fn = pytensor.function(inputs, outputs, mode=mode)
        a_dev = jax.device_put(a_values, fn.input_storage[0].type.sharding)
        x0_dev = jax.device_put(x0_values, fn.input_storage[1].type.sharding)
        solution, success = fn(a_dev, x0_dev)
        error = np.abs(np.asarray(solution) - np.stack([a_values, a_values**2], axis=1)).max()
        seconds = median_seconds(
            partial(_ready, fn, a_dev, x0_dev),
            number=1 if args.quick else 3,
            repeat=5 if args.quick else 9,
        )
        baseline = baseline or seconds
        table.add_row(
            f"{size} x {platform}"
            + (" (simulated)" if gpubackend.devices.is_simulated(devices[0]) else ""),
            format_seconds(seconds),
            f"{seconds / baseline:.2f}x",
            f"{int(np.asarray(success).sum())}/{args.batch}",
            f"{error:.1e}",
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
