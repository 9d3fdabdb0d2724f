"""A graph with while-Scan traces of run-time length, as one function JAX traces: node by node, in
order.

`bounded_graph` runs the nodes of a `BoundedPlan` with their length-aware
lowerings (the others with their ordinary ones), folds the rules' run-time
conditions into one error code, and climbs a ladder of capacities at each
while-Scan: the loop first gets room for `FIRST_CAPACITY` steps; only when it
runs out of room does it resume, inside ``lax.cond``, where it stopped with
`CAPACITY_GROWTH` times more, up to the bound, and the rest of the graph then
runs at that room. A loop that stops after a few steps thus costs a few steps
however generous its bound, in the loop, in the buffers and in every op after
it (a gradient's backward Scan); no step is taken twice, and no length leaves
the device. Under ``vmap`` a ``lax.cond`` computes both branches, so there a
call costs every rung up to the bound.

`step_counted_graph` runs an `ExactLengthsNeeded` graph with the traces cut
to assumed step counts, and returns the counts taken (JAX_GPU only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from pytensor.graph.basic import Apply, Constant, Variable

from gpubackend.dispatch.jax.tracing import is_traced
from gpubackend.dispatch.jax.while_scan.checks import NodeResult, first_failure
from gpubackend.dispatch.jax.while_scan.plan import BoundedPlan, ExactLengthsNeeded
from gpubackend.dispatch.jax.while_scan.refusals import unbounded_step_count
from gpubackend.dispatch.jax.while_scan.traces import specialised_scan
from gpubackend.dispatch.jax.while_scan.values import (
    Bounded,
    BoundedInt,
    as_kind,
    with_capacity,
)
from gpubackend.errors import DataDependentLengthError

FIRST_CAPACITY = 16
CAPACITY_GROWTH = 16
SPLIT_CAPACITY = FIRST_CAPACITY * CAPACITY_GROWTH
"""Where a ladder run as two computations splits (`LadderedGraph`): rungs with more room go to the
second."""


class GraphRun(NamedTuple):
    outputs: list
    """Plain values, and `Bounded` ones for the outputs whose length is known only at run time."""
    error_code: Any
    """`checks.first_failure` of the graph's run-time conditions (None when all are proven)."""
    overflow: Any


def _constants(
    fgraph, order: Sequence[Apply], constant: Callable[[Constant], Any]
) -> dict[Variable, Any]:
    values = {
        value: constant(value)
        for node in order
        for value in node.inputs
        if isinstance(value, Constant)
    }
    values.update(
        (value, constant(value)) for value in fgraph.outputs if isinstance(value, Constant)
    )
    return values


def _plain_outputs(
    sizing: frozenset[Apply],
    while_scans: Sequence[Apply],
    node: Apply,
    fn: Callable,
    arguments: list,
):
    """A node with its ordinary lowering; one that sizes a while-Scan from the data is refused by
    name."""
    try:
        return fn(*arguments)
    except (TypeError, jax.errors.ConcretizationTypeError) as error:
        if node in sizing and any(is_traced(value) for value in arguments):
            raise unbounded_step_count((*while_scans, node)[0].op, node) from error
        raise


@contextmanager
def _refused_where_unbounded(scan_op, node: Apply) -> Iterator[None]:
    """A size a rule finds unbounded while tracing (its ``NotImplementedError``) is refused by name;
    a refusal of its own keeps its message."""
    try:
        yield
    except DataDependentLengthError:
        raise
    except NotImplementedError as error:
        raise unbounded_step_count(scan_op, node) from error


def _specialised_outputs(node: Apply, fn: Callable, arguments: list, assumed_steps: int | None):
    """A while-Scan specialised on its step count; one whose bound or buffer sizes come from the
    data (no bound while tracing) is refused by name."""
    with _refused_where_unbounded(node.op, node):
        return fn(*arguments, assumed_steps=assumed_steps)


def _rule_outputs(
    plan: BoundedPlan, node: Apply, lowering, arguments: list, capacity: int | None, resume
):
    """A node with its length rule; a size the rule finds unbounded while tracing is refused by
    name."""
    with _refused_where_unbounded((plan.while_scans or (node,))[0].op, node):
        if lowering.capacity_limited:
            return lowering.fn(*arguments, capacity=capacity, resume=resume)
        return lowering.fn(*arguments)


def _fresh_values(
    constants: dict[Variable, Any], variables: Sequence[Variable], inputs: Sequence
) -> dict[Variable, Any]:
    """The graph's values before a run, in containers of their own.

    PyTensor's random variables write their new key into the generator's dict,
    and a graph runs several times while traced (the ladder's rungs, the probe
    of each): each run mutates its own dicts, never the next run's.
    """
    return _fresh({**constants, **dict(zip(variables, inputs, strict=True))})


def _either(overflow, other):
    """``overflow | other``, kept a Python False while neither can happen."""
    if overflow is False:
        return other
    return overflow if other is False else overflow | other


def _as_output(value, run_time_length: bool, static_length: int | None):
    """A graph output: a `Bounded` one is kept where its length is known only at run time, else cut
    to its type's."""
    if isinstance(value, BoundedInt):
        return value.value
    if isinstance(value, Bounded) and not run_time_length:
        assert static_length is not None, (
            "an output whose length is not a run-time one has a static one"
        )
        return with_capacity(value.buffer, static_length)
    return value


class LadderedGraph(NamedTuple):
    """A bounded graph as one computation (`whole`), or as its lower rungs and the rest (`lower`,
    then `higher`).

    On the CPU, XLA maps a computation's temporaries afresh on every call once
    they are large: the higher rungs' buffers, sized for the bound, would make
    the lower rungs fault in their pages on every call. Run apart, the lower
    rungs keep small temporaries, and the higher ones are computed (and their
    buffers mapped) only when the lower ones overflow.
    """

    whole: Callable
    """``whole(*inputs) -> GraphRun``."""
    lower: Callable
    """``lower(*inputs) -> GraphRun``: the rungs up to `SPLIT_CAPACITY`; its overflow None where
    there is no other."""
    higher: Callable
    """``higher(*inputs) -> GraphRun``: the rungs above `SPLIT_CAPACITY`."""


class Climb(NamedTuple):
    """How a run climbs the ladder: the rungs it may climb, and the structure every branch of it
    returns."""

    rungs: Sequence[int]
    with_code: bool
    """Some rung has a check left: every branch returns an error code."""
    terminal: bool
    """The last rung has the bound's room: the result's overflow is None; otherwise the last rung's
    flag."""

    def settled(self, run: GraphRun) -> GraphRun:
        overflow = None if self.terminal else jnp.asarray(run.overflow)
        return GraphRun(run.outputs, _settled_code(run.error_code, self.with_code), overflow)


def bounded_graph(
    fgraph,
    order: Sequence[Apply],
    plan: BoundedPlan,
    default_fn: Callable[[Apply], Callable],
    constant,
) -> LadderedGraph:
    """The plan's graph, climbing the ladder at each while-Scan: with more room, the loop resumes
    where it stopped."""
    plain_fns = {node: default_fn(node) for node in order if node not in plan.lowerings}
    constants = _constants(fgraph, order, constant)
    run_time = [output in plan.run_time_lengths for output in fgraph.outputs]

    def interpret(
        values: dict,
        start: int,
        oks: list,
        overflow: Any,
        climb: Climb | None,
        capacity: int | None,
    ) -> GraphRun:
        """The nodes from ``start`` on; a Scan climbs ``climb`` (None: every Scan gets
        ``capacity``)."""
        for index in range(start, len(order)):
            node = order[index]
            arguments = [values[value] for value in node.inputs]
            lowering = plan.lowerings.get(node)
            if lowering is None:
                outputs = _plain_outputs(
                    plan.sizing, plan.while_scans, node, plain_fns[node], arguments
                )
                values.update(
                    zip(node.outputs, [outputs] if len(node.outputs) == 1 else outputs, strict=True)
                )
                continue
            if lowering.capacity_limited and climb is not None:
                return climb_at(index, values, oks, overflow, climb, resume=None)
            result = _rule_outputs(plan, node, lowering, arguments, capacity, None)
            oks, overflow = absorb(node, lowering, result, values, oks, overflow)
        results = [
            _as_output(
                values[output],
                keep,
                output.type.shape[0] if getattr(output.type, "ndim", 0) else None,
            )
            for output, keep in zip(fgraph.outputs, run_time, strict=True)
        ]
        return GraphRun(results, first_failure(oks), overflow)

    def climb_at(
        index: int, values: dict, oks: list, overflow: Any, climb: Climb, resume
    ) -> GraphRun:
        """The Scan at ``index`` on the first of the climb's rungs, then the rest of the graph, or
        more room."""
        node = order[index]
        lowering = plan.lowerings[node]
        result = _rule_outputs(
            plan, node, lowering, [values[value] for value in node.inputs], climb.rungs[0], resume
        )

        def rest_of_graph() -> GraphRun:
            own_values = _fresh(values)
            own_oks, own_overflow = absorb(node, lowering, result, own_values, oks, overflow)
            return interpret(own_values, index + 1, own_oks, own_overflow, climb, None)

        if result.overflow is False or len(climb.rungs) == 1:
            return rest_of_graph()

        # Rematerialised: differentiated by JAX, a cond keeps the residuals of both branches, zeros
        # for the one not taken; a higher rung's residuals would be buffers of its room. Remat keeps
        # only its inputs. Without prevent_cse, which puts an optimisation barrier around the
        # branch: XLA would then copy the loop's buffers on every step instead of updating them in
        # place.
        @partial(jax.checkpoint, prevent_cse=False)
        def more_room():
            higher = climb._replace(rungs=climb.rungs[1:])
            return tuple(
                climb.settled(
                    climb_at(index, _fresh(values), oks, overflow, higher, resume=result.state)
                )
            )

        return GraphRun(
            *jax.lax.cond(result.overflow, more_room, lambda: tuple(climb.settled(rest_of_graph())))
        )

    def probe(inputs: Sequence, capacity: int | None) -> GraphRun:
        """Every Scan at one capacity: what the rung's structure is while tracing."""
        return interpret(
            _fresh_values(constants, fgraph.inputs, inputs), 0, [], False, None, capacity
        )

    if plan.run_time_lengths:
        # Outputs of run-time length are returned at the size of their buffers: one rung, at the
        # bound.
        def at_the_bound(*inputs) -> GraphRun:
            return GraphRun(*probe(inputs, None)[:2], None)

        return LadderedGraph(at_the_bound, at_the_bound, at_the_bound)

    def climbing(select: Callable[[list[int]], list[int]]) -> Callable:
        def selected_rungs(*inputs) -> GraphRun:
            capacities, with_code = _rungs(lambda capacity: probe(inputs, capacity))
            rungs = select(capacities)
            climb = Climb(rungs, with_code, terminal=rungs[-1] == capacities[-1])
            values = _fresh_values(constants, fgraph.inputs, inputs)
            return climb.settled(interpret(values, 0, [], False, climb, None))

        return selected_rungs

    def lower_rungs(capacities: list[int]) -> list[int]:
        return [capacity for capacity in capacities if capacity <= SPLIT_CAPACITY] or capacities[:1]

    def higher_rungs(capacities: list[int]) -> list[int]:
        return capacities[len(lower_rungs(capacities)) :]

    return LadderedGraph(
        climbing(lambda capacities: capacities), climbing(lower_rungs), climbing(higher_rungs)
    )


def absorb(
    node: Apply, lowering, result, values: dict, oks: list, overflow: Any
) -> tuple[list, Any]:
    """A rule's result into ``values`` (in the kinds the plan declared); the checks and overflow so
    far."""
    if isinstance(result, NodeResult):
        result, node_oks, node_overflow, _ = result
        oks, overflow = [*oks, *node_oks], _either(overflow, node_overflow)
    outputs = [result] if len(node.outputs) == 1 else result
    values.update(
        zip(
            node.outputs,
            (
                as_kind(value, kind)
                for value, kind in zip(outputs, lowering.output_kinds, strict=True)
            ),
            strict=True,
        )
    )
    return oks, overflow


def _fresh(values: dict) -> dict:
    """``values`` in containers of their own, for a branch that runs nodes (random variables write
    into their dicts)."""
    return {variable: jax.tree.map(lambda leaf: leaf, value) for variable, value in values.items()}


def _rungs(run_at: Callable[[int], GraphRun]) -> tuple[list[int], bool]:
    """The capacities the ladder may climb to, and whether any rung has an error code.

    Each rung is traced once under ``jax.eval_shape``, which stages nothing,
    only to learn what its Python-level structure is while tracing.
    """
    capacities, with_code = [], False
    capacity = FIRST_CAPACITY
    while True:
        seen: dict[str, bool] = {}

        def probe(capacity=capacity, seen=seen):
            result = run_at(capacity)
            seen.update(code=result.error_code is not None, last=result.overflow is False)
            return result.outputs

        jax.eval_shape(probe)
        capacities.append(capacity)
        with_code |= seen["code"]
        if seen["last"]:
            return capacities, with_code
        capacity *= CAPACITY_GROWTH


def _settled_code(error_code, with_code: bool):
    """A rung's error code in the structure every rung shares: an int32 where any rung has checks
    left."""
    return error_code if error_code is not None or not with_code else jnp.int32(0)


def step_counted_graph(
    fgraph,
    order: Sequence[Apply],
    plan: ExactLengthsNeeded,
    default_fn: Callable[[Apply], Callable],
    constant,
    **kwargs,
) -> Callable:
    """``graph(assumed_steps, *inputs) -> (outputs, ((steps_taken, matched), ...), error_code)``,
    one pair per while-Scan of the plan, and the code of the plan's first failed index check
    (None where every check was proven while tracing)."""
    specialised = {node: specialised_scan(node.op, node, **kwargs) for node in plan.nodes}
    sizing = plan.sizing
    fns = {node: specialised.get(node) or default_fn(node) for node in order}
    constants = _constants(fgraph, order, constant)

    def graph(assumed_steps: tuple[int | None, ...], *inputs):
        assumed: Mapping[Apply, int | None] = dict(zip(plan.nodes, assumed_steps, strict=True))
        values = _fresh_values(constants, fgraph.inputs, inputs)
        counts = []
        oks: list = []
        for node in order:
            arguments = [values[value] for value in node.inputs]
            if node in specialised:
                outputs, taken, matched = _specialised_outputs(
                    node, fns[node], arguments, assumed[node]
                )
                counts.append((taken, matched))
            elif node in plan.index_checks:
                result = plan.index_checks[node].fn(*arguments)
                outputs = result.outputs
                oks.extend(result.oks)
            else:
                outputs = _plain_outputs(sizing, plan.nodes, node, fns[node], arguments)
            values.update(
                zip(node.outputs, [outputs] if len(node.outputs) == 1 else outputs, strict=True)
            )
        return [values[output] for output in fgraph.outputs], tuple(counts), first_failure(oks)

    return graph
