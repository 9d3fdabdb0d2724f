"""Make integer inputs that decide a length static arguments of the JAX jit.

``scan(n_steps=n)``, ``zeros((n, 2))`` or ``arange(n)`` with an integer input
or shared variable ``n`` need ``n`` as a Python int while JAX traces, or they
fail with "Shapes must be 1D sequences of concrete values". PyTensor's JAX linker already passes
an integer input as a static argument of ``jax.jit`` when its only clients are
`JAXShapeTuple` nodes (``JAXLinker.scalar_shape_inputs``): ``jax.jit`` then
caches one compiled function per distinct value, and a new value recompiles.

This rewrite routes every use of such an input through ``JAXShapeTuple(n)[0]``
whenever the input reaches a length (a Scan's step count or nit-sot size, the
shape of ``Alloc``/``AllocEmpty``/``Reshape``, the bounds of ``ARange`` or
``Eye``, a slice bound of ``Subtensor``/``IncSubtensor``: ``v[3:k]``, and
``x[:k]``, the sequence of ``scan(f, sequences=[x], n_steps=k)``), so the
linker makes it static; the trace-time evaluation of shape
arithmetic (`gpubackend.dispatch.jax.fgraph`) keeps everything computed from it
concrete. It runs once at compile time. JAX_GPU includes it by its
``gpubackend`` tag; stock ``mode="JAX"`` gets it through the "jax" tag only when
gpubackend's lowerings serve it (``$GPUBACKEND_REGISTER``, see `gpubackend.registration`), since
stock lowerings cannot use what it makes static.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pytensor.compile import optdb
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import graph_rewriter
from pytensor.graph.traversal import ancestors
from pytensor.scan.op import Scan
from pytensor.tensor.basic import Alloc, AllocEmpty, ARange, Eye
from pytensor.tensor.random.type import RandomType
from pytensor.tensor.shape import Reshape
from pytensor.tensor.subtensor import IncSubtensor, Subtensor, indices_from_subtensor
from pytensor.tensor.type import TensorType

from gpubackend.registration import DEFAULT_LOWERINGS, REWRITE_TAG


def _length_inputs(node: Apply) -> Iterator[Variable]:
    """The inputs of ``node`` that its JAX lowering needs as concrete values."""
    op = node.op
    if isinstance(op, Scan):
        yield node.inputs[0]
        yield from op.outer_nitsot(list(node.inputs))
    elif isinstance(op, Alloc | Reshape):
        yield from node.inputs[1:]
    elif isinstance(op, AllocEmpty | ARange | Eye):
        yield from node.inputs
    elif isinstance(op, Subtensor | IncSubtensor):
        # The bounds of slices, which decide a length; an integer position does not (a new one
        # must not recompile).
        first_index = 1 if isinstance(op, Subtensor) else 2
        for index in indices_from_subtensor(node.inputs[first_index:], op.idx_list):
            if isinstance(index, slice):
                yield from (
                    bound
                    for bound in (index.start, index.stop, index.step)
                    if isinstance(bound, Variable)
                )


def _is_integer_scalar_input(variable: Variable, fgraph: FunctionGraph) -> bool:
    # Shared variables too: PyMC holds a dim's length in one (``model.dim_lengths``), and
    # ``arange(length)`` is how models index it.
    return (
        variable in fgraph.inputs
        and isinstance(variable.type, TensorType)
        and variable.type.ndim == 0
        and np.dtype(variable.type.dtype).kind in "iu"
    )


@graph_rewriter
def static_integer_length_inputs(fgraph: FunctionGraph) -> None:
    lengths = [variable for node in fgraph.apply_nodes for variable in _length_inputs(node)]
    if not lengths:
        return
    static_inputs = [
        variable for variable in ancestors(lengths) if _is_integer_scalar_input(variable, fgraph)
    ]
    # PyTensor's JAX dispatch (and jax) load with the first JAX compile, not with gpubackend.
    from pytensor.link.jax.dispatch.shape import JAXShapeTuple

    for variable in static_inputs:
        clients = fgraph.clients[variable]
        if clients and all(isinstance(client.op, JAXShapeTuple) for client, _ in clients):
            continue
        # `replace` rewires only the clients the input had before the call, so the
        # new JAXShapeTuple keeps reading the input itself.
        fgraph.replace(
            variable, JAXShapeTuple()(variable)[0], reason="static_integer_length_inputs"
        )


optdb.register(
    "jax_static_integer_length_inputs",
    static_integer_length_inputs,
    REWRITE_TAG,
    *(["jax"] if DEFAULT_LOWERINGS == "gpubackend" else []),
    position=101,
)


@graph_rewriter
def generator_kept_by_its_update_through_a_view(fgraph: FunctionGraph) -> None:
    """An update that keeps a shared generator as it is (``{rng: rng}``, which PyMC makes for the
    generators of a ``Truncated``'s while-Scan) returns it through a ``ViewOp``.

    PyTensor's JAX linker swaps each shared generator for a copy after it has
    mapped the graph's storage, and its thunk returns nothing, so ``Function``
    reads the outputs back from that storage: an output that is the generator
    itself reads the original ``Generator``, which the update then writes into
    the copy's cell, and the next call fails in ``jax.jit``. As a view's output
    it has a cell of its own, which the thunk fills with the state the call
    returned. The rewrite would go if the linker mapped the copy's storage.
    """
    from pytensor.compile.ops import view_op

    # Inner graphs (a Scan's, an OpFromGraph's), which PyTensor rewrites too, have no updates.
    for output_position, input_position in (fgraph.update_mapping or {}).items():
        generator = fgraph.inputs[input_position]
        if fgraph.outputs[output_position] is generator and isinstance(generator.type, RandomType):
            fgraph.change_node_input(
                *fgraph.get_output_client(output_position),
                view_op(generator),
                reason="generator_kept_by_its_update_through_a_view",
            )


optdb.register(
    "jax_generator_kept_by_its_update_through_a_view",
    generator_kept_by_its_update_through_a_view,
    REWRITE_TAG,
    *(["jax"] if DEFAULT_LOWERINGS == "gpubackend" else []),
    position=101.5,
)
