"""Scan under JAX and JAX_GPU: while-loops, lengths computed from input shapes, nesting, gradients.

Each graph is compared with the FAST_COMPILE backend; `compile_checked` also
checks that linking and calling neither rewrite nor compile PyTensor graphs and
that the user's inner-graph ops are left untouched.
"""

import subprocess
import sys

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.conditional.op import ifelse
from pytensor.graph.traversal import applys_between
from pytensor.raise_op import CheckAndRaise
from pytensor.scan.op import Scan
from pytensor.scan.utils import until
from pytensor.tensor.optimize import root

from gpubackend import DataDependentLengthError, ScanSequenceLengthError, SliceBoundNotStaticError
from tests.jax_lowering_harness import JAX_MODES, assert_matches_reference


def _scan(*args, **kwargs):
    return pytensor.scan(*args, return_updates=False, **kwargs)


def _newton_sqrt(x0, a, n_steps=50):
    def step(x, a):
        new_x = x - (x**2 - a) / (2 * x)
        return new_x, until(pt.max(pt.abs(new_x - x)) < 1e-12)

    return _scan(step, outputs_info=[x0], non_sequences=[a], n_steps=n_steps)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_while_scan_sit_sot_stops_at_convergence(mode):
    x0, a = pt.vector("x0"), pt.vector("a")
    xs = _newton_sqrt(x0, a)
    assert_matches_reference([x0, a], [xs[-1]], [np.ones(3), np.array([2.0, 3.0, 40.0])], mode)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_while_scan_mit_sot_nit_sot_and_kept_window(mode):
    f0, limit = pt.vector("f0"), pt.scalar("limit")

    def fibonacci(f_tm2, f_tm1, limit):
        f_t = f_tm1 + f_tm2
        return [f_t, 2 * f_t], until(f_t.sum() > limit)

    fs, doubled = _scan(
        fibonacci,
        outputs_info=[{"initial": f0, "taps": [-2, -1]}, None],
        non_sequences=[limit],
        n_steps=100,
    )
    outputs = [fs[-1], fs[-2], doubled[-1]]
    assert_matches_reference([f0, limit], outputs, [np.array([1.0, 1.0]), np.asarray(100.0)], mode)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_while_scan_over_a_sequence_with_an_untraced_count(mode):
    xs, limit = pt.vector("xs"), pt.scalar("limit")

    def accumulate(x_t, total, count, limit):
        new_total = total + x_t
        return [new_total, count + 1], until(new_total > limit)

    totals, counts = _scan(
        accumulate,
        sequences=[xs],
        outputs_info=[pt.zeros(()), pt.zeros((), dtype="int64")],
        non_sequences=[limit],
    )
    values = [np.linspace(0.5, 3.0, 12), np.asarray(6.0)]
    assert_matches_reference([xs, limit], [totals[-1], counts[-1]], values, mode)
    assert_matches_reference([xs, limit], [totals, counts], values, "JAX_GPU")


@pytest.mark.parametrize("mode", JAX_MODES)
def test_nested_while_scans_and_while_scan_inside_ofg(mode):
    a = pt.vector("a")

    def grow_until_ten(x):
        return _scan(lambda y: (y * 1.5, until(y * 1.5 > 10)), outputs_info=[x], n_steps=100)[-1]

    nested = _scan(grow_until_ten, sequences=[a])
    x0, target = pt.vector("x0"), pt.vector("target")
    sqrt_op = OpFromGraph(
        [x0, target], [_newton_sqrt(x0, target)[-1]], inline=False, name="newton_sqrt"
    )
    outputs = [nested, sqrt_op(pt.ones_like(a), a * a)]
    assert_matches_reference([a], outputs, [np.array([0.5, 2.0, 9.0])], mode)


def _doubling_until(x0, limit):
    def double(x, limit):
        doubled = x * 2
        return doubled, until(doubled > limit)

    return _scan(double, outputs_info=[x0], non_sequences=[limit], n_steps=50)


def test_full_trace_and_gradient_of_a_while_scan_under_jax_gpu():
    x0, limit = pt.scalar("x0"), pt.scalar("limit")
    xs = _doubling_until(x0, limit)
    outputs = [xs, pytensor.grad(xs.sum(), x0)]
    assert_matches_reference([x0, limit], outputs, [np.asarray(0.3), np.asarray(10.0)], "JAX_GPU")
    # One compiled function, trace lengths changing from call to call, back and forth.
    fn = pytensor.function([x0, limit], outputs, mode="JAX_GPU")
    reference_fn = pytensor.function([x0, limit], outputs, mode="FAST_COMPILE")
    for limit_value in (10.0, 1000.0, 1e300, 10.0):
        values = [np.asarray(0.3), np.asarray(limit_value)]
        for got, want in zip(fn(*values), reference_fn(*values), strict=True):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)


def test_full_trace_of_a_while_scan_is_refused_by_stock_jax_with_a_clear_error():
    x0, limit = pt.scalar("x0"), pt.scalar("limit")
    # Refused when the call traces: only then do the bounds say whether the length is known.
    fn = pytensor.function([x0, limit], _doubling_until(x0, limit), mode="JAX")
    with pytest.raises(
        DataDependentLengthError, match=r"data-dependent shape.*JAX_GPU.*trace\[-1\]"
    ):
        fn(1.0, 100.0)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_lengths_from_input_shapes_follow_each_new_shape(mode):
    x = pt.vector("x")
    powers = _scan(
        lambda acc, x: acc * x,
        outputs_info=[pt.ones_like(x)],
        non_sequences=[x],
        n_steps=x.shape[0] // 2,
    )

    def two_tap(x_tm2, x_tm1, x):
        return 0.5 * x_tm1 + x_tm2 + x[0]

    taps = _scan(
        two_tap,
        outputs_info=[{"initial": x[:2], "taps": [-2, -1]}],
        non_sequences=[x],
        n_steps=x.shape[0],
    )
    for size in (6, 9):
        values = [np.linspace(0.5, 1.5, size)]
        assert_matches_reference(
            [x], [powers, taps, pt.grad(taps.sum() + powers.sum(), x)], values, mode
        )


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_body_split_at_sizes_from_input_shapes(mode):
    # Before: PyTensor's lowering passes the sizes, known while tracing, through the loop's
    # carry, where they became tracers and jnp.split failed (ConcretizationTypeError). A
    # Jacobian by scan of a concatenation splits so; root's Jacobian of concatenated equations is
    # one.
    x, a = pt.vector("x"), pt.scalar("a")
    joined = pt.concatenate([x[:1] ** 3, 2.0 * x[1:]])
    equations = pt.concatenate([x[:1] ** 3 + x[1:] - a, x[1:] - x[:1]])
    solution, success = root(equations, x, method="hybr")
    jacobian = pytensor.gradient.jacobian(joined, x, vectorize=False)
    assert any(isinstance(node.op, Scan) for node in applys_between([x], [jacobian]))
    for size in (3, 5):
        assert_matches_reference([x], [jacobian], [np.linspace(0.5, 1.5, size)], mode)
    assert_matches_reference([x, a], [solution, success], [np.array([0.5, 0.5]), 2.0], mode)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_gradient_of_a_scan_and_of_an_ofg_holding_a_scan(mode):
    xs, h0, w = pt.matrix("xs"), pt.vector("h0"), pt.scalar("w")
    hs = _scan(
        lambda x_t, h, w: pt.tanh(h * w + x_t), sequences=[xs], outputs_info=[h0], non_sequences=[w]
    )
    op = OpFromGraph([xs, h0, w], [hs[-1]], inline=False, name="rnn_last")
    loss = (hs**2).sum() + op(xs, h0, w).sum()
    grads = pytensor.grad(loss, [xs, h0, w])
    rng = np.random.default_rng(0)
    assert_matches_reference(
        [xs, h0, w], grads, [rng.normal(size=(5, 3)), rng.normal(size=3), np.asarray(0.7)], mode
    )


@pytest.mark.parametrize("jax_differentiable", [False, True], ids=["JAX_GPU", "stock JAX"])
def test_the_gradient_of_a_while_scan_updates_its_buffers_in_place(jax_differentiable):
    """The backward Scan reads its mit-mot buffer at two taps and writes one, every step: XLA
    updates it in place, never copying a buffer of the trace's room (a step then cost the room,
    and a gradient steps times the room)."""
    import re

    import jax
    from pytensor.compile.mode import JAX
    from pytensor.graph.fg import FunctionGraph
    from pytensor.link.jax.dispatch import jax_funcify

    from gpubackend.dispatch.jax.lowering_context import CONTEXT_KEYWORD, LoweringContext
    from gpubackend.registration import using_lowerings

    width, bound = 7, 10
    a, x0 = pt.vector("a", shape=(width,)), pt.vector("x0", shape=(width,))
    fgraph = FunctionGraph([a, x0], [pt.grad(_newton_sqrt(x0, a, bound)[-1].sum(), a)], clone=True)
    JAX.optimizer.rewrite(fgraph)
    context = LoweringContext(jax_differentiable=jax_differentiable)
    with using_lowerings("gpubackend"):
        graph_fn = jax.jit(jax_funcify(fgraph, **{CONTEXT_KEYWORD: context}))
    values = (np.linspace(1.0, 4.0, width), np.ones(width))
    np.testing.assert_allclose(graph_fn(*values)[0], 0.5 / np.sqrt(values[0]), rtol=1e-10)
    compiled = graph_fn.lower(*values).compile().as_text()
    room = bound + 1  # the initial entry and one per step
    assert not re.findall(rf"= f64\[{room},{width}\]\{{1,0\}} copy\(", compiled)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_gradient_through_lazy_ifelse(mode):
    flag, x = pt.scalar("flag"), pt.vector("x")
    out = ifelse(flag > 0, pt.exp(x).cumsum(), pt.sin(x) * 2)
    outputs = [out, pytensor.grad(out.sum(), x)]
    for flag_value in (1.0, -1.0):
        assert_matches_reference(
            [flag, x], outputs, [np.asarray(flag_value), np.array([0.1, -0.4, 0.9])], mode
        )


@pytest.mark.parametrize("mode", JAX_MODES)
def test_integer_input_used_as_a_length_specialises_the_compiled_function(mode):
    n, x, k = pt.lscalar("n"), pt.vector("x"), pt.lscalar("k")
    powers = _scan(
        lambda acc, x: acc * x, outputs_info=[pt.ones_like(x)], non_sequences=[x], n_steps=n
    )
    outputs = [powers, pt.zeros((n, 2)) + x.sum() * k, pt.arange(n) * 2.0]
    fn = pytensor.function([n, x, k], outputs, mode=mode)
    reference_fn = pytensor.function([n, x, k], outputs, mode="FAST_COMPILE")
    # n is a static argument of the jit (one compiled function per value); k, used only as data, is
    # not.
    assert fn.maker.linker.scalar_shape_inputs == (0,)
    for steps in (3, 5, 3):
        values = [np.asarray(steps), np.array([0.5, 2.0]), np.asarray(2)]
        for got, want in zip(fn(*values), reference_fn(*values), strict=True):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_shared_integer_used_as_a_length_specialises_the_compiled_function(mode):
    """A PyMC dim's length lives in a shared variable (``model.dim_lengths``): ``arange(length)``
    and ``zeros((length, 2))`` follow each ``set_value``, as with an integer input."""
    length, x = pytensor.shared(np.int64(3), name="length"), pt.vector("x")
    outputs = [pt.arange(length) * x.sum(), pt.zeros((length, 2)) + 1.0]
    fn = pytensor.function([x], outputs, mode=mode)
    reference_fn = pytensor.function([x], outputs, mode="FAST_COMPILE")
    for steps in (3, 5, 3):
        length.set_value(np.int64(steps))
        for got, want in zip(
            fn(np.array([0.5, 2.0])), reference_fn(np.array([0.5, 2.0])), strict=True
        ):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
            assert np.shape(got) == np.shape(want)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_while_scan_length_in_a_three_operand_integer_add(mode):
    """PyTensor fuses ``n + b + c`` into one 3-input scalar Add; its bounds are the sum of all
    three (a binary ``np.add`` took the third operand as its ``out``: pymc-extras' convergent
    Kalman filter failed so)."""
    x0, a = pt.vector("x0"), pt.vector("a")
    b, c = pt.lscalar("b"), pt.lscalar("c")
    roots = _newton_sqrt(x0, a)
    length = roots.shape[0]
    outputs = [length + b + c, pt.zeros(length + 1 + 2).shape[0] * b, roots[-1].sum()]
    values = [np.ones(3), np.array([2.0, 3.0, 40.0]), np.asarray(2), np.asarray(3)]
    assert_matches_reference([x0, a, b, c], outputs, values, mode)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_an_integer_reduction_with_exact_bounds_of_a_while_scan_length(mode):
    """A reduction whose operand's bounds pin it down is evaluated while tracing (its bounds are
    numpy), not staged: a staged one reached numpy as a tracer."""
    x0 = pt.matrix("x0")
    decay = _scan(
        lambda x: (x * 0.9, until(pt.max(pt.abs(x * 0.9)) < 1e-3)),
        outputs_info=[x0],
        n_steps=1000,
    )
    pinned = pt.minimum(decay.shape[0], 0) + 5
    size = pt.stack([pinned, pt.constant(3, dtype="int64")]).max()
    outputs = [decay[-1].sum() * size, pt.zeros(size).shape[0] + decay.shape[0]]
    assert_matches_reference([x0], outputs, [np.ones((2, 3))], mode)


def _head_and_tail(x0, n: int = 20):
    """A while-Scan until the state settles, then a for-Scan over the steps left (the shape of
    pymc-extras' convergent Kalman filter): the two traces joined have length ``n`` always."""
    head = _scan(lambda x: (x * 0.5, until(pt.abs(x * 0.5) < 1e-3)), outputs_info=[x0], n_steps=n)
    tail = _scan(lambda x: x * 0.5, outputs_info=[head[-1]], n_steps=n - head.shape[0])
    return pt.concatenate([head, tail])


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_while_scan_head_joined_to_a_for_scan_over_the_steps_left_has_a_static_length(mode):
    x0 = pt.scalar("x0")
    full = _head_and_tail(x0)
    for start in (1.0, 1e-4):
        assert_matches_reference([x0], [full, full.sum()], [np.asarray(start)], mode)


def test_a_while_scan_head_joined_to_a_for_scan_over_the_steps_left_on_the_jaxified_path():
    import jax
    from pytensor.compile.mode import JAX
    from pytensor.graph.fg import FunctionGraph
    from pytensor.link.jax.dispatch import jax_funcify

    x0 = pt.scalar("x0")
    full = _head_and_tail(x0)
    fgraph = FunctionGraph([x0], [full], clone=True)
    JAX.optimizer.rewrite(fgraph)
    lowered = jax.jit(jax_funcify(fgraph))
    want = pytensor.function([x0], full, mode="FAST_COMPILE")(1.0)
    np.testing.assert_allclose(np.asarray(lowered(1.0)[0]), want, rtol=1e-12)


def _head_cut_by_another_trace(x0, n: int = 20):
    """As `_head_and_tail`, but the head is one trace cut at the length of another trace of the same
    while-Scan, as pymc-extras' convergent Kalman filter cuts its state trace at
    ``k = minimum(len(loglike trace), n - 1)``."""
    states, sizes = _scan(
        lambda x: ((x * 0.5, pt.abs(x)), until(pt.abs(x * 0.5) < 1e-3)),
        outputs_info=[x0, None],
        n_steps=n,
    )
    k = pt.minimum(sizes.shape[0], n - 1)
    tail = _scan(lambda x: x * 0.5, outputs_info=[states[k - 1]], n_steps=n - k)
    return pt.concatenate([states[:k], tail])


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_head_cut_at_the_length_of_another_trace_of_its_while_scan_has_a_static_length(mode):
    """Every trace of a while-Scan has its length tabulated on the same steps: the lengths of two
    of them stay known relative to each other (refused with DataDependentLengthError under
    mode="JAX" before)."""
    x0 = pt.scalar("x0")
    full = _head_cut_by_another_trace(x0)
    for start in (1.0, 1e-4):
        assert_matches_reference([x0], [full, full.sum()], [np.asarray(start)], mode)


def _growing_until(x0, stop):
    return _scan(lambda x: (x * 1.5, until(x * 1.5 > stop)), outputs_info=[x0], n_steps=8)


def test_ifelse_branches_reading_a_trace_are_refused_under_mode_jax_with_pt_switch_as_advice():
    """PyTensor moves what only one branch needs (here the length) into a LazyIfElse branch, so the
    trace itself reaches it: mode='JAX' cannot give it its exact length, and says what works."""
    x0, stop, k = pt.dscalar("x0"), pt.dscalar("stop"), pt.lscalar("k")
    xs = _growing_until(x0, stop)
    n = xs.shape[0]
    out = ifelse(n >= k, 2 * xs.sum(), xs.sum() - n)
    with pytest.raises(DataDependentLengthError, match=r"LazyIfElse.*pt\.switch"):
        pytensor.function([x0, stop, k], out, mode="JAX")


@pytest.mark.parametrize("mode", JAX_MODES)
def test_pt_switch_between_values_read_from_a_trace(mode):
    """The refusal's advice: pt.switch computes both values, each a reduction of the trace."""
    x0, stop, k = pt.dscalar("x0"), pt.dscalar("stop"), pt.lscalar("k")
    xs = _growing_until(x0, stop)
    n = xs.shape[0]
    out = pt.switch(n >= k, 2 * xs.sum(), xs.sum() - n)
    for stop_value in (3.0, 100.0):
        values = [np.float64(1.0), np.float64(stop_value), np.int64(3)]
        assert_matches_reference([x0, stop, k], [out], values, mode)


SECOND_ORDER_SCAN_GRADIENT = """
import numpy as np, pytensor, pytensor.tensor as pt
import gpubackend
y, a, x0 = pt.vector("y"), pt.scalar("a"), pt.scalar("x0")
xs = pytensor.scan(lambda y_t, x, a: a * x + y_t, sequences=[y], outputs_info=[x0],
                   non_sequences=[a], return_updates=False)
ga, gy = pytensor.grad(xs.sum(), [a, y])
g2 = pytensor.grad(ga + gy.sum(), a)
values = (np.ones(50), 0.9, 0.5)
want = pytensor.function([y, a, x0], g2, mode="FAST_COMPILE")(*values)
got = pytensor.function([y, a, x0], g2, mode={mode!r})(*values)
np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10)
"""


@pytest.mark.parametrize("mode", JAX_MODES)
def test_second_order_scan_gradient_compiles_without_aborting_xla(mode):
    """XLA aborted the process on the full-window scatter + reverse of this graph: run it in a child
    process."""
    child = subprocess.run(
        [sys.executable, "-c", SECOND_ORDER_SCAN_GRADIENT.format(mode=mode)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-2000:]


class NotConverged(RuntimeError):
    """The error a graph's own check raises (as PyMC's TruncationCheck raises TruncationError)."""


def _checked_newton(max_steps: int):
    """Newton's sqrt stopped after at most ``max_steps``, checked for convergence as PyMC checks
    truncation."""
    x0, a = pt.vector("x0"), pt.vector("a")
    xs = _newton_sqrt(x0, a, n_steps=max_steps)
    converged = pt.all(pt.abs(xs[-1] ** 2 - a) < 1e-8)
    return [x0, a], CheckAndRaise(NotConverged, "did not converge")(xs[-1], converged)


@pytest.mark.parametrize("mode", ["JAX_GPU", "JAX"])
def test_a_check_on_the_data_after_a_while_scan_runs_at_run_time(mode):
    """Stock JAX drops data checks while tracing; a graph with a while-Scan (which stock refuses
    whole) keeps them."""
    inputs, checked = _checked_newton(3)
    fn = pytensor.function(inputs, checked, mode=mode)
    reference = pytensor.function(inputs, checked, mode="FAST_COMPILE")
    near, far = [np.full(3, 1.0), np.full(3, 1.21)], [np.full(3, 1.0), np.full(3, 400.0)]
    np.testing.assert_allclose(np.asarray(fn(*near)), reference(*near))
    with pytest.raises(NotConverged):
        reference(*far)
    if mode == "JAX_GPU":
        # JAX_GPU owns the call: the error read back is the op's own.
        with pytest.raises(NotConverged, match="did not converge"):
            fn(*far)
    else:
        # A stock linker does not own the call: the check runs inside the computation.
        with pytest.raises(Exception, match="NotConverged: did not converge"):
            np.asarray(fn(*far))


def test_a_call_whose_check_fails_leaves_the_shared_variables_as_they_were():
    """As in the reference, a failed check applies no update. JAX_GPU reads a check back after
    the computation ran, so a graph with one must not donate an updated variable's buffer: the
    next call would find it deleted."""
    inputs, checked = _checked_newton(3)
    calls = pytensor.shared(np.float64(0.0), name="calls")
    outputs = checked.sum() + calls
    near, far = [np.full(3, 1.0), np.full(3, 1.21)], [np.full(3, 1.0), np.full(3, 400.0)]
    results = {}
    for mode in ("JAX_GPU", "FAST_COMPILE"):
        calls.set_value(np.float64(0.0))
        fn = pytensor.function(inputs, outputs, mode=mode, updates={calls: calls + 1})
        first = float(np.asarray(fn(*near)))
        with pytest.raises(NotConverged):
            fn(*far)
        results[mode] = (first, float(np.asarray(fn(*near))))
    assert results["JAX_GPU"] == pytest.approx(results["FAST_COMPILE"])


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_write_through_a_boolean_mask_from_the_data_in_a_while_scan_runs(mode):
    """PyMC's rejection sampling writes ``x[reject] = draw[reject]``: the write keeps x's shape,
    whatever the mask, so it runs (tests/test_jax_boolean_masks.py has the rule's cases)."""
    x0, limit = pt.vector("x0"), pt.scalar("limit")

    def redraw_small(x, limit):
        small = x < limit
        return pt.set_subtensor(x[small], 2 * x[small]), until(pt.all(~small))

    xs = _scan(redraw_small, outputs_info=[x0], non_sequences=[limit], n_steps=20)
    assert_matches_reference([x0, limit], [xs[-1]], [np.linspace(0.5, 2.0, 4), 3.0], mode)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_boolean_mask_from_the_data_in_a_while_scan_is_refused_by_name(mode):
    """A value that needs the selection itself (a cumulative sum along the selected entries) has
    the length the data decides, which JAX cannot trace."""
    x0, limit = pt.vector("x0"), pt.scalar("limit")

    def redraw_small(x, limit):
        small = x < limit
        return pt.set_subtensor(x[small], x[small].cumsum()), until(pt.all(~small))

    xs = _scan(redraw_small, outputs_info=[x0], non_sequences=[limit], n_steps=20)
    fn = pytensor.function([x0, limit], xs[-1], mode=mode)
    with pytest.raises(
        DataDependentLengthError, match=r"boolean mask known only at run time.*pt\.where"
    ):
        fn(np.linspace(0.5, 2.0, 4), 3.0)


# --- For-Scan step counts, slice bounds from integer inputs, truncated gradients ------------------


def _mapped_and_accumulated(steps):
    """A step that only maps its sequence (PyTensor's rewrites push it out of the loop) and one that
    accumulates it (the Scan stays), both over ``x`` for ``steps`` steps."""
    x = pt.vector("x")
    doubled = _scan(lambda x_t: 2 * x_t, sequences=[x], n_steps=steps)
    totals = _scan(
        lambda x_t, total: total + x_t,
        sequences=[x],
        outputs_info=[pt.constant(np.float64(0.0))],
        n_steps=steps,
    )
    return x, [doubled, totals]


@pytest.mark.parametrize("mode", [*JAX_MODES, "NUMBA"])
@pytest.mark.parametrize("steps", ["constant", "input"])
def test_a_for_scan_with_more_steps_than_its_sequence_raises_the_references_error(mode, steps):
    """FAST_COMPILE's Scan raises ValueError ("Sequence 0 has shape (3,) but the Scan's required
    number of steps is 5"); the rewrites drop that check with the mapping Scan, and the Scans left
    read past the sequence's end under JAX and Numba."""
    k = pt.lscalar("k")
    x, outputs = _mapped_and_accumulated(5 if steps == "constant" else k)
    inputs = [x] if steps == "constant" else [x, k]
    step_count = [] if steps == "constant" else [np.asarray(5)]
    short, long_enough = [np.arange(3.0), *step_count], [np.arange(6.0), *step_count]
    for output in outputs:
        reference = pytensor.function(inputs, output, mode="FAST_COMPILE")
        fn = pytensor.function(inputs, output, mode=mode)
        with pytest.raises(ValueError, match="required number of steps"):
            reference(*short)
        with pytest.raises(ScanSequenceLengthError, match=r"Sequence 0 .*required number of steps"):
            np.asarray(fn(*short))
        np.testing.assert_allclose(np.asarray(fn(*long_enough)), reference(*long_enough))


@pytest.mark.parametrize("mode", ["JAX_GPU", "NUMBA"])
def test_a_scan_over_its_sequences_without_n_steps_keeps_no_length_check(mode):
    """It runs over the shortest sequence, so its sequences are long enough by construction."""
    x, y = pt.vector("x"), pt.matrix("y")
    totals = _scan(
        lambda x_t, y_t, total: total + x_t * y_t.sum(),
        sequences=[x, y],
        outputs_info=[pt.constant(np.float64(0.0))],
    )
    fn = pytensor.function([x, y], totals, mode=mode)
    assert not [
        node
        for node in fn.maker.fgraph.apply_nodes
        if isinstance(node.op, CheckAndRaise) and node.op.exc_type is ScanSequenceLengthError
    ]


@pytest.mark.parametrize("mode", JAX_MODES)
def test_an_integer_input_as_n_steps_or_slice_bound_specialises_the_compiled_function(mode):
    """``scan(f, sequences=[x], n_steps=k)`` slices ``x[:k]`` (where the mapping step is pushed out
    of its Scan, nothing else reads ``k``), and ``v[3:k]`` slices by an integer input: each such
    input is a static argument of the jit (one compile per value)."""
    v, k = pt.vector("v"), pt.lscalar("k")
    x, (doubled, totals) = _mapped_and_accumulated(k)
    mapped = _scan(lambda v_t: 2 * v_t, sequences=[v])
    for outputs in ([doubled], [v[3:k], mapped[3:k], pt.set_subtensor(v[3:k], 0.0)], [totals]):
        inputs = [x, v, k]
        fn = pytensor.function(inputs, outputs, mode=mode, on_unused_input="ignore")
        reference_fn = pytensor.function(
            inputs, outputs, mode="FAST_COMPILE", on_unused_input="ignore"
        )
        assert fn.maker.linker.scalar_shape_inputs == (2,)
        for steps in (4, 6, 4):
            values = [np.linspace(0.0, 1.0, 6), np.arange(10.0), np.asarray(steps)]
            for got, want in zip(fn(*values), reference_fn(*values), strict=True):
                np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
                assert np.shape(got) == np.shape(want)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_slice_bound_computed_from_the_data_is_refused_by_name(mode):
    """``v[1:argmax(v)]`` has the length the data decide, which jax.jit cannot trace: refused with
    advice, still the IndexError JAX raised bare."""
    v = pt.vector("v")
    k = pt.argmax(v)
    for output in (v[1:k], pt.set_subtensor(v[1:k], 0.0)):
        fn = pytensor.function([v], output, mode=mode)
        with pytest.raises(SliceBoundNotStaticError, match=r"integer input.*pt\.where.*NUMBA"):
            fn(np.array([0.0, 3.0, 1.0, 5.0, 2.0]))
    assert issubclass(SliceBoundNotStaticError, IndexError)
    assert issubclass(SliceBoundNotStaticError, DataDependentLengthError)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_gradient_of_a_scan_with_truncate_gradient(mode):
    """The backward Scan runs the last two steps into traces of full length, zero past what it
    writes, as the reference leaves them (PyTensor's JAX lowering asserted that a trace fills its
    buffer)."""
    x, h0, w = pt.matrix("x"), pt.vector("h0"), pt.scalar("w")

    def step(x_t, h_prev2, h_prev1, w):
        h = pt.tanh(x_t + w * h_prev1 + 0.25 * h_prev2)
        return h, h.sum()

    (hs, sums) = _scan(
        step,
        sequences=[x],
        outputs_info=[{"initial": pt.stack([h0, h0]), "taps": [-2, -1]}, None],
        non_sequences=[w],
        truncate_gradient=2,
    )
    cost = (hs**2).sum() + sums.sum()
    gradients = pytensor.grad(cost, [x, h0, w])
    values = [np.linspace(-1.0, 1.0, 12).reshape(6, 2), np.array([0.3, -0.2]), 0.5]
    assert_matches_reference([x, h0, w], gradients, values, mode, rtol=1e-10)
