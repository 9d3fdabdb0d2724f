"""What one call of a compiled function costs, as host-side callers make it (issue 25).

PyMC's NUTS, nutpie, find_MAP and scipy loops call one small function
thousands of times, with numpy in and numpy out. For each graph this prints
the per-call median (numpy in, ``np.asarray`` of every output, as PyMC's NUTS
takes them) of:

- JAX_GPU with ``outputs="numpy"`` (``mode="JAX_GPU_NUMPY"``, the host callers' mode);
- JAX_GPU (``jax.Array`` outputs, made numpy by the caller);
- stock ``mode="JAX"`` and ``mode="NUMBA"``;
- a hand-written ``jax.jit`` on the same device (the floor): for the small model
  ``jax.jit(jax.value_and_grad(logp))`` written out, for the others the graph as
  PyMC's JAX samplers get it (``get_jaxified_graph``), jitted by hand.

Graphs: PyMC's ``logp_dlogp_function(ravel_inputs=True)`` of a small model (a
Normal likelihood, 2 parameters, 50 observations), called through PyMC's
``ValueGradFunction`` and as PyMC's NUTS calls it (its compiled function
directly, ``_pytensor_function``), of a model whose logp holds a Scan (an AR(1)
likelihood), a graph with an optimize op (``minimize`` with BFGS
and its gradient), and a gather at positions known only at run time, which
JAX_GPU checks as the reference does (issue 27) where JAX clamps. Then
device-resident calls (``jax.Array`` in and out, blocked on) of JAX_GPU (the
small model's graph, compiled with ``pytensor.function``, and the gather, whose
check costs a read) against the hand jit with the same arrays, and PyMC's NUTS
sampling time per mode on the small model (PyMC's own ``sampling_time``: the
compile is excluded; best of 2), beside the same NUTS with the hand jit as its
logp and gradient (`HandJitNUTS`): what any JAX function costs PyMC's sampler.
Then what the lock costs a call that updates a shared variable (issue 43: such
calls from several threads run one at a time): the same JAX_GPU function with
and without its lock, in the same rounds.
Every variant of a table is timed in the same rounds, in turn, and every ratio
is against a baseline from the same run.

Goals (issue 25): numpy in and out, JAX_GPU_NUMPY at most 1.25x the hand jit and
at most stock JAX on every graph; device-resident at most 1.1x the hand jit; NUTS
with JAX_GPU_NUMPY at most 1.5x NUMBA's sampling time and faster than stock JAX.
"""

from __future__ import annotations

import argparse
import os
import warnings

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("GPUBACKEND_DEVICE", "cpu:1")
# As bench_pymc.py: OpenBLAS on one thread, so NUMBA's solves do not wait on a busy helper thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax
import jax.numpy as jnp
import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from _timing import format_seconds, interleaved_medians, print_ratio_table
from jax.sharding import SingleDeviceSharding
from pymc.sampling.jax import get_jaxified_graph
from pytensor.tensor.optimize import minimize
from rich.console import Console
from rich.table import Table

import gpubackend

MODES = ("JAX_GPU_NUMPY", "JAX_GPU", "JAX", "NUMBA")
N_OBSERVED = 50


def small_model() -> pm.Model:
    y = np.random.default_rng(0).normal(1.0, 2.0, size=N_OBSERVED)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        sigma = pm.HalfNormal("sigma", 5.0)
        pm.Normal("obs", mu, sigma, observed=y)
    return model


def hand_small_logp(y: np.ndarray):
    """The small model's logp of the raveled point ``[mu, log(sigma)]``, written for JAX."""
    norm = jax.scipy.stats.norm

    def logp(point):
        mu, log_sigma = point[0], point[1]
        sigma = jnp.exp(log_sigma)
        return (
            norm.logpdf(y, mu, sigma).sum()
            + norm.logpdf(mu, 0.0, 10.0)
            + norm.logpdf(sigma, 0.0, 5.0)
            + jnp.log(2.0)
            + log_sigma
        )

    return logp


def scan_model() -> pm.Model:
    """An AR(1) likelihood written as a Scan over the observations, as statespace models are."""
    rng = np.random.default_rng(1)
    y = np.cumsum(rng.normal(size=N_OBSERVED)) * 0.3
    with pm.Model() as model:
        rho = pm.Uniform("rho", -1.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        data = pt.as_tensor(y)

        def step(current, previous, rho, sigma):
            return pm.logp(pm.Normal.dist(rho * previous, sigma), current)

        terms = pytensor.scan(
            step,
            sequences=[data[1:], data[:-1]],
            non_sequences=[rho, sigma],
            return_updates=False,
        )
        pm.Potential("ar1", terms.sum())
    return model


def optimize_graph():
    """``minimize`` (BFGS) of a quartic, with its solution's gradient (an optimize op)."""
    x, a = pt.vector("x"), pt.vector("a")
    objective = ((x - a) ** 2).sum() + 0.1 * (x**4).sum()
    solution, _ = minimize(objective, x, method="BFGS", optimizer_kwargs={"tol": 1e-10})
    return [x, a], [solution, pt.grad(solution.sum(), a)], [np.zeros(3), np.array([1.0, -2, 0.5])]


def indexed_graph():
    """A gather at positions known only at run time, which JAX_GPU checks as the reference does (an
    out-of-range position raises ``IndexError``; JAX and the hand jit clamp it)."""
    x, positions = pt.vector("x"), pt.lvector("positions")
    values = np.linspace(0.0, 1.0, 50)
    return [x, positions], [(x[positions] ** 2).sum()], [values, np.arange(0, 50, 3)]


def host_call(fn, *args):
    """A call as PyMC's NUTS makes it: numpy in, every output taken with ``np.asarray``."""

    def call():
        return [np.asarray(output) for output in fn(*args)]

    return call


def hand_jit(graph_fn, device: jax.Device, n_inputs: int):
    sharding = SingleDeviceSharding(device)
    return jax.jit(graph_fn, in_shardings=(sharding,) * n_inputs, out_shardings=sharding)


def jaxified_by_hand(fn, device: jax.Device):
    """The graph of a compiled function, as PyMC's JAX samplers get it, jitted by hand."""
    fgraph = fn.maker.fgraph
    graph_fn = get_jaxified_graph(inputs=fgraph.inputs, outputs=fgraph.outputs)
    return hand_jit(graph_fn, device, len(fgraph.inputs))


def time_graph(label, compiled, hand, args, number, repeat):
    """Per-call medians of one graph: every mode and the hand jit, in the same rounds."""
    calls = {mode: host_call(fn, *args) for mode, fn in compiled.items()}
    calls["hand jit"] = host_call(hand, *args)
    reference = calls["hand jit"]()
    for mode, call in calls.items():
        for ours, expected in zip(call(), reference, strict=True):
            np.testing.assert_allclose(ours, expected, rtol=1e-6, err_msg=f"{label}: {mode}")
    return interleaved_medians(calls, number=number, repeat=repeat)


def compiled_functions(functions: dict) -> dict:
    """The compiled function behind each ``ValueGradFunction``, which PyMC's NUTS calls directly."""
    return {mode: function._pytensor_function for mode, function in functions.items()}


class HandJitNUTS(pm.NUTS):
    """PyMC's NUTS whose leapfrog steps call a hand-written ``jax.jit`` (numpy in, numpy out)."""

    def __init__(self, *args, hand, **kwargs):
        super().__init__(*args, **kwargs)
        self.integrator._logp_dlogp_func = lambda q, _: [np.asarray(o) for o in hand(q)]


def logp_dlogp_functions(model: pm.Model):
    functions = {}
    for mode in MODES:
        function = model.logp_dlogp_function(mode=mode, ravel_inputs=True)
        function.set_extra_values({})
        functions[mode] = function
    return functions


def nuts_sampling_time(
    model: pm.Model, mode: str, draws: int, tune: int, tries: int, hand=None
) -> float:
    """PyMC's own ``sampling_time`` (compile excluded) of its NUTS, best of ``tries``; with
    ``hand``, its leapfrog steps call that jitted logp and gradient instead (`HandJitNUTS`)."""
    times = []
    for seed in range(tries):
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step = (
                {"step": HandJitNUTS(hand=hand, compile_kwargs={"mode": mode})}
                if hand is not None
                else {}
            )
            idata = pm.sample(
                **step,
                draws=draws,
                tune=tune,
                chains=1,
                cores=1,
                nuts_sampler="pymc",
                compile_kwargs={"mode": mode},
                random_seed=seed,
                progressbar=False,
                compute_convergence_checks=False,
            )
        times.append(float(idata.sample_stats.attrs["sampling_time"]))
    return min(times)


def update_lock_cost(number: int, repeat: int) -> tuple[float, float]:
    """Per-call medians of a JAX_GPU function updating a shared variable (``u + 1``), with its
    update lock and with the lock taken out (a copy whose calls are not serialised), in the same
    rounds: what serialising calls with updates costs a call that meets no other thread."""
    u = pytensor.shared(np.zeros(3), name="u")
    locked = pytensor.function([], [], updates={u: u + 1}, mode="JAX_GPU")
    unlocked = locked.copy()
    unlocked._serialised = None  # the call without the lock, for this comparison only
    medians = interleaved_medians(
        {"locked": locked, "unlocked": unlocked}, number=number, repeat=repeat
    )
    return medians["locked"], medians["unlocked"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer calls and draws")
    args = parser.parse_args()
    number, repeat = (200, 9) if args.quick else (500, 21)
    device = gpubackend.resolve_device()
    console = Console(width=160)
    console.print(f"target device: {gpubackend.devices.describe_device(device)}")

    model = small_model()
    point = np.array([0.1, 0.2])
    small = logp_dlogp_functions(model)
    observed = np.asarray(model.rvs_to_values[model.observed_RVs[0]].data)
    hand_small = hand_jit(jax.value_and_grad(hand_small_logp(observed)), device, 1)

    ar1 = scan_model()
    scan = logp_dlogp_functions(ar1)
    scan_point = np.array([0.3, -0.2])
    hand_scan = jaxified_by_hand(scan["JAX_GPU"]._pytensor_function, device)

    inputs, outputs, optimize_args = optimize_graph()
    optimize = {mode: pytensor.function(inputs, outputs, mode=mode) for mode in MODES}
    hand_optimize = jaxified_by_hand(optimize["JAX_GPU"], device)

    inputs, outputs, indexed_args = indexed_graph()
    indexed = {mode: pytensor.function(inputs, outputs, mode=mode) for mode in MODES}
    hand_indexed = jaxified_by_hand(indexed["JAX_GPU"], device)

    graphs = {
        "PyMC logp_dlogp_function, small model": time_graph(
            "small", small, hand_small, (point,), number, repeat
        ),
        "the same, called as PyMC's NUTS calls it (the compiled function)": time_graph(
            "small, compiled", compiled_functions(small), hand_small, (point,), number, repeat
        ),
        "PyMC logp_dlogp_function, AR(1) logp holding a Scan": time_graph(
            "scan", scan, hand_scan, (scan_point,), number, repeat
        ),
        "minimize (BFGS) and its gradient": time_graph(
            "optimize", optimize, hand_optimize, optimize_args, number // 5, repeat
        ),
        "gather at run-time positions (JAX_GPU checks them)": time_graph(
            "indexed", indexed, hand_indexed, indexed_args, number, repeat
        ),
    }
    table = Table(title="per call, numpy in and numpy out (median)")
    for column in ("graph", *MODES, "hand jit", "NUMPY / hand", "NUMPY / JAX", "goal"):
        table.add_column(column)
    for label, medians in graphs.items():
        table.add_row(
            label,
            *(format_seconds(medians[mode]) for mode in (*MODES, "hand jit")),
            f"{medians['JAX_GPU_NUMPY'] / medians['hand jit']:.2f}x",
            f"{medians['JAX_GPU_NUMPY'] / medians['JAX']:.2f}x",
            "<= 1.25x, <= 1.0x",
        )
    console.print(table)

    # Device-resident: jax.Array in and out, blocked on, against the hand jit with the same arrays.
    # A caller that chains on the device compiles with pytensor.function itself: the same graph.
    resident_point = jax.device_put(point, device)
    fgraph = small["JAX_GPU"]._pytensor_function.maker.fgraph
    resident_fn = pytensor.function(fgraph.inputs, fgraph.outputs, mode="JAX_GPU")
    resident_indexed = [jax.device_put(value, device) for value in indexed_args]
    resident = interleaved_medians(
        {
            "JAX_GPU": lambda: jax.block_until_ready(resident_fn(resident_point)),
            "hand jit": lambda: jax.block_until_ready(hand_small(resident_point)),
            "JAX_GPU indexed": lambda: jax.block_until_ready(indexed["JAX_GPU"](*resident_indexed)),
            "hand jit indexed": lambda: jax.block_until_ready(hand_indexed(*resident_indexed)),
        },
        number=number,
        repeat=repeat,
    )
    print_ratio_table(
        "device-resident call, jax.Array in and out (median); ratio = JAX_GPU / hand jit",
        [
            (
                "small model's logp_dlogp, JAX_GPU / hand jit",
                resident["JAX_GPU"],
                resident["hand jit"],
                "<= 1.1x",
            ),
            (
                "gather at run-time positions: JAX_GPU (checked, one read) / hand jit (clamps)",
                resident["JAX_GPU indexed"],
                resident["hand jit indexed"],
                "the check's cost",
            ),
        ],
    )

    print_ratio_table(
        "a call updating a shared variable (median); ratio = with its lock / without",
        [("u + 1, JAX_GPU", *update_lock_cost(number, repeat), "about 0.1 µs more")],
    )

    draws, tune = (300, 200) if args.quick else (1000, 500)
    sampling = {mode: nuts_sampling_time(model, mode, draws, tune, 2) for mode in MODES}
    # The floor of any JAX function in PyMC's sampler: its leapfrog steps on the hand jit.
    sampling["hand jit"] = nuts_sampling_time(model, "NUMBA", draws, tune, 2, hand=hand_small)
    table = Table(title=f"PyMC NUTS, small model, {tune} tune + {draws} draws (best of 2)")
    for column in ("mode", "sampling time", "/ NUMBA", "/ stock JAX", "/ hand jit"):
        table.add_column(column)
    for mode, seconds in sampling.items():
        table.add_row(
            mode,
            format_seconds(seconds),
            f"{seconds / sampling['NUMBA']:.2f}x",
            f"{seconds / sampling['JAX']:.2f}x",
            f"{seconds / sampling['hand jit']:.2f}x",
        )
    console.print(table)
    console.print(
        "goal: JAX_GPU_NUMPY <= 1.5x NUMBA and < 1.0x stock JAX (hand jit: the same NUTS with a "
        "hand-written jax.jit as its logp and gradient)"
    )


if __name__ == "__main__":
    main()
