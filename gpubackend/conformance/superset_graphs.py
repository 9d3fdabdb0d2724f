"""Hypothesis strategies for the stock-superset differential (`stock_superset`): one per family.

Each draws a `SupersetGraph` that reaches one of the op types whose JAX
lowering gpubackend replaces, in the forms models build them: constant and
shared inputs, length-1 (broadcastable) batch dimensions, Blockwise over
(advanced) indexing with batched integer and boolean indices
(``vectorize_graph`` of a core graph, as pymc-extras' marginalised models
do), lengths from the data (``x.shape[0]`` arithmetic) for Reshape,
ARange and Split, IncSubtensor/AdvancedIncSubtensor (set and inc; scalar, slice and
integer-array indices), IfElse, CheckAndRaise, OpFromGraph and for-Scans
(`gpubackend.conformance.strategies`). Some graphs fail under stock JAX too:
the differential then checks that ours fails the same way or gives
FAST_COMPILE's values.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import given
from hypothesis import strategies as st
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.conditional.op import ifelse
from pytensor.graph.basic import Variable
from pytensor.graph.replace import clone_replace, vectorize_graph
from pytensor.graph.traversal import graph_inputs
from pytensor.raise_op import CheckAndRaise

from gpubackend.conformance.strategies import build_generated, drawing, graph_specs

FLOAT = pytensor.config.floatX


@dataclass(frozen=True)
class SupersetGraph:
    """A graph to compare: symbolic inputs and outputs, input values, and its family's name.

    ``float_input`` is the position of the float input that ``vmap`` batches
    and ``grad`` differentiates with respect to (None: neither path runs).
    """

    family: str
    description: str
    inputs: tuple[Variable, ...]
    outputs: tuple[Variable, ...]
    values: tuple[np.ndarray, ...]
    float_input: int | None = None


def _seeded(draw: st.DrawFn) -> np.random.Generator:
    return np.random.default_rng(draw(st.integers(0, 2**16)))


def _floats(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.normal(size=shape).astype(FLOAT)


def _source(
    kind: str, name: str, value: np.ndarray, static_shape: tuple[int | None, ...]
) -> tuple[Variable, np.ndarray | None]:
    """A variable holding ``value``: a constant, a shared variable or an input (with its value)."""
    if kind == "constant":
        return pt.constant(value, name=name), None
    if kind == "shared":
        return pytensor.shared(value, name=name, shape=static_shape), None
    return pt.tensor(name, dtype=value.dtype.name, shape=static_shape), value


class _Builder:
    """Collects a graph's inputs with their values; the float input ``vmap``/``grad`` use."""

    def __init__(self) -> None:
        self.inputs: list[Variable] = []
        self.values: list[np.ndarray] = []
        self.float_input: int | None = None

    def add(
        self, variable: Variable, value: np.ndarray | None, differentiate: bool = False
    ) -> Variable:
        """``variable``; an input (``value`` given) is recorded, and with ``differentiate`` is the
        float input."""
        if value is not None:
            if differentiate:
                self.float_input = len(self.inputs)
            self.inputs.append(variable)
            self.values.append(np.asarray(value, dtype=variable.type.dtype))
        return variable

    def source(
        self,
        kind: str,
        name: str,
        value: np.ndarray,
        static_shape: tuple[int | None, ...],
        differentiate: bool = False,
    ) -> Variable:
        variable, input_value = _source(kind, name, value, static_shape)
        return self.add(variable, input_value, differentiate)

    def graph(self, family: str, description: str, outputs: list[Variable]) -> SupersetGraph:
        return SupersetGraph(
            family,
            description,
            tuple(self.inputs),
            tuple(outputs),
            tuple(self.values),
            self.float_input,
        )


def _maybe_in_ofg(
    draw: st.DrawFn, builder: _Builder, outputs: list[Variable]
) -> tuple[list[Variable], str]:
    """The outputs, or the same computed by an OpFromGraph of the graph's inputs (drawn)."""
    if not builder.inputs or not draw(st.booleans()):
        return outputs, ""
    # OpFromGraph takes shared variables only as explicit inputs.
    shared = [var for var in graph_inputs(outputs) if isinstance(var, SharedVariable)]
    outer_inputs = [*builder.inputs, *shared]
    inner_inputs = [variable.type() for variable in outer_inputs]
    inner_outputs = clone_replace(outputs, dict(zip(outer_inputs, inner_inputs, strict=True)))
    op = OpFromGraph(inner_inputs, inner_outputs, inline=False, name="drawn")
    wrapped = op(*outer_inputs)
    return (list(wrapped) if isinstance(wrapped, list | tuple) else [wrapped]), " in an OFG"


# --- Blockwise over indexing ------------------------------------------------------------------


def _batch_shape(sizes: tuple[int, ...], batched: bool) -> tuple[int, ...]:
    return sizes if batched else (1,) * len(sizes)


def _static(shape: tuple[int, ...], broadcastable: bool) -> tuple[int | None, ...]:
    """Static shape: 1 where the dimension is declared broadcastable, else unknown."""
    return tuple(1 if broadcastable and size == 1 else None for size in shape)


@st.composite
def blockwise_indexing_graphs(draw: st.DrawFn) -> SupersetGraph:
    """``vectorize_graph`` of a read, set or inc of a table at integer or boolean indices."""
    rng = _seeded(draw)
    core_shape = draw(st.sampled_from([(4,), (3, 4)]))
    index_kind = draw(st.sampled_from(["scalar", "vector", "mask", "pair", "scalar and slice"]))
    if len(core_shape) == 1 and index_kind in ("pair", "scalar and slice"):
        index_kind = "scalar"
    operation = draw(st.sampled_from(["read", "set", "inc"]))
    table_source = draw(
        st.sampled_from(["constant", "shared", "broadcastable input", "batched input", "core"])
    )
    index_source = draw(
        st.sampled_from(["batched input", "broadcastable input", "constant", "batched constant"])
    )
    sizes = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    reduce = draw(st.booleans())

    table = pt.tensor("table", shape=core_shape)
    length = core_shape[0]
    positions: list[Variable]
    if index_kind == "mask":
        positions = [pt.tensor("mask", dtype="bool", shape=(length,))]
    elif index_kind == "vector":
        positions = [pt.tensor("indices", dtype="int64", shape=(2,))]
    elif index_kind == "pair":
        positions = [pt.scalar("row", dtype="int64"), pt.scalar("column", dtype="int64")]
    else:
        positions = [pt.scalar("row", dtype="int64")]
    w = pt.scalar("w")
    key: tuple = tuple(positions)
    if index_kind == "scalar and slice":
        key = (positions[0], slice(1, None))
    selected = table[key]
    if operation == "read":
        core = selected * w
    elif operation == "set":
        core = pt.set_subtensor(selected, w)
    else:
        core = pt.inc_subtensor(selected, w)
    if reduce:
        core = core.sum()

    builder = _Builder()
    batched_indices = index_source.startswith("batched")
    replacements: dict[Variable, Variable] = {}
    if table_source == "core":
        replacements[table] = pt.constant(_floats(rng, core_shape), name="table")
    else:
        batched_table = table_source == "batched input"
        kind = {"broadcastable input": "input", "batched input": "input"}.get(table_source)
        shape = _batch_shape(sizes, batched_table) + core_shape
        replacements[table] = builder.source(
            kind or table_source, "tables", _floats(rng, shape), _static(shape, not batched_table)
        )
    for variable in positions:
        core_index_shape = variable.type.shape
        shape = _batch_shape(sizes, batched_indices) + tuple(int(s or 0) for s in core_index_shape)
        value: np.ndarray
        if variable.type.dtype == "bool":
            value = rng.random(shape) < 0.5
        else:
            bound = core_shape[1] if variable.name == "column" else length
            value = rng.integers(-bound, bound, size=shape)
        kind = "constant" if index_source.endswith("constant") else "input"
        replacements[variable] = builder.source(
            kind, f"{variable.name}s", value, _static(shape, not batched_indices)
        )
    replacements[w] = builder.source(
        "input", "weights", _floats(rng, sizes), (None,) * len(sizes), differentiate=True
    )
    outputs = [vectorize_graph(core, replacements)]
    description = (
        f"{operation} table{list(core_shape)}[{index_kind}]{'.sum()' if reduce else ''}, "
        f"batch {list(sizes)}, table {table_source}, indices {index_source}"
    )
    return builder.graph("blockwise-indexing", description, outputs)


@st.composite
def blockwise_length_graphs(draw: st.DrawFn) -> SupersetGraph:
    """``vectorize_graph`` of a core graph whose length ``n`` is a length-1-batched value."""
    rng = _seeded(draw)
    n, w = pt.scalar("n", dtype="int64"), pt.scalar("w")
    shapes: dict[str, Callable[[], Variable]] = {
        "arange": lambda: pt.arange(n) * w,
        "zeros": lambda: pt.zeros((n,)) + w,
        "reshape": lambda: pt.arange(n * 2).reshape((n, 2)) * w,
        "scan": lambda: pytensor.scan(
            lambda previous, w: previous * w + 1.0,
            outputs_info=[pt.zeros(())],
            non_sequences=[w],
            n_steps=n,
            return_updates=False,
        ),
    }
    kind = draw(st.sampled_from(sorted(shapes)))
    length_source = draw(st.sampled_from(["constant", "shared", "input", "batched constant"]))
    sizes = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    length = draw(st.integers(1, 3))
    builder = _Builder()
    if length_source == "batched constant":
        outer_length = pt.constant(np.full(sizes, length, dtype="int64"), name="n")
    else:
        ones = (1,) * len(sizes)
        outer_length = builder.source(
            length_source, "n", np.full(ones, length, dtype="int64"), ones
        )
    weights = builder.source(
        "input", "weights", _floats(rng, sizes), (None,) * len(sizes), differentiate=True
    )
    outputs = [vectorize_graph(shapes[kind](), {n: outer_length, w: weights})]
    description = f"{kind}(n={length}) batch {list(sizes)}, n {length_source}"
    return builder.graph("blockwise-length", description, outputs)


# --- IncSubtensor, AdvancedSubtensor, AdvancedIncSubtensor -------------------------------------


def _index(kind: str, x: Variable, builder: _Builder, rng: np.random.Generator) -> tuple:
    length = x.shape[0]
    if kind == "scalar":
        return (pt.constant(np.int64(rng.integers(-3, 3))),)
    if kind == "scalar input":
        return (builder.source("input", "i", np.asarray(rng.integers(-3, 3)), ()),)
    if kind == "slice":
        return (slice(1, 3),)
    if kind == "reversed slice":
        return (slice(None, None, -2),)
    if kind == "slice from the shape":
        return (slice(length // 2, None),)
    if kind == "whole slice":
        # Ours writes a whole-axis update without a scatter (`subtensor`).
        return (slice(None),)
    if kind == "slice to the length":
        return (slice(0, length),)
    if kind == "slice from an input":
        return (slice(builder.source("input", "stop", np.asarray(rng.integers(0, 5)), ()), None),)
    if kind == "index array":
        return (pt.constant(rng.integers(-3, 3, size=3)),)
    if kind == "index array input":
        return (builder.source("input", "indices", rng.integers(-3, 3, size=(2,)), (None,)),)
    if kind == "index matrix":
        return (pt.constant(rng.integers(-3, 3, size=(2, 2))),)
    if kind == "mask":
        return (pt.constant(rng.random(3) < 0.6),)
    if kind == "mask from the data":
        return (x[:, 0] > 0.0 if x.type.ndim == 2 else x > 0.0,)
    if kind == "array and slice":
        return (pt.constant(rng.integers(-3, 3, size=2)), slice(None, 2))
    return (pt.constant(rng.integers(-3, 3, size=2)), pt.constant(rng.integers(-2, 2, size=2)))


INDEX_KINDS = (
    "scalar",
    "scalar input",
    "slice",
    "reversed slice",
    "slice from the shape",
    "whole slice",
    "slice to the length",
    "slice from an input",
    "index array",
    "index array input",
    "index matrix",
    "mask",
    "mask from the data",
    "array and slice",
    "two arrays",
)


@st.composite
def indexing_graphs(draw: st.DrawFn) -> SupersetGraph:
    """A read, set or inc of ``x[index]``, ``x`` an input, a constant or a shared variable."""
    rng = _seeded(draw)
    ndim = draw(st.sampled_from([1, 2]))
    kind = draw(st.sampled_from(INDEX_KINDS))
    if ndim == 1 and kind in ("array and slice", "two arrays"):
        ndim = 2
    x_source = draw(st.sampled_from(["input", "constant", "shared"]))
    operation = draw(st.sampled_from(["read", "set", "inc"]))
    update = draw(st.sampled_from(["scalar", "matched", "reversed"]))
    builder = _Builder()
    shape = (3,) if ndim == 1 else (3, 2)
    x = builder.source(x_source, "x", _floats(rng, shape), (None,) * ndim, differentiate=True)
    w = builder.source(
        "input", "w", np.asarray(rng.normal()), (), differentiate=x_source != "input"
    )
    key = _index(kind, x, builder, rng)
    selected = x[key]
    if update == "scalar":
        y = w
    elif update == "reversed" and selected.type.ndim > 0:
        y = selected[::-1] * w
    else:
        y = selected * w
    if operation == "read":
        out = selected * w
    elif operation == "set":
        out = pt.set_subtensor(selected, y)
    else:
        out = pt.inc_subtensor(selected, y)
    # Reversed afterwards: what Scan gradients do with an update (XLA once aborted on it).
    reversed_after = out.type.ndim > 0 and draw(st.booleans())
    if reversed_after:
        out = out[::-1]
    outputs, wrapped = _maybe_in_ofg(draw, builder, [out])
    description = (
        f"{operation} x{list(shape)}[{kind}] with {update} update"
        f"{', reversed' if reversed_after else ''}, x {x_source}{wrapped}"
    )
    return builder.graph("indexing", description, outputs)


# --- Reshape and ARange -------------------------------------------------------------------------


@st.composite
def length_graphs(draw: st.DrawFn) -> SupersetGraph:
    """``arange``, ``reshape`` and ``split`` with lengths from constants, inputs and the data's
    shape."""
    rng = _seeded(draw)
    builder = _Builder()
    size = draw(st.sampled_from([4, 6]))
    x = builder.source("input", "x", _floats(rng, (size,)), (None,), differentiate=True)
    n = pt.scalar("n", dtype="int64")
    bounds: dict[str, Callable[[], Variable]] = {
        "constant": lambda: pt.constant(np.int64(3)),
        "shape": lambda: x.shape[0],
        "shape arithmetic": lambda: x.shape[0] // 2 + 1,
        "integer input": lambda: builder.add(n, np.asarray(3)) if n not in builder.inputs else n,
        "float input": lambda: pt.cast(builder.source("input", "s", np.asarray(2.0), ()), "int64"),
    }
    kind = draw(st.sampled_from(["arange", "reshape", "split"]))
    if kind == "arange":
        stop = bounds[stop_kind := draw(st.sampled_from(sorted(bounds)))]()
        start_kind = draw(st.sampled_from(["none", "constant", "shape arithmetic"]))
        start = {"none": 0, "constant": 1, "shape arithmetic": x.shape[0] // 4}[start_kind]
        step = draw(st.sampled_from([1, 2]))
        dtype = draw(st.sampled_from(["int64", FLOAT]))
        out = pt.arange(start, stop, step, dtype=dtype) * x[0]
        description = f"arange(start {start_kind}, stop {stop_kind}, step {step}, {dtype})"
    elif kind == "split":
        head_kind = draw(st.sampled_from(sorted(bounds)))
        head = pt.minimum(bounds[head_kind](), x.shape[0])
        first, second = pt.split(x, pt.stack([head, x.shape[0] - head]), n_splits=2)
        out = first.sum() * second
        description = f"split(head {head_kind})"
    else:
        rows_kind = draw(st.sampled_from(sorted(bounds)))
        rows = bounds[rows_kind]()
        target = draw(st.sampled_from(["rows, -1", "rows, 2", "-1", "1, len"]))
        source = pt.tile(x, 6)[: rows * 2] if target in ("rows, -1", "rows, 2") else x
        shape = {
            "rows, -1": (rows, -1),
            "rows, 2": (rows, 2),
            "-1": (-1,),
            "1, len": (1, x.shape[0]),
        }[target]
        out = source.reshape(shape) * 2.0
        description = f"reshape(({target})), rows {rows_kind}"
    outputs, wrapped = _maybe_in_ofg(draw, builder, [out])
    return builder.graph("reshape-arange", description + wrapped, outputs)


# --- IfElse -------------------------------------------------------------------------------------


@st.composite
def ifelse_graphs(draw: st.DrawFn) -> SupersetGraph:
    """An ifelse (a LazyIfElse with OpFromGraph branches once rewritten) of values or shapes."""
    rng = _seeded(draw)
    builder = _Builder()
    x = builder.source(
        "input", "x", _floats(rng, (draw(st.integers(1, 4)),)), (None,), differentiate=True
    )
    flag = builder.source("input", "flag", np.asarray(draw(st.sampled_from([-1.0, 1.0]))), ())
    conditions: dict[str, Callable[[], Variable]] = {
        "flag": lambda: flag > 0,
        "shape": lambda: x.shape[0] > 2,
        "data": lambda: x.sum() > 0,
    }
    branches: dict[str, Callable[[], tuple[list[Variable], list[Variable]]]] = {
        "values": lambda: ([pt.exp(x).cumsum()], [pt.sin(x) * 2]),
        "shapes": lambda: ([x.shape[0] * 2], [x.shape[0] + x.shape[0]]),
        "mixed": lambda: ([pt.zeros((x.shape[0],)) + x.sum()], [x * 3]),
        "two outputs": lambda: ([x * 2, x.sum()], [x[::-1], x.max()]),
        "indexing": lambda: ([pt.set_subtensor(x[:1], 0.0)], [pt.inc_subtensor(x[-1:], 1.0)]),
    }
    condition_kind = draw(st.sampled_from(sorted(conditions)))
    branch_kind = draw(st.sampled_from(sorted(branches)))
    if_true, if_false = branches[branch_kind]()
    chosen = ifelse(conditions[condition_kind](), if_true, if_false)
    outputs = list(chosen) if isinstance(chosen, list | tuple) else [chosen]
    if draw(st.booleans()):
        # Nested: the chosen values decide again.
        outputs = [ifelse(flag < 0, output, output * 2) for output in outputs]
    description = f"ifelse({condition_kind}) of {branch_kind}"
    return builder.graph("ifelse", description, outputs)


# --- CheckAndRaise ------------------------------------------------------------------------------

CONDITIONS: dict[str, Callable[[Variable], Variable]] = {
    "constant true": lambda x: pt.constant(True),
    "shape held": lambda x: pt.eq(x.shape[0], 4),
    "shape violated": lambda x: pt.eq(x.shape[0], 3),
    "values held": lambda x: pt.all(x > -10),
    "values violated": lambda x: pt.all(x > 10),
}


@st.composite
def check_graphs(draw: st.DrawFn) -> SupersetGraph:
    """A CheckAndRaise on shapes (concrete while tracing) or values, of an input or a constant."""
    rng = _seeded(draw)
    builder = _Builder()
    x_source = draw(st.sampled_from(["input", "constant", "shared"]))
    x = builder.source(x_source, "x", _floats(rng, (4,)), (None,), differentiate=True)
    w = builder.source("input", "w", np.asarray(1.5), (), differentiate=x_source != "input")
    names = draw(st.lists(st.sampled_from(sorted(CONDITIONS)), min_size=1, max_size=2))
    message = f"x must satisfy {' and '.join(names)}"
    checked = CheckAndRaise(AssertionError, message)(x, *(CONDITIONS[name](x) for name in names))
    outputs, wrapped = _maybe_in_ofg(draw, builder, [checked * w])
    description = f"check {' and '.join(names)} of x {x_source}{wrapped}"
    return builder.graph("check-and-raise", description, outputs)


# --- Scan and OpFromGraph -----------------------------------------------------------------------


@st.composite
def scan_and_ofg_graphs(draw: st.DrawFn) -> SupersetGraph:
    """The conformance suite's generated Scan/OpFromGraph graphs, with PyTensor's gradient of
    their outputs' sum as one more output when drawn (Scan gradients write buffers with
    IncSubtensor and read them reversed)."""
    spec = draw(graph_specs())
    graph = build_generated(spec)
    outputs = list(graph.outputs)
    # One in four: a gradient's compiles cost several times the graph's.
    with_gradient = draw(st.integers(0, 3)) == 0
    if with_gradient:
        total = sum(output.sum() for output in outputs)
        outputs.append(pytensor.grad(total, graph.inputs[0], disconnected_inputs="ignore"))
    kind = type(spec).__name__.removesuffix("Spec")
    values = tuple(np.asarray(value) for value in graph.values)
    description = f"{kind}{' with its gradient' if with_gradient else ''} {spec}"
    return SupersetGraph("scan-ofg", description, tuple(graph.inputs), tuple(outputs), values, 0)


FAMILIES: dict[str, st.SearchStrategy[SupersetGraph]] = {
    "blockwise-indexing": blockwise_indexing_graphs(),
    "blockwise-length": blockwise_length_graphs(),
    "indexing": indexing_graphs(),
    "reshape-arange": length_graphs(),
    "ifelse": ifelse_graphs(),
    "check-and-raise": check_graphs(),
    "scan-ofg": scan_and_ofg_graphs(),
}
"""Each family's strategy."""
SHARES = {"blockwise-indexing": 3, "indexing": 2}
"""How many graphs of a family are drawn for one of the others (default 1): the most varied
families, Blockwise over indexing the least tested before, get more."""


def _family_counts(count: int) -> dict[str, int]:
    """``count`` split over the families by their shares, every family at least once when it
    can be."""
    total = sum(SHARES.get(name, 1) for name in FAMILIES)
    counts = {name: count * SHARES.get(name, 1) // total for name in FAMILIES}
    for name in list(FAMILIES)[: count - sum(counts.values())]:
        counts[name] += 1
    return counts


def draw_family(name: str, count: int) -> list[SupersetGraph]:
    """``count`` graphs of one family, reproducibly (derandomised), outside any test runner."""
    graphs: list[SupersetGraph] = []
    seen: set[tuple[str, bytes]] = set()
    if count <= 0:
        return graphs

    @drawing(count)
    @given(FAMILIES[name])
    def collect(graph: SupersetGraph) -> None:
        key = (graph.description, b"".join(value.tobytes() for value in graph.values))
        if len(graphs) < count and key not in seen:
            seen.add(key)
            graphs.append(graph)

    collect()
    return graphs


def draw_graphs(count: int) -> list[SupersetGraph]:
    """``count`` graphs of every family by its share, interleaved, the same ones every run."""
    drawn = [draw_family(name, n) for name, n in _family_counts(count).items()]
    interleaved = [graph for group in itertools.zip_longest(*drawn) for graph in group if graph]
    return interleaved[:count]
