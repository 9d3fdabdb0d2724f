"""While-Scan calls under JAX_GPU: when does a call return, against when is its result ready?

A 400-wide while-Scan (``x <- tanh(W x) + b`` until it settles, at most 100
steps). JAX dispatches asynchronously, so a call that makes no host read
returns long before its result is ready; a call that reads a step count back
returns only once the loop is done. Per graph the script prints the median
time for the call to return, the median time until ``jax.block_until_ready``
of its result, their ratio (near 0: asynchronous; near 1: the call synced with
the device) and the explicit host reads per call. Run it on two checkouts to
compare them (``PYTHONPATH=<checkout> python benchmarks/bench_while_scan.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("GPUBACKEND_DEVICE", "cpu:1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from _timing import format_seconds  # noqa: E402
from pytensor.scan.utils import until  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import gpubackend  # noqa: E402

WIDTH = 400
MAX_STEPS = 100


def settling_graphs() -> tuple[list, dict[str, pt.TensorVariable]]:
    x0, b, w = pt.vector("x0"), pt.vector("b"), pt.matrix("w")

    def settle(x, b, w):
        new_x = pt.tanh(w @ x) + b
        return new_x, until(pt.max(pt.abs(new_x - x)) < 1e-10)

    xs = pytensor.scan(settle, outputs_info=[x0], non_sequences=[b, w], n_steps=MAX_STEPS, return_updates=False)
    graphs = {
        "xs[-1].sum()": xs[-1].sum(),
        "xs.sum()": xs.sum(),
        "grad(xs.sum(), b)": pytensor.grad(xs.sum(), b),
    }
    return [x0, b, w], graphs


def return_and_ready_seconds(call, repeat: int) -> tuple[float, float]:
    jax.block_until_ready(call())
    returned, ready = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        result = call()
        returned.append(time.perf_counter() - started)
        jax.block_until_ready(result)
        ready.append(time.perf_counter() - started)
    return statistics.median(returned), statistics.median(ready)


def explicit_reads(fn, values, device) -> str:
    try:
        from gpubackend.conformance.checks import count_host_reads
    except ImportError:  # a checkout that predates the counter
        return "n/a"
    reads = count_host_reads(fn, values, device)
    return f"{reads.explicit}" + (" + implicit" if reads.implicit else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    device = gpubackend.resolve_device()
    rng = np.random.default_rng(0)
    values = [rng.normal(size=WIDTH), 0.1 * rng.normal(size=WIDTH), 0.5 * rng.normal(size=(WIDTH, WIDTH)) / np.sqrt(WIDTH)]
    resident = [jax.device_put(value, device) for value in values]
    inputs, graphs = settling_graphs()
    table = Table(title=f"{WIDTH}-wide while-Scan under JAX_GPU on {device} ({gpubackend.__file__})")
    for column in ("graph", "call returns", "result ready", "return / ready", "host reads per call"):
        table.add_column(column)
    for name, output in graphs.items():
        fn = pytensor.function(inputs, output, mode="JAX_GPU")
        returned, ready = return_and_ready_seconds(lambda fn=fn: fn(*resident), args.repeat)
        table.add_row(name, format_seconds(returned), format_seconds(ready), f"{returned / ready:.2f}", explicit_reads(fn, resident, device))
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
