"""Identity fingerprints of every inner-graph op reachable from a graph's outputs.

A fingerprint records, per op, the op object and its hash, the identity of its
frozen graph, and for every node its identity, op, input and output identities
and destroy map. Two fingerprints of the same outputs compare equal exactly
when no canonical inner-graph op was replaced, rebuilt or mutated in between.
A fingerprint holds the graphs it recorded, so that no identity it records
can be reused by a new object while it lives.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pytensor.graph.basic import Variable
from pytensor.graph.op import HasMultipleInnerGraph, Op

NodeRecord = tuple[
    int, int, tuple[int, ...], tuple[int, ...], tuple[tuple[int, tuple[int, ...]], ...]
]


@dataclass(frozen=True)
class OpRecord:
    op_id: int
    op_repr: str
    op_hash: int
    graphs: tuple[tuple[str, int, tuple[NodeRecord, ...]], ...]
    recorded: tuple = field(compare=False, repr=False)
    """The op, its inner graphs and their nodes (which hold their variables): the identities above
    stay theirs."""


Fingerprint = dict[int, OpRecord]


def _inner_graph_ops_of(op: Op) -> Iterator[HasMultipleInnerGraph]:
    """The op itself and the ops it wraps (Elemwise's scalar_op, Blockwise's core_op) that have
    inner graphs."""
    for candidate in (op, getattr(op, "scalar_op", None), getattr(op, "core_op", None)):
        if isinstance(candidate, HasMultipleInnerGraph):
            yield candidate


def _nodes_of(outputs: Iterable[Variable]) -> Iterator:
    """Every apply node (mutable or frozen) that ``outputs`` depend on."""
    seen: set[int] = set()
    stack = [var.owner for var in outputs if var.owner is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(var.owner for var in node.inputs if var.owner is not None)


def inner_graph_ops(outputs: Iterable[Variable]) -> list[HasMultipleInnerGraph]:
    """Inner-graph ops reachable from ``outputs``, recursively through inner graphs, each once."""
    found: dict[int, HasMultipleInnerGraph] = {}
    pending = list(outputs)
    while pending:
        nodes = list(_nodes_of(pending))
        pending = []
        for node in nodes:
            for op in _inner_graph_ops_of(node.op):
                if id(op) not in found:
                    found[id(op)] = op
                    for graph in op.inner_graphs.values():
                        pending.extend(graph.outputs)
    return list(found.values())


def _node_record(node) -> NodeRecord:
    destroy_map = tuple(
        sorted((out, tuple(ins)) for out, ins in getattr(node.op, "destroy_map", {}).items())
    )
    return (
        id(node),
        id(node.op),
        tuple(id(var) for var in node.inputs),
        tuple(id(var) for var in node.outputs),
        destroy_map,
    )


def op_record(op: HasMultipleInnerGraph) -> OpRecord:
    nodes = {name: graph.toposort() for name, graph in op.inner_graphs.items()}
    graphs = tuple(
        (name, id(graph), tuple(map(_node_record, nodes[name])))
        for name, graph in op.inner_graphs.items()
    )
    return OpRecord(
        id(op), f"{type(op).__name__}({op})", hash(op), graphs, (op, op.inner_graphs, nodes)
    )


def fingerprint(outputs: Iterable[Variable]) -> Fingerprint:
    return {record.op_id: record for record in map(op_record, inner_graph_ops(outputs))}


def describe_difference(before: Fingerprint, after: Fingerprint) -> str | None:
    """None when equal, else one line naming the first op that changed and how."""
    if before.keys() != after.keys():
        gone = [before[key].op_repr for key in before.keys() - after.keys()]
        gained = [after[key].op_repr for key in after.keys() - before.keys()]
        return f"reachable inner-graph ops changed: lost {gone[:3]}, gained {gained[:3]}"
    for key, old in before.items():
        new = after[key]
        if old == new:
            continue
        if old.op_hash != new.op_hash:
            return f"{old.op_repr}: op hash changed"
        for (name, old_id, old_nodes), (_, new_id, new_nodes) in zip(
            old.graphs, new.graphs, strict=False
        ):
            if old_id != new_id:
                return f"{old.op_repr}: inner graph {name or 'fgraph'!r} was replaced"
            if old_nodes != new_nodes:
                return f"{old.op_repr}: nodes of inner graph {name or 'fgraph'!r} changed"
        return f"{old.op_repr}: inner graphs changed"
    return None


def count_inplace_nodes(ops: Iterable[HasMultipleInnerGraph]) -> int:
    """Nodes with a destroy map inside the given ops' own inner graphs."""
    return sum(
        1
        for op in ops
        for graph in op.inner_graphs.values()
        for node in graph.toposort()
        if getattr(node.op, "destroy_map", None)
    )
