"""Bake inplace into optimize-op inner graphs that gpubackend lowers to Numba.

Stock PyTensor keeps these inner graphs functional under `NumbaLinker`, since
it never funcifies the ops. gpubackend does (`gpubackend.dispatch.numba.optimize`),
so an op with a native solver gets PyTensor's own Numba `OpFromGraph` rule
(`destructive_rewrite_ofg_inner_graph`): inputs are protected by a Supervisor,
inplace is allowed between internal buffers, and boundary deepcopies stop an
output from aliasing an input. The solver calls the
inner function many times with the same argument arrays, so those must survive.

An op without a native solver runs through the object-mode fallback, whose
scipy wrapper re-links the graph with `FunctionMaker` and, for scalar or 0-d
problems, rebuilds it around a new input with ``graph_replace``; it keeps
stock PyTensor's functional graph so nothing changes on that path.

A scalar problem's inner graph of 0-d Elemwise work is then moved onto
PyTensor's scalar ops (`on_scalars`), so that the solver's evaluations are
float arithmetic rather than 0-d arrays.

Vectorised (`Blockwise`) optimize ops need their core output shapes made
explicit for PyTensor's Numba `Blockwise` lowering. Stock PyTensor derives
them from the core op's ``infer_shape``, which these ops lack, and then runs
the whole `Blockwise` in object mode; the solution has the shape of ``x``, so
`introduce_core_shape_optimize_blockwise` states that directly.

The same lack of ``infer_shape`` leaves a read of the solution's shape on the
solve itself: `local_optimize_solution_shape` reads it from ``x``. Without it
the shape keeps a solve alive that nothing else uses: in a PyMC gradient,
PyTensor's core-shape rewrite for a batched Jacobian reads the shape of an
earlier copy of a `Blockwise` solve (its ``x`` folded into another constant),
which then runs a second time for its shape alone.
"""

from pytensor.compile import optdb
from pytensor.compile.ops import DeepCopyOp
from pytensor.compile.rewriting import destructive_rewrite_ofg_inner_graph
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.link.numba.linker import NumbaLinker
from pytensor.scalar.basic import constant as scalar_constant
from pytensor.tensor.basic import as_tensor, constant, scalar_from_tensor, tensor_from_scalar
from pytensor.tensor.blockwise import Blockwise, BlockwiseWithCoreShape
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.optimize import (
    ScipyScalarWrapperOp,
    ScipyWrapperOp,
    rewrite_optimize_inner_graph,
)
from pytensor.tensor.rewriting.optimize import jit_rewrite_optimize_inner_graph
from pytensor.tensor.shape import Shape_i
from pytensor.tensor.type import TensorType

from gpubackend.dispatch.numba.optimize_plan import has_native_solver


@rewrite_optimize_inner_graph.register(NumbaLinker)
def numba_rewrite_optimize_inner_graph(linker, op, node, inner, *, mode) -> None:
    if has_native_solver(op):
        destructive_rewrite_ofg_inner_graph(linker, op, node, inner, mode=mode)
        if isinstance(op, ScipyScalarWrapperOp):
            on_scalars(inner)
    else:
        jit_rewrite_optimize_inner_graph(linker, op, node, inner, mode=mode)


def _is_0d(variable: Variable) -> bool:
    return isinstance(variable.type, TensorType) and variable.type.ndim == 0


def on_scalars(inner: FunctionGraph) -> None:
    """A scalar problem's inner graph of 0-d Elemwise work, rewritten onto PyTensor's scalar ops.

    A bracketing solver evaluates its objective a few dozen times in a few
    microseconds; on 0-d arrays each Elemwise node allocates one and updates
    reference counts atomically. On scalars the graph is float arithmetic, with
    one conversion at each end (``ScalarFromTensor`` of each input,
    ``TensorFromScalar`` of each output). A graph with anything else keeps its
    arrays.
    """
    nodes = inner.toposort()
    if not all(_is_0d(variable) for variable in (*inner.inputs, *inner.outputs)) or any(
        variable.owner is None for variable in inner.outputs
    ):
        return
    if not all(
        isinstance(node.op, Elemwise | DeepCopyOp) and all(map(_is_0d, node.outputs))
        for node in nodes
    ):
        return
    scalars: dict[Variable, Variable] = {
        variable: scalar_from_tensor(variable) for variable in inner.inputs
    }

    def scalar_of(variable: Variable) -> Variable:
        if isinstance(variable, Constant):
            return scalar_constant(variable.data.item(), dtype=variable.type.dtype)
        return scalars[variable]

    for inner_node in nodes:
        inputs = [scalar_of(variable) for variable in inner_node.inputs]
        if isinstance(inner_node.op, DeepCopyOp):
            # A fresh array comes out of each conversion: nothing to break an alias with.
            scalars[inner_node.outputs[0]] = inputs[0]
            continue
        scalars.update(
            zip(inner_node.outputs, inner_node.op.scalar_op.make_node(*inputs).outputs, strict=True)
        )
    inner.replace_all(
        [(output, tensor_from_scalar(scalars[output])) for output in inner.outputs],
        reason="optimize_inner_graph_on_scalars",
    )


@node_rewriter([Blockwise])
def introduce_core_shape_optimize_blockwise(fgraph, node):
    """Wrap a `Blockwise` of a natively lowered optimize op in `BlockwiseWithCoreShape`.

    The core solution has the core shape of ``x`` (the first input) and the
    success flag is a scalar. Only ``x``'s own shape is read, so this is safe
    after inplacing, like PyTensor's `introduce_explicit_core_shape_blockwise`.
    """
    op: Blockwise = node.op
    core_op = op.core_op
    if not isinstance(core_op, ScipyWrapperOp) or not has_native_solver(core_op):
        return None
    x = node.inputs[0]
    core_ndim = core_op.inner_inputs[0].type.ndim
    x_core_dims = [x.shape[x.type.ndim - core_ndim + i] for i in range(core_ndim)]
    solution_core_shape = (
        as_tensor(x_core_dims, dtype="int64") if x_core_dims else constant([], dtype="int64")
    )
    success_core_shape = constant([], dtype="int64")
    return BlockwiseWithCoreShape(
        [*node.inputs, solution_core_shape, success_core_shape],
        node.outputs,
        destroy_map=op.destroy_map,
    )(*node.inputs, solution_core_shape, success_core_shape, return_list=True)


# Just before PyTensor's generic core-shape rewrite (position 100), which would
# give up on these nodes.
optdb.register(
    introduce_core_shape_optimize_blockwise.__name__,
    dfs_rewriter(introduce_core_shape_optimize_blockwise),
    "numba",
    position=99.9,
)


@node_rewriter([Shape_i])
def local_optimize_solution_shape(fgraph, node):
    """``Shape_i`` of a core dimension of an optimize op's solution (also batched) -> that of ``x``.

    The solution has the shape of ``x``, the op's first input (PyTensor
    reshapes scipy's result to it). Batch dimensions, a broadcast of every
    input's, are left alone.
    """
    [solution] = node.inputs
    solve = solution.owner
    if solve is None or solution is not solve.outputs[0]:
        return None
    op = solve.op
    if isinstance(op, BlockwiseWithCoreShape):
        [blockwise] = op.fgraph.apply_nodes
        op = blockwise.op
    core_op = op.core_op if isinstance(op, Blockwise) else op
    if not isinstance(core_op, ScipyWrapperOp):
        return None
    x = solve.inputs[0]
    core_ndim = core_op.inner_inputs[0].type.ndim
    dim = node.op.i
    if dim < solution.type.ndim - core_ndim:
        return None
    return [Shape_i(x.type.ndim - solution.type.ndim + dim)(x)]


# After the last ``Shape_i`` reads are made: PyTensor's core-shape rewrite
# (position 100) builds them for every Blockwise from shapes it inferred earlier.
optdb.register(
    local_optimize_solution_shape.__name__,
    dfs_rewriter(local_optimize_solution_shape),
    "numba",
    position=100.5,
)
