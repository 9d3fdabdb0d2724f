"""The stock-superset differential: generated graphs run with PyTensor's JAX lowerings and ours.

gpubackend replaces PyTensor's JAX lowerings of a dozen op types
(`gpubackend.dispatch.jax.replacements`) and promises a superset: where the
stock lowering handles a graph, ours gives the same values, dtypes, shapes,
errors and warnings; ours adds behaviour only where stock fails. `compare`
checks that promise on one graph (drawn by `gpubackend.conformance.superset_graphs`)
along every path a graph reaches these lowerings by:

- ``function``: ``pytensor.function(mode=Mode(JAXLinker(), optimizer))``, called
  twice, as stock ``mode="JAX"`` runs it;
- ``jit``, ``vmap``, ``grad``: ``jax_funcify`` of the graph's FunctionGraph,
  with shared variables made constants, as PyMC's ``get_jaxified_graph`` hands
  it to numpyro and blackjax: under ``jax.jit``, under ``jax.jit(jax.vmap(...))``
  over a leading batch of one float input, and under ``jax.jit(jax.grad(...))``
  of the sum of the float outputs with respect to that input.

Each path runs on the graph rewritten by PyTensor's JAX optimizer and on the
graph as built (where Blockwise, Reshape and ARange nodes stay as built). Stock
means PyTensor's lowerings (`gpubackend.registration.using_lowerings`) and its
optimizer without gpubackend's rewrite; ours, gpubackend's lowerings and rewrite.

A path's verdict:

- ``same``: both give the same values (to 1e-10), dtypes, shapes and warnings,
  or the same error;
- ``added``: stock fails, ours gives the values of PyTensor's Python backend
  (FAST_COMPILE);
- ``refined``: a deliberate difference of the README: ours raises a subclass of
  stock's error (a more specific refusal); for a check stock drops, the error
  FAST_COMPILE raises; or, where stock refuses an arange/reshape argument while
  lowering, an error while tracing (ours checks the argument there, and an
  earlier op may refuse the traced value first);
- ``violation``: anything else: ours fails where stock runs, other values,
  dtypes, shapes or warnings, another error, or values where FAST_COMPILE fails.

A graph's verdict is its worst path's. Only the deliberate differences are
allowed: an output comes back with its graph type's dtype where stock returns
another, and ours may raise a violated check that stock drops.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import pytensor
from pytensor.compile.mode import JAX, Mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import HasMultipleInnerGraph
from pytensor.graph.replace import clone_replace
from pytensor.graph.traversal import graph_inputs
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.link.jax.dispatch.shape import SHAPE_NOT_COMPATIBLE
from pytensor.link.jax.dispatch.tensor_basic import ARANGE_CONCRETE_VALUE_ERROR
from pytensor.link.jax.linker import JAXLinker
from rich.console import Console
from rich.markup import escape

from gpubackend.conformance.progress import progress_display
from gpubackend.conformance.superset_graphs import SupersetGraph, draw_graphs
from gpubackend.devices import resolve_device
from gpubackend.dispatch.jax.replacements import REPLACED
from gpubackend.registration import REWRITE_TAG, Lowerings, using_lowerings

Verdict = Literal["same", "added", "refined", "violation"]
Stage = Literal["lowering", "call"]
VERDICTS: tuple[Verdict, ...] = ("same", "added", "refined", "violation")
PATHS = ("function", "jit", "vmap", "grad")

DEFERRED_REFUSALS = frozenset({ARANGE_CONCRETE_VALUE_ERROR, SHAPE_NOT_COMPATIBLE})
"""Stock's compile-time refusals of arange/reshape arguments, which ours makes while tracing."""

RTOL = ATOL = 1e-10
"""Stock and ours run the same JAX operations, up to XLA's reassociation."""
REFERENCE_TOLERANCE = (1e-7, 1e-9)
"""(rtol, atol) against FAST_COMPILE where only ours runs: another implementation."""

# PyTensor writes each lowered graph's source to a fresh temporary file, which JAX's tracing
# errors name: the same error from two lowerings differs only there.
_GENERATED_SOURCE = re.compile(r"\S*tmp\w+:\d+")
# JAX appends where a tracer came from (functions, files and lines): the lowering's own code,
# which differs between two lowerings that raise the same error.
_JAX_PROVENANCE = re.compile(
    r"\s*(If using `jit`|The error occurred while tracing|This \w+ (with object id \d+ )?"
    r"(was created|became a tracer)).*",
    re.DOTALL,
)


def _error_message(error: Exception) -> str:
    return _JAX_PROVENANCE.sub("", _GENERATED_SOURCE.sub("<generated source>", str(error)))


@dataclass(frozen=True)
class Outcome:
    """What one path gave: its values or its error (type, message), and the warnings it raised."""

    values: tuple[np.ndarray, ...] | None
    error: tuple[type, str] | None
    warnings: tuple[tuple[str, str], ...] = ()
    stage: Stage = "lowering"
    """Where the error was raised: while lowering (compiling), or calling (tracing, running)."""

    def describe(self) -> str:
        if self.error is not None:
            return f"{self.error[0].__name__}: {self.error[1][:300]}"
        assert self.values is not None
        return f"{len(self.values)} outputs"


@dataclass
class Comparison:
    """`compare`'s answer for one graph: a verdict per path and the graph's (its worst path's)."""

    graph: SupersetGraph
    paths: dict[str, Verdict] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    op_types: frozenset[str] = frozenset()
    failing_paths: int = 0
    """Paths on which stock and ours both fail (the same error, or a refined one)."""

    @property
    def verdict(self) -> Verdict:
        return max(self.paths.values(), key=_SEVERITY.__getitem__, default="same")


_SEVERITY: dict[Verdict, int] = {"same": 0, "refined": 1, "added": 2, "violation": 3}


class _Progress:
    """How far a path got: ``stage`` becomes "call" once its function is lowered."""

    stage: Stage = "lowering"


def _captured(run: Callable[[_Progress], Sequence[Any]]) -> Outcome:
    progress = _Progress()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            values = tuple(np.asarray(value) for value in run(progress))
            error = None
        except Exception as exc:  # noqa: BLE001 - the error is what is compared
            values = None
            error = (type(exc), _error_message(exc))
    seen = sorted({(w.category.__name__, str(w.message)) for w in caught})
    return Outcome(values, error, tuple(seen), progress.stage)


# --- the paths ------------------------------------------------------------------------------------


def _optimizer(lowerings: Lowerings, rewrite: bool):
    """The JAX mode's rewrites (ours: with gpubackend's, stock: without), or none."""
    if not rewrite:
        return None
    query = JAX.provided_optimizer
    return (
        query.including(REWRITE_TAG) if lowerings == "gpubackend" else query.excluding(REWRITE_TAG)
    )


def _function_path(graph: SupersetGraph, lowerings: Lowerings, rewrite: bool) -> Outcome:
    def run(progress: _Progress) -> Sequence[Any]:
        mode = Mode(JAXLinker(), _optimizer(lowerings, rewrite))
        fn = pytensor.function(
            list(graph.inputs), list(graph.outputs), mode=mode, on_unused_input="ignore"
        )
        progress.stage = "call"
        fn(*graph.values)
        return fn(*graph.values)

    with using_lowerings(lowerings):
        return _captured(run)


def _jaxified_fgraph(graph: SupersetGraph, lowerings: Lowerings, rewrite: bool) -> FunctionGraph:
    """The FunctionGraph ``get_jaxified_graph`` lowers: shared variables as constants, rewritten."""
    shared = [var for var in graph_inputs(graph.outputs) if isinstance(var, SharedVariable)]
    outputs = clone_replace(
        list(graph.outputs),
        replace={var: pytensor.tensor.constant(var.get_value(borrow=True)) for var in shared},
    )
    fgraph = FunctionGraph(list(graph.inputs), outputs, clone=True)
    optimizer = _optimizer(lowerings, rewrite)
    if optimizer is not None:
        Mode(JAXLinker(), optimizer).optimizer.rewrite(fgraph)
    return fgraph


def _float_output_positions(graph: SupersetGraph) -> list[int]:
    return [
        position
        for position, output in enumerate(graph.outputs)
        if np.dtype(output.type.dtype).kind == "f"
    ]


def _batch(value: np.ndarray) -> np.ndarray:
    """Two instances of a float input: itself and a shifted copy."""
    return np.stack([value, value * 0.5 + 0.125]).astype(value.dtype)


def _jaxified_path(
    graph: SupersetGraph, lowerings: Lowerings, rewrite: bool, path: str
) -> tuple[Outcome, frozenset[str]]:
    # Rewritten outside the outcome: an error here is the harness's, not the lowering's.
    fgraph = _jaxified_fgraph(graph, lowerings, rewrite)

    def run(progress: _Progress) -> Sequence[Any]:
        graph_fn = jax_funcify(fgraph)
        progress.stage = "call"
        values = list(graph.values)
        if path == "jit":
            return list(jax.jit(graph_fn)(*values))
        position = graph.float_input
        assert position is not None
        if path == "vmap":
            in_axes = tuple(0 if index == position else None for index in range(len(values)))
            values[position] = _batch(values[position])
            return list(jax.jit(jax.vmap(graph_fn, in_axes=in_axes))(*values))
        float_outputs = _float_output_positions(graph)

        def total(wrt, *others):
            arguments = [*others[:position], wrt, *others[position:]]
            outputs = graph_fn(*arguments)
            return sum(jnp.sum(outputs[index]) for index in float_outputs)

        others = values[:position] + values[position + 1 :]
        return [jax.jit(jax.grad(total))(values[position], *others)]

    with using_lowerings(lowerings):
        return _captured(run), _replaced_op_types(fgraph)


# --- references (FAST_COMPILE), for where only ours runs ------------------------------------------


def _fast_compile(inputs: Sequence[Variable], outputs: Sequence[Variable]) -> Callable:
    return pytensor.function(
        list(inputs), list(outputs), mode="FAST_COMPILE", on_unused_input="ignore"
    )


def _reference(graph: SupersetGraph, path: str) -> Outcome:
    def forward(progress: _Progress) -> Sequence[Any]:
        return _fast_compile(graph.inputs, graph.outputs)(*graph.values)

    def batched(progress: _Progress) -> Sequence[Any]:
        fn = _fast_compile(graph.inputs, graph.outputs)
        assert graph.float_input is not None
        instances = []
        for instance in _batch(graph.values[graph.float_input]):
            values = list(graph.values)
            values[graph.float_input] = instance
            instances.append([np.asarray(value) for value in fn(*values)])
        return [np.stack(outputs) for outputs in zip(*instances, strict=True)]

    def gradient(progress: _Progress) -> Sequence[Any]:
        assert graph.float_input is not None
        wrt = graph.inputs[graph.float_input]
        total = sum(graph.outputs[index].sum() for index in _float_output_positions(graph))
        grad = pytensor.grad(total, wrt, disconnected_inputs="ignore", return_disconnected="zero")
        return [_fast_compile(graph.inputs, [grad])(*graph.values)[0]]

    return _captured({"function": forward, "jit": forward, "vmap": batched, "grad": gradient}[path])


# --- the verdicts ---------------------------------------------------------------------------------


def _value_problems(
    ours: Sequence[np.ndarray],
    want: Sequence[np.ndarray],
    dtypes: Sequence[str | None],
    tolerance: tuple[float, float],
) -> list[str]:
    if len(ours) != len(want):
        return [f"{len(ours)} outputs, expected {len(want)}"]
    problems = []
    for position, (got, expected, dtype) in enumerate(zip(ours, want, dtypes, strict=True)):
        # Deliberate difference: outputs have their graph type's dtype where stock returns another.
        if dtype is not None and expected.dtype != dtype:
            expected = expected.astype(dtype)
        if got.dtype != expected.dtype or got.shape != expected.shape:
            problems.append(
                f"output {position}: {got.dtype}{list(got.shape)}, "
                f"expected {expected.dtype}{list(expected.shape)}"
            )
            continue
        rtol, atol = tolerance
        if not np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
            problems.append(f"output {position}: {got!r}, expected {expected!r}")
    return problems


def _path_verdict(
    path: str,
    stock: Outcome,
    ours: Outcome,
    dtypes: Sequence[str | None],
    reference: Callable[[str], Outcome],
) -> tuple[Verdict, list[str]]:
    """``path``'s verdict; ``reference(path)`` is FAST_COMPILE's outcome there."""
    context = f"stock: {stock.describe()}; ours: {ours.describe()}"
    if stock.error is None:
        assert stock.values is not None
        if ours.error is None:
            assert ours.values is not None
            problems = _value_problems(ours.values, stock.values, dtypes, (RTOL, ATOL))
            if ours.warnings != stock.warnings:
                problems.append(f"warnings {ours.warnings}, stock {stock.warnings}")
            return ("violation", problems) if problems else ("same", [])
        # Deliberate difference: a check violated while tracing raises the op's error, which
        # stock drops; FAST_COMPILE runs the check.
        if reference("function").error == ours.error:
            return "refined", []
        return "violation", [f"ours fails where stock runs ({context})"]
    if ours.error is not None:
        (our_type, our_message), (stock_type, stock_message) = ours.error, stock.error
        if our_type is stock_type and our_message == stock_message:
            return "same", []
        # A more specific refusal: a subclass with its own message.
        if issubclass(our_type, stock_type) and our_type is not stock_type:
            return "refined", []
        # Deliberate difference: an arange/reshape argument stock refuses while lowering is
        # checked while tracing, where an earlier op may refuse a traced value first.
        if (
            stock.stage == "lowering"
            and stock_type is NotImplementedError
            and stock_message in DEFERRED_REFUSALS
            and ours.stage == "call"
        ):
            return "refined", []
        return "violation", [f"another error than stock's ({context})"]
    assert ours.values is not None
    expected = reference(path)
    if expected.error is not None:
        return "violation", [f"ours runs where stock and FAST_COMPILE fail ({context})"]
    assert expected.values is not None
    problems = _value_problems(ours.values, expected.values, dtypes, REFERENCE_TOLERANCE)
    if problems:
        return "violation", [f"against FAST_COMPILE, {problem}" for problem in problems]
    return "added", []


def _replaced_op_types(fgraph: FunctionGraph) -> frozenset[str]:
    """The op types of ``fgraph`` (inner graphs included) whose lowering gpubackend replaces."""
    found: set[str] = set()

    def visit(graph) -> None:
        found.add(type(graph).__name__)
        for node in graph.apply_nodes:
            op = node.op
            found.update(type(inner).__name__ for inner in (op, getattr(op, "core_op", None)))
            if isinstance(op, HasMultipleInnerGraph):
                for inner in op.inner_graphs.values():
                    visit(inner)

    visit(fgraph)
    return frozenset(name for name in found if name in _REPLACED_NAMES)


_REPLACED_NAMES = frozenset(op_type.__name__ for op_type in REPLACED)


def _variants(graph: SupersetGraph) -> Iterator[tuple[str, bool]]:
    for rewrite in (True, False):
        for path in PATHS:
            if path in ("vmap", "grad") and graph.float_input is None:
                continue
            if path == "grad" and not _float_output_positions(graph):
                continue
            yield path, rewrite


def compare(
    graph: SupersetGraph,
    ours: Callable[[], AbstractContextManager[Any]] | None = None,
) -> Comparison:
    """Run ``graph`` on every path with stock lowerings and with ours, and judge each path.

    ``ours`` (a test's hook) is a context manager entered around our runs, e.g.
    one that registers a deliberately broken lowering, to show a verdict can fail.
    """
    comparison = Comparison(graph)
    dtypes: list[str | None] = [output.type.dtype for output in graph.outputs]
    op_types: set[str] = set()
    references: dict[str, Outcome] = {}

    def reference(path: str) -> Outcome:
        # One FAST_COMPILE run per kind of path, and only where stock fails or ours raises.
        kind = "forward" if path in ("function", "jit") else path
        if kind not in references:
            references[kind] = _reference(graph, path)
        return references[kind]

    for path, rewrite in _variants(graph):
        name = f"{path}/{'rewritten' if rewrite else 'as built'}"
        with warnings.catch_warnings():
            if path == "function":
                stock = _function_path(graph, "stock", rewrite)
                with ours() if ours is not None else nullcontext():
                    our_outcome = _function_path(graph, "gpubackend", rewrite)
            else:
                stock, _ = _jaxified_path(graph, "stock", rewrite, path)
                with ours() if ours is not None else nullcontext():
                    our_outcome, seen = _jaxified_path(graph, "gpubackend", rewrite, path)
                op_types |= seen
        # A gradient has its input's dtype.
        wrt = graph.inputs[graph.float_input or 0]
        path_dtypes = [wrt.type.dtype] if path == "grad" else dtypes
        verdict, problems = _path_verdict(path, stock, our_outcome, path_dtypes, reference)
        comparison.paths[name] = verdict
        comparison.failing_paths += stock.error is not None and our_outcome.error is not None
        comparison.problems += [f"{name}: {problem}" for problem in problems]
    comparison.op_types = frozenset(op_types)
    return comparison


# --- many graphs ----------------------------------------------------------------------------------


@dataclass
class SupersetReport:
    """Counts per family and verdict, and per replaced op type met, over a run of `compare`."""

    comparisons: list[Comparison] = field(default_factory=list)

    def add(self, comparison: Comparison) -> None:
        self.comparisons.append(comparison)

    @property
    def violations(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.verdict == "violation"]

    def counts(self) -> dict[str, Counter[str]]:
        by_family: dict[str, Counter[str]] = {}
        for comparison in self.comparisons:
            by_family.setdefault(comparison.graph.family, Counter())[comparison.verdict] += 1
        return dict(sorted(by_family.items()))

    def op_type_counts(self) -> Counter[str]:
        return Counter(name for c in self.comparisons for name in c.op_types)

    def summary(self) -> str:
        header = f"{'family':<24}" + "".join(f"{verdict:>11}" for verdict in VERDICTS)
        lines = ["stock-superset differential: graphs per family and verdict", header]
        totals: Counter[str] = Counter()
        for family, counts in self.counts().items():
            totals.update(counts)
            lines.append(f"{family:<24}" + "".join(f"{counts[v]:>11}" for v in VERDICTS))
        lines.append(f"{'total':<24}" + "".join(f"{totals[v]:>11}" for v in VERDICTS))
        met = ", ".join(f"{name} {count}" for name, count in sorted(self.op_type_counts().items()))
        lines.append(f"graphs lowering each replaced op type (jaxified paths): {met}")
        # A graph that fails everywhere compares errors only: how many there are, per family.
        failing = Counter(
            c.graph.family for c in self.comparisons if c.failing_paths == len(c.paths)
        )
        lines.append(
            "graphs failing on every path, stock and ours: "
            + (", ".join(f"{family} {count}" for family, count in sorted(failing.items())) or "0")
        )
        for comparison in self.violations:
            lines.append(f"VIOLATION {comparison.graph.family}: {comparison.graph.description}")
            lines += [f"    {problem}" for problem in comparison.problems]
        return "\n".join(lines)


def run_stock_superset(count: int, progress: Callable[[str], None] | None = None) -> SupersetReport:
    """Compare ``count`` generated graphs (derandomised: the same graphs every run)."""
    report = SupersetReport()
    for graph in draw_graphs(count):
        comparison = compare(graph)
        report.add(comparison)
        if progress is not None:
            progress(f"stock superset: {graph.family} {comparison.verdict}")
    return report


def run_stock_superset_and_report(
    count: int, out_dir: str | Path, console: Console, device: str = "cpu", progress: bool = True
) -> SupersetReport:
    """Run `run_stock_superset` on ``device`` ("cpu", "gpu:1", ...), print its summary and write it
    to ``stock_superset.txt``."""
    with progress_display(progress, count) as advance, jax.default_device(resolve_device(device)):
        report = run_stock_superset(count, advance)
    summary = report.summary()
    path = Path(out_dir) / "stock_superset.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(summary + "\n")
    console.print(escape(summary), highlight=False)
    console.print(f"report: {path}")
    return report
