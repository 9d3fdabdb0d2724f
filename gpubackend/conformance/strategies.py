"""Hypothesis strategies for random Scan and OpFromGraph graphs.

A strategy draws a *spec* (plain data: an elementwise expression tree, taps,
nesting, sharing), and `build_generated` turns a spec into a `CaseGraph` whose
reference comes from PyTensor's Python backend. Generated cases then go
through the same checks as the catalogue.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytensor.compile.builders import OpFromGraph
from pytensor.graph.basic import Variable

from gpubackend.conformance.catalogue import Case, CaseGraph

# An expression tree: ("leaf", i) | ("const", c) | ("unary", name, child) | ("binary", name, left,
# right)
Expression = tuple

UNARY: dict[str, Callable[[Variable], Variable]] = {
    "sin": pt.sin,
    "cos": pt.cos,
    "tanh": pt.tanh,
    "neg": pt.neg,
}
BINARY: dict[str, Callable[[Variable, Variable], Variable]] = {
    "add": pt.add,
    "sub": pt.sub,
    "mul": pt.mul,
}
STATE_SIZE = 3


def expressions(n_leaves: int) -> st.SearchStrategy[Expression]:
    """Elementwise expressions over ``n_leaves`` inputs, using every operator family."""
    base = st.one_of(
        st.tuples(st.just("leaf"), st.integers(0, n_leaves - 1)),
        st.tuples(st.just("const"), st.sampled_from([0.5, -1.0, 2.0])),
    )

    def extend(children: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(
            st.tuples(st.just("unary"), st.sampled_from(sorted(UNARY)), children),
            st.tuples(st.just("binary"), st.sampled_from(sorted(BINARY)), children, children),
        )

    return st.recursive(base, extend, max_leaves=6)


def evaluate(expression: Expression, leaves: Sequence[Variable]) -> Variable:
    kind = expression[0]
    if kind == "leaf":
        return leaves[expression[1]]
    if kind == "const":
        return pt.as_tensor_variable(np.asarray(expression[1], dtype=pytensor.config.floatX))
    if kind == "unary":
        return UNARY[expression[1]](evaluate(expression[2], leaves))
    return BINARY[expression[1]](evaluate(expression[2], leaves), evaluate(expression[3], leaves))


def _bounded(expression: Expression, leaves: Sequence[Variable]) -> Variable:
    """The expression squashed by tanh, so recurrences stay finite, and shaped like the leaves.

    A drawn expression may use constants only; broadcasting against the first
    leaf keeps every generated body a state-shaped vector.
    """
    return pt.tanh(evaluate(expression, leaves)) + pt.zeros_like(leaves[0])


@dataclass(frozen=True)
class ScanSpec:
    taps: tuple[int, ...]
    n_steps: int
    with_sequence: bool
    shared_ofg: bool
    nested: bool
    nit_sot: bool
    body: Expression
    seed: int

    @property
    def n_leaves(self) -> int:
        return len(self.taps) + self.with_sequence + 1


@dataclass(frozen=True)
class OFGSpec:
    depth: int
    uses: int
    body: Expression
    seed: int


@st.composite
def scan_specs(draw: st.DrawFn) -> ScanSpec:
    taps = tuple(sorted(draw(st.sets(st.sampled_from([-3, -2, -1]), min_size=1, max_size=2))))
    with_sequence = draw(st.booleans())
    n_leaves = len(taps) + with_sequence + 1
    return ScanSpec(
        taps=taps,
        n_steps=draw(st.integers(1, 4)),
        with_sequence=with_sequence,
        shared_ofg=draw(st.booleans()),
        nested=draw(st.booleans()),
        nit_sot=draw(st.booleans()),
        body=draw(expressions(n_leaves)),
        seed=draw(st.integers(0, 2**16)),
    )


@st.composite
def ofg_specs(draw: st.DrawFn) -> OFGSpec:
    return OFGSpec(
        depth=draw(st.integers(1, 3)),
        uses=draw(st.integers(1, 3)),
        body=draw(expressions(2)),
        seed=draw(st.integers(0, 2**16)),
    )


def graph_specs() -> st.SearchStrategy[ScanSpec | OFGSpec]:
    return st.one_of(scan_specs(), ofg_specs())


def _inner_map(state: Variable) -> Variable:
    """A scan nested in the body: map over the state's elements."""
    return pytensor.map(
        lambda element: pt.sin(element) * 0.5, sequences=[state], return_updates=False
    )


def build_scan(spec: ScanSpec) -> CaseGraph:
    rng = np.random.default_rng(spec.seed)
    depth = -spec.taps[0]
    init, w = pt.matrix("init"), pt.vector("w")
    inputs, values = [init, w], [rng.normal(size=(depth, STATE_SIZE)), rng.normal(size=STATE_SIZE)]
    sequences = []
    if spec.with_sequence:
        xs = pt.matrix("xs")
        inputs.append(xs)
        values.append(rng.normal(size=(spec.n_steps, STATE_SIZE)))
        sequences = [xs]

    leaf_templates = [pt.vector(f"leaf{i}") for i in range(spec.n_leaves)]
    body_op = (
        OpFromGraph(
            leaf_templates, [_bounded(spec.body, leaf_templates)], inline=False, name="shared_body"
        )
        if spec.shared_ofg
        else None
    )

    def body(*args: Variable) -> Variable:
        # scan passes sequences first, then taps, then non-sequences; leaves are taps, sequence, w
        sequence_args, tap_args, (w_arg,) = (
            args[: len(sequences)],
            args[len(sequences) : -1],
            args[-1:],
        )
        leaves = [*tap_args, *sequence_args, w_arg]
        step = body_op(*leaves) if body_op is not None else _bounded(spec.body, leaves)
        if spec.nested:
            step = step + _inner_map(tap_args[-1])
        # A per-step output alongside the recurrence, when drawn
        return (step, pt.cos(step).sum()) if spec.nit_sot else step

    recurrence = {"initial": init[:depth] if depth > 1 else init[0], "taps": list(spec.taps)}
    scanned = pytensor.scan(
        body,
        sequences=sequences,
        outputs_info=[recurrence, None] if spec.nit_sot else [recurrence],
        non_sequences=[w],
        n_steps=spec.n_steps,
        return_updates=False,
    )
    outputs = list(scanned) if spec.nit_sot else [scanned]
    if body_op is not None:
        # The same op again, outside the scan
        outer_leaves = [init[0]] * len(spec.taps) + ([xs[0]] if spec.with_sequence else []) + [w]
        outputs.append(body_op(*outer_leaves))
    return CaseGraph(inputs, outputs, [np.asarray(v, dtype=pytensor.config.floatX) for v in values])


def build_ofg(spec: OFGSpec) -> CaseGraph:
    rng = np.random.default_rng(spec.seed)
    a, b = pt.vector("a"), pt.vector("b")
    op = OpFromGraph([a, b], [_bounded(spec.body, [a, b])], inline=False, name="level1")
    for level in range(2, spec.depth + 1):
        a, b = pt.vector("a"), pt.vector("b")
        op = OpFromGraph([a, b], [op(a, b) * b + a], inline=False, name=f"level{level}")
    x, y = pt.vector("x"), pt.vector("y")
    out = x
    for _ in range(spec.uses):
        out = op(out, y)
    values = [rng.normal(size=STATE_SIZE), rng.normal(size=STATE_SIZE)]
    return CaseGraph([x, y], [out], [np.asarray(v, dtype=pytensor.config.floatX) for v in values])


def build_generated(spec: ScanSpec | OFGSpec) -> CaseGraph:
    return build_scan(spec) if isinstance(spec, ScanSpec) else build_ofg(spec)


def spec_case(spec: ScanSpec | OFGSpec, index: int) -> Case:
    kind = "scan" if isinstance(spec, ScanSpec) else "ofg"
    return Case(f"generated_{kind}_{index}", "generated", partial(build_generated, spec))


def drawing(count: int) -> settings:
    """Derandomised settings to draw ``count`` distinct examples: Hypothesis draws some twice (the
    simplest first), so three times as many are drawn and the callers keep the distinct ones."""
    return settings(
        max_examples=count * 3,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


def draw_specs(count: int) -> list[ScanSpec | OFGSpec]:
    """``count`` distinct specs, reproducibly (derandomised), outside any test runner."""
    if count < 0:  # else Hypothesis refuses max_examples=count * 3
        raise ValueError(f"count={count}: expected a number of graphs to draw, 0 or more.")
    specs: list[ScanSpec | OFGSpec] = []
    if not count:
        return specs

    @drawing(count)
    @given(graph_specs())
    def collect(spec: ScanSpec | OFGSpec) -> None:
        if len(specs) < count and spec not in specs:
            specs.append(spec)

    collect()
    return specs


def generated_cases(count: int) -> list[Case]:
    return [spec_case(spec, index) for index, spec in enumerate(draw_specs(count))]
