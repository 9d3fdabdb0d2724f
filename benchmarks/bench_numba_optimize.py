"""Benchmark: native Numba lowering of the optimize ops vs stock PyTensor.

Prints, per problem, the median time of one solve (one call of the compiled
function) and three ratios measured in this one run:

- stock ``mode="NUMBA"`` (scipy in object mode; measured in a subprocess that
  never imports gpubackend) over ``mode="NUMBA"`` with gpubackend;
- gpubackend over the floor: the same Numba solver called from Python through
  a hand-written ``@njit`` function with the objective written inline;
- warm over cold compile-plus-first-call latency, each in a fresh process
  sharing a temporary ``base_compiledir``, which holds the Numba cache
  (cold: empty; warm: filled by the cold run).

Goals: stock/gpubackend >= 20x on vector problems and >= 10x on scalar ones;
gpubackend/floor <= 1.5x on vector problems; warm/cold <= 25%.

Usage: ``python benchmarks/bench_numba_optimize.py [--quick]``
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
VECTOR_CASES = ("bfgs_rosenbrock2", "bfgs_rosenbrock10", "hybr_2eq")
SCALAR_CASES = ("brent", "brentq", "secant")
LATENCY_CASES = ("bfgs_rosenbrock2", "hybr_2eq")


def build_case(name: str):
    """``(inputs, outputs, values)`` of a problem; imports only PyTensor."""
    import pytensor.tensor as pt
    from pytensor.tensor.optimize import minimize, minimize_scalar, root, root_scalar

    a = pt.scalar("a")
    if name.startswith("bfgs_rosenbrock"):
        n = int(name.removeprefix("bfgs_rosenbrock"))
        x = pt.vector("x", shape=(n,))
        objective = pt.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (a - x[:-1]) ** 2)
        solution, success = minimize(objective, x, method="BFGS")
        x0 = np.tile([-1.2, 1.0], n // 2)
        return [x, a], [solution, success], (x0, 1.0)
    if name == "hybr_2eq":
        x = pt.vector("x", shape=(2,))
        equations = pt.stack([x[0] ** 2 + x[1] ** 2 - a, x[0] - x[1] ** 3])
        solution, success = root(equations, x, method="hybr")
        return [x, a], [solution, success], (np.array([1.0, 1.0]), 2.0)
    z = pt.scalar("z")
    if name == "brent":
        solution, success = minimize_scalar((z - a) ** 2 + pt.cos(z), z, method="brent")
    elif name == "brentq":
        solution, success = root_scalar(z**3 - a, z, method="brentq", bracket=(0.0, 3.0))
    elif name == "secant":
        solution, success = root_scalar(z**3 - a, z, method="secant")
    else:
        raise ValueError(f"unknown case {name!r}")
    return [z, a], [solution, success], (np.array(1.0), 2.0)


def median_call_seconds(call: Callable[[], object], repeats: int, budget_s: float) -> float:
    """Median over ``repeats`` batches of the mean time of one call."""
    start = time.perf_counter()
    call()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(budget_s / repeats / once))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - start) / number)
    return float(np.median(samples))


def compiled_call(name: str) -> Callable[[], object]:
    import pytensor

    inputs, outputs, values = build_case(name)
    fn = pytensor.function(inputs, outputs, mode="NUMBA")
    fn.trust_input = True
    values = tuple(np.asarray(v, dtype="float64") for v in values)
    return lambda: fn(*values)


def call_overhead_seconds(repeats: int, budget_s: float) -> float:
    """One call of a compiled NUMBA identity function: the floor of any PyTensor call."""
    import pytensor
    import pytensor.tensor as pt

    x = pt.vector("x")
    fn = pytensor.function([x], x + 1, mode="NUMBA")
    fn.trust_input = True
    value = np.zeros(2)
    return median_call_seconds(lambda: fn(value), repeats, budget_s)


def solve_times(cases, repeats: int, budget_s: float) -> dict[str, float]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: median_call_seconds(compiled_call(name), repeats, budget_s) for name in cases}


def compile_latency(name: str) -> float:
    """Seconds to compile ``name`` under NUMBA and make its first call (gpubackend imported)."""
    import warnings

    import pytensor

    import gpubackend  # noqa: F401

    inputs, outputs, values = build_case(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        fn = pytensor.function(inputs, outputs, mode="NUMBA")
        fn(*values)
        return time.perf_counter() - start


def run_worker(argv: list[str]) -> dict:
    python = [sys.executable, __file__, *argv]
    env = os.environ | {"PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if argv[0] == "--latency-worker":
        env["PYTENSOR_FLAGS"] = f"base_compiledir={argv[2]}"
    out = subprocess.run(python, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# Hand-written problems for the floor: same solvers, objective written inline.
def floor_calls(cases) -> dict[str, Callable[[], object]]:
    from numba import njit

    from gpubackend.dispatch.numba.optimize_plan import solver_plan
    from gpubackend.solvers.bfgs import make_bfgs
    from gpubackend.solvers.brent_minimize import make_brent_minimize
    from gpubackend.solvers.brentq import make_brentq
    from gpubackend.solvers.dogleg_root import make_dogleg_root
    from gpubackend.solvers.secant import make_secant

    @njit
    def rosenbrock(x, args):
        (a,) = args
        n = x.shape[0]
        f = 0.0
        g = np.zeros(n)
        for i in range(n - 1):
            t = x[i + 1] - x[i] ** 2
            u = a - x[i]
            f += 100.0 * t * t + u * u
            g[i] += -400.0 * t * x[i] - 2.0 * u
            g[i + 1] += 200.0 * t
        return f, g

    @njit
    def two_equations(x, args):
        (a,) = args
        residual = np.array([x[0] ** 2 + x[1] ** 2 - a, x[0] - x[1] ** 3])
        jacobian = np.array([[2 * x[0], 2 * x[1]], [1.0, -3 * x[1] ** 2]])
        return residual, jacobian

    @njit
    def brent_objective(z, args):
        return (z - args[0]) ** 2 + np.cos(z)

    @njit
    def cube_root_equation(z, args):
        return z**3 - args[0]

    factories = {
        "bfgs_rosenbrock2": (make_bfgs, rosenbrock, False),
        "bfgs_rosenbrock10": (make_bfgs, rosenbrock, False),
        "hybr_2eq": (make_dogleg_root, two_equations, False),
        "brent": (make_brent_minimize, brent_objective, True),
        "brentq": (make_brentq, cube_root_equation, True),
        "secant": (make_secant, cube_root_equation, True),
    }
    calls = {}
    for name in cases:
        make_solver, fun, scalar = factories[name]
        inputs, outputs, values = build_case(name)
        settings = solver_plan(outputs[0].owner.op).settings
        solve = make_solver(fun)
        x0, a = np.asarray(values[0], dtype="float64"), float(values[1])
        if scalar:
            interval = np.array([0.0, 3.0]) if name == "brentq" else np.empty(0)
            floor = _scalar_floor(solve, settings)
            calls[name] = lambda floor=floor, x0=float(x0), a=a, interval=interval: floor(x0, a, interval)
        else:
            floor = _vector_floor(solve, settings)
            calls[name] = lambda floor=floor, x0=x0, a=a: floor(x0, a)
    return calls


def _vector_floor(solve, settings):
    from numba import njit

    @njit
    def floor(x0, a):
        return solve(x0, (a,), settings)

    return floor


def _scalar_floor(solve, settings):
    from numba import njit

    @njit
    def floor(x0, a, interval):
        return solve((a,), x0, interval, settings)

    return floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and a shorter time budget")
    parser.add_argument("--stock-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--latency-worker", nargs=2, metavar=("CASE", "COMPILEDIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    repeats, budget_s = (5, 0.5) if args.quick else (9, 2.0)
    cases = VECTOR_CASES + SCALAR_CASES

    if args.stock_worker:
        print(json.dumps(solve_times(cases, repeats, budget_s)))
        return
    if args.latency_worker:
        print(json.dumps({"seconds": compile_latency(args.latency_worker[0])}))
        return

    quick = ["--quick"] if args.quick else []
    stock = run_worker(["--stock-worker", *quick])
    import gpubackend  # noqa: F401  (only now: the stock worker must not see it)

    native = solve_times(cases, repeats, budget_s)
    floors = {name: median_call_seconds(call, repeats, budget_s) for name, call in floor_calls(cases).items()}
    latency = {}
    for name in LATENCY_CASES[:1] if args.quick else LATENCY_CASES:
        with tempfile.TemporaryDirectory(prefix="bench_numba_optimize_") as compiledir:
            cold = run_worker(["--latency-worker", name, compiledir])["seconds"]
            warm = run_worker(["--latency-worker", name, compiledir])["seconds"]
        latency[name] = (cold, warm)

    from rich.console import Console
    from rich.table import Table

    table = Table(title="Numba optimize ops: per-solve median (one run)")
    for column in ("problem", "gpubackend", "stock NUMBA", "stock / gpubackend", "floor", "gpubackend / floor"):
        table.add_column(column, justify="right")
    for name in cases:
        table.add_row(
            name,
            f"{native[name] * 1e6:.1f} us",
            f"{stock[name] * 1e6:.1f} us",
            f"{stock[name] / native[name]:.1f}x",
            f"{floors[name] * 1e6:.1f} us",
            f"{native[name] / floors[name]:.2f}x",
        )
    console = Console()
    console.print(table)
    overhead = call_overhead_seconds(repeats, budget_s)
    console.print(
        f"A PyTensor call of a trivial NUMBA function costs {overhead * 1e6:.1f} us; the floor pays none of it."
    )

    latency_table = Table(title="Compile + first call, fresh process (gpubackend)")
    for column in ("problem", "cold cache", "warm cache", "warm / cold"):
        latency_table.add_column(column, justify="right")
    for name, (cold, warm) in latency.items():
        latency_table.add_row(name, f"{cold:.2f} s", f"{warm:.2f} s", f"{warm / cold:.0%}")
    console.print(latency_table)


if __name__ == "__main__":
    main()
