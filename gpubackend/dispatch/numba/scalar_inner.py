"""A scalar problem's inner graph as a graph of PyTensor scalars.

The inner graph of a `minimize_scalar` or `root_scalar` is, once fused, a few
Elemwise nodes on 0-d tensors. Lowered as is, every evaluation passes 0-d
arrays through PyTensor's Elemwise lowering: an allocation and about a dozen
atomic reference-count updates, most of what a bracketing solver spends per
step. `as_scalar_graph` rebuilds the same computation on the Elemwise nodes'
own scalar ops, which Numba compiles to arithmetic on floats (as it does the
inside of a ``Composite``). A graph holding anything else (a reduction, a
copy, a non-0-d value) gets None and keeps the array lowering.
"""

from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.scalar.basic import ScalarOp, ScalarType, constant as scalar_constant, get_scalar_type
from pytensor.tensor.basic import ScalarFromTensor, TensorFromScalar
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.type import TensorType


def _is_0d(variable: Variable) -> bool:
    return isinstance(variable.type, ScalarType) or (isinstance(variable.type, TensorType) and variable.type.ndim == 0)


def as_scalar_graph(fgraph: FunctionGraph) -> FunctionGraph | None:
    """``fgraph`` on scalars, inputs and outputs in the same order; None where it holds more than 0-d Elemwise work."""
    if not all(_is_0d(variable) for variable in (*fgraph.inputs, *fgraph.outputs)):
        return None
    scalars: dict[Variable, Variable] = {
        variable: get_scalar_type(variable.type.dtype).make_variable(name=variable.name) for variable in fgraph.inputs
    }

    def scalar_of(variable: Variable) -> Variable:
        if isinstance(variable, Constant):
            return scalar_constant(variable.data.item(), dtype=variable.type.dtype)
        return scalars[variable]

    if any(variable in fgraph.inputs or isinstance(variable, Constant) for variable in fgraph.outputs):
        # An output that is an input or a constant is no scalar op's result; the array lowering copies it.
        return None
    for node in fgraph.toposort():
        inputs = [scalar_of(variable) for variable in node.inputs]
        if isinstance(node.op, Elemwise) and all(_is_0d(variable) for variable in node.outputs):
            outputs = node.op.scalar_op.make_node(*inputs).outputs
        elif isinstance(node.op, ScalarOp):
            outputs = node.op.make_node(*inputs).outputs
        elif isinstance(node.op, TensorFromScalar | ScalarFromTensor):
            outputs = inputs
        else:
            return None
        scalars.update(zip(node.outputs, outputs, strict=True))
    return FunctionGraph(
        [scalars[variable] for variable in fgraph.inputs], [scalars[variable] for variable in fgraph.outputs], clone=False
    )
