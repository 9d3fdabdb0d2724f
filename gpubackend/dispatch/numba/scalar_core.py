"""A scalar problem's inner graph as one Numba function on floats, where it is one scalar op between
conversions.

`gpubackend.rewrites.numba.on_scalars` moves a scalar problem's 0-d Elemwise
work onto PyTensor's scalar ops at compile time, and fusion has made it one
``Composite``: the inner graph is ``ScalarFromTensor`` of each input, that op,
and ``TensorFromScalar`` of each output. Lowered whole, each evaluation would
still wrap and unwrap 0-d arrays at both ends; `scalar_core` lowers the scalar
op alone, so the solver passes floats in and gets floats out. Nothing is built:
it reads the graph as baked, and any other shape of graph keeps the array path.
"""

from __future__ import annotations

from collections.abc import Callable

from pytensor.graph.basic import Apply
from pytensor.link.numba.dispatch.basic import numba_funcify, numba_njit
from pytensor.scalar.basic import ScalarOp
from pytensor.tensor.basic import ScalarFromTensor, TensorFromScalar


def _core_node(fgraph) -> Apply | None:
    cores = [node for node in fgraph.apply_nodes if isinstance(node.op, ScalarOp)]
    conversions = [
        node
        for node in fgraph.apply_nodes
        if isinstance(node.op, ScalarFromTensor | TensorFromScalar)
    ]
    if len(cores) != 1 or len(cores) + len(conversions) != len(fgraph.apply_nodes):
        return None
    return cores[0]


def scalar_core(fgraph) -> Callable | None:
    """``inner(*scalar_inputs) -> tuple of scalar outputs``, in the graph's order; None for any
    other graph."""
    core = _core_node(fgraph)
    if core is None:
        return None
    input_positions = []
    for variable in core.inputs:
        converted = variable.owner
        if (
            converted is None
            or not isinstance(converted.op, ScalarFromTensor)
            or converted.inputs[0] not in fgraph.inputs
        ):
            return None
        input_positions.append(fgraph.inputs.index(converted.inputs[0]))
    output_positions = []
    for output in fgraph.outputs:
        converted = output.owner
        if (
            converted is None
            or not isinstance(converted.op, TensorFromScalar)
            or converted.inputs[0].owner is not core
        ):
            return None
        output_positions.append(core.outputs.index(converted.inputs[0]))
    core_fn = numba_funcify(core.op, node=core)
    names = [f"i{position}" for position in range(len(fgraph.inputs))]
    results = "results" if len(core.outputs) > 1 else "(results,)"
    source = (
        f"def scalar_inner({', '.join(names)}):\n"
        f"    results = core_fn({', '.join(names[position] for position in input_positions)})\n"
        f"    outputs = {results}\n"
        f"    return ({''.join(f'outputs[{position}], ' for position in output_positions)})\n"
    )
    namespace = {"core_fn": core_fn}
    exec(compile(source, "<scalar_core>", "exec"), namespace)
    return numba_njit(namespace["scalar_inner"])
