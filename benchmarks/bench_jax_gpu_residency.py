"""JAX_GPU per-call cost against a hand-written jax.jit (the floor) and stock mode="JAX".

Graphs: ``(x * 2 + s).sum()`` with a 1e6-element float64 shared ``s`` and a
device-resident ``x``, ``s`` holding a read-only array (resident: no transfer
per call, as for a ``jax.Array`` a JAX update leaves) or a writeable numpy
array (uploaded on every call, since NUMBA, C or the user may have written it
in place); and ``a * b + 1`` on two resident scalars, which
measures pure call overhead. Every call blocks until its result is ready.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("GPUBACKEND_DEVICE", "cpu:1")

import jax
import numpy as np
import pytensor
import pytensor.tensor as pt
from _timing import median_seconds, print_ratio_table
from rich.console import Console

import gpubackend


def blocking(fn, *args):
    return lambda: jax.block_until_ready(fn(*args))


def passes_transfer_guard(fn, *args) -> bool:
    try:
        with jax.transfer_guard("disallow_explicit"):
            jax.block_until_ready(fn(*args))
    except Exception:  # noqa: BLE001  the guard's error type differs across JAX versions
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    repeat = 7 if args.quick else 21
    device = gpubackend.resolve_device()
    console = Console()
    console.print(f"target device: {gpubackend.devices.describe_device(device)}")

    size = 1_000_000
    s_host = np.random.default_rng(0).normal(size=size)
    x_dev = jax.device_put(np.ones(size), device)
    s_dev = jax.device_put(s_host, device)
    x = pt.vector("x")
    read_only = s_host.copy()
    read_only.setflags(write=False)
    s = pytensor.shared(read_only, name="s", borrow=True)
    s_numpy = pytensor.shared(s_host.copy(), name="s_numpy")
    ours = pytensor.function([x], (x * 2 + s).sum(), mode="JAX_GPU")
    ours_numpy = pytensor.function([x], (x * 2 + s_numpy).sum(), mode="JAX_GPU")
    stock = pytensor.function([x], (x * 2 + s_numpy).sum(), mode="JAX")
    floor = jax.jit(lambda x, s: (x * 2 + s).sum())
    reference = float(floor(x_dev, s_dev))
    for fn in (ours, ours_numpy, stock):
        np.testing.assert_allclose(float(fn(x_dev)), reference, rtol=1e-12)

    a, b = pt.scalars("a", "b")
    tiny_graph = a * b + 1
    ours_tiny = pytensor.function([a, b], tiny_graph, mode="JAX_GPU")
    stock_tiny = pytensor.function([a, b], tiny_graph, mode="JAX")
    stock_tiny_trusted = pytensor.function([a, b], tiny_graph, mode="JAX", trust_input=True)
    floor_tiny = jax.jit(lambda a, b: a * b + 1)
    a_dev, b_dev = (jax.device_put(np.float64(v), device) for v in (2.0, 3.0))

    large = 200 if args.quick else 500
    tiny = 2000 if args.quick else 5000
    t_ours = median_seconds(blocking(ours, x_dev), number=large, repeat=repeat)
    t_ours_numpy = median_seconds(blocking(ours_numpy, x_dev), number=large // 4, repeat=repeat)
    t_stock = median_seconds(blocking(stock, x_dev), number=large // 4, repeat=repeat)
    t_floor = median_seconds(blocking(floor, x_dev, s_dev), number=large, repeat=repeat)
    t_floor_numpy = median_seconds(blocking(floor, x_dev, s_host), number=large // 4, repeat=repeat)
    t_ours_tiny = median_seconds(blocking(ours_tiny, a_dev, b_dev), number=tiny, repeat=repeat)
    t_stock_tiny = median_seconds(blocking(stock_tiny, a_dev, b_dev), number=tiny, repeat=repeat)
    t_trusted_tiny = median_seconds(
        blocking(stock_tiny_trusted, a_dev, b_dev), number=tiny, repeat=repeat
    )
    t_floor_tiny = median_seconds(blocking(floor_tiny, a_dev, b_dev), number=tiny, repeat=repeat)

    print_ratio_table(
        "JAX_GPU per call (median); ratio = first / second",
        [
            ("(x*2+s).sum(), 1e6, s resident: JAX_GPU / hand jit", t_ours, t_floor, "<= 1.3x"),
            ("s numpy: stock JAX / JAX_GPU with s resident", t_stock, t_ours, ">= 2.5x"),
            (
                "s numpy: JAX_GPU / hand jit given numpy s",
                t_ours_numpy,
                t_floor_numpy,
                "<= 1.3x (an upload per call)",
            ),
            ("a*b+1: JAX_GPU / hand-written jit", t_ours_tiny, t_floor_tiny, "<= 3x"),
            ("a*b+1: stock JAX / hand-written jit", t_stock_tiny, t_floor_tiny, "baseline"),
            (
                "a*b+1: stock JAX trust_input / hand-written jit",
                t_trusted_tiny,
                t_floor_tiny,
                "baseline, no checks",
            ),
        ],
        columns=("case", "first", "second", "ratio", "goal"),
    )
    console.print(
        "warm call under transfer_guard('disallow_explicit'): JAX_GPU with s resident "
        f"{'passes' if passes_transfer_guard(ours, x_dev) else 'FAILS'}, "
        "with s numpy "
        f"{'passes' if passes_transfer_guard(ours_numpy, x_dev) else 'fails (uploads per call)'}, "
        "stock JAX "
        f"{'passes' if passes_transfer_guard(stock, x_dev) else 'fails (uploads every call)'}"
    )


if __name__ == "__main__":
    main()
