"""A graph with while-Scan traces of run-time length, as one function JAX traces: node by node, in
order (`GraphWalk`, which folds the rules' run-time conditions into one error code).

`bounded_graph` walks a `BoundedPlan` and climbs a ladder of capacities at
each while-Scan: the loop first gets room for `FIRST_CAPACITY` steps; only
when it runs out of room does it resume, inside ``lax.cond``, where it stopped
with `CAPACITY_GROWTH` times more, up to the bound, and the rest of the graph
then runs at that room. A loop that stops after a few steps thus costs a few
steps however generous its bound, in the loop, in the buffers and in every op
after it (a gradient's backward Scan); no step is taken twice, and no length
leaves the device. Under ``vmap`` a ``lax.cond`` computes both branches, so
there a call costs every rung up to the bound.

`step_counted_graph` walks an `ExactLengthsNeeded` graph with the traces cut
to assumed step counts, and returns the counts taken (JAX_GPU only).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.traversal import ancestors

from gpubackend.dispatch.jax.tracing import is_traced
from gpubackend.dispatch.jax.while_scan.checks import NodeResult, first_failure
from gpubackend.dispatch.jax.while_scan.plan import BoundedPlan, ExactLengthsNeeded
from gpubackend.dispatch.jax.while_scan.refusals import unbounded_step_count
from gpubackend.dispatch.jax.while_scan.rules import BoundedLowering
from gpubackend.dispatch.jax.while_scan.traces import specialised_scan
from gpubackend.dispatch.jax.while_scan.values import (
    Bounded,
    BoundedInt,
    as_kind,
    kinds,
    with_capacity,
)
from gpubackend.errors import DataDependentLengthError

FIRST_CAPACITY = 16
CAPACITY_GROWTH = 16
LOWER_RUNGS = 2
"""The rungs a split ladder runs as its first computation (`LadderedGraph.lower`); each higher rung
is a computation of its own (`LadderedGraph.at_rung`)."""


class GraphRun(NamedTuple):
    outputs: list
    """Plain values, and `Bounded` ones for the outputs whose length is known only at run time."""
    error_code: Any
    """`checks.first_failure` of the graph's run-time conditions (None when all are proven)."""
    overflow: Any


class Progress(NamedTuple):
    """What the nodes walked so far report: their checks' conditions, and whether a Scan ran out of
    room."""

    oks: tuple = ()
    overflow: Any = False

    def after(self, result: NodeResult) -> Progress:
        """With a node's result; the overflow is kept a Python False while none can happen."""
        overflow, other = self.overflow, result.overflow
        if overflow is not False and other is not False:
            overflow = overflow | other
        return Progress((*self.oks, *result.oks), other if overflow is False else overflow)


Call = Callable[[Apply, BoundedLowering, list], Any]
"""How a walk calls a node's lowering on its arguments: what it tells the node's Scan (its room, or
the step count it assumes)."""


class GraphWalk:
    """A graph's nodes in order: each with its lowering in ``lowerings``, called as the walk says,
    or else with its ordinary one."""

    def __init__(
        self,
        fgraph,
        order: Sequence[Apply],
        lowerings: Mapping[Apply, BoundedLowering],
        default_fn: Callable[[Apply], Callable],
        constant: Callable[[Constant], Any],
        *,
        while_scans: Sequence[Apply],
        run_time_lengths: Collection[Variable] = (),
    ):
        self.order = order
        self.lowerings = lowerings
        self.plain_fns = {node: default_fn(node) for node in order if node not in lowerings}
        self.inputs, self.outputs = fgraph.inputs, fgraph.outputs
        self.constants = {
            value: constant(value)
            for value in (*(value for node in order for value in node.inputs), *fgraph.outputs)
            if isinstance(value, Constant)
        }
        self.while_scans = while_scans
        while_scan_inputs = [value for node in while_scans for value in node.inputs]
        self.sizing = frozenset(
            value.owner for value in ancestors(while_scan_inputs) if value.owner is not None
        )
        """The nodes that compute the while-Scans' step bounds and buffers: JAX needs their sizes
        while tracing."""
        self.run_time_lengths = run_time_lengths

    def fresh_values(self, inputs: Sequence) -> dict[Variable, Any]:
        """The graph's values before a run, in containers of their own.

        PyTensor's random variables write their new key into the generator's dict,
        and a graph runs several times while traced (the ladder's rungs, the probe
        of each): each run mutates its own dicts, never the next run's.
        """
        return _fresh({**self.constants, **dict(zip(self.inputs, inputs, strict=True))})

    def result(self, node: Apply, values: dict, call: Call) -> NodeResult:
        """The node's outputs, with what its lowering reports; a size found unbounded while tracing
        is refused by name (a refusal of a rule's own keeps its message)."""
        arguments = [values[value] for value in node.inputs]
        lowering = self.lowerings.get(node)
        # Named by the while-Scan itself, else by the first one (which the node sizes or follows).
        scan = node if node in self.while_scans else (*self.while_scans, node)[0]
        if lowering is None:
            try:
                return NodeResult(self.plain_fns[node](*arguments))
            except (TypeError, jax.errors.ConcretizationTypeError) as error:
                # An ordinary lowering that sizes a while-Scan from the data.
                if node in self.sizing and any(is_traced(value) for value in arguments):
                    raise unbounded_step_count(scan.op, node) from error
                raise
        try:
            result = call(node, lowering, arguments)
        except DataDependentLengthError:
            raise
        except NotImplementedError as error:
            raise unbounded_step_count(scan.op, node) from error
        return result if isinstance(result, NodeResult) else NodeResult(result)

    def absorb(self, node: Apply, result: NodeResult, values: dict, progress: Progress) -> Progress:
        """A node's result into ``values``, in the kinds its lowering declared (a length can turn
        out concrete while tracing)."""
        outputs = [result.outputs] if len(node.outputs) == 1 else result.outputs
        lowering = self.lowerings.get(node)
        output_kinds = kinds(None, len(outputs)) if lowering is None else lowering.output_kinds
        values.update(zip(node.outputs, map(as_kind, outputs, output_kinds), strict=True))
        return progress.after(result)

    def walk(
        self,
        values: dict,
        start: int,
        progress: Progress,
        call: Call,
        branch: Callable[[int, dict, Progress], GraphRun] | None = None,
    ) -> GraphRun:
        """The nodes from ``start`` on, then the graph's outputs; ``branch(index, values,
        progress)`` takes over at a capacity-limited Scan where it is given."""
        for index in range(start, len(self.order)):
            node = self.order[index]
            lowering = self.lowerings.get(node)
            if branch is not None and lowering is not None and lowering.capacity_limited:
                return branch(index, values, progress)
            progress = self.absorb(node, self.result(node, values, call), values, progress)
        outputs = [
            _as_output(values[output], output in self.run_time_lengths, output)
            for output in self.outputs
        ]
        return GraphRun(outputs, first_failure(progress.oks), progress.overflow)


def _at_capacity(capacity: int | None, resume=None) -> Call:
    """Every Scan with room for ``capacity`` steps (None: its bound), resuming from ``resume`` (the
    `NodeResult.state` of a run with less room that overflowed)."""

    def call(node: Apply, lowering: BoundedLowering, arguments: list):
        if lowering.capacity_limited:
            return lowering.fn(*arguments, capacity=capacity, resume=resume)
        return lowering.fn(*arguments)

    return call


def _as_output(value, run_time_length: bool, output: Variable):
    """A graph output: a `Bounded` one is kept where its length is known only at run time, else cut
    to its type's."""
    if isinstance(value, BoundedInt):
        return value.value
    if isinstance(value, Bounded) and not run_time_length:
        static_length = output.type.shape[0]
        assert static_length is not None, (
            "an output whose length is not a run-time one has a static one"
        )
        return with_capacity(value.buffer, static_length)
    return value


class LadderedGraph(NamedTuple):
    """A bounded graph as one computation (`whole`), or as computations the caller runs one after
    the other while they overflow: the lower rungs (`lower`), then one rung each (`at_rung`).

    A computation's temporaries are sized by its largest rung (XLA allocates
    them for every branch of a cond): in one computation a call costs the
    bound, in memory if not in work. On the CPU, XLA moreover maps large
    temporaries afresh on every call, which the lower rungs' computation
    (room for 256 steps at most) keeps small. Run apart, each rung costs only
    when the one below it overflowed, so memory follows the steps taken.
    """

    whole: Callable
    """``whole(*inputs) -> GraphRun``."""
    lower: Callable
    """``lower(*inputs) -> GraphRun``: the first `LOWER_RUNGS` rungs; its overflow None where there
    is no other."""
    at_rung: Callable
    """``at_rung(rung, *inputs) -> GraphRun``: every Scan with the room of the ladder's rung
    ``rung`` (0 the first, `LOWER_RUNGS` the first above `lower`'s), its overflow None on the
    last rung."""


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
        """A rung's run in the structure every rung shares (an int32 code where any has checks
        left)."""
        code = jnp.int32(0) if run.error_code is None and self.with_code else run.error_code
        return GraphRun(run.outputs, code, None if self.terminal else jnp.asarray(run.overflow))


def bounded_graph(
    fgraph,
    order: Sequence[Apply],
    plan: BoundedPlan,
    default_fn: Callable[[Apply], Callable],
    constant,
) -> LadderedGraph:
    """The plan's graph, climbing the ladder at each while-Scan: with more room, the loop resumes
    where it stopped."""
    graph = GraphWalk(
        fgraph,
        order,
        plan.lowerings,
        default_fn,
        constant,
        while_scans=plan.while_scans,
        run_time_lengths=plan.run_time_lengths,
    )
    at_the_bound = _at_capacity(None)

    def climb_at(
        index: int, values: dict, progress: Progress, climb: Climb, resume=None
    ) -> GraphRun:
        """The Scan at ``index`` on the first of the climb's rungs, then the rest of the graph, or
        more room."""
        node = order[index]
        result = graph.result(node, values, _at_capacity(climb.rungs[0], resume))

        def rest_of_graph() -> GraphRun:
            own_values = _fresh(values)
            own_progress = graph.absorb(node, result, own_values, progress)
            return graph.walk(
                own_values, index + 1, own_progress, at_the_bound, partial(climb_at, climb=climb)
            )

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
                climb.settled(climb_at(index, _fresh(values), progress, higher, result.state))
            )

        return GraphRun(
            *jax.lax.cond(result.overflow, more_room, lambda: tuple(climb.settled(rest_of_graph())))
        )

    def probe(inputs: Sequence, capacity: int | None) -> GraphRun:
        """Every Scan at one capacity: what the rung's structure is while tracing."""
        return graph.walk(graph.fresh_values(inputs), 0, Progress(), _at_capacity(capacity))

    def at_rung(rung: int, *inputs) -> GraphRun:
        run = probe(inputs, FIRST_CAPACITY * CAPACITY_GROWTH**rung)
        return run._replace(overflow=None if run.overflow is False else run.overflow)

    if plan.run_time_lengths:
        # Outputs of run-time length are returned at the size of their buffers, which the branches
        # of a cond cannot vary: in one computation, one rung at the bound; a linker that reads
        # back climbs computations of one rung each (`at_rung`).
        def whole_bound(*inputs) -> GraphRun:
            return GraphRun(*probe(inputs, None)[:2], None)

        return LadderedGraph(whole_bound, whole_bound, at_rung)

    def climbing(select: Callable[[list[int]], list[int]]) -> Callable:
        def selected_rungs(*inputs) -> GraphRun:
            capacities, with_code = _rungs(lambda capacity: probe(inputs, capacity))
            rungs = select(capacities)
            climb = Climb(rungs, with_code, terminal=rungs[-1] == capacities[-1])
            values = graph.fresh_values(inputs)
            run = graph.walk(values, 0, Progress(), at_the_bound, partial(climb_at, climb=climb))
            return climb.settled(run)

        return selected_rungs

    return LadderedGraph(
        climbing(lambda capacities: capacities),
        climbing(lambda capacities: capacities[:LOWER_RUNGS]),
        at_rung,
    )


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
    lowerings = dict(plan.index_checks)
    for node in plan.nodes:
        specialised = specialised_scan(node.op, node, **kwargs)
        lowerings[node] = BoundedLowering(specialised, kinds(None, len(node.outputs)))
    graph = GraphWalk(fgraph, order, lowerings, default_fn, constant, while_scans=plan.nodes)

    def counted(assumed_steps: tuple[int | None, ...], *inputs):
        assumed = dict(zip(plan.nodes, assumed_steps, strict=True))
        counts = []

        def at_assumed_steps(node: Apply, lowering: BoundedLowering, arguments: list):
            if node not in assumed:
                return lowering.fn(*arguments)
            outputs, taken, matched = lowering.fn(*arguments, assumed_steps=assumed[node])
            counts.append((taken, matched))
            return outputs

        run = graph.walk(graph.fresh_values(inputs), 0, Progress(), at_assumed_steps)
        return run.outputs, tuple(counts), run.error_code

    return counted
