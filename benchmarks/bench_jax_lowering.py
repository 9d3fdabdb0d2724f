"""Benchmark of gpubackend's JAX lowerings against hand-written JAX (medians, one run).

1. A while-Scan (Newton square root until convergence, large vector state)
   under JAX_GPU vs a hand-written ``lax.while_loop``. Goal: <= 1.3x.
2. BFGS on a batch of Rosenbrock-10 problems (Blockwise MinimizeOp) under
   JAX_GPU vs a hand-written vmapped ``optimistix.minimise``. Goal: <= 1.3x.
3. A chain of 50 calls to one OpFromGraph: compile plus first call under
   JAX_GPU, under mode="JAX" (gpubackend's lowerings registered), and under
   PyTensor's own JAX lowerings (`gpubackend.mode.stock_jax_mode`).

Run: ``python benchmarks/bench_jax_lowering.py [--quick]``. Without a GPU set
``GPUBACKEND_DEVICE=cpu`` (the default here).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("GPUBACKEND_DEVICE", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytensor
import pytensor.tensor as pt
from _timing import median_seconds, print_ratio_table
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode
from pytensor.graph.replace import vectorize_graph
from pytensor.scan.utils import until
from pytensor.tensor.optimize import minimize

import gpubackend
from gpubackend.mode import stock_jax_mode

NEWTON_TOL = 1e-9
BFGS_TOL = 1e-8


def blocking(fn, *args):
    return lambda: jax.block_until_ready(fn(*args))


def newton_while_scan(size: int, repeats: int) -> tuple[float, float]:
    x0, a = pt.vector("x0"), pt.vector("a")

    def step(x, a):
        residual = x**2 - a
        # Stop on the residual, not on |delta|: PyTensor rewrites abs(a / b) into
        # abs(a) / abs(b), a second division per element that a hand-written loop
        # would not do, and this benchmark measures the lowering.
        return x - residual / (2 * x), until(pt.max(pt.abs(residual)) < NEWTON_TOL)

    xs = pytensor.scan(
        step, outputs_info=[x0], non_sequences=[a], n_steps=100, return_updates=False
    )
    fn = pytensor.function([x0, a], xs[-1], mode="JAX_GPU")
    fn.trust_input = True

    @jax.jit
    def hand_written(x0, a):
        def keep_going(carry):
            step_count, _, done = carry
            return (step_count < 100) & ~done

        def body(carry):
            step_count, x, _ = carry
            residual = x**2 - a
            return step_count + 1, x - residual / (2 * x), jnp.max(jnp.abs(residual)) < NEWTON_TOL

        return jax.lax.while_loop(keep_going, body, (0, x0, False))[1]

    device = gpubackend.resolve_device()
    rng = np.random.default_rng(0)
    x0_v = jax.device_put(np.ones(size), device)
    a_v = jax.device_put(rng.uniform(1.0, 100.0, size), device)
    np.testing.assert_allclose(
        np.asarray(fn(x0_v, a_v)), np.asarray(hand_written(x0_v, a_v)), rtol=1e-12
    )
    return (
        median_seconds(blocking(fn, x0_v, a_v), number=1, repeat=repeats),
        median_seconds(blocking(hand_written, x0_v, a_v), number=1, repeat=repeats),
    )


def rosenbrock(x, shift):
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (shift - x[:-1]) ** 2).sum()


def bfgs_rosenbrock(batch: int, repeats: int) -> tuple[float, float]:
    x, shift = pt.vector("x"), pt.scalar("shift")
    solution, _ = minimize(
        rosenbrock(x, shift), x, method="BFGS", optimizer_kwargs={"tol": BFGS_TOL}
    )
    batch_x, batch_shift = pt.matrix("batch_x"), pt.vector("batch_shift")
    batched = vectorize_graph(solution, {x: batch_x, shift: batch_shift})
    fn = pytensor.function([batch_x, batch_shift], batched, mode="JAX_GPU")
    fn.trust_input = True

    solver: optx.BFGS = optx.BFGS(rtol=BFGS_TOL, atol=BFGS_TOL)

    @jax.jit
    def hand_written(x0, shifts):
        def solve(x0, shift):
            return optx.minimise(
                rosenbrock, solver, x0, args=shift, max_steps=2000, throw=False
            ).value

        return jax.vmap(solve)(x0, shifts)

    device = gpubackend.resolve_device()
    rng = np.random.default_rng(1)
    x0_v = jax.device_put(rng.uniform(-0.5, 0.5, (batch, 10)), device)
    shifts_v = jax.device_put(rng.uniform(0.5, 1.5, batch), device)
    np.testing.assert_allclose(
        np.asarray(fn(x0_v, shifts_v)), np.asarray(hand_written(x0_v, shifts_v)), rtol=1e-6
    )
    return (
        median_seconds(blocking(fn, x0_v, shifts_v), number=1, repeat=repeats),
        median_seconds(blocking(hand_written, x0_v, shifts_v), number=1, repeat=repeats),
    )


def _ofg_chain_graph(n_calls: int):
    a = pt.vector("a")
    step = OpFromGraph([a], [pt.sin(a) + 0.5 * a], inline=False, name="step")
    x = pt.vector("x")
    out = x
    for _ in range(n_calls):
        out = step(out)
    return x, out


def compile_and_first_call(mode: str | Mode, n_calls: int) -> float:
    """Compile plus first call of a fresh 50-call chain (a fresh graph compiles from scratch)."""
    x, out = _ofg_chain_graph(n_calls)
    start = time.perf_counter()
    fn = pytensor.function([x], out, mode=mode)
    jax.block_until_ready(fn(np.linspace(-1.0, 1.0, 16)))
    return time.perf_counter() - start


def ofg_chain_compile_times(n_calls: int, rounds: int) -> tuple[float, float, float]:
    """Medians for JAX_GPU, JAX, and PyTensor's own JAX lowerings, measured round-robin after a
    warm-up round."""
    measure = (
        lambda: compile_and_first_call("JAX_GPU", n_calls),
        lambda: compile_and_first_call("JAX", n_calls),
        lambda: compile_and_first_call(stock_jax_mode(), n_calls),
    )
    for run in measure:
        run()
    samples = [[run() for run in measure] for _ in range(rounds)]
    gpu_mode, jax_mode, stock_ofg = (
        statistics.median(column) for column in zip(*samples, strict=True)
    )
    return gpu_mode, jax_mode, stock_ofg


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller problems and fewer repeats")
    args = parser.parse_args(argv)
    repeats = 5 if args.quick else 20
    vector_size = 200_000 if args.quick else 1_000_000
    batch = 64 if args.quick else 256

    newton = newton_while_scan(vector_size, repeats)
    bfgs = bfgs_rosenbrock(batch, repeats)
    compiles = 3 if args.quick else 7
    gpu_mode, jax_mode, stock_ofg = ofg_chain_compile_times(50, compiles)
    print_ratio_table(
        f"gpubackend JAX lowerings on {gpubackend.resolve_device()} "
        f"(medians of {repeats} calls, {compiles} compiles)",
        [
            (
                f"while-Scan Newton n={vector_size} (JAX_GPU) vs hand-written lax.while_loop",
                *newton,
                "<= 1.3x",
            ),
            (
                f"BFGS Rosenbrock-10 x{batch} (JAX_GPU) vs hand-written vmapped optimistix",
                *bfgs,
                "<= 1.3x",
            ),
            ("50 OFG calls, compile + first call: JAX_GPU vs mode=JAX", gpu_mode, jax_mode, "< 1x"),
            (
                "50 OFG calls, compile + first call: JAX_GPU vs PyTensor's own JAX lowerings",
                gpu_mode,
                stock_ofg,
                "< 1x",
            ),
        ],
    )


if __name__ == "__main__":
    main()
