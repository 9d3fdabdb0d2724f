"""gpubackend's replacements of PyTensor's JAX lowerings are strict supersets of the stock ones.

Each graph is compiled and called twice under mode="JAX": once with PyTensor's
own lowerings selected (`gpubackend.registration.using_lowerings`, which
changes no global state) and gpubackend's rewrite left out, once with
gpubackend's. Where stock succeeds, ours must give the same
dtypes, shapes and values (to 1e-12) and the same warnings; where stock fails,
ours fails with the same error or succeeds with PyTensor's own (Python
backend) result. Graphs are compiled with the rewrite pipeline and without it
(``optimizer=None``, which leaves Blockwise, Reshape and ARange nodes as built).

Deliberate differences, listed in the README, are allowed and nothing else:
an output whose stock dtype is not its graph type's comes back with the graph's
dtype; a CheckAndRaise whose condition is concrete and false while tracing
raises the op's error (stock drops it); and a refusal may be a subclass of the
stock exception with its own, more specific message (a while-Scan trace whose
length depends on the data raises `DataDependentLengthError`, a
``NotImplementedError``).

Each test prints how many graphs it compared (``-s`` shows them).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytensor.compile.mode import JAX, Mode
from pytensor.conditional.op import ifelse
from pytensor.graph.basic import Variable
from pytensor.graph.replace import vectorize_graph
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.link.jax.linker import JAXLinker

# Not Assert: importing pymc.sampling.jax registers a pass-through JAX lowering for
# Assert (and tests share a process with the PyMC tests); CheckAndRaise is PyTensor's own.
from pytensor.raise_op import CheckAndRaise
from pytensor.tensor.subtensor import AdvancedIncSubtensor

from gpubackend.conformance.catalogue import CaseGraph, select_cases
from gpubackend.conformance.cli import main as conformance_main
from gpubackend.conformance.stock_superset import compare, run_stock_superset
from gpubackend.conformance.strategies import build_generated, graph_specs
from gpubackend.conformance.superset_graphs import FAMILIES, SupersetGraph
from gpubackend.dispatch.jax import blockwise as blockwise_lowering
from gpubackend.dispatch.jax import boolean_masks
from gpubackend.dispatch.jax.replacements import REPLACED, stock_lowering
from gpubackend.registration import REWRITE_TAG, using_lowerings

TOLERANCE = 1e-12
REWRITES = {True: JAX.provided_optimizer, False: None}


def _settings(max_examples: int):
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )


@dataclass
class Outcome:
    values: list[np.ndarray] | None
    error: tuple[type, str] | None
    warnings: list[tuple[str, str]]

    def describe(self) -> str:
        return f"error {self.error}" if self.error else f"{len(self.values)} outputs"


# PyTensor writes each lowered graph's source to a fresh temporary file, which JAX's tracing
# errors name: the same error from two compiles differs only there.
_GENERATED_SOURCE = re.compile(r"\S*tmp\w+:\d+")


def _run(inputs, outputs, values, optimizer) -> Outcome:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn = pytensor.function(
                inputs, outputs, mode=Mode(JAXLinker(), optimizer), on_unused_input="ignore"
            )
            fn(*values)
            result = [np.asarray(value) for value in fn(*values)]
            error = None
        except Exception as exc:  # noqa: BLE001 - the error is what is compared
            result = None
            error = (type(exc), _GENERATED_SOURCE.sub("<generated source>", str(exc)))
    return Outcome(result, error, sorted({(w.category.__name__, str(w.message)) for w in caught}))


def stock_outcome(inputs, outputs, values, rewrite: bool) -> Outcome:
    optimizer = (
        REWRITES[True] if rewrite else Mode(JAXLinker(), None).provided_optimizer
    ).excluding(REWRITE_TAG)
    with using_lowerings("stock"):
        return _run(inputs, outputs, values, optimizer)


def our_outcome(inputs, outputs, values, rewrite: bool) -> Outcome:
    return _run(inputs, outputs, values, REWRITES[rewrite])


def _assert_same_values(
    ours: Sequence[np.ndarray], stock: Sequence[np.ndarray], outputs: Sequence[Variable]
) -> None:
    assert len(ours) == len(stock)
    for position, (got, want, variable) in enumerate(zip(ours, stock, outputs, strict=True)):
        declared = variable.type.dtype
        # Deliberate difference: outputs have their graph type's dtype even where stock's lowering
        # returns another.
        if want.dtype != declared:
            want = want.astype(declared)
        assert got.dtype == want.dtype, (
            f"output {position}: dtype {got.dtype}, stock {want.dtype}, graph {declared}"
        )
        assert got.shape == want.shape, f"output {position}: shape {got.shape}, stock {want.shape}"
        np.testing.assert_allclose(
            got, want, rtol=TOLERANCE, atol=TOLERANCE, err_msg=f"output {position}"
        )


def _reference(inputs, outputs, values) -> list[np.ndarray]:
    fn = pytensor.function(inputs, outputs, mode="FAST_COMPILE", on_unused_input="ignore")
    return [np.asarray(value) for value in fn(*values)]


def assert_superset(
    inputs,
    outputs,
    values,
    rewrite: bool,
    violated_assertion: str | None = None,
    tolerance: tuple[float, float] = (1e-7, 1e-9),
) -> str:
    """Compare stock and ours on one graph; return how they relate ("same", "added" where only ours
    succeeds, ...).

    ``tolerance`` (rtol, atol) applies where only ours succeeds and is checked
    against PyTensor's Python backend (solvers differ there).
    """
    stock = stock_outcome(inputs, outputs, values, rewrite)
    ours = our_outcome(inputs, outputs, values, rewrite)
    context = f"stock: {stock.describe()}, ours: {ours.describe()}"
    if violated_assertion is not None and stock.error is None:
        # Deliberate difference: a violated assertion known while tracing raises the op's error.
        assert ours.error is not None and ours.error[1] == violated_assertion, context
        return "checked"
    if stock.error is None:
        assert ours.error is None, context
        _assert_same_values(ours.values, stock.values, outputs)
        assert ours.warnings == stock.warnings
        return "same"
    if ours.error is not None:
        (our_type, our_message), (stock_type, stock_message) = ours.error, stock.error
        # The same refusal, or a more specific one (a subclass with its own message).
        assert (our_type is stock_type and our_message == stock_message) or (
            issubclass(our_type, stock_type) and our_type is not stock_type
        ), context
        return "same" if our_type is stock_type else "refined"
    reference = _reference(inputs, outputs, values)
    for position, (got, want) in enumerate(zip(ours.values, reference, strict=True)):
        rtol, atol = tolerance
        np.testing.assert_allclose(
            got,
            want,
            rtol=rtol,
            atol=atol,
            err_msg=f"output {position} (stock fails: {stock.error})",
        )
    return "added"


def _report(family: str, outcomes: list[str]) -> None:
    counts = {kind: outcomes.count(kind) for kind in sorted(set(outcomes))}
    print(f"\n[stock superset] {family}: {len(outcomes)} graphs compared {counts}")
    assert outcomes, f"{family}: no graph compared"


@dataclass(frozen=True)
class DrawnGraph:
    inputs: list[Variable]
    outputs: list[Variable]
    values: list[np.ndarray]
    violated_assertion: str | None = None


def compare_drawn(family: str, graphs: st.SearchStrategy[DrawnGraph], max_examples: int) -> None:
    """Compare ``max_examples`` drawn graphs, each with or without the rewrite pipeline."""
    outcomes = []

    @_settings(max_examples)
    @given(graphs, st.booleans())
    def compare(graph: DrawnGraph, rewrite: bool) -> None:
        outcomes.append(
            assert_superset(
                graph.inputs, graph.outputs, graph.values, rewrite, graph.violated_assertion
            )
        )

    compare()
    _report(family, outcomes)


# --- the conformance catalogue ------------------------------------------------------------------


@pytest.mark.parametrize("rewrite", [True, False], ids=["rewritten", "unrewritten"])
@pytest.mark.parametrize("case", select_cases(), ids=lambda case: case.name)
def test_catalogue(case, rewrite: bool) -> None:
    graph: CaseGraph = case.build()
    outcome = assert_superset(
        graph.inputs, graph.outputs, graph.values, rewrite, tolerance=(graph.rtol, graph.atol)
    )
    _report(f"catalogue {case.name} ({'rewritten' if rewrite else 'unrewritten'})", [outcome])


# --- IfElse ---------------------------------------------------------------------------------------


@st.composite
def ifelse_graphs(draw: st.DrawFn):
    """An IfElse; the rewrite pipeline turns it into a LazyIfElse with OpFromGraph branches."""
    flag, x = pt.scalar("flag"), pt.vector("x")
    kind = draw(st.sampled_from(["values", "shapes", "mixed"]))
    if kind == "values":
        branches = [pt.exp(x).cumsum(), pt.sin(x) * 2]
    elif kind == "shapes":
        # Equal concrete values in both branches: ours picks the value without lax.cond.
        branches = [x.shape[0] * 2, x.shape[0] + x.shape[0]]
    else:
        branches = [pt.zeros((x.shape[0],)) + x.sum(), x * 3]
    out = ifelse(flag > 0, branches[0], branches[1])
    flag_value = np.asarray(draw(st.sampled_from([-1.0, 1.0])))
    return DrawnGraph([flag, x], [out], [flag_value, np.linspace(-1, 1, draw(st.integers(1, 4)))])


def test_ifelse() -> None:
    compare_drawn("IfElse/LazyIfElse", ifelse_graphs(), 12)


# --- Blockwise of linalg ops ---------------------------------------------------------------------


def _spd(rng: np.random.Generator, shape: tuple[int, ...], n: int) -> np.ndarray:
    a = rng.normal(size=(*shape, n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


LINALG = {
    "solve": (2, lambda a, b: [pt.linalg.solve(a, b)]),
    "cholesky": (1, lambda a: [pt.linalg.cholesky(a)]),
    "qr": (1, lambda a: list(pt.linalg.qr(a))),
    "eigh": (1, lambda a: list(pt.linalg.eigh(a))),
    "lu": (1, lambda a: list(pt.linalg.lu(a))),
    "expm": (1, lambda a: [pt.linalg.expm(a * 0.1)]),
    "det": (1, lambda a: [pt.linalg.det(a)]),
    "inv": (1, lambda a: [pt.linalg.inv(a)]),
}


@st.composite
def blockwise_graphs(draw: st.DrawFn):
    n_inputs, build = LINALG[draw(st.sampled_from(sorted(LINALG)))]
    n = 3
    batch_ndim = draw(st.integers(0, 2))
    sizes = [draw(st.sampled_from([1, 2])) for _ in range(batch_ndim)]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    inputs, values = [], []
    for position in range(n_inputs):
        # Each batch axis is broadcastable (static 1) or batched, per input.
        shape = tuple(size if draw(st.booleans()) else 1 for size in sizes)
        static = tuple(1 if size == 1 else None for size in shape)
        inputs.append(pt.tensor(f"a{position}", shape=(*static, n, n)))
        values.append(_spd(rng, shape, n))
    return DrawnGraph(inputs, build(*inputs), values)


def test_blockwise_linalg() -> None:
    compare_drawn("Blockwise (linalg)", blockwise_graphs(), 24)


# --- Reshape, ARange, Split and SpecifyShape ----------------------------------------------------

LENGTHS: dict[str, Callable] = {
    "constant": lambda x, n, s: pt.constant(3, dtype="int64"),
    "shape": lambda x, n, s: x.shape[0],
    "shape_arithmetic": lambda x, n, s: x.shape[0] // 2 + 1,
    "integer_input": lambda x, n, s: n,
    "float_input": lambda x, n, s: s,
}


@st.composite
def length_graphs(draw: st.DrawFn):
    x, n, s = pt.vector("x"), pt.scalar("n", dtype="int64"), pt.scalar("s")
    length = LENGTHS[draw(st.sampled_from(sorted(LENGTHS)))](x, n, s)
    kind = draw(st.sampled_from(["arange", "reshape", "split", "specify_shape"]))
    if kind == "arange":
        out = pt.arange(length) * 2
    elif kind == "specify_shape":
        size = length if length.type.dtype.startswith("int") else pt.cast(length, "int64")
        out = pt.specify_shape(x, (pt.maximum(size, x.shape[0]),)) * 2
    elif kind == "split":
        size = length if length.type.dtype.startswith("int") else pt.cast(length, "int64")
        head, tail = pt.split(x, pt.stack([size, x.shape[0] - size]), n_splits=2)
        out = head.sum() * tail
    else:
        rows = length if length.type.dtype.startswith("int") else pt.cast(length, "int64")
        out = (
            pt.tile(x, 6)[: rows * 2].reshape((rows, -1))
            if draw(st.booleans())
            else x.reshape((1, x.shape[0]))
        )
    return DrawnGraph([x, n, s], [out], [np.linspace(0, 1, 6), np.asarray(3), np.asarray(3.0)])


def test_reshape_arange_split_and_specify_shape() -> None:
    compare_drawn("Reshape/ARange/Split/SpecifyShape", length_graphs(), 32)


def test_a_specified_shape_mismatch_is_a_refined_error_on_every_path() -> None:
    # Stock raises ValueError; ours ShapeMismatchError, also the reference's AssertionError: a
    # subclass of stock's error, which the verdict counts as refined, never as a violation.
    x = pt.vector("x")
    graph = SupersetGraph(
        "specify_shape",
        "x of length 2 specified as 3",
        (x,),
        (pt.specify_shape(x, (3,)) * 2,),
        (np.ones(2),),
        float_input=0,
    )
    comparison = compare(graph)
    assert not comparison.problems
    assert set(comparison.paths.values()) == {"refined"}


# --- CheckAndRaise --------------------------------------------------------------------------------

CONDITIONS: dict[str, tuple[Callable, bool]] = {
    # name: (condition, violated while tracing with the values below)
    "constant_true": (lambda x: pt.constant(True), False),
    "constant_false": (lambda x: pt.constant(False), True),
    "shape_held": (lambda x: pt.eq(x.shape[0], 4), False),
    "shape_violated": (lambda x: pt.eq(x.shape[0], 3), True),
    "values": (lambda x: pt.all(x > -10), False),
}


@st.composite
def assert_graphs(draw: st.DrawFn):
    x = pt.vector("x")
    name = draw(st.sampled_from(sorted(CONDITIONS)))
    condition, violated = CONDITIONS[name]
    message = f"x must satisfy {name}"
    out = CheckAndRaise(AssertionError, message)(x, condition(x)) * 2
    return DrawnGraph([x], [out], [np.linspace(0, 1, 4)], message if violated else None)


def test_check_and_raise() -> None:
    compare_drawn("CheckAndRaise", assert_graphs(), 12)


# --- Advanced indexing ----------------------------------------------------------------------------

MASKS: dict[str, Callable] = {
    "integer positions": lambda x: pt.constant([0, 2, 3]),
    "constant mask": lambda x: pt.constant([True, False, True, True]),
    "mask from the data": lambda x: x > 0.4,
}


@st.composite
def advanced_indexing_graphs(draw: st.DrawFn):
    """Reads and writes through an index array or a boolean mask; one from the data has no JAX
    shape."""
    x = pt.vector("x")
    index = MASKS[draw(st.sampled_from(sorted(MASKS)))](x)
    if draw(st.booleans()):
        out = x[index] * 2
    else:
        out = (
            pt.set_subtensor(x[index], -x[index])
            if draw(st.booleans())
            else pt.inc_subtensor(x[index], 1.0)
        )
    return DrawnGraph([x], [out], [np.linspace(0, 1, 4)])


def test_advanced_indexing() -> None:
    compare_drawn("AdvancedSubtensor/AdvancedIncSubtensor", advanced_indexing_graphs(), 16)


# --- Scan and OpFromGraph ------------------------------------------------------------------------


def _drawn_from_spec(spec) -> DrawnGraph:
    graph = build_generated(spec)
    return DrawnGraph(graph.inputs, graph.outputs, graph.values)


def test_scan_and_ofg() -> None:
    compare_drawn("Scan/OpFromGraph", graph_specs().map(_drawn_from_spec), 12)


# --- the generated differential (gpubackend.conformance.stock_superset) --------------------------

QUICK_GRAPHS = 21
"""Two graphs per family or more (Blockwise over indexing: seven); `make conformance` runs 200."""


def test_generated_graphs_quick_budget() -> None:
    """Stock-runnable graphs of every family give the same results with ours, on every path."""
    report = run_stock_superset(QUICK_GRAPHS)
    print("\n" + report.summary())
    assert set(report.counts()) == set(FAMILIES)
    assert not report.violations, report.summary()


# Each verdict can fail: ours, deliberately broken for the duration of our runs, is caught.


def _constant_table_read_by_batched_indices() -> SupersetGraph:
    """What pymc-extras' marginalised models build (issue 24): ``table[i] * w`` vectorised over
    ``i`` and ``w``, the table a constant of batch shape (1,)."""
    table, i, w = pt.vector("table", shape=(4,)), pt.scalar("i", dtype="int64"), pt.scalar("w")
    indices, weights = pt.vector("indices", dtype="int64"), pt.vector("weights")
    table_values = pt.constant(np.array([[0.5, 2.0, -1.5, 3.0]]))
    out = vectorize_graph(table[i] * w, {table: table_values, i: indices, w: weights})
    values = (np.array([0, 3, -1]), np.array([1.0, 2.0, 3.0]))
    return SupersetGraph("blockwise-indexing", "table[i]", (indices, weights), (out,), values, 1)


def _numpy_core_value(value, batch_ndim: int):
    """The Blockwise lowering's reduction before e2fe9d6: numpy, which a tracer cannot index."""
    index = (0,) * batch_ndim
    return value[index] if isinstance(value, jax.core.Tracer) else np.asarray(value)[index]


def test_the_differential_catches_the_numpy_core_value_regression(monkeypatch) -> None:
    graph = _constant_table_read_by_batched_indices()
    assert compare(graph).verdict == "same"
    monkeypatch.setattr(blockwise_lowering, "_core_value", _numpy_core_value)
    comparison = compare(graph)
    assert comparison.verdict == "violation"
    assert any("TracerArrayConversionError" in problem for problem in comparison.problems)


def _mask_graph(mask_from_data: bool) -> SupersetGraph:
    """``set_subtensor(x[mask], 0)``: stock runs a constant mask, refuses one from the data."""
    x = pt.vector("x")
    mask = x > 0 if mask_from_data else pt.constant(np.array([True, False, True]))
    out = pt.set_subtensor(x[mask], 0.0)
    return SupersetGraph("indexing", "x[mask] = 0", (x,), (out,), (np.array([1.0, -2.0, 3.0]),), 0)


def _pair_index_graph() -> SupersetGraph:
    """``set_subtensor(x[rows, cols], 0)`` with constant index arrays: stock runs it, through
    AdvancedIncSubtensor's lowering (a write through a boolean mask is lowered by the graph)."""
    x = pt.matrix("x")
    out = pt.set_subtensor(x[[0, 1], [1, 0]], 0.0)
    return SupersetGraph("indexing", "x[rows, cols] = 0", (x,), (out,), (np.ones((2, 2)),), 0)


@contextmanager
def _masked_writes_lowered_by(lowering: Callable) -> Iterator[None]:
    """``lowering`` serves the writes through a boolean mask, which the graph lowering gives their
    own function (`boolean_masks`), in the block."""
    original = boolean_masks._masked_write
    boolean_masks._masked_write = lambda op, drop_count_axis: lowering(op)
    try:
        yield
    finally:
        boolean_masks._masked_write = original


def _raising(op, node=None, **kwargs):
    def lowered(*inputs):
        raise RuntimeError("a broken lowering")

    return lowered


def _incrementing(op, node=None, **kwargs):
    """Adds where the op sets: other values."""
    stock = stock_lowering(AdvancedIncSubtensor)(op, node=node, **kwargs)
    return lambda x, y, *indices: stock(x, y, *indices) + x


@contextmanager
def _lowering_of(op_type: type, lowering: Callable) -> Iterator[None]:
    """``lowering`` serves ``op_type`` in the block, for every selection; ours again after it."""
    jax_funcify.register(op_type, lowering)
    try:
        yield
    finally:
        jax_funcify.register(op_type, REPLACED[op_type].ours)


@pytest.mark.parametrize(
    ("build", "broken", "problem"),
    [
        (_pair_index_graph, lambda: _lowering_of(AdvancedIncSubtensor, _incrementing), "expected"),
        (
            _pair_index_graph,
            lambda: _lowering_of(AdvancedIncSubtensor, _raising),
            "ours fails where stock runs",
        ),
        (
            lambda: _mask_graph(True),
            lambda: _masked_writes_lowered_by(_raising),
            "another error than stock's",
        ),
    ],
    ids=["other values", "fails where stock runs", "another error"],
)
def test_the_differential_catches_a_broken_lowering(build, broken, problem) -> None:
    graph = build()
    assert compare(graph).verdict in ("same", "added", "refined")
    comparison = compare(graph, ours=broken)
    assert comparison.verdict == "violation"
    assert all(problem in text for text in comparison.problems), comparison.problems


def test_the_differential_checks_added_values_against_fast_compile() -> None:
    """Where only ours runs, its values are FAST_COMPILE's: a lowering that makes up values where
    stock refuses is caught."""

    def made_up(op, node=None, **kwargs):
        return lambda x, y, *indices: jnp.zeros_like(x) - 7.0

    comparison = compare(_mask_graph(True), ours=lambda: _masked_writes_lowered_by(made_up))
    assert comparison.verdict == "violation"
    assert any("against FAST_COMPILE" in text for text in comparison.problems)


@pytest.mark.parametrize("broken", [False, True], ids=["ours", "numpy core value"])
def test_the_cli_runs_the_differential_and_fails_on_a_violation(
    tmp_path, monkeypatch, broken: bool
) -> None:
    """The first graphs drawn are a constant table read at batched indices (the regression of
    issue 24) and a length-1-batched length."""
    if broken:
        monkeypatch.setattr(blockwise_lowering, "_core_value", _numpy_core_value)
    arguments = ["--no-catalogue", "--stock-superset", "2", "--no-progress"]
    status = conformance_main([*arguments, "--device", "cpu", "--out", str(tmp_path)])
    summary = (tmp_path / "stock_superset.txt").read_text()
    assert status == int(broken), summary
    assert "blockwise-indexing" in summary and "blockwise-length" in summary
    assert ("VIOLATION blockwise-indexing" in summary) == broken
