"""While-Scans under JAX: what a gradient costs as the bound grows, and when a JAX_GPU call returns.

**Bound sweep.** Newton's method for ``sqrt(a)`` on a 1000-vector stops after
about 6 steps whatever its bound ``n_steps``. Per bound (10 to 10,000) the
script prints the median time of one call of ``grad(xs[-1].sum(), a)``
compiled with JAX_GPU, stock ``mode="JAX"`` (gpubackend's global lowerings)
and NUMBA, and of a hand-written ``lax.while_loop`` that carries the
derivative along (the floor), with the ratios the goals name: the cost at
bound 10,000 over the cost at bound 10 (goal: at most 1.5 on every path) and
JAX_GPU over NUMBA (goal: at most 1.5), and the host reads per JAX_GPU call.
A call is the user's: numpy inputs in, the result as numpy out (which waits for
it). Each function is timed over a block of consecutive calls, as a user calls
it, the blocks taken in rounds so that drift in the machine's load hits all
alike (calls of different functions interleaved one by one would share the
allocator's state: a large bound's temporaries then change what a small one
pays).

**A sampler's view.** The convergent Kalman filter of tests/pymc_models.py
(a while-Scan until the covariance settles, then a for-Scan): median time of
one logp+gradient call (PyMC's ``logp_dlogp_function``) under JAX_GPU and
NUMBA while the parameters jump between points whose step counts differ, as a
sampler's do (goal: JAX_GPU at most 2× NUMBA), and how many XLA compiles the
calls after the first make (goal: none).

**Return against ready.** A 400-wide while-Scan (``x <- tanh(W x) + b`` until it settles, at most
100 steps). JAX dispatches asynchronously, so a call that makes no host read returns long before its
result is ready; a call that reads a step count back returns only once the loop is done. Per graph
the script prints the median time for the call to return, the median time until
``jax.block_until_ready`` of its result, their ratio (near 0: asynchronous; near 1: the call synced
with the device) and the explicit host reads per call. Run it on two checkouts to compare them
(``PYTHONPATH=<checkout> python benchmarks/bench_while_scan.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("GPUBACKEND_DEVICE", "cpu:1")

import jax
import numpy as np
import pytensor
import pytensor.tensor as pt
from _timing import format_seconds
from pytensor.scan.utils import until
from rich.console import Console
from rich.table import Table

import gpubackend

WIDTH = 400
MAX_STEPS = 100
SWEEP_WIDTH = 1000
SWEEP_BOUNDS = (10, 100, 1000, 10_000)
SWEEP_MODES = ("JAX_GPU", "JAX", "NUMBA")


def settling_graphs() -> tuple[list, dict[str, pt.TensorVariable]]:
    x0, b, w = pt.vector("x0"), pt.vector("b"), pt.matrix("w")

    def settle(x, b, w):
        new_x = pt.tanh(w @ x) + b
        return new_x, until(pt.max(pt.abs(new_x - x)) < 1e-10)

    xs = pytensor.scan(
        settle, outputs_info=[x0], non_sequences=[b, w], n_steps=MAX_STEPS, return_updates=False
    )
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
    jax.block_until_ready(
        fn(*values)
    )  # compiled first: a call that compiles returns only once it has
    reads = count_host_reads(fn, values, device)
    return f"{reads.explicit}" + (" + implicit" if reads.implicit else "")


def newton_gradient(bound: int) -> tuple[list, pt.TensorVariable]:
    a, x0 = pt.vector("a"), pt.vector("x0")

    def newton(x, a):
        new_x = 0.5 * (x + a / x)
        return new_x, until(pt.max(pt.abs(new_x - x)) < 1e-8)

    xs = pytensor.scan(
        newton, outputs_info=[x0], non_sequences=[a], n_steps=bound, return_updates=False
    )
    return [a, x0], pytensor.grad(xs[-1].sum(), a)


def hand_written_gradient(bound: int, device):
    """The floor: the same loop by hand, carrying d(x)/d(a) along (each entry depends on its own
    ``a`` only), on the device the JAX_GPU functions use."""
    import jax.numpy as jnp

    @partial(jax.jit, in_shardings=jax.sharding.SingleDeviceSharding(device))
    def gradient(a, x0):
        def keep_going(carry):
            step, converged, _, _ = carry
            return (step < bound) & ~converged

        def newton_step(carry):
            step, _, x, dx = carry
            new_x = 0.5 * (x + a / x)
            new_dx = 0.5 * (dx + 1 / x - a * dx / x**2)
            return step + 1, jnp.max(jnp.abs(new_x - x)) < 1e-8, new_x, new_dx

        return jax.lax.while_loop(keep_going, newton_step, (0, False, x0, jnp.zeros_like(x0)))[3]

    return gradient


def interleaved_medians(calls: dict, repeat: int, block: int = 1) -> dict:
    """Median seconds per call of each call, timed in rounds so that drift in the machine's load
    hits all alike: each round times ``block`` consecutive calls of each (after one untimed
    call)."""
    for call in calls.values():
        jax.block_until_ready(call())
    times: dict = {key: [] for key in calls}
    for _ in range(repeat):
        for key, call in calls.items():
            if block > 1:
                jax.block_until_ready(call())
            for _ in range(block):
                started = time.perf_counter()
                jax.block_until_ready(call())
                times[key].append(time.perf_counter() - started)
    return {key: statistics.median(seconds) for key, seconds in times.items()}


def users_call(fn, values: list):
    """What a user's call costs: numpy in, and the result as numpy (which waits for it)."""
    return lambda: np.asarray(fn(*values))


def bound_sweep(device, repeat: int) -> None:
    rng = np.random.default_rng(0)
    values = [rng.uniform(1.0, 4.0, SWEEP_WIDTH), np.ones(SWEEP_WIDTH)]
    resident = [jax.device_put(value, device) for value in values]
    calls = {}
    reads: dict[int, str] = {}
    for bound in SWEEP_BOUNDS:
        inputs, gradient = newton_gradient(bound)
        for mode in SWEEP_MODES:
            fn = pytensor.function(inputs, gradient, mode=mode)
            calls[mode, bound] = users_call(fn, values)
            if mode == "JAX_GPU":
                reads[bound] = explicit_reads(fn, resident, device)
        floor = hand_written_gradient(bound, device)
        calls["hand-written", bound] = users_call(floor, values)
    medians = interleaved_medians(calls, repeat, block=10)
    times: dict[str, dict[int, float]] = {mode: {} for mode in (*SWEEP_MODES, "hand-written")}
    for (mode, bound), seconds in medians.items():
        times[mode][bound] = seconds
    table = Table(
        title="grad(xs[-1].sum(), a), Newton's sqrt on a "
        f"{SWEEP_WIDTH}-vector (~6 steps), median per call on {device}"
    )
    for column in (
        "path",
        *(f"bound {bound}" for bound in SWEEP_BOUNDS),
        "10,000 / 10 (goal <= 1.5)",
        "/ NUMBA at 10,000",
    ):
        table.add_column(column)
    numba_last = times["NUMBA"][SWEEP_BOUNDS[-1]]
    for mode, per_bound in times.items():
        growth = per_bound[SWEEP_BOUNDS[-1]] / per_bound[SWEEP_BOUNDS[0]]
        versus_numba = per_bound[SWEEP_BOUNDS[-1]] / numba_last
        goal = " (goal <= 1.5)" if mode == "JAX_GPU" else ""
        table.add_row(
            mode,
            *(format_seconds(per_bound[bound]) for bound in SWEEP_BOUNDS),
            f"{growth:.2f}",
            f"{versus_numba:.2f}{goal}",
        )
    Console(width=180).print(table)
    print(
        "JAX_GPU host reads per call by bound: "
        + ", ".join(f"{bound}: {reads[bound]}" for bound in SWEEP_BOUNDS)
    )


def kalman_walk(repeat: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.jax_lowering_harness import backend_compiles
    from tests.pymc_models import CASES
    from tests.test_kalman import WALK, riccati_settling_steps, value_point

    rng = np.random.default_rng(0)
    order = rng.integers(0, len(WALK), 30 * repeat)
    table = Table(
        title=f"convergent Kalman filter, logp+gradient per call over {len(order)} calls, "
        f"{len({riccati_settling_steps(*WALK[i]) for i in order})} distinct step counts"
    )
    for column in (
        "mode",
        "median per call",
        "/ NUMBA (goal <= 2)",
        "compiles after the first call (goal 0)",
    ):
        table.add_column(column)
    calls = {}
    for mode in ("NUMBA", "JAX_GPU"):
        model = CASES["kalman_convergent"].build()
        points = [
            np.concatenate([np.ravel(v) for v in value_point(model, sigmas).values()])
            for sigmas in WALK
        ]
        logp_dlogp = model.logp_dlogp_function(ravel_inputs=True, mode=mode)
        logp_dlogp(points[order[0]])
        walk = iter(np.resize(order, 10 * len(order)))
        calls[mode] = lambda logp_dlogp=logp_dlogp, points=points, walk=walk: logp_dlogp(
            points[next(walk)]
        )
    with backend_compiles() as compiled:
        medians = interleaved_medians(calls, len(order))
    for mode, seconds in medians.items():
        # Only JAX_GPU compiles with XLA: every compile heard after the first calls is its.
        table.add_row(
            mode,
            format_seconds(seconds),
            f"{seconds / medians['NUMBA']:.2f}",
            str(len(compiled)) if mode == "JAX_GPU" else "-",
        )
    Console(width=160).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--sweep-only", action="store_true", help="only the bound sweep")
    args = parser.parse_args()
    repeat = 7 if args.quick else args.repeat
    device = gpubackend.resolve_device()
    bound_sweep(device, repeat)
    if args.sweep_only:
        return
    kalman_walk(repeat)
    rng = np.random.default_rng(0)
    values = [
        rng.normal(size=WIDTH),
        0.1 * rng.normal(size=WIDTH),
        0.5 * rng.normal(size=(WIDTH, WIDTH)) / np.sqrt(WIDTH),
    ]
    resident = [jax.device_put(value, device) for value in values]
    inputs, graphs = settling_graphs()
    table = Table(
        title=f"{WIDTH}-wide while-Scan under JAX_GPU on {device} ({gpubackend.__file__})"
    )
    for column in (
        "graph",
        "call returns",
        "result ready",
        "return / ready",
        "host reads per call",
    ):
        table.add_column(column)
    for name, output in graphs.items():
        fn = pytensor.function(inputs, output, mode="JAX_GPU")
        returned, ready = return_and_ready_seconds(lambda fn=fn: fn(*resident), repeat)
        table.add_row(
            name,
            format_seconds(returned),
            format_seconds(ready),
            f"{returned / ready:.2f}",
            explicit_reads(fn, resident, device),
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
