"""The function of a whole graph whose while-Scan traces may be trimmed, for the linker and path it
is lowered for.

Given the graph's plan (`plan`) and the `LoweringContext`:

- a linker that reads back (JAX_GPU's top graph) gets, whatever the plan, a
  function that takes the assumed step counts first and returns what the call
  reads beside the outputs, with how to call it (`HostReadPlan`), both in the
  `LoweredGraph` returned: traces stay bounded and the call reads lengths and
  the error code only where the graph has them, or, for a graph that needs
  exact lengths, the graph is specialised on its step counts;
- any other caller gets a function of static-shape outputs (a `LoweredGraph`
  with no plan), whose run-time checks run inside the computation, or a
  `DataDependentLengthError` that says what to do on its path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
from pytensor.graph.basic import Apply

from gpubackend.dispatch.jax.lowering_context import LoweringContext
from gpubackend.dispatch.jax.while_scan.checks import raise_in_graph
from gpubackend.dispatch.jax.while_scan.interpreter import (
    LOWER_RUNGS,
    bounded_graph,
    step_counted_graph,
)
from gpubackend.dispatch.jax.while_scan.plan import BoundedPlan, ExactLengthsNeeded
from gpubackend.dispatch.jax.while_scan.refusals import no_length_rule, run_time_length_output
from gpubackend.dispatch.jax.while_scan.values import Bounded, known_value
from gpubackend.host_reads import HostReadPlan, HostReads, LoweredGraph


def lowered_while_scan_graph(
    fgraph,
    order: Sequence[Apply],
    plan: BoundedPlan | ExactLengthsNeeded,
    context: LoweringContext,
    default_fn: Callable[[Apply], Callable],
    constant: Callable,
    typed: Callable[[list], list],
    **node_kwargs,
) -> LoweredGraph:
    """``typed`` gives the plain outputs their graph dtypes."""
    if isinstance(plan, ExactLengthsNeeded):
        if not context.reads_back:
            raise no_length_rule(plan.nodes[0].op, plan.consumer, plan.reason, context)
        counted = step_counted_graph(fgraph, order, plan, default_fn, constant, **node_kwargs)

        def specialised(step_counts: tuple, *inputs):
            outputs, counts, error_code = counted(step_counts, *inputs)
            return typed(outputs), HostReads(error_code=error_code, step_counts=counts)

        return LoweredGraph(specialised, HostReadPlan(plan.checks, n_specialised=len(plan.nodes)))
    graph = bounded_graph(fgraph, order, plan, default_fn, constant)
    if context.reads_back:
        positions = tuple(
            position
            for position, output in enumerate(fgraph.outputs)
            if output in plan.run_time_lengths
        )

        def returned(outputs: list, error_code) -> tuple[list, HostReads]:
            lengths = tuple(outputs[position].length.value for position in positions)
            buffers = [value.buffer if isinstance(value, Bounded) else value for value in outputs]
            return typed(buffers), HostReads(lengths, error_code)

        if plan.run_time_lengths:
            # Outputs of run-time length: the call reads their lengths, and with them whether the
            # rung overflowed, when the next one runs.
            def climbing(rung: int, *inputs):
                outputs, error_code, overflow = graph.at_rung(rung, *inputs)
                outputs, reads = returned(outputs, error_code)
                return outputs, reads._replace(overflow=overflow)

            return LoweredGraph(climbing, HostReadPlan(plan.checks, positions, climbs=True))

        # A graph without a while-Scan (only index checks) has no ladder to split.
        if not plan.while_scans:
            return LoweredGraph(
                lambda step_counts, *inputs: returned(*graph.whole(*inputs)[:2]),
                HostReadPlan(plan.checks, positions),
            )

        # The ladder split, and whole: the linker chooses (`host_reads.SplitLadder`).
        def lower_rungs(step_counts: tuple, *inputs):
            outputs, error_code, overflow = graph.lower(*inputs)
            return (*returned(outputs, error_code), overflow)

        def higher_rungs(rung: int, *inputs):
            outputs, error_code, overflow = graph.at_rung(LOWER_RUNGS + rung, *inputs)
            return (*returned(outputs, error_code), overflow)

        def every_rung(step_counts: tuple, *inputs):
            outputs, error_code, _ = graph.whole(*inputs)
            return (*returned(outputs, error_code), None)

        return LoweredGraph(
            lower_rungs,
            HostReadPlan(plan.checks, positions, continuation=higher_rungs, whole=every_rung),
        )
    run_time_lengths = set(plan.run_time_lengths)

    def statically_cut(value, output):
        """An output the plan gives a run-time length, cut to it where the bounds pin it down
        while tracing (a while-Scan's head joined to the for-Scan over the remaining steps)."""
        if output not in run_time_lengths:
            return value
        length = known_value(value.length)
        if length is None:
            raise run_time_length_output(plan.while_scans[0].op, output, context)
        return jax.lax.slice_in_dim(value.buffer, 0, length)

    def checked(*inputs):
        outputs, error_code, _ = graph.whole(*inputs)
        outputs = [
            statically_cut(value, output)
            for value, output in zip(outputs, fgraph.outputs, strict=True)
        ]
        return typed(raise_in_graph(outputs, error_code, plan.checks))

    return LoweredGraph(checked)
