"""How one graph lowers the while-Scan traces whose length depends on the data.

PyTensor trims a while-Scan's trace to the steps actually taken, and
``jax.jit`` can only return shapes fixed at trace time. `plan_trimmed_traces`
looks at the graph once, at lowering time, and picks:

- `BoundedPlan`, when the trimmed traces only reach outputs of static shape
  (``xs[-3]``, ``xs.sum()``, gradients through the loop): the traces and what
  follows them are lowered by `bounded` (maximum-length buffers plus their
  lengths). No step count leaves the device; this works in any JAX linker.
- otherwise (an output whose length is the step count, such as the full
  trace, or an op with no length-aware lowering) the graph needs the step
  counts on the host. A linker that owns the call (JAX_GPU) says so
  (`LoweringContext.step_counts`) and gets a `StepCountedGraph`: the graph, with one
  static argument (the assumed step count of each such while-Scan, None for
  its bound), returning the outputs and, per while-Scan, the steps taken and
  whether they match. `StepSpecialisedFunction` calls it, reads those counts
  with one explicit ``jax.device_get`` and runs it again on a mismatch.
  Stock linkers get `DataDependentLengthError` at compile time.

Nothing is shared between traces, calls or threads: the assumed counts are an
argument of the traced function, the counts taken are its result, and the
only state kept is the last counts seen (replaced whole, never mutated).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from dataclasses import dataclass
from typing import Any

import jax
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.scan.op import Scan

from gpubackend.dispatch.jax.bounded import Kind, as_kind, as_output, bounded_jax_funcify
from gpubackend.dispatch.jax.scan import data_dependent_length_error, possibly_trimmed_traces, specialised_while_scan


def _trimmed_while_scans(order: Sequence[Apply]) -> list[Apply]:
    return [
        node
        for node in order
        if isinstance(node.op, Scan) and node.op.info.as_while and any(possibly_trimmed_traces(node.op, node))
    ]


@dataclass(frozen=True)
class BoundedPlan:
    """Length-aware lowerings for the nodes that see a run-time length, and the output kinds."""

    lowerings: dict[Apply, Callable]
    output_kinds: tuple[Kind, ...]


@dataclass(frozen=True)
class StepCountsNeeded:
    """The while-Scans to specialise on their step counts, and why the bounded lowering cannot serve."""

    nodes: tuple[Apply, ...]
    reason: str


def plan_trimmed_traces(fgraph, order: Sequence[Apply], **kwargs) -> BoundedPlan | StepCountsNeeded | None:
    """None when no while-Scan trace of the graph (whose nodes, in order, are ``order``) may be trimmed."""
    trimmed = _trimmed_while_scans(order)
    if not trimmed:
        return None
    kinds: dict[Variable, Kind] = {}
    lowerings: dict[Apply, Callable] = {}
    for node in order:
        input_kinds = tuple(kinds.get(value) for value in node.inputs)
        if node not in trimmed and not any(input_kinds):
            continue
        try:
            lowering, output_kinds = bounded_jax_funcify(node.op, node, input_kinds, **kwargs)
        except NotImplementedError as error:
            return StepCountsNeeded(tuple(trimmed), str(error))
        lowerings[node] = _in_declared_kinds(lowering, output_kinds)
        kinds.update((output, kind) for output, kind in zip(node.outputs, output_kinds, strict=True) if kind)
    for output in fgraph.outputs:
        if kinds.get(output) == "array" and output.type.shape[0] is None:
            return StepCountsNeeded(tuple(trimmed), f"output {output} has the length of a while-Scan trace")
    return BoundedPlan(lowerings, tuple(kinds.get(output) for output in fgraph.outputs))


def _in_declared_kinds(lowering: Callable, output_kinds: tuple[Kind, ...]) -> Callable:
    def conforming(*inputs):
        outputs = lowering(*inputs)
        if len(output_kinds) == 1:
            return as_kind(outputs, output_kinds[0])
        return [as_kind(value, kind) for value, kind in zip(outputs, output_kinds, strict=True)]

    return conforming


@dataclass(frozen=True)
class StepCountedGraph:
    """``fn(assumed_steps, *inputs) -> (outputs, ((steps_taken, matched), ...))``, one entry per node."""

    fn: Callable
    nodes: tuple[Apply, ...]


def interpreted_graph(
    fgraph,
    order: Sequence[Apply],
    node_fn: Callable[[Apply], Callable],
    constant: Callable[[Constant], Any],
    squeeze_output: bool,
    finish: Callable[[list], list] = lambda outputs: outputs,
) -> Callable:
    """The graph as a Python function calling each node's lowering in ``order`` (values may be bounded)."""
    fns = [node_fn(node) for node in order]
    constants = {value: constant(value) for node in order for value in node.inputs if isinstance(value, Constant)}
    constants.update((value, constant(value)) for value in fgraph.outputs if isinstance(value, Constant))

    def run(*inputs, call_kwargs: Mapping[Apply, dict] = MappingProxyType({})):
        values: dict[Variable, Any] = {**constants, **dict(zip(fgraph.inputs, inputs, strict=True))}
        extras = []
        for node, fn in zip(order, fns, strict=True):
            outputs = fn(*(values[value] for value in node.inputs), **call_kwargs.get(node, {}))
            if node in call_kwargs:
                outputs, *extra = outputs
                extras.append(tuple(extra))
            outputs = [outputs] if len(node.outputs) == 1 else outputs
            values.update(zip(node.outputs, outputs, strict=True))
        results = finish([values[output] for output in fgraph.outputs])
        results = results[0] if squeeze_output and len(results) == 1 else results
        return (results, tuple(extras)) if call_kwargs else results

    return run


def bounded_graph(fgraph, order: Sequence[Apply], plan: BoundedPlan, default_fn: Callable[[Apply], Callable], constant, squeeze_output: bool):
    def finish(outputs: list) -> list:
        return [
            as_output(value, None if kind != "array" else output.type.shape[0])
            for value, kind, output in zip(outputs, plan.output_kinds, fgraph.outputs, strict=True)
        ]

    return interpreted_graph(fgraph, order, lambda node: plan.lowerings.get(node) or default_fn(node), constant, squeeze_output, finish)


def step_counted_graph(
    fgraph,
    order: Sequence[Apply],
    plan: StepCountsNeeded, default_fn: Callable[[Apply], Callable], constant, squeeze_output: bool, **kwargs
) -> StepCountedGraph:
    specialised = {node: specialised_while_scan(node.op, node, **kwargs) for node in plan.nodes}
    graph = interpreted_graph(fgraph, order, lambda node: specialised.get(node) or default_fn(node), constant, squeeze_output)

    def graph_with_step_counts(assumed_steps: tuple[int | None, ...], *inputs):
        call_kwargs = {node: {"assumed_steps": steps} for node, steps in zip(plan.nodes, assumed_steps, strict=True)}
        return graph(*inputs, call_kwargs=call_kwargs)

    return StepCountedGraph(graph_with_step_counts, plan.nodes)


def refuse(plan: StepCountsNeeded):
    node = plan.nodes[0]
    raise data_dependent_length_error(node.op, f"its trace reaches the graph's result ({plan.reason})")


class StepSpecialisedFunction:
    """Call a jitted `StepCountedGraph` specialised on the step counts that the data actually produce.

    Each call makes one explicit device-to-host read (all step counts in one
    ``jax.device_get``). A call whose counts match the last call's runs the
    graph once; otherwise it runs again specialised on the new counts (one
    compile per distinct tuple of counts, cached by ``jax.jit``), so a
    wrong-length answer is never returned.
    """

    def __init__(self, jitted: Callable, n_while_scans: int):
        self._jitted = jitted
        self._assumed: tuple[int | None, ...] = (None,) * n_while_scans

    def __call__(self, *args):
        assumed = self._assumed
        outputs, counts = self._jitted(assumed, *args)
        taken, matched = self._read(counts)
        if all(matched):
            return outputs
        self._assumed = taken
        outputs, counts = self._jitted(taken, *args)
        if not all(self._read(counts)[1]):
            raise RuntimeError("while-Scan step counts changed between two runs on the same inputs")
        return outputs

    @staticmethod
    def _read(counts: Sequence[tuple[Any, Any]]) -> tuple[tuple[int, ...], tuple[bool, ...]]:
        host = jax.device_get(counts)
        return tuple(int(steps) for steps, _ in host), tuple(bool(matched) for _, matched in host)
