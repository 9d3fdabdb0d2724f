"""While-Scan graphs for the differential fuzzer: specs as plain data, their graphs, inputs and a
numpy twin.

A `WhileGraphSpec` says which loop runs (`LoopSpec`: recurrence, dtype,
width, bound, how ``n_steps`` is given, whether a random generator rides
along), what reads its trace (`ConsumerSpec`), whether the loop sits inside a
for-Scan, an OpFromGraph or another while-Scan (``wrapper``) or feeds a second
loop (``chain``), and at which step each call stops (``stops``: one call runs
to the bound, others stop early). `while_graph` builds its PyTensor graph and
`call_inputs` the inputs of each call, chosen so that the loop stops where the
spec says.

The graph is written once, against an `Ops` namespace: `SymbolicOps` builds
PyTensor variables, `NumericOps` computes with numpy for one call's inputs.
The numpy run (`truth`) is an independent reference: numpy's own semantics
(an index past the end raises, elementwise shapes must agree) with none of
PyTensor's rewrites, which lets the differential runner tell an upstream bug
in the reference from a bug of a backend. Gradients have no numpy twin.

Each spec belongs to one class of issue 18's table (`case_class`): "1" to
"13", or a family of its own ("gradient", "rng", "reduction", ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import given
from hypothesis import strategies as st
from pytensor.compile.builders import OpFromGraph
from pytensor.conditional.op import ifelse
from pytensor.graph.basic import Variable
from pytensor.raise_op import Assert, CheckAndRaise
from pytensor.scan import until

from gpubackend.conformance.strategies import drawing

RECURRENCES = ("sit-sot", "mit-sot", "nit-sot", "sequence")
"""sit-sot ``x_t = f(x_{t-1})``; mit-sot ``f(x_{t-1}, x_{t-2})``; nit-sot: the trace read is a
per-step output ``g(x_t)`` beside the state; sequence: ``f(x_{t-1}, seq_t)``, with a sequence that
may outlast the loop."""
N_STEPS = ("constant", "input", "data")
"""``n_steps`` as a Python int, as an int64 input, or computed from a float input
(``cast(floor(nf), int64)``)."""
WRAPPERS = ("none", "for", "ofg", "while")
"""Where the loop sits: the top-level graph, a for-Scan's body, an OpFromGraph, another while-Scan's
body."""
CHAINS = ("none", "n_steps", "sequence", "for_sequence")
"""A second loop fed by the first trace, whose own trace the consumer reads: a while-Scan with
``n_steps`` the first's length, a while-Scan over the first trace, or a for-Scan mapping it with
``n_steps`` the bound."""
MULTIPLIERS = (1, 2, 3)
"""A wrapped loop runs once per multiplier of its initial state (the for-Scan's or outer
while-Scan's sequence)."""
NEVER = np.inf
"""A stopping threshold no loop reaches."""

NUMERIC_REDUCTIONS = ("sum", "prod", "mean", "max", "min")
REDUCTIONS = (*NUMERIC_REDUCTIONS, "any", "all")
"""Every reduction reads a bool trace; a numeric trace gets `NUMERIC_REDUCTIONS`."""
CONSUMERS = (
    "reduce",
    "index",
    "slice",
    "step_input",
    "drop_last",
    "with_trace",
    "with_vector",
    "set_index",
    "set_slice",
    "check_length",
    "zeros",
    "cumsum",
    "trace",
    "shape",
    "grad",
    "length",
)
"""What reads the trace ``xs``: ``xs.op(axis)``; ``xs[k]`` (constant or input ``k``); ``xs[a:b:c]``;
``xs[::s]`` with ``s`` an input; ``xs[:xs.shape[0] - k]`` with ``k`` an input; elementwise with
another trace or with an input vector; ``set_subtensor``/``inc_subtensor`` at an index,
``set_subtensor(xs[1:], v)``; an ``Assert`` or ``CheckAndRaise`` on ``xs.shape[0]``;
``zeros(xs.shape[0] - c)``; ``cumsum``; the trace itself; its shape; a gradient of a scalar read
through the loop; integer arithmetic on its length, or branches that read it (`LENGTH_VARIANTS`)."""
ARRAY_CONSUMERS = tuple(
    c for c in CONSUMERS if c not in {"reduce", "index", "shape", "grad", "length"}
)
"""Consumers whose result is an array, which ``summed`` turns into a scalar of static shape."""
BOOL_CONSUMERS = (
    "reduce",
    "index",
    "slice",
    "step_input",
    "drop_last",
    "check_length",
    "zeros",
    "trace",
    "shape",
    "length",
)
INT_CONSUMERS = tuple(kind for kind in CONSUMERS if kind != "grad")
GRADIENT_OF = ("sum", "last", "index", "slice")
LENGTH_VARIANTS = ("add3", "mul3", "pinned_max", "ifelse")
"""The states that broke pymc-extras' convergent Kalman filter, on ``n = xs.shape[0]`` and an int64
input ``k``: ``n + k + 2`` and ``n * k * 3`` (one n-ary Add or Mul once canonicalised);
``zeros(stack([minimum(n, 0) + 5, 3]).max()).shape[0] + n`` (a reduction whose bounds pin it
down); ``ifelse(n >= k, 2 * xs.sum(), xs.sum() - n)`` (branches that read the trace, which
PyTensor makes lazy: ``lax.cond`` under JAX)."""

UPSTREAM_BUGS = {
    "positive-index": "a constant positive index of a while-Scan "
    "trace is translated by PyTensor's rewrites as if "
    "the trace had n_steps entries (a value, or another entry, where the trace is shorter)",
    "negative-index-reads-initial-state": "a negative index "
    "past a while-Scan trace's start reads the loop's "
    "initial state instead of raising IndexError (merged "
    "with the trace's [1:] in every mode, FAST_COMPILE too)",
    "for-scan-past-sequence": "a for-Scan with more steps "
    "than its sequence has entries reads past the end "
    "once PyTensor's rewrites drop the length check",
    "negative-zeros": "zeros(length - c) with a negative "
    "length is accepted: its shape is computed without the "
    "allocation and comes back negative",
    "numba-step-count-edges": "PyTensor's Numba backend does not check a negative n_steps (its "
    "Scan runs, or fails later with another error)",
}
"""PyTensor bugs the differential runner finds in the reference or in the rewritten graph (README,
"Conformance suite"); `upstream_hint` names the one a spec can hit."""

CHECKS_RESTORED = frozenset({"for-scan-past-sequence"})
"""The `UPSTREAM_BUGS` where the rewrites drop a check of the reference that gpubackend puts back
(`gpubackend.rewrites.scan_lengths`): there FAST_COMPILE's error is what every mode must raise, and
doing what the rewritten graph does is no excuse."""


@dataclass(frozen=True)
class LoopSpec:
    recurrence: str = "sit-sot"
    dtype: str = "float64"
    """Of the trace read: float64, int64, or bool (a nit-sot ``x_t > level`` beside a float
    state)."""
    width: int = 0
    """0: a scalar state (the trace is a vector); 1 to 3: a vector state (the trace is a matrix)."""
    bound: int = 6
    n_steps: str = "constant"
    sequence_extra: int = 0
    """How many entries the sequence has beyond the bound (recurrence ``sequence``)."""
    rng: bool = False
    """Each step draws ``floor(uniform())`` (always 0) from a shared generator carried through the
    loop."""

    @property
    def depth(self) -> int:
        return 2 if self.recurrence == "mit-sot" else 1

    @property
    def state_dtype(self) -> str:
        return "int64" if self.dtype == "int64" else "float64"


@dataclass(frozen=True)
class ConsumerSpec:
    kind: str
    op: str = ""
    """reduce: the reduction; grad: the scalar differentiated (`GRADIENT_OF`)."""
    position: int = 0
    """index, set_index, grad of an index: the entry; drop_last and length: ``k``; step_input:
    ``s``; check_length: the least length; zeros: ``c``."""
    from_input: bool = False
    """index: the position is an int64 input rather than a constant."""
    bounds: tuple[int | None, int | None, int | None] = (None, None, None)
    """slice: start, stop, step."""
    variant: str = ""
    """with_trace: ``shifted`` (``xs[1:]`` and ``xs``) or ``second_loop`` (a second loop's trace);
    with_vector: the vector's length per call, ``match`` (the trace's), ``bound`` or ``mismatch``
    (one more); set_slice: ``match`` or ``mismatch``; check_length: ``Assert`` or ``CheckAndRaise``
    (a ValueError); zeros: ``value`` or ``shape``; inc: set_index adds instead of setting
    (``inc``); index: ``take`` reads the entry with ``pt.take``; length: one of
    `LENGTH_VARIANTS`."""
    axis: int | None = None
    """reduce: None, or 0 (over the steps) for a matrix trace."""
    summed: bool = False
    """An array result is summed to a scalar (a static shape) rather than returned as is."""
    order: int = 1
    """grad: 1, or 2 (the gradient of the gradient's sum)."""
    wrt: str = "init"
    """grad: ``init`` (the loop's initial state) or ``param`` (its growth factor, a
    non-sequence)."""


@dataclass(frozen=True)
class WhileGraphSpec:
    loop: LoopSpec
    consumer: ConsumerSpec
    wrapper: str = "none"
    chain: str = "none"
    stops: tuple[int, ...] = (3, 6, 2)
    """Per call, the step at which the loop stops (the bound: it runs to the end)."""
    seed: int = 0


def case_class(spec: WhileGraphSpec) -> str:
    """The class of issue 18's table the spec exercises, or the family it belongs to."""
    consumer, loop = spec.consumer, spec.loop
    if loop.rng:
        return "rng"
    if spec.wrapper != "none":
        return "9"
    if spec.chain != "none":
        return "10"
    if loop.n_steps == "data" or consumer.kind == "step_input":
        return "12"
    if consumer.kind == "reduce":
        if loop.dtype == "bool":
            return "1"
        return "7" if loop.dtype == "int64" and consumer.op in ("max", "min") else "reduction"
    if consumer.kind == "index":
        return "last-value" if not consumer.from_input and consumer.position in (-1, -2) else "3"
    if consumer.kind == "with_vector":
        return "13" if consumer.variant == "mismatch" else "8"
    by_kind = {
        "with_trace": "2",
        "set_index": "4",
        "set_slice": "5",
        "check_length": "6",
        "drop_last": "11",
        "zeros": "13",
        "grad": "gradient",
        "length": "length",
    }
    return by_kind.get(consumer.kind, consumer.kind)


CLASSES = (
    *map(str, range(1, 14)),
    "gradient",
    "rng",
    "reduction",
    "last-value",
    "slice",
    "cumsum",
    "trace",
    "shape",
    "length",
)
"""Every class `case_class` gives, in the order reports list them."""


def loop_family(spec: WhileGraphSpec) -> str:
    """The loop's shape in a few words, e.g. ``mit-sot int64 2-D n_steps=input``."""
    loop = spec.loop
    parts = [loop.recurrence, loop.dtype, "2-D" if loop.width else "1-D", f"n_steps={loop.n_steps}"]
    if spec.wrapper != "none":
        parts.append(f"in {spec.wrapper}")
    if spec.chain != "none":
        parts.append(f"chained by {spec.chain}")
    return " ".join(parts)


def upstream_hint(spec: WhileGraphSpec) -> str:
    """The key of the `UPSTREAM_BUGS` entry the spec can hit, or ``""``."""
    consumer = spec.consumer
    indexed = consumer.kind in ("index", "set_index") or (
        consumer.kind == "grad" and consumer.op == "index"
    )
    if spec.chain == "for_sequence":
        return "for-scan-past-sequence"
    if consumer.kind == "zeros":
        return "negative-zeros"
    if indexed and consumer.position >= 0 and not consumer.from_input:
        return "positive-index"
    if indexed and consumer.position < -1:
        return "negative-index-reads-initial-state"
    return ""


# --- Ops: one graph, written once, built by PyTensor or computed by numpy -------------------------


class NoTruth(Exception):
    """numpy has no twin for this part of the graph (a gradient)."""


class DeclaresInputs(Protocol):
    """What `declare_inputs` needs."""

    def input(self, name: str, dtype: str, ndim: int): ...


class Ops(DeclaresInputs, Protocol):
    """What `evaluate_spec` needs beyond what PyTensor variables and numpy arrays share (indexing,
    ``.sum()``...)."""

    def constant(self, value: np.ndarray | np.generic): ...
    def while_loop(
        self,
        step: Callable,
        init,
        depth: int,
        n_steps,
        sequence=None,
        n_outputs: int = 1,
        rng_seed: int | None = None,
    ) -> list:
        """The traces of ``step(sequence_entry, taps, noise) -> (outputs, stop)``, run until
        ``stop`` or for ``n_steps``; ``noise`` is ``floor(uniform())`` from a generator seeded with
        ``rng_seed``, or None."""

    def map(self, fn: Callable, sequence, n_steps):
        """``fn`` of each of the first ``n_steps`` entries of ``sequence``: a for-Scan (too short a
        sequence raises)."""

    def accumulate(self, multipliers, value_of: Callable, stop=None): ...
    def op_from_graph(self, build: Callable, inputs: dict) -> list: ...
    def elementwise(self, fn: Callable, a, b): ...
    def take(self, xs, index): ...
    def set_entry(self, xs, index, value, inc: bool): ...
    def set_tail(self, xs, value): ...
    def check(self, xs, ok, error: str): ...
    def zeros(self, length): ...
    def cumsum(self, xs): ...
    def grad(self, cost, wrt): ...
    def floor_int(self, value): ...
    def larger(self, a, b): ...
    def smaller(self, a, b): ...
    def if_else(self, condition, then: Callable, otherwise: Callable): ...


class SymbolicOps:
    """Builds the PyTensor graph; records its inputs in order and the shared generator's update."""

    def __init__(self) -> None:
        self.inputs: dict[str, Variable] = {}
        self.updates: dict[Variable, Variable] = {}

    def input(self, name, dtype, ndim):
        self.inputs[name] = pt.tensor(name, dtype=dtype, shape=(None,) * ndim)
        return self.inputs[name]

    def constant(self, value):
        return pt.constant(value)

    def while_loop(self, step, init, depth, n_steps, sequence=None, n_outputs=1, rng_seed=None):
        generator = (
            None
            if rng_seed is None
            else pytensor.shared(np.random.default_rng(rng_seed), name="rng")
        )

        def body(*scan_args):
            args = list(scan_args)
            sequence_entry = args.pop(0) if sequence is not None else None
            taps, rest = args[:depth], args[depth:]
            noise, next_generator = None, None
            if generator is not None:
                next_generator, draw = pt.random.uniform(
                    size=taps[-1].shape, rng=rest[0], return_next_rng=True
                )
                noise = pt.floor(draw)
            outputs, stop = step(sequence_entry, taps, noise)
            return [*outputs, *([next_generator] if generator is not None else [])], until(stop)

        state = {"initial": init, "taps": [-2, -1]} if depth == 2 else init
        outputs_info = [
            state,
            *[None] * (n_outputs - 1),
            *([generator] if generator is not None else []),
        ]
        results = pytensor.scan(
            body,
            sequences=[] if sequence is None else [sequence],
            outputs_info=outputs_info,
            n_steps=n_steps,
            return_updates=False,
        )
        results = results if isinstance(results, list) else [results]
        if generator is not None:
            self.updates[generator] = results.pop()
        return results

    def map(self, fn, sequence, n_steps):
        return pytensor.scan(fn, sequences=[sequence], n_steps=n_steps, return_updates=False)

    def accumulate(self, multipliers, value_of, stop=None):
        def body(multiplier, total):
            new_total = total + pt.cast(value_of(multiplier), "float64")
            return new_total if stop is None else (new_total, until(multiplier >= stop))

        totals = pytensor.scan(
            body,
            sequences=[multipliers],
            outputs_info=[pt.constant(0.0, dtype="float64")],
            return_updates=False,
        )
        return totals[-1]

    def op_from_graph(self, build, inputs):
        inner = {name: variable.type(name) for name, variable in inputs.items()}
        op = OpFromGraph(list(inner.values()), build(inner), inline=False, name="while_scan_in_ofg")
        outputs = op(*inputs.values())
        return outputs if isinstance(outputs, list) else [outputs]

    def elementwise(self, fn, a, b):
        return fn(a, b)

    def take(self, xs, index):
        return pt.take(xs, index, axis=0)

    def set_entry(self, xs, index, value, inc):
        return (pt.inc_subtensor if inc else pt.set_subtensor)(xs[index], value)

    def set_tail(self, xs, value):
        return pt.set_subtensor(xs[1:], value)

    def check(self, xs, ok, error):
        raise_op = (
            Assert("the trace is too short")
            if error == "Assert"
            else CheckAndRaise(ValueError, "too short")
        )
        return raise_op(xs, ok)

    def zeros(self, length):
        return pt.zeros(length)

    def cumsum(self, xs):
        return pt.cumsum(xs, axis=0)

    def grad(self, cost, wrt):
        return pytensor.grad(cost, wrt)

    def floor_int(self, value):
        return pt.cast(pt.floor(value), "int64")

    def larger(self, a, b):
        return pt.stack([a, b]).max()

    def smaller(self, a, b):
        return pt.minimum(a, b)

    def if_else(self, condition, then, otherwise):
        return ifelse(condition, then(), otherwise())


class NumericOps:
    """Computes one call with numpy, with PyTensor's semantics where numpy's differ (no silent
    broadcasting)."""

    def __init__(self, values: dict[str, np.ndarray]) -> None:
        self.values = values

    def input(self, name, dtype, ndim):
        return self.values[name]

    def constant(self, value):
        return value

    def while_loop(self, step, init, depth, n_steps, sequence=None, n_outputs=1, rng_seed=None):
        n_steps = len(sequence) if n_steps is None else int(n_steps)
        if n_steps < 0:
            raise IndexError(f"Scan was asked to run for negative number of step {n_steps}")
        history = list(init) if depth == 2 else [init]
        traces: list[list] = [[] for _ in range(n_outputs)]
        # floor(uniform()) is 0: the numpy twin needs no generator.
        noise = None if rng_seed is None else 0.0
        for t in range(n_steps):
            outputs, stop = step(None if sequence is None else sequence[t], history[-depth:], noise)
            history.append(outputs[0])
            for trace, output in zip(traces, outputs, strict=True):
                trace.append(output)
            if stop:
                break
        if n_steps == 0:
            # No step taken: the traces are empty, with the shape and dtype of a step's outputs.
            entry = None
            if sequence is not None:
                entry = (
                    sequence[0]
                    if len(sequence)
                    else np.zeros_like(sequence, shape=np.shape(sequence)[1:])
                )
            outputs, _ = step(entry, history[-depth:], noise)
            return [
                np.empty((0, *np.shape(output)), np.asarray(output).dtype) for output in outputs
            ]
        return [np.array(trace) for trace in traces]

    def map(self, fn, sequence, n_steps):
        if len(sequence) < n_steps:
            raise ValueError(f"the sequence has {len(sequence)} entries for {n_steps} steps")
        return np.array([fn(entry) for entry in sequence[:n_steps]])

    def accumulate(self, multipliers, value_of, stop=None):
        total = np.float64(0.0)
        for multiplier in multipliers:
            total = total + np.float64(value_of(multiplier))
            if stop is not None and multiplier >= stop:
                break
        return total

    def op_from_graph(self, build, inputs):
        return build(inputs)

    def elementwise(self, fn, a, b):
        if np.shape(a) != np.shape(b):
            raise ValueError(f"elementwise operands of shapes {np.shape(a)} and {np.shape(b)}")
        return fn(a, b)

    def take(self, xs, index):
        return np.take(xs, index, axis=0)

    def set_entry(self, xs, index, value, inc):
        result = xs.copy()
        if inc:
            result[index] += value
        else:
            result[index] = value
        return result

    def set_tail(self, xs, value):
        result = xs.copy()
        result[1:] = value
        return result

    def check(self, xs, ok, error):
        if not ok:
            raise (
                AssertionError("the trace is too short")
                if error == "Assert"
                else ValueError("too short")
            )
        return xs

    def zeros(self, length):
        return np.zeros(length)

    def cumsum(self, xs):
        return np.cumsum(xs, axis=0)

    def grad(self, cost, wrt):
        raise NoTruth("gradients have no numpy twin")

    def floor_int(self, value):
        return np.int64(np.floor(value))

    def larger(self, a, b):
        return np.max([a, b])

    def smaller(self, a, b):
        return np.minimum(a, b)

    def if_else(self, condition, then, otherwise):
        # Lazy, as the reference's IfElse once PyTensor's rewrites make its branches lazy.
        return then() if condition else otherwise()


# --- The graph of a spec --------------------------------------------------------------------------


def declare_inputs(spec: WhileGraphSpec, ops: DeclaresInputs) -> dict:
    """The spec's inputs, in the order the compiled function takes them."""
    loop, consumer = spec.loop, spec.consumer
    state, scalar = (1 if loop.width else 0), 0
    init = state + (loop.depth == 2)
    inputs = {
        "x0": ops.input("x0", loop.state_dtype, init),
        "param": ops.input("param", loop.state_dtype, scalar),
        "stop": ops.input("stop", "float64", scalar),
    }
    if loop.recurrence == "sequence":
        inputs["seq"] = ops.input("seq", loop.state_dtype, state + 1)
    if loop.dtype == "bool":
        inputs["level"] = ops.input("level", "float64", scalar)
    if loop.n_steps == "input":
        inputs["n_steps"] = ops.input("n_steps", "int64", scalar)
    if loop.n_steps == "data":
        inputs["n_steps_float"] = ops.input("n_steps_float", "float64", scalar)
    if (consumer.kind == "index" and consumer.from_input) or consumer.kind in (
        "drop_last",
        "length",
    ):
        inputs["k"] = ops.input("k", "int64", scalar)
    if consumer.kind == "step_input":
        inputs["s"] = ops.input("s", "int64", scalar)
    if consumer.kind in ("with_vector", "set_slice"):
        inputs["v"] = ops.input("v", loop.dtype, state + 1)
    if consumer.kind == "with_trace" and consumer.variant == "second_loop":
        inputs["x0_second"] = ops.input("x0_second", loop.state_dtype, init)
        inputs["stop_second"] = ops.input("stop_second", "float64", scalar)
    if spec.chain in ("n_steps", "sequence"):
        inputs["stop_chain"] = ops.input("stop_chain", "float64", scalar)
    if spec.wrapper == "while":
        inputs["outer_stop"] = ops.input("outer_stop", "float64", scalar)
    return inputs


class _Names:
    """Answers `declare_inputs` with the names alone."""

    def input(self, name, dtype, ndim):
        return name


def input_names(spec: WhileGraphSpec) -> list[str]:
    return list(declare_inputs(spec, _Names()))


def loop_traces(
    spec: WhileGraphSpec, ops: Ops, inputs: dict, init, stop, rng_seed: int | None = None
) -> list:
    """The spec's loop from ``init``, stopping once its statistic passes ``stop``: the states'
    trace, and the per-step output's for a nit-sot."""
    loop = spec.loop
    if loop.n_steps == "constant":
        n_steps = loop.bound
    elif loop.n_steps == "input":
        n_steps = inputs["n_steps"]
    else:
        n_steps = ops.floor_int(inputs["n_steps_float"])

    def step(sequence_entry, taps, noise):
        grown = (
            taps[-1] * inputs["param"]
            if loop.state_dtype == "float64"
            else taps[-1] + inputs["param"]
        )
        if loop.depth == 2:
            grown = grown + taps[0]
        new = grown + (
            sequence_entry
            if sequence_entry is not None
            else ops.constant(np.asarray(1, loop.state_dtype))
        )
        if noise is not None:
            new = new + noise
        outputs = [new]
        if loop.recurrence == "nit-sot":
            outputs.append(new > inputs["level"] if loop.dtype == "bool" else new * 2 - 1)
        return outputs, _statistic(new, loop) > stop

    n_outputs = 1 + (loop.recurrence == "nit-sot")
    return ops.while_loop(step, init, loop.depth, n_steps, inputs.get("seq"), n_outputs, rng_seed)


def _statistic(state, loop: LoopSpec):
    """What the stopping condition compares to the threshold: the state, or its sum; it grows every
    step."""
    return state.sum() if loop.width else state


def _chained(spec: WhileGraphSpec, ops: Ops, inputs: dict, first):
    """The trace the consumer reads: ``first``, or the trace of the loop it feeds (`CHAINS`)."""
    if spec.chain == "none":
        return first
    one = ops.constant(np.float64(1.0))
    if spec.chain == "for_sequence":
        return ops.map(lambda entry: entry + one, first, spec.loop.bound)
    zero = ops.zeros(first.shape[1]) if spec.loop.width else ops.constant(np.float64(0.0))

    def step(sequence_entry, taps, noise):
        new = taps[-1] + (sequence_entry if sequence_entry is not None else one)
        return [new], _statistic(new, spec.loop) > inputs["stop_chain"]

    if spec.chain == "n_steps":
        return ops.while_loop(step, zero, 1, first.shape[0])[0]
    return ops.while_loop(step, zero, 1, None, sequence=first)[0]


def consumed_trace(spec: WhileGraphSpec, ops: Ops, inputs: dict, init):
    """The trace the consumer reads, with the loop started from ``init``."""
    rng_seed = spec.seed if spec.loop.rng else None
    return _chained(
        spec, ops, inputs, loop_traces(spec, ops, inputs, init, inputs["stop"], rng_seed)[-1]
    )


def consume(spec: WhileGraphSpec, ops: Ops, inputs: dict, xs) -> list:
    """The consumer's outputs (two for a gradient: the cost or first gradient, and the gradient)."""
    consumer = spec.consumer
    kind = consumer.kind
    if kind == "reduce":
        return [getattr(xs, consumer.op)(axis=consumer.axis)]
    if kind == "shape":
        return [_shape(xs)]
    if kind == "index":
        position = inputs["k"] if consumer.from_input else consumer.position
        return [ops.take(xs, position) if consumer.variant == "take" else xs[position]]
    if kind == "grad":
        return _gradient(spec, ops, inputs, xs)
    if kind == "length":
        return [_length_arithmetic(consumer.variant, ops, inputs["k"], xs)]
    result = _array_consumer(spec, ops, inputs, xs)
    return [result.sum() if consumer.summed else result]


def _length_arithmetic(variant: str, ops: Ops, k, xs):
    """One of `LENGTH_VARIANTS`."""
    n = xs.shape[0]
    if variant == "add3":
        return n + k + 2
    if variant == "mul3":
        return n * k * 3
    if variant == "pinned_max":
        size = ops.larger(ops.smaller(n, 0) + 5, 3)
        return ops.zeros(size).shape[0] + n
    return ops.if_else(n >= k, lambda: 2 * xs.sum(), lambda: xs.sum() - n)


def _shape(xs):
    return np.asarray(xs.shape, dtype="int64") if isinstance(xs, np.ndarray) else xs.shape


def _array_consumer(spec: WhileGraphSpec, ops: Ops, inputs: dict, xs):
    consumer = spec.consumer
    kind = consumer.kind
    if kind == "slice":
        return xs[slice(*consumer.bounds)]
    if kind == "step_input":
        return xs[:: inputs["s"]]
    if kind == "drop_last":
        return xs[: xs.shape[0] - inputs["k"]]
    if kind == "with_trace":
        if consumer.variant == "shifted":
            return ops.elementwise(lambda a, b: a + b, xs[1:], xs)
        second = loop_traces(spec, ops, inputs, inputs["x0_second"], inputs["stop_second"])[-1]
        return ops.elementwise(lambda a, b: a * b, xs, _chained(spec, ops, inputs, second))
    if kind == "with_vector":
        return ops.elementwise(lambda a, b: a * b, xs, inputs["v"])
    if kind == "set_index":
        return ops.set_entry(
            xs, consumer.position, ops.constant(np.asarray(1, xs.dtype)), consumer.variant == "inc"
        )
    if kind == "set_slice":
        return ops.set_tail(xs, inputs["v"])
    if kind == "check_length":
        return ops.check(xs, xs.shape[0] >= consumer.position, consumer.variant)
    if kind == "zeros":
        zeros = ops.zeros(xs.shape[0] - consumer.position)
        return _shape(zeros) if consumer.variant == "shape" else zeros
    if kind == "cumsum":
        return ops.cumsum(xs)
    return xs  # "trace"


def _gradient(spec: WhileGraphSpec, ops: Ops, inputs: dict, xs) -> list:
    consumer = spec.consumer
    read = {
        "sum": lambda: xs,
        "last": lambda: xs[-1],
        "index": lambda: xs[consumer.position],
        "slice": lambda: xs[slice(*consumer.bounds)],
    }[consumer.op]
    cost = read().sum()
    wrt = inputs["x0" if consumer.wrt == "init" else "param"]
    first = ops.grad(cost, wrt)
    return [cost, first] if consumer.order == 1 else [first, ops.grad(first.sum(), wrt)]


def evaluate_spec(spec: WhileGraphSpec, ops: Ops) -> list:
    """The spec's outputs under ``ops``: PyTensor variables, or one call's numpy values."""
    inputs = declare_inputs(spec, ops)
    if spec.wrapper == "none":
        return consume(spec, ops, inputs, consumed_trace(spec, ops, inputs, inputs["x0"]))
    if spec.wrapper == "ofg":
        # The OpFromGraph's inner graph reads its own inputs, not the outer graph's.
        return ops.op_from_graph(
            lambda inner: consume(spec, ops, inner, consumed_trace(spec, ops, inner, inner["x0"])),
            inputs,
        )

    def scaled_value(multiplier):
        (value,) = consume(
            spec, ops, inputs, consumed_trace(spec, ops, inputs, inputs["x0"] * multiplier)
        )
        # A length computed by numpy is a Python int, without ndim.
        return value.sum() if getattr(value, "ndim", 0) else value

    multipliers = ops.constant(np.asarray(MULTIPLIERS, dtype=spec.loop.state_dtype))
    stop = inputs["outer_stop"] if spec.wrapper == "while" else None
    return [ops.accumulate(multipliers, scaled_value, stop)]


@dataclass
class WhileGraph:
    """A spec's graph: inputs, outputs, the shared generator's update, and each call's input values
    by name."""

    spec: WhileGraphSpec
    inputs: list[Variable]
    outputs: list[Variable]
    updates: dict[Variable, Variable]
    calls: list[dict[str, np.ndarray]] = field(repr=False)

    def arguments(self) -> list[list[np.ndarray]]:
        """Each call's input values, in the order of ``inputs``."""
        return [[call[variable.name] for variable in self.inputs] for call in self.calls]


def while_graph(spec: WhileGraphSpec) -> WhileGraph:
    ops = SymbolicOps()
    outputs = evaluate_spec(spec, ops)
    return WhileGraph(spec, list(ops.inputs.values()), outputs, ops.updates, call_inputs(spec))


def truth(spec: WhileGraphSpec, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    """One call's outputs computed by numpy; raises what the call should raise, or `NoTruth`."""
    return [np.asarray(value) for value in evaluate_spec(spec, NumericOps(values))]


# --- Inputs per call: chosen so that the loop stops where the spec says ---------------------------


def _threshold(statistics: np.ndarray, stop_step: int) -> np.float64:
    """A threshold the growing ``statistics`` first pass at step ``stop_step`` (1-based); `NEVER`
    past the last."""
    if stop_step >= len(statistics):
        return np.float64(NEVER)
    below = statistics[stop_step - 2] if stop_step >= 2 else statistics[0] - 1.0
    return np.float64((below + statistics[stop_step - 1]) / 2)


def _statistics(trace: np.ndarray) -> np.ndarray:
    return trace.reshape(len(trace), -1).sum(axis=1).astype("float64")


def _unstopped_states(spec: WhileGraphSpec, values: dict, init) -> np.ndarray:
    """The first loop's states over every step, never stopping early."""
    unstopped = {**values, "level": np.float64(NEVER)}
    return loop_traces(spec, NumericOps(unstopped), unstopped, init, np.float64(NEVER))[0]


def call_inputs(spec: WhileGraphSpec) -> list[dict[str, np.ndarray]]:
    """Each call's input values by name: the same loop, stopping at ``spec.stops[i]`` in call
    ``i``."""
    loop, consumer = spec.loop, spec.consumer
    names = input_names(spec)
    rng = np.random.default_rng(spec.seed)
    state_shape = (loop.width,) if loop.width else ()
    init_shape = (2, *state_shape) if loop.depth == 2 else state_shape
    if loop.state_dtype == "int64":
        base = {"x0": rng.integers(0, 4, size=init_shape), "param": np.int64(rng.integers(1, 4))}
    else:
        base = {
            "x0": rng.uniform(0.1, 1.0, size=init_shape),
            "param": np.float64(rng.uniform(1.0, 1.5)),
        }
    if loop.recurrence == "sequence":
        shape = (loop.bound + loop.sequence_extra, *state_shape)
        base["seq"] = (
            rng.integers(1, 4, size=shape)
            if loop.state_dtype == "int64"
            else rng.uniform(0.5, 1.5, shape)
        )
    if loop.n_steps == "input":
        base["n_steps"] = np.int64(loop.bound)
    if loop.n_steps == "data":
        base["n_steps_float"] = np.float64(loop.bound + 0.25)
    if "k" in names:
        base["k"] = np.int64(consumer.position)
    if "s" in names:
        base["s"] = np.int64(consumer.position)
    base = {name: np.asarray(value) for name, value in base.items()}

    states = _unstopped_states(spec, base, base["x0"])
    statistics = _statistics(states)
    second = None
    if "x0_second" in names:
        base["x0_second"] = base["x0"] + np.asarray(1, base["x0"].dtype)
        second = _statistics(_unstopped_states(spec, base, base["x0_second"]))
    calls = []
    for index, stop_step in enumerate(spec.stops):
        values = dict(base, stop=_threshold(statistics, stop_step))
        if "level" in names:
            # Every other call, no state passes the level: a trace of False only (class 1).
            values["level"] = np.float64(
                states.max() + 1.0 if index % 2 == 0 else np.median(states)
            )
        if second is not None:
            values["stop_second"] = _threshold(second, spec.stops[(index + 1) % len(spec.stops)])
        if "stop_chain" in names:
            values["stop_chain"] = _chain_threshold(spec, values, index)
        if "outer_stop" in names:
            # Every other call, the outer loop stops at its second multiplier.
            values["outer_stop"] = np.float64(NEVER if index % 2 == 0 else MULTIPLIERS[1])
        if "v" in names:
            values["v"] = _vector(spec, values, rng)
        calls.append({name: np.asarray(value) for name, value in values.items()})
    return calls + _step_count_edge_calls(loop, calls[0])


STEP_COUNT_EDGES = (-1, 0)
"""The step counts of the calls after the planned stops, where ``n_steps`` is given at run time: a
negative one (the reference raises ``IndexError``), and zero (empty traces, whose last entry the
reference cannot read)."""


def _step_count_edge_calls(loop: LoopSpec, first_call: dict) -> list[dict[str, np.ndarray]]:
    """Calls like the first, with each of `STEP_COUNT_EDGES` as the step count."""
    if loop.n_steps == "input":
        return [dict(first_call, n_steps=np.asarray(np.int64(count))) for count in STEP_COUNT_EDGES]
    if loop.n_steps == "data":
        # The count is floor(n_steps_float): a quarter above each edge.
        return [
            dict(first_call, n_steps_float=np.asarray(np.float64(count + 0.25)))
            for count in STEP_COUNT_EDGES
        ]
    return []


def _chain_threshold(spec: WhileGraphSpec, values: dict, index: int) -> np.float64:
    """Every other call, the chained loop stops halfway through the first trace."""
    if index % 2 == 0:
        return np.float64(NEVER)
    unstopped = {**values, "stop_chain": np.float64(NEVER)}
    chained = consumed_trace(spec, NumericOps(unstopped), unstopped, values["x0"])
    return _threshold(_statistics(chained), max(1, len(chained) // 2))


def _vector(spec: WhileGraphSpec, values: dict, rng: np.random.Generator) -> np.ndarray:
    """The input vector of with_vector and set_slice, its length set per call by the consumer's
    variant."""
    try:
        length = len(consumed_trace(spec, NumericOps(values), values, values["x0"]))
    except ValueError:
        # A for_sequence chain longer than its sequence: the call raises before it reads the vector.
        length = spec.loop.bound
    variant = spec.consumer.variant
    if spec.consumer.kind == "set_slice":
        length = max(length - 1, 0) if variant == "match" else length + 1
    else:
        length = {"match": length, "bound": spec.loop.bound, "mismatch": length + 1}[variant]
    shape = (length, spec.loop.width) if spec.loop.width else (length,)
    return (
        rng.integers(1, 4, size=shape)
        if spec.loop.dtype == "int64"
        else rng.uniform(0.5, 1.5, size=shape)
    )


# --- Hypothesis strategies ------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What a run of draws aims at: the choices it may make (None: the default mix)."""

    dtypes: tuple[str, ...] | None = None
    kinds: tuple[str, ...] | None = None
    wrappers: tuple[str, ...] | None = None
    chains: tuple[str, ...] | None = None
    n_steps: tuple[str, ...] | None = None
    rng: bool | None = None
    reductions: tuple[str, ...] | None = None


PLAIN = Target(wrappers=("none",), chains=("none",), n_steps=("constant", "input"), rng=False)
"""A consumer's target keeps the loop at the top level: the structural targets (9, 10, 12, rng) nest
and chain."""

TARGETS = (
    replace(PLAIN, dtypes=("bool",), kinds=("reduce",)),  # 1
    replace(PLAIN, kinds=("with_trace",)),  # 2
    replace(PLAIN, kinds=("index",)),  # 3 and last-value
    replace(PLAIN, kinds=("set_index",)),  # 4
    replace(PLAIN, kinds=("set_slice",)),  # 5
    replace(PLAIN, kinds=("check_length",)),  # 6
    replace(PLAIN, dtypes=("int64",), kinds=("reduce",), reductions=("max", "min")),  # 7
    replace(PLAIN, kinds=("with_vector",)),  # 8 and 13
    Target(wrappers=WRAPPERS[1:], rng=False),  # 9
    Target(chains=CHAINS[1:], rng=False, wrappers=("none",)),  # 10
    replace(PLAIN, kinds=("drop_last",)),  # 11
    Target(n_steps=("data",), rng=False, wrappers=("none",), chains=("none",)),  # 12
    replace(PLAIN, kinds=("step_input",)),  # 12
    replace(PLAIN, kinds=("zeros",)),  # 13
    replace(PLAIN, kinds=("grad",)),  # gradient
    Target(dtypes=("float64",), rng=True),  # rng
    replace(PLAIN, dtypes=("float64",), kinds=("reduce",)),  # reduction
    replace(PLAIN, kinds=("slice", "cumsum", "trace", "shape")),
    Target(kinds=("length",), rng=False),  # length
)
"""`draw_while_specs` spreads its draws over these, so that a few hundred graphs cover every
class."""

DEFAULT_DTYPES = ("float64", "float64", "float64", "int64", "bool")
DEFAULT_WRAPPERS = ("none",) * 6 + WRAPPERS[1:]
DEFAULT_CHAINS = ("none",) * 6 + CHAINS[1:]
DEFAULT_N_STEPS = (N_STEPS[0],) * 3 + N_STEPS[1:]
DEFAULT = Target(
    dtypes=DEFAULT_DTYPES,
    kinds=CONSUMERS,
    wrappers=DEFAULT_WRAPPERS,
    chains=DEFAULT_CHAINS,
    n_steps=DEFAULT_N_STEPS,
)
"""The default mix: repeated entries weigh a choice (hypothesis's ``sampled_from`` draws
uniformly)."""


def _consumers_of(dtype: str) -> tuple[str, ...]:
    return {"bool": BOOL_CONSUMERS, "int64": INT_CONSUMERS}.get(dtype, CONSUMERS)


@st.composite
def loop_specs(draw: st.DrawFn, target: Target = DEFAULT) -> LoopSpec:
    dtypes = target.dtypes or DEFAULT_DTYPES
    # Only the dtypes whose traces the target's consumers can read.
    dtype = draw(
        st.sampled_from(
            [d for d in dtypes if not target.kinds or set(target.kinds) & set(_consumers_of(d))]
        )
    )
    recurrence = "nit-sot" if dtype == "bool" else draw(st.sampled_from(RECURRENCES))
    rng = dtype == "float64" and (
        target.rng if target.rng is not None else draw(st.integers(0, 9)) == 0
    )
    return LoopSpec(
        recurrence=recurrence,
        dtype=dtype,
        width=draw(st.sampled_from([0, 0, 1, 2, 3])),
        bound=draw(st.integers(3, 8)),
        n_steps=draw(st.sampled_from(target.n_steps or DEFAULT_N_STEPS)),
        sequence_extra=draw(st.sampled_from([0, 2])) if recurrence == "sequence" else 0,
        rng=rng,
    )


def _allowed_kinds(loop: LoopSpec, wrapped: bool) -> list[str]:
    kinds = _consumers_of(loop.dtype)
    # A wrapped loop's consumer feeds a sum (a for-Scan's, a while-Scan's) or an OpFromGraph: one
    # output.
    return [kind for kind in kinds if not (wrapped and kind in ("grad", "shape"))]


@st.composite
def consumer_specs(
    draw: st.DrawFn, loop: LoopSpec, wrapped: bool, target: Target = DEFAULT
) -> ConsumerSpec:
    allowed = _allowed_kinds(loop, wrapped)
    wanted = [kind for kind in target.kinds or () if kind in allowed]
    kind = draw(st.sampled_from(wanted or allowed))
    out_of_range = st.integers(-(loop.bound + 2), loop.bound + 1)
    summed = kind in ARRAY_CONSUMERS and draw(st.booleans())
    small = st.one_of(st.none(), st.integers(-loop.bound, loop.bound))
    if kind == "reduce":
        ops = target.reductions or (REDUCTIONS if loop.dtype == "bool" else NUMERIC_REDUCTIONS)
        axis = draw(st.sampled_from([None, 0])) if loop.width else None
        return ConsumerSpec(kind, op=draw(st.sampled_from(ops)), axis=axis)
    if kind == "index":
        return ConsumerSpec(
            kind,
            position=draw(out_of_range),
            from_input=draw(st.booleans()),
            variant=draw(st.sampled_from(["", "take"])),
        )
    if kind == "slice":
        step = draw(st.sampled_from([None, 1, 2, -1]))
        return ConsumerSpec(kind, bounds=(draw(small), draw(small), step), summed=summed)
    if kind == "step_input":
        return ConsumerSpec(kind, position=draw(st.sampled_from([-2, -1, 1, 2, 3])), summed=summed)
    if kind == "drop_last":
        return ConsumerSpec(kind, position=draw(st.integers(0, loop.bound + 1)), summed=summed)
    if kind == "with_trace":
        return ConsumerSpec(
            kind, variant=draw(st.sampled_from(["shifted", "second_loop"])), summed=summed
        )
    if kind == "with_vector":
        return ConsumerSpec(
            kind, variant=draw(st.sampled_from(["match", "bound", "mismatch"])), summed=summed
        )
    if kind == "set_index":
        variant = draw(st.sampled_from(["set", "inc"]))
        return ConsumerSpec(kind, position=draw(out_of_range), variant=variant, summed=summed)
    if kind == "set_slice":
        return ConsumerSpec(
            kind, variant=draw(st.sampled_from(["match", "mismatch"])), summed=summed
        )
    if kind == "check_length":
        variant = draw(st.sampled_from(["Assert", "CheckAndRaise"]))
        return ConsumerSpec(
            kind, position=draw(st.integers(1, loop.bound)), variant=variant, summed=summed
        )
    if kind == "zeros":
        variant = "value" if wrapped else draw(st.sampled_from(["value", "shape"]))
        return ConsumerSpec(
            kind, position=draw(st.integers(1, loop.bound)), variant=variant, summed=summed
        )
    if kind == "length":
        variant = draw(st.sampled_from(LENGTH_VARIANTS))
        return ConsumerSpec(kind, position=draw(st.integers(0, loop.bound)), variant=variant)
    if kind == "grad":
        op = draw(st.sampled_from(GRADIENT_OF))
        return ConsumerSpec(
            kind,
            op=op,
            position=draw(out_of_range) if op == "index" else 0,
            bounds=(1, 3, None) if op == "slice" else (None, None, None),
            order=draw(st.sampled_from([1, 1, 2])),
            wrt=draw(st.sampled_from(["init", "param"])),
        )
    return ConsumerSpec(kind, summed=summed)


@st.composite
def while_graph_specs(draw: st.DrawFn, target: Target = DEFAULT) -> WhileGraphSpec:
    """A spec within ``target``'s choices; what a choice rules out (a gradient of an int64 trace, a
    random generator in a nested loop) is not drawn."""
    loop = draw(loop_specs(target))
    wrappers = ("none",) if loop.rng else target.wrappers or DEFAULT_WRAPPERS
    wrapper = draw(st.sampled_from(wrappers))
    plain = loop.rng or loop.dtype != "float64" or wrapper != "none"
    chain = draw(st.sampled_from(("none",) if plain else target.chains or DEFAULT_CHAINS))
    consumer = draw(consumer_specs(loop, wrapper != "none", target))
    early = st.integers(1, loop.bound - 1)
    stops = [draw(early), draw(early)]
    stops.insert(draw(st.integers(0, 2)), loop.bound)
    return WhileGraphSpec(
        loop, consumer, wrapper, chain, tuple(stops), seed=draw(st.integers(0, 2**16))
    )


def _draw(
    strategy: st.SearchStrategy[WhileGraphSpec], count: int, exclude: list[WhileGraphSpec]
) -> list:
    specs: list[WhileGraphSpec] = []

    @drawing(count)
    @given(strategy)
    def collect(spec: WhileGraphSpec) -> None:
        if len(specs) < count and spec not in specs and spec not in exclude:
            specs.append(spec)

    collect()
    return specs


def draw_while_specs(count: int) -> list[WhileGraphSpec]:
    """``count`` distinct specs, reproducibly (derandomised), outside any test runner, spread over
    `TARGETS`."""
    if count < 0:  # else Hypothesis refuses max_examples=count * 3
        raise ValueError(f"count={count}: expected a number of graphs to draw, 0 or more.")
    specs: list[WhileGraphSpec] = []
    for index, target in enumerate(TARGETS):
        share = count // len(TARGETS) + (index < count % len(TARGETS))
        if share:
            specs += _draw(while_graph_specs(target), share, specs)
    return specs
