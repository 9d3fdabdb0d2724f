"""Integer indices out of range under JAX_GPU: the reference's ``IndexError``, not JAX's clamp.

With ``x`` of length 3, ``x[5]`` is an ``IndexError`` for NumPy, PyTensor's C
and Python code and Numba. JAX clamps the read to ``x[2]`` and drops the
write. JAX_GPU checks every integer index known only at run time and reads the
check back with the call; indices known while tracing are checked then, and
cost no read (issue 27, item 2).
"""

from __future__ import annotations

import jax
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.gradient import jacobian
from pytensor.scan.utils import until
from pytensor.tensor.optimize import minimize, root

from gpubackend.conformance.checks import count_host_reads

x = pt.vector("x")
X = pt.matrix("X")
i = pt.lscalar("i")
iv = pt.lvector("iv")
jv = pt.lvector("jv")
X_VALUE = np.arange(12.0).reshape(3, 4)
ROWS = np.array([True, False, True])


def _trace_from_sum(x):
    """A while-Scan counting up from ``x.sum()`` (3 for ``arange(3)``) past 5: three steps."""

    def count(s):
        new = s + 1.0
        return new, until(new > 5.0)

    return pytensor.scan(count, outputs_info=[x.sum()], n_steps=50, return_updates=False)


# name: (inputs, output, bad index values, good index values); x has length 3, X shape (3, 4).
GRAPHS = {
    "x[i]": ([x, i], x[i], [5, -4], [-3, 2]),
    "set_subtensor(x[i])": ([x, i], pt.set_subtensor(x[i], 9.0), [3, -4], [-1, 0]),
    "inc_subtensor(x[i])": ([x, i], pt.inc_subtensor(x[i], 1.0), [7], [1]),
    "X[:, i]": ([X, i], X[:, i], [4, -5], [3, -4]),
    "X[1:, i]": ([X, i], X[1:, i], [4], [-1]),
    "x[iv]": ([x, iv], x[iv], [[0, 5], [-4, 0]], [[0, -3], [2, 2]]),
    "inc_subtensor(x[iv])": ([x, iv], pt.inc_subtensor(x[iv], 1.0), [[0, 5]], [[0, -3]]),
    "set_subtensor(x[iv])": ([x, iv], pt.set_subtensor(x[iv], 9.0), [[3]], [[-1]]),
    "take(X, iv, axis=1)": ([X, iv], pt.take(X, iv, axis=1), [[4]], [[3, -4]]),
    "X[iv, jv]": ([X, iv, jv], X[iv, jv], [([0], [4]), ([3], [0])], [([2], [3])]),
    # A constant mask indexes the first axis, so the integer index is checked against the second.
    "X[mask, i]": ([X, i], X[ROWS, i], [4], [3]),
    # Inside inner graphs (issue 27): a Scan's body and an OpFromGraph clamped silently.
    "scan body x[i + k]": (
        [x, i],
        pytensor.scan(
            lambda k, x, i: x[i + k],
            sequences=[pt.arange(2)],
            non_sequences=[x, i],
            return_updates=False,
        ).sum(),
        [2, -4],
        [1, -3],
    ),
    "scan body set_subtensor(x[i])": (
        [x, i],
        pytensor.scan(
            lambda k, x, i: pt.set_subtensor(x[i], k).sum(),
            sequences=[pt.arange(2.0)],
            non_sequences=[x, i],
            return_updates=False,
        ),
        [3],
        [-1],
    ),
    # A while-Scan's trace reaching sort (no length rule) specialises the graph on its step count.
    "x[i] beside a specialised while-Scan": (
        [x, i],
        pt.sort(_trace_from_sum(x)) + x[i],
        [5],
        [2],
    ),
    "sort(while-Scan trace)[i]": ([x, i], pt.sort(_trace_from_sum(x))[i], [3, -4], [2, -3]),
    "OpFromGraph x[i]": ([x, i], OpFromGraph([x, i], [x[i] * 2])(x, i), [5], [2]),
    "OpFromGraph in a scan body": (
        [x, iv],
        pytensor.scan(
            lambda k, x, iv: OpFromGraph([x, iv], [x[iv].sum()])(x, iv) * k,
            sequences=[pt.arange(2.0)],
            non_sequences=[x, iv],
            return_updates=False,
        ),
        [[0, 3]],
        [[0, -3]],
    ),
}


def _arguments(inputs, index_values):
    values = [X_VALUE if inputs[0] is X else np.arange(3.0)]
    indices = index_values if len(inputs) > 2 else (index_values,)
    return values + [np.asarray(value, dtype=np.int64) for value in indices]


@pytest.mark.parametrize("mode", ["JAX_GPU", "JAX_GPU_NUMPY"])
@pytest.mark.parametrize("name", list(GRAPHS))
def test_an_index_out_of_range_raises_the_references_error(name, mode, target_device):
    inputs, output, bad, good = GRAPHS[name]
    reference = pytensor.function(inputs, output, mode="FAST_COMPILE")
    checked = pytensor.function(inputs, output, mode=mode)
    for index_values in bad:
        arguments = _arguments(inputs, index_values)
        with pytest.raises(IndexError, match="out of bounds"):
            reference(*arguments)
        with pytest.raises(IndexError, match="out of bounds for axis"):
            checked(*arguments)
    for index_values in good:
        arguments = _arguments(inputs, index_values)
        np.testing.assert_array_equal(np.asarray(checked(*arguments)), reference(*arguments))


def test_an_index_known_while_tracing_is_checked_then():
    # x[len(x)]: the index is shape arithmetic, concrete while tracing.
    output = x[x.shape[0]]
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        pytensor.function([x], output, mode="FAST_COMPILE")(np.arange(3.0))
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        pytensor.function([x], output, mode="JAX_GPU")(np.arange(3.0))


def test_a_failed_index_check_leaves_shared_variables_as_they_were():
    state = pytensor.shared(np.arange(3.0), name="state")
    write = pytensor.function(
        [i], [], updates={state: pt.set_subtensor(state[i], 9.0)}, mode="JAX_GPU"
    )
    with pytest.raises(IndexError, match="out of bounds for axis 0 of state"):
        write(3)
    np.testing.assert_array_equal(state.get_value(), [0.0, 1.0, 2.0])
    write(-1)
    np.testing.assert_array_equal(state.get_value(), [0.0, 1.0, 9.0])


@pytest.mark.parametrize(
    ("name", "output", "reads"),
    [
        ("x[i]", x[i], 1),
        ("x[iv]", x[iv], 1),
        ("x[-1]", x[-1], 0),
        ("x[arange(len(x))]", x[pt.arange(x.shape[0])], 0),
        ("x[len(x) - 1]", x[x.shape[0] - 1], 0),
    ],
)
def test_only_indices_known_at_run_time_cost_a_read(name, output, reads, target_device):
    inputs = [x, *(value for value in (i, iv) if value in pytensor.graph.ancestors([output]))]
    fn = pytensor.function(inputs, output, mode="JAX_GPU")
    arguments = [np.arange(3.0), *([0] if i in inputs else []), *([[0, 1]] if iv in inputs else [])]
    resident = [jax.device_put(np.asarray(value), target_device) for value in arguments]
    fn(*resident)
    counted = count_host_reads(fn, resident, target_device)
    assert not counted.implicit, counted
    assert counted.explicit == reads, counted


def test_an_inner_graph_that_indexes_costs_one_read_and_keeps_the_outputs_on_the_device(
    target_device,
):
    inputs, output, _, _ = GRAPHS["scan body x[i + k]"]
    fn = pytensor.function(inputs, output, mode="JAX_GPU")
    resident = [jax.device_put(np.asarray(value), target_device) for value in (np.arange(3.0), 1)]
    fn(*resident)
    counted = count_host_reads(fn, resident, target_device)
    assert not counted.implicit, counted
    assert counted.explicit == 1, counted
    assert fn(*resident).devices() == {target_device}


@pytest.mark.parametrize("name", ["x[t] over arange(len(x))", "jacobian"])
def test_a_scan_over_arange_of_the_length_is_proven_in_range_and_reads_nothing(name, target_device):
    """A for-Scan's sequence known while tracing has a known range: its entries used as indices
    in the body are proven then. PyTensor's jacobian is such a Scan, in every gradient of an
    optimize op: without the proof each of its calls paid a read."""
    outputs = {
        "x[t] over arange(len(x))": pytensor.scan(
            lambda t, x: x[t] * 2,
            sequences=[pt.arange(x.shape[0])],
            non_sequences=[x],
            return_updates=False,
        ),
        "jacobian": jacobian(pt.exp(x) * x.sum(), x, vectorize=False),
    }
    fn = pytensor.function([x], outputs[name], mode="JAX_GPU")
    value = np.array([0.5, -1.0, 2.0])
    want = pytensor.function([x], outputs[name], mode="FAST_COMPILE")(value)
    np.testing.assert_allclose(np.asarray(fn(value)), want)
    resident = [jax.device_put(value, target_device)]
    counted = count_host_reads(fn, resident, target_device)
    assert not counted.implicit, counted
    assert counted.explicit == 0, counted


def test_a_constant_sequence_with_an_entry_out_of_range_is_checked_at_run_time():
    rows = pytensor.scan(
        lambda t, x: x[t],
        sequences=[pt.as_tensor(np.array([0, 5]))],
        non_sequences=[x],
        return_updates=False,
    )
    fn = pytensor.function([x], rows, mode="JAX_GPU")
    with pytest.raises(IndexError, match="out of bounds for axis 0"):
        fn(np.arange(3.0))
    np.testing.assert_array_equal(np.asarray(fn(np.arange(6.0))), [0.0, 5.0])


def test_a_failed_inner_index_check_leaves_shared_variables_as_they_were():
    state = pytensor.shared(np.arange(3.0), name="state")
    rows = pytensor.scan(
        lambda k, state, i: state[i + k],
        sequences=[pt.arange(2)],
        non_sequences=[state, i],
        return_updates=False,
    )
    write = pytensor.function([i], [], updates={state: state + rows.sum()}, mode="JAX_GPU")
    with pytest.raises(IndexError, match="out of bounds for axis 0"):
        write(2)
    np.testing.assert_array_equal(state.get_value(), [0.0, 1.0, 2.0])
    write(1)
    np.testing.assert_array_equal(state.get_value(), [3.0, 4.0, 5.0])


OBJECTIVES_THAT_INDEX = {
    # The objective reads x[i] of the variable solved for: the index is inside the op's inner graph.
    "minimize": lambda: minimize(((x - 1.0) ** 2).sum() + x[i] ** 2, x)[0],
    "root": lambda: root(x - 0.5 * x[i] - 1.0, x)[0],
}


@pytest.mark.parametrize("name", list(OBJECTIVES_THAT_INDEX))
def test_an_index_out_of_range_in_an_optimize_objective_raises_the_references_error(
    name, target_device
):
    """optimistix evaluated the objective with the index clamped (x[5] read x[2]) and returned a
    solution; the objective's indices are now checked once, at the solution."""
    solution = OBJECTIVES_THAT_INDEX[name]()
    reference = pytensor.function([x, i], solution, mode="FAST_COMPILE")
    checked = pytensor.function([x, i], solution, mode="JAX_GPU")
    start = np.full(3, 0.5)
    for bad in (5, -4):
        with pytest.raises(IndexError, match="out of bounds"):
            reference(start, bad)
        with pytest.raises(IndexError, match="out of bounds for axis 0"):
            checked(start, bad)
    np.testing.assert_allclose(np.asarray(checked(start, -3)), reference(start, -3), atol=1e-5)


def test_stock_jax_keeps_jaxs_clamping():
    """mode="JAX" with the plugin keeps JAX's semantics: a check there would cost a host
    callback per call (README, "Index bounds")."""
    clamped = pytensor.function([x, i], x[i], mode="JAX")
    assert float(clamped(np.arange(3.0), 5)) == 2.0


# Issue 43: literal indices. x has length 3 (known only at run time, or static for xs).
xs = pt.tensor("xs", shape=(3,), dtype="float64")
n = pt.lscalar("n")
LITERAL_INDICES = {
    "x[3]": ([x], x[3]),
    "x[-4]": ([x], x[-4]),
    "take(x, 9)": ([x], pt.take(x, 9)),
    "(x[3] + x).sum()": ([x], (x[3] + x).sum()),
    "set_subtensor(x[3], 9)": ([x], pt.set_subtensor(x[3], 9.0)),
    "inc_subtensor(x[3], 1)": ([x], pt.inc_subtensor(x[3], 1.0)),
    "xs[3], static shape": ([xs], xs[3]),
    "scan body v[5]": (
        [x],
        pytensor.scan(
            lambda k, total, v: total + v[5] * k,
            sequences=[pt.arange(2.0)],
            outputs_info=[pt.constant(0.0, dtype="float64")],
            non_sequences=[x],
            return_updates=False,
        ),
    ),
}


def _while_scan_traces(n_steps):
    """A while-Scan's sit-sot trace ``ys`` and nit-sot trace ``zs`` (PyTensor's
    test_while_scan_taps_and_map): ``ys[-1]`` of no step reads the initial state, ``zs[-1]``
    raises."""
    return pytensor.scan(
        lambda previous: ((previous + 1.0, previous * 2.0), until(previous >= 99.0)),
        outputs_info=[x.sum(), None],
        n_steps=n_steps,
        return_updates=False,
    )


X_ROWS = pt.matrix("X_ROWS")
# name: (inputs, output, arguments of a call that takes no step)
EMPTY_TRACES = {
    "while-Scan of n steps, zs[-1]": ([x, n], _while_scan_traces(n)[1][-1], [np.arange(3.0), 0]),
    "while-Scan of n steps, ys[-1]": ([x, n], _while_scan_traces(n)[0][-1], [np.arange(3.0), 0]),
    "while-Scan of iv[0] steps, zs[-1]": (
        [x, iv],
        _while_scan_traces(iv[0])[1][-1],
        [np.arange(3.0), np.array([0])],
    ),
    "map over no rows, [-1]": (
        [X_ROWS],
        pytensor.map(lambda row: pt.sort(row)[0], sequences=[X_ROWS], return_updates=False)[-1],
        [np.zeros((0, 3))],
    ),
    "scan of n steps, nit-sot [-1]": (
        [x, n],
        pytensor.scan(
            lambda total: (total * 2.0, total + 1.0),
            outputs_info=[x.sum(), None],
            n_steps=n,
            return_updates=False,
        )[1][-1],
        [np.arange(3.0), 0],
    ),
}


def _reference_outcome(inputs, output, arguments):
    try:
        return pytensor.function(inputs, output, mode="FAST_COMPILE")(*arguments)
    except IndexError as error:
        return error


@pytest.mark.parametrize("mode", ["JAX_GPU", "JAX"])
@pytest.mark.parametrize("name", list(LITERAL_INDICES))
def test_a_literal_index_out_of_range_raises_the_references_error_while_tracing(name, mode):
    """Constant indices were left to JAX, which clamps: ``x[3]`` read ``x[2]``, a write there was
    dropped. They are checked while tracing, where the length is concrete, on both JAX paths."""
    inputs, output = LITERAL_INDICES[name]
    with pytest.raises(IndexError, match="out of bounds"):
        pytensor.function(inputs, output, mode="FAST_COMPILE")(np.arange(3.0))
    with pytest.raises(IndexError, match=r"index -?[0-9]+ is out of bounds for axis 0 with size 3"):
        pytensor.function(inputs, output, mode=mode)(np.arange(3.0))


@pytest.mark.parametrize("mode", ["JAX_GPU", "JAX", "NUMBA"])
@pytest.mark.parametrize("name", list(EMPTY_TRACES))
def test_the_last_entry_of_an_empty_trace_is_the_references(name, mode):
    """A Scan of no step returns its nit-sots empty (``Scan.perform``): their last entry is an
    IndexError, where JAX read a buffer's unwritten entry (0.0) or failed stock's assertion, and
    NUMBA read one (0.0). A sit-sot's last entry is then its initial state, in every mode."""
    inputs, output, arguments = EMPTY_TRACES[name]
    expected = _reference_outcome(inputs, output, arguments)
    fn = pytensor.function(inputs, output, mode=mode)
    if not isinstance(expected, IndexError):
        np.testing.assert_array_equal(np.asarray(fn(*arguments)), expected)
        return
    raised = IndexError if mode != "JAX" else (IndexError, jax.errors.JaxRuntimeError)
    with pytest.raises(raised, match=r"IndexError|out of bounds"):
        fn(*arguments)
    # With steps taken, the reference's value.
    taking_steps = [arguments[0] if len(arguments[0]) else np.ones((2, 3)), *arguments[1:]]
    taking_steps = [
        np.asarray(value) + (1 if position else 0) for position, value in enumerate(taking_steps)
    ]
    np.testing.assert_array_equal(
        np.asarray(fn(*taking_steps)), _reference_outcome(inputs, output, taking_steps)
    )


@pytest.mark.parametrize("mode", ["JAX_GPU", "JAX", "NUMBA"])
@pytest.mark.parametrize("static_row", [False, True], ids=["row of unknown length", "row of 3"])
def test_a_scan_of_no_step_keeps_the_lengths_its_type_knows(static_row, mode):
    """A map over no rows returns its nit-sot empty, each other axis as long as the output's type
    says (PyTensor's C, NUMBA and stock JAX Scans: ``(0, 3)`` where the row is known to have 3
    entries), and 0 where it does not know (``Scan.perform``); an empty nit-sot of every axis 0
    contradicted a type of 3 columns."""

    def row(values):
        doubled = pt.sort(values) * 2.0
        return pt.specify_shape(doubled, (3,)) if static_row else doubled

    mapped = pytensor.map(row, sequences=[X_ROWS], return_updates=False)
    assert mapped.type.shape[1:] == ((3,) if static_row else (None,))
    got = pytensor.function([X_ROWS], mapped, mode=mode)(np.zeros((0, 3)))
    assert got.shape == (0, 3 if static_row else 0)
    if not static_row:
        reference = pytensor.function([X_ROWS], mapped, mode="FAST_COMPILE")(np.zeros((0, 3)))
        assert got.shape == reference.shape


@pytest.mark.parametrize("mode", ["JAX_GPU", "JAX"])
def test_inner_graphs_compile_with_rewrite_errors_raised(mode):
    """gpubackend's rewrites also run on the inner graphs of Scans and OpFromGraphs, which have no
    updates: the generator-update rewrite read their missing update mapping and failed (logged as
    a rewrite error, raised under ``on_opt_error="raise"``, as PyTensor's own tests run)."""
    start = pt.scalar("start")
    trace = pytensor.scan(
        lambda value: value + 1.0, outputs_info=[start], n_steps=3, return_updates=False
    )
    twice = OpFromGraph([start], [start * 2.0])(start)
    with pytensor.config.change_flags(on_opt_error="raise"):
        fn = pytensor.function([start], [trace, twice], mode=mode)
    got_trace, got_twice = fn(1.0)
    np.testing.assert_array_equal(got_trace, [2.0, 3.0, 4.0])
    assert float(got_twice) == 2.0


@pytest.mark.parametrize("name", ["x[-1]", "xs[2], static shape", "while-Scan zs[-1] of n steps"])
def test_literal_indices_in_range_cost_no_read(name, target_device):
    output, arguments = {
        "x[-1]": (x[-1], [np.arange(3.0)]),
        "xs[2], static shape": (xs[2], [np.arange(3.0)]),
        "while-Scan zs[-1] of n steps": (_while_scan_traces(n)[1][-1], [np.arange(3.0), 4]),
    }[name]
    inputs = [xs if "static" in name else x, *([n] if len(arguments) > 1 else [])]
    fn = pytensor.function(inputs, output, mode="JAX_GPU")
    # n sizes the loop: JAX_GPU specialises on it, as a Python int.
    resident = [jax.device_put(arguments[0], target_device), *arguments[1:]]
    fn(*resident)
    counted = count_host_reads(fn, resident, target_device)
    assert not counted.implicit, counted
    assert counted.explicit == 0, counted
