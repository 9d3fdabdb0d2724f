"""Bake inplace into optimize-op inner graphs that gpubackend lowers to Numba.

Stock PyTensor keeps these inner graphs functional under `NumbaLinker`, since
it never funcifies the ops. gpubackend does (`gpubackend.dispatch.numba_optimize`),
so an op with a native solver gets the `OpFromGraph` treatment: inputs are
protected by a Supervisor, inplace is allowed between internal buffers, and
boundary deepcopies stop an output from aliasing an input. The solver calls the
inner function many times with the same argument arrays, so those must survive.

An op without a native solver runs through the object-mode fallback, whose
scipy wrapper re-links the graph with `FunctionMaker` and, for scalar or 0-d
problems, rebuilds it around a new input with ``graph_replace``; it keeps
stock PyTensor's functional graph so nothing changes on that path.
"""

from pytensor.compile.aliasing import add_supervisor_to_fgraph, insert_deepcopy
from pytensor.compile.io import In, Out
from pytensor.link.numba.linker import NumbaLinker
from pytensor.tensor.optimize import rewrite_optimize_inner_graph
from pytensor.tensor.rewriting.optimize import jit_rewrite_optimize_inner_graph

from gpubackend.dispatch.numba_optimize_plan import has_native_solver


@rewrite_optimize_inner_graph.register(NumbaLinker)
def numba_rewrite_optimize_inner_graph(linker, op, node, inner, *, mode) -> None:
    if not has_native_solver(op):
        jit_rewrite_optimize_inner_graph(linker, op, node, inner, mode=mode)
        return
    input_specs = [In(x, borrow=True, mutable=False) for x in inner.inputs]
    add_supervisor_to_fgraph(fgraph=inner, input_specs=input_specs, accept_inplace=True)
    mode.optimizer.rewrite(inner)
    output_specs = [Out(o, borrow=False) for o in inner.outputs]
    insert_deepcopy(inner, wrapped_inputs=input_specs, wrapped_outputs=output_specs)
