"""Plain (Scan-free) graphs that index an array at literal positions, for the index differential.

An `IndexSpec` reads ``x[i]``, ``x[[i, j]]`` or ``pt.take(x, i)``, or writes
``set_subtensor``/``inc_subtensor`` at such a position, with ``i`` a literal
(a constant in the graph) drawn in range, past the end, negative in range or
negative past the start, or a literal index array mixing them (`POSITIONS`).
``x`` is a vector or a matrix (indexed along its first axis) whose length is
either in its type (``static``: one call) or known only at run time: then the
graph is called at the drawn length, on an empty array and on a longer one, so
that one literal is in range on some calls and out of range on others.
`index_graph` builds the graph and each call's inputs; `truth` computes a
call with numpy, whose ``IndexError`` is the independent reference.

Issue 43: such literals once clamped silently under JAX (``x[3]`` of a
length-3 vector gave ``x[2]``, ``set_subtensor(x[3], 9)`` gave ``x``) and
read past the array under NUMBA (``take(x, 9)``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pytensor.tensor as pt
from hypothesis import given
from hypothesis import strategies as st
from pytensor.graph.basic import Variable

from gpubackend.conformance.strategies import drawing

OPERATIONS = ("read", "take", "set", "inc")
"""``x[index] * w``, ``pt.take(x, index) * w``, ``set_subtensor(x[index], w)``,
``inc_subtensor(x[index], w)``."""
POSITIONS = ("in range", "past the end", "negative in range", "negative past the start", "array")
"""Where the literal points, relative to the drawn length; ``array``: a literal index array of
such positions."""
LONGER = 2
"""A run-time-length graph's third call passes an array this much longer than the drawn length."""


@dataclass(frozen=True)
class IndexSpec:
    operation: str
    position: str
    """One of `POSITIONS`."""
    index: int | tuple[int, ...]
    """The literal: a position, or the entries of an index array."""
    length: int
    """The length ``index`` was drawn against; a static ``x`` has it in its type."""
    static: bool
    width: int = 0
    """0: ``x`` is a vector; else a matrix of ``width`` columns, indexed along its rows."""
    seed: int = 0

    @property
    def lengths(self) -> tuple[int, ...]:
        """Per call, the length of ``x``: the static one, or the drawn one, empty and longer."""
        return (self.length,) if self.static else (self.length, 0, self.length + LONGER)

    @property
    def literal(self) -> int | np.ndarray:
        return (
            np.asarray(self.index, dtype="int64") if isinstance(self.index, tuple) else self.index
        )


@st.composite
def index_specs(draw: st.DrawFn, position: str | None = None) -> IndexSpec:
    """A spec whose literal is at ``position`` (one of `POSITIONS`; None: drawn)."""
    length = draw(st.integers(1, 4))
    in_range, past_end = st.integers(0, length - 1), st.integers(length, length + 2)
    negative, before_start = st.integers(-length, -1), st.integers(-length - 3, -length - 1)
    position = position or draw(st.sampled_from(POSITIONS))
    index: int | tuple[int, ...]
    if position == "array":
        entry = st.one_of(in_range, past_end, negative, before_start)
        index = tuple(draw(st.lists(entry, min_size=1, max_size=3)))
    else:
        literals = dict(zip(POSITIONS, (in_range, past_end, negative, before_start), strict=False))
        index = draw(literals[position])
    return IndexSpec(
        operation=draw(st.sampled_from(OPERATIONS)),
        position=position,
        index=index,
        length=length,
        static=draw(st.booleans()),
        width=draw(st.sampled_from([0, 0, 2])),
        seed=draw(st.integers(0, 2**16)),
    )


def _draw(strategy: st.SearchStrategy[IndexSpec], count: int) -> list[IndexSpec]:
    specs: list[IndexSpec] = []

    @drawing(count)
    @given(strategy)
    def collect(spec: IndexSpec) -> None:
        if len(specs) < count and spec not in specs:
            specs.append(spec)

    collect()
    return specs


def draw_index_specs(count: int) -> list[IndexSpec]:
    """``count`` distinct specs, reproducibly (derandomised), outside any test runner: as many of
    each position, interleaved."""
    if count < 0:  # else Hypothesis refuses max_examples=count * 3
        raise ValueError(f"count={count}: expected a number of graphs to draw, 0 or more.")
    if not count:
        return []
    per_position = -(-count // len(POSITIONS))
    groups = [_draw(index_specs(position), per_position) for position in POSITIONS]
    return [spec for group in itertools.zip_longest(*groups) for spec in group if spec][:count]


@dataclass
class IndexGraph:
    """A spec's graph: inputs ``x`` and ``w``, one output, and each call's input values."""

    inputs: list[Variable]
    outputs: list[Variable]
    calls: list[list[np.ndarray]] = field(repr=False)
    updates: dict[Variable, Variable] = field(default_factory=dict)

    def arguments(self) -> list[list[np.ndarray]]:
        return self.calls


def _call_values(spec: IndexSpec) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(spec.seed)
    columns = (spec.width,) if spec.width else ()
    return [
        [rng.normal(size=(length, *columns)), np.asarray(rng.normal())] for length in spec.lengths
    ]


def index_graph(spec: IndexSpec) -> IndexGraph:
    x = pt.tensor(
        "x",
        dtype="float64",
        shape=(spec.length if spec.static else None,) + (None,) * (spec.width > 0),
    )
    w = pt.scalar("w", dtype="float64")
    literal = spec.literal
    if spec.operation == "read":
        out = x[literal] * w
    elif spec.operation == "take":
        # A vector is taken from as the issue wrote it (flattened); a matrix along its rows.
        out = pt.take(x, literal, axis=0 if spec.width else None) * w
    elif spec.operation == "set":
        out = pt.set_subtensor(x[literal], w)
    else:
        out = pt.inc_subtensor(x[literal], w)
    return IndexGraph([x, w], [out], _call_values(spec))


def truth(spec: IndexSpec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """One call's output computed by numpy; raises numpy's IndexError where the literal is out of
    range."""
    literal = spec.literal
    if spec.operation == "read":
        return x[literal] * w
    if spec.operation == "take":
        return np.take(x, literal, axis=0 if spec.width else None) * w
    updated = x.copy()
    if spec.operation == "set":
        updated[literal] = w
    else:
        # inc_subtensor adds once per occurrence of a repeated index, as np.add.at does.
        np.add.at(updated, literal, w)
    return updated
