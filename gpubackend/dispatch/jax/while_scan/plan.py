"""How one graph lowers the while-Scan traces whose length depends on the data, decided once at
lowering.

`plan_graph` follows the values of run-time length from each while-Scan
PyTensor may trim, through the rules of `bounded_jax_funcify`, and picks:

- `BoundedPlan`: every node that sees a run-time length has a rule. The
  traces stay `Bounded` and nothing needs their exact length. Outputs of
  static shape come out as plain arrays; an output of run-time length
  (``xs`` itself) is one only a linker that reads lengths back can return.
- `ExactLengthsNeeded`: a node has no rule for what it sees, so the traces
  must have their exact length: only a linker that specialises on step
  counts (JAX_GPU) can run the graph.
- None: no trace of the graph may be trimmed.

For a linker that reads back, the plan also checks the integer indices known
only at run time (`index_checks`), the brackets of bracketing root finds
(`brackets`) and the lengths ``specify_shape`` declares that are known only at
run time (`allocation.checked_specify_shape`), in graphs with or without a
while-Scan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pytensor.graph.basic import Apply, Variable
from pytensor.raise_op import CheckAndRaise
from pytensor.scan.op import Scan

from gpubackend.dispatch.jax.index_checks import index_checked_nodes
from gpubackend.dispatch.jax.while_scan import allocation
from gpubackend.dispatch.jax.while_scan.brackets import bracketed_root_finds, checked_bracket
from gpubackend.dispatch.jax.while_scan.indexing import checked_indexing
from gpubackend.dispatch.jax.while_scan.lengths import checks_data_at_run_time
from gpubackend.dispatch.jax.while_scan.loop import possibly_trimmed_traces
from gpubackend.dispatch.jax.while_scan.rules import BoundedLowering, bounded_jax_funcify
from gpubackend.dispatch.jax.while_scan.values import Kind
from gpubackend.host_reads import RuntimeCheck


def trimmed_while_scans(order: Sequence[Apply]) -> list[Apply]:
    return [
        node
        for node in order
        if isinstance(node.op, Scan) and any(possibly_trimmed_traces(node.op, node))
    ]


@dataclass(frozen=True)
class BoundedPlan:
    while_scans: tuple[Apply, ...]
    """The while-Scans whose traces may be trimmed."""

    lowerings: Mapping[Apply, BoundedLowering]
    """The length-aware lowering of each node that sees a run-time length."""

    run_time_lengths: tuple[Variable, ...]
    """The graph's outputs whose length is known only at run time."""

    @property
    def checks(self) -> tuple[RuntimeCheck, ...]:
        """Every check the graph may need, in the order of its nodes."""
        return tuple(check for lowering in self.lowerings.values() for check in lowering.checks)


@dataclass(frozen=True)
class ExactLengthsNeeded:
    nodes: tuple[Apply, ...]
    """The while-Scans whose traces must have their exact length."""

    consumer: Apply
    """The first node with no rule for what it sees."""

    reason: str

    index_checks: Mapping[Apply, BoundedLowering] = field(default_factory=dict)
    """The checked lowering of each indexing node with an index known only at run time, of each
    bracketing root find and of each SpecifyShape of a length known only at run time (for a linker
    that reads back)."""

    @property
    def checks(self) -> tuple[RuntimeCheck, ...]:
        """Every index, bracket and shape check the graph may need, in the order of its nodes."""
        return tuple(check for lowering in self.index_checks.values() for check in lowering.checks)


def _run_time_checks(order: Sequence[Apply]) -> set[Apply]:
    """In a graph with a while-Scan (which stock JAX refuses whole), the checks gpubackend lowers,
    to run at run time."""
    if not any(isinstance(node.op, Scan) and node.op.info.as_while for node in order):
        return set()
    return {
        node
        for node in order
        if isinstance(node.op, CheckAndRaise) and checks_data_at_run_time(node.op)
    }


def plan_graph(
    fgraph, order: Sequence[Apply], *, index_checks: bool = False, **kwargs
) -> BoundedPlan | ExactLengthsNeeded | None:
    """None when no while-Scan trace of the graph (whose nodes, in order, are ``order``) may be
    trimmed, no check of a graph with a while-Scan needs the run, and no index is checked.

    ``index_checks``: integer indices and declared shapes known only at run time, and brackets,
    are checked (`index_checks`, `allocation.checked_specify_shape`, `brackets`), for a linker
    that reads back.
    """
    trimmed = trimmed_while_scans(order)
    checked = _run_time_checks(order)
    indexed = index_checked_nodes(order) if index_checks else set()
    bracketed = bracketed_root_finds(order) if index_checks else set()
    specified = allocation.run_time_specified_shapes(order) if index_checks else set()
    read_back_checked = indexed | bracketed | specified
    if not trimmed and not checked and not read_back_checked:
        return None

    def checked_lowering(node: Apply) -> BoundedLowering:
        if node in bracketed:
            return checked_bracket(node.op, node, **kwargs)
        if node in specified:
            return allocation.checked_specify_shape(node.op, node, **kwargs)
        return checked_indexing(node.op, node, **kwargs)

    kinds: dict[Variable, Kind] = {}
    lowerings: dict[Apply, BoundedLowering] = {}
    for node in order:
        input_kinds = tuple(kinds.get(value) for value in node.inputs)
        if node not in trimmed and node not in checked and not any(input_kinds):
            if node in read_back_checked:
                lowerings[node] = checked_lowering(node)
            continue
        try:
            lowering = bounded_jax_funcify(node.op, node, input_kinds, **kwargs)
        except NotImplementedError as error:
            index_lowerings = {
                other: checked_lowering(other) for other in order if other in read_back_checked
            }
            return ExactLengthsNeeded(tuple(trimmed), node, str(error), index_lowerings)
        lowerings[node] = lowering
        kinds.update(
            (output, kind)
            for output, kind in zip(node.outputs, lowering.output_kinds, strict=True)
            if kind
        )
    run_time_lengths = tuple(
        output
        for output in fgraph.outputs
        if kinds.get(output) == "array" and output.type.shape[0] is None
    )
    return BoundedPlan(tuple(trimmed), lowerings, run_time_lengths)
