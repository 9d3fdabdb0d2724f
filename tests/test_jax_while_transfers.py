"""While-Scans under JAX: host reads per call, runs per call, threads, donation, pmap of grad, stock
linkers.

A while-Scan's trace has a data-dependent length. Graphs whose outputs have
static shapes keep it on the device as a bounded buffer (zero reads, any JAX
linker); only an output of that length makes JAX_GPU read the step counts,
once per call (`jax.device_get`). Reads are counted by the conformance
suite's `count_host_reads`, whose CPU method is itself tested here against
deliberate reads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.scan.utils import until

from gpubackend import DataDependentLengthError
from gpubackend.conformance.checks import count_host_reads
from gpubackend.introspection import specialised_on_step_counts
from tests.jax_lowering_harness import backend_compiles, pmapped
from tests.test_jax_jaxified import jaxified

LIMITS = (10.0, 1000.0, 1e300)


def _doubling(n_steps: int = 50):
    x0, limit = pt.scalar("x0"), pt.scalar("limit")

    def double(x, limit):
        doubled = x * 2
        return doubled, until(doubled > limit)

    xs = pytensor.scan(
        double, outputs_info=[x0], non_sequences=[limit], n_steps=n_steps, return_updates=False
    )
    return x0, limit, xs


def _graphs():
    x0, limit, xs = _doubling()
    return (x0, limit), {
        "xs[-1]": xs[-1],
        "xs[-2]": xs[-2],
        "xs[-3]": xs[-3],
        "xs.sum()": xs.sum(),
        # Slicing a run-time length brings comparisons (bool results) and shape assertions.
        "xs[:-1].sum()": xs[:-1].sum(),
        "grad(xs[:-1].sum(), x0)": pytensor.grad(xs[:-1].sum(), x0),
        "grad(xs[-1], x0)": pytensor.grad(xs[-1], x0),
        "grad(xs.sum(), x0)": pytensor.grad(xs.sum(), x0),
        "full trace": xs,
    }


# Explicit device-to-host reads per warm call; None: refused when the call traces. xs[-3] has a real
# run-time condition (a loop that stops after one step leaves one entry: the reference raises
# IndexError), which JAX_GPU reads back and stock JAX checks inside the computation.
EXPECTED_READS = {
    "JAX_GPU": {"full trace": 1, "xs[-3]": 1},
    "JAX": {"full trace": None},
}


def _resident(values, target_device):
    return [jax.device_put(np.asarray(value), target_device) for value in values]


@pytest.mark.parametrize("mode", ["JAX_GPU", "JAX"])
@pytest.mark.parametrize("name", list(_graphs()[1]))
def test_host_reads_per_call_of_while_scan_graphs(mode, name, target_device):
    inputs, graphs = _graphs()
    expected = EXPECTED_READS[mode].get(name, 0)
    if expected is None:
        # Refused when the call traces, where the bounds show the length is not known.
        refused = pytensor.function(list(inputs), graphs[name], mode=mode)
        with pytest.raises(DataDependentLengthError, match="data-dependent shape"):
            refused(0.3, LIMITS[0])
        with pytest.raises(DataDependentLengthError, match="data-dependent shape"):
            jax.jit(jaxified(list(inputs), [graphs[name]]))(0.3, LIMITS[0])
        return
    reference = pytensor.function(list(inputs), graphs[name], mode="FAST_COMPILE")
    if mode == "JAX":
        # What PyMC's JAX samplers run: the stock lowering under jax.jit (mode="JAX"'s
        # own Function copies inputs through NumPy on every call, whatever the graph).
        graph_fn = jax.jit(jaxified(list(inputs), [graphs[name]]))

        def fn(*values):
            return graph_fn(*values)[0]

        stock = pytensor.function(list(inputs), graphs[name], mode="JAX")
        for limit in LIMITS:
            np.testing.assert_allclose(
                np.asarray(stock(0.3, limit)), reference(0.3, limit), rtol=1e-12
            )
    else:
        fn = pytensor.function(list(inputs), graphs[name], mode=mode)
    for limit in LIMITS:
        values = [0.3, limit]
        np.testing.assert_allclose(np.asarray(fn(*values)), reference(*values), rtol=1e-12)
    resident = _resident([0.3, LIMITS[-1]], target_device)
    fn(*resident)  # warm for device-array inputs
    reads = count_host_reads(fn, resident, target_device)
    assert not reads.implicit, reads
    assert reads.explicit == expected, reads


_square = jax.jit(lambda value: value * value)


def _square_read_by_numpy(x):
    squared = _square(x)
    np.asarray(squared).item()
    return squared


def _square_read_by_bool(x):
    squared = _square(x)
    bool(squared)
    return squared


@pytest.mark.parametrize(
    ("call", "explicit", "implicit"),
    [
        (_square, 0, False),
        (lambda x: jax.device_get(_square(x)), 1, False),
        (_square_read_by_numpy, 0, True),
        (_square_read_by_bool, 0, True),
    ],
    ids=["no read", "device_get", "np.asarray", "bool"],
)
def test_host_read_counting_catches_deliberate_reads(call, explicit, implicit, target_device):
    x = jax.device_put(np.asarray(3.0), target_device)
    call(x)
    reads = count_host_reads(call, [x], target_device)
    assert reads.explicit == explicit, reads
    assert bool(reads.implicit) == implicit, reads


def test_an_accelerators_refused_read_is_reported_as_an_implicit_read():
    """On a GPU, JAX's guard refuses an implicit read and stops the call; the count reports that
    read rather than failing (a stand-in accelerator here: the test raises the guard's refusal)."""

    class Accelerator:
        platform = "gpu"

    def refused(x):
        raise jax.errors.JaxRuntimeError(
            "INVALID_ARGUMENT: Disallowed device-to-host transfer: shape=(), dtype=F64"
        )

    def other_failure(x):
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: out of memory")

    reads = count_host_reads(refused, [np.asarray(3.0)], Accelerator())
    assert reads.explicit == 0 and "Disallowed device-to-host transfer" in reads.implicit, reads
    with pytest.raises(jax.errors.JaxRuntimeError, match="RESOURCE_EXHAUSTED"):
        count_host_reads(other_failure, [np.asarray(3.0)], Accelerator())


def test_full_trace_runs_the_graph_once_per_call_whatever_the_count(target_device):
    """The trace comes back bounded and is cut to its length after the one read: no run or compile
    per count, but one run per rung of the ladder a call climbs above the last call's (the 50
    steps to 1e300 need the second rung; the calls after it start there)."""
    (x0, limit), graphs = _graphs()
    fn = pytensor.function([x0, limit], graphs["full trace"], mode="JAX_GPU")
    assert not specialised_on_step_counts(fn)
    reads = []
    for limit_value in (10.0, 10.0, 1000.0, 1000.0, 10.0, 1e300, 1e300, 10.0):
        reads.append(
            count_host_reads(
                fn, _resident([0.3, limit_value], target_device), target_device
            ).explicit
        )
    # Each run reads once, so reads per call = runs per call.
    assert reads == [1, 1, 1, 1, 1, 2, 1, 1]


def _reference_values(inputs, output, limits):
    reference = pytensor.function(list(inputs), output, mode="FAST_COMPILE")
    return {limit: reference(0.3, limit) for limit in limits}


def _four_threads(call_for_thread, want, limits) -> None:
    def worker(thread: int) -> list[bool]:
        call = call_for_thread()
        matches = []
        for index in range(12):
            limit = limits[(thread + index) % len(limits)]
            got = np.asarray(call(0.3, limit))
            matches.append(
                got.shape == np.shape(want[limit])
                and bool(np.allclose(got, want[limit], rtol=1e-12))
            )
        return matches

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(worker, range(4)))
    assert all(all(matches) for matches in results), results


THREAD_LIMITS = [10.0, 1000.0, 1e6, 1e300]


@pytest.mark.parametrize("name", ["full trace", "grad(xs.sum(), x0)"])
def test_one_compiled_callable_called_from_four_threads_at_once(name, target_device):
    """The linker's jitted callable is shared (a PyTensor Function's input storage is not: see the
    next test)."""
    inputs, graphs = _graphs()
    jitted = pytensor.function(list(inputs), graphs[name], mode="JAX_GPU").vm.jit_fn

    def call(x0, limit):
        result = jitted(*_resident([x0, limit], target_device))
        return result[0] if isinstance(result, list | tuple) else result

    _four_threads(
        lambda: call, _reference_values(inputs, graphs[name], THREAD_LIMITS), THREAD_LIMITS
    )


@pytest.mark.parametrize("name", ["full trace", "grad(xs.sum(), x0)"])
def test_function_copies_used_from_four_threads(name):
    inputs, graphs = _graphs()
    fn = pytensor.function(list(inputs), graphs[name], mode="JAX_GPU")
    _four_threads(fn.copy, _reference_values(inputs, graphs[name], THREAD_LIMITS), THREAD_LIMITS)


def test_updates_are_donated_next_to_a_bounded_while_scan(target_device):
    x0, limit, xs = _doubling()
    acc = pytensor.shared(np.zeros(3), name="acc")
    fn = pytensor.function([x0, limit], xs.sum(), updates={acc: acc + xs.sum()}, mode="JAX_GPU")
    values = _resident([0.3, 10.0], target_device)
    fn(*values)
    previous = acc.get_value(borrow=True)
    fn(*values)
    assert previous.is_deleted()
    np.testing.assert_allclose(np.asarray(acc.get_value()), 2 * np.full(3, 37.8))


def test_pytensor_gradient_of_a_while_scan_runs_in_a_stock_jaxified_graph():
    """nutpie's gradient_backend="pytensor" and get_jaxified_graph: PyTensor's gradient needs the
    trace."""
    x0, limit, xs = _doubling()
    cost = (xs**2).sum()
    outputs = [cost, pytensor.grad(cost, x0)]
    graph_fn = jax.jit(jaxified([x0, limit], outputs))
    want = _reference_values([x0, limit], outputs, LIMITS)
    for limit_value in LIMITS:
        got = graph_fn(0.3, limit_value)
        np.testing.assert_allclose(
            [np.asarray(value) for value in got], want[limit_value], rtol=1e-12
        )


def test_pmap_of_jax_grad_through_a_newton_while_scan():
    """numpyro's default chain method pmaps jax.grad of the logp (issue: closure-converted
    function)."""
    a = pt.scalar("a")

    def newton(x, a):
        new_x = x - (x**2 - a) / (2 * x)
        return new_x, until(pt.abs(new_x - x) < 1e-12)

    xs = pytensor.scan(
        newton, outputs_info=[pt.ones(())], non_sequences=[a], n_steps=50, return_updates=False
    )
    logp = -((xs[-1] - 1.5) ** 2)
    graph_fn = jaxified([a], [logp])
    chains = jnp.asarray([2.0, 3.0])
    got = pmapped(jax.grad(lambda value: graph_fn(value)[0]))(chains)
    # d/da of -(sqrt(a) - 1.5)^2 = -(sqrt(a) - 1.5) / sqrt(a)
    want = -(np.sqrt([2.0, 3.0]) - 1.5) / np.sqrt([2.0, 3.0])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-8)


def _fibonacci_until():
    f0, limit = pt.vector("f0"), pt.scalar("limit")

    def fibonacci(f_tm2, f_tm1, limit):
        f_t = f_tm1 + f_tm2
        return [f_t, 2 * f_t], until(f_t.sum() > limit)

    fs, doubled = pytensor.scan(
        fibonacci,
        outputs_info=[{"initial": f0, "taps": [-2, -1]}, None],
        non_sequences=[limit],
        n_steps=30,
        return_updates=False,
    )
    graphs = {
        "fs.sum()": fs.sum(),
        "fs[::-1][0]": fs[::-1][0],
        "doubled.max()": doubled.max(),
        "doubled.mean()": doubled.mean(),
        "grad through mit-sot and nit-sot": pytensor.grad((fs**2).sum() + doubled.sum(), f0),
    }
    return [f0, limit], graphs, [[np.array([1.0, 1.0]), limit] for limit in (1.0, 2.5, 100.0, 1e9)]


def _accumulate_until():
    seq, v = pt.matrix("seq"), pt.vector("v")

    def accumulate(x_t, total, v):
        new_total = total + x_t * v
        return new_total, until(new_total.sum() > 3.0)

    totals = pytensor.scan(
        accumulate,
        sequences=[seq],
        outputs_info=[pt.zeros_like(v)],
        non_sequences=[v],
        return_updates=False,
    )
    graphs = {
        "totals.sum()": totals.sum(),
        "grad wrt the non-sequence": pytensor.grad((totals**2).sum(), v),
        "grad wrt the sequence": pytensor.grad((totals**2).sum(), seq),
    }
    # 1 and 2 rows: lengths the plan treats as run-time ones turn out static while tracing.
    return [seq, v], graphs, [[np.full((rows, 3), 0.3), np.ones(3)] for rows in (1, 2, 8, 30)]


@pytest.mark.parametrize("mode", ["JAX", "JAX_GPU"])
@pytest.mark.parametrize(
    "family", [_fibonacci_until, _accumulate_until], ids=["mit-sot+nit-sot", "over a sequence"]
)
def test_bounded_traces_match_pytensor_through_their_consumers(family, mode):
    inputs, graphs, cases = family()
    for name, output in graphs.items():
        fn = pytensor.function(inputs, output, mode=mode)
        reference = pytensor.function(inputs, output, mode="FAST_COMPILE")
        assert not specialised_on_step_counts(fn), f"{name}: expected no step specialisation"
        for values in cases:
            np.testing.assert_allclose(
                np.asarray(fn(*values)), reference(*values), rtol=1e-12, err_msg=name
            )


def _counting_past_limit():
    """A loop counting up by one from ``x0`` until past ``limit``, for at most 5000 steps."""
    x0, limit = pt.scalar("x0"), pt.scalar("limit")

    def count(x, limit):
        new_x = x + 1
        return new_x, until(new_x > limit)

    xs = pytensor.scan(
        count, outputs_info=[x0], non_sequences=[limit], n_steps=5000, return_updates=False
    )
    return x0, limit, xs


@pytest.mark.parametrize("mode", ["JAX", "JAX_GPU"])
def test_the_capacity_ladder_climbs_as_far_as_the_loop_needs(mode):
    """Each rung of room (16, 256, 4096 steps, then the bound) is reached by a call that needs it,
    with exact results.

    Under JAX_GPU on the CPU the rungs above 256 are a second computation, run only when the first
    overflows.
    """
    x0, limit, xs = _counting_past_limit()
    outputs = [xs.sum(), xs[:-1].mean(), pytensor.grad((xs**2).sum(), x0)]
    fn = pytensor.function([x0, limit], outputs, mode=mode)
    reference = pytensor.function([x0, limit], outputs, mode="FAST_COMPILE")
    for steps in (3, 16, 17, 200, 256, 257, 3000, 4097, 4999, 5000):
        got, want = fn(0.0, steps - 0.5), reference(0.0, steps - 0.5)
        for value, expected in zip(got, want, strict=True):
            np.testing.assert_allclose(
                np.asarray(value), expected, rtol=1e-12, err_msg=f"{steps} steps"
            )


def test_a_loop_that_stops_early_never_runs_the_rungs_above_256_steps_of_room():
    """Under JAX_GPU a gradient whose loop stops within 256 steps compiles and runs one computation,
    whatever its bound: on the CPU the rungs above are a second one, run only when the first
    overflowed (dispatched on every call, it would map buffers sized for the bound every call)."""
    x0, limit, xs = _counting_past_limit()
    gradient = pytensor.grad((xs**2).sum(), x0)
    fn = pytensor.function([x0, limit], gradient, mode="JAX_GPU")
    reference = pytensor.function([x0, limit], gradient, mode="FAST_COMPILE")
    with backend_compiles() as compiled:
        for steps in (3, 200, 3, 256):
            np.testing.assert_allclose(
                np.asarray(fn(0.0, steps - 0.5)), reference(0.0, steps - 0.5), rtol=1e-12
            )
    assert len(compiled) == 1, compiled
    np.testing.assert_allclose(np.asarray(fn(0.0, 3000.5)), reference(0.0, 3000.5), rtol=1e-12)


@pytest.mark.parametrize("outputs", ["device", "numpy"])
def test_a_trace_reaching_an_op_without_a_length_rule_is_seen_specialised(outputs, target_device):
    """``sort(xs)`` needs the trace's exact length: the graph is specialised on its step counts,
    and introspection sees it through the numpy-outputs wrapper too."""
    from gpubackend import jax_gpu_mode

    (x0, limit), graphs = _graphs()
    sorted_trace = pt.sort(graphs["full trace"])
    mode = jax_gpu_mode(device=target_device, outputs=outputs)
    fn = pytensor.function([x0, limit], sorted_trace, mode=mode)
    reference = pytensor.function([x0, limit], sorted_trace, mode="FAST_COMPILE")
    np.testing.assert_allclose(np.asarray(fn(0.3, 10.0)), reference(0.3, 10.0), rtol=1e-12)
    assert specialised_on_step_counts(fn)
