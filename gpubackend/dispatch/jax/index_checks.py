"""Index bounds as the reference checks them, for JAX_GPU's graphs, top and inner: integer
positions that are out of range raise ``IndexError`` instead of being clamped.

NumPy, PyTensor's C and Python code and Numba raise ``IndexError`` for an
integer index (a scalar or an integer array, in ``Subtensor``,
``IncSubtensor``, ``AdvancedSubtensor`` or ``AdvancedIncSubtensor``) outside
``-size..size-1``. JAX clamps reads and drops writes there, silently. Slices
never raise (they clip, as Python's do), and a boolean mask's shape is
checked while tracing.

A position known while tracing (a constant, or integer arithmetic that
`fgraph` evaluates at trace time: ``arange`` of a length, a length minus one)
is checked then and costs nothing at run time; one out of range raises the
reference's message while the call traces. In the top graph, a position known
only at run time becomes a run-time check (`while_scan.indexing.checked_indexing`):
its condition is computed in the computation and read back in the call's one
read (`gpubackend.host_reads`). Only a linker that reads back asks for these
checks (`while_scan.plan.plan_graph`): stock ``mode="JAX"`` keeps JAX's
semantics, as a check there would cost a host callback.

Inside the inner graphs of Scans and OpFromGraphs (a Scan's body runs once per
step, inside ``lax.scan``), a condition cannot reach the top graph's read as a
value: there the check is ``checkify.check`` (`checkified_indexing`), and the
linker functionalizes the whole computation with ``jax.experimental.checkify``
(`checkified`), which carries the first failure out of every loop and branch
as a value the call reads (`gpubackend.host_reads.raise_checked`). Only
functions whose Scans, OpFromGraphs or optimize ops index at run-time positions
do this (`inner_graphs_index`).

An optimize op's objective runs inside the solver's loops (optimistix's, with
their own error handling), which are left as they are: its indices are checked
once, at the solution, where the lowering evaluates the objective again
(`objective_index_conditions`). That is exact for an index that the op's
arguments give (it is the same at every iterate); an index computed from the
variable solved for is checked at the solution only. Graphs nested inside an
objective (a jacobian's Scan) are not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from pytensor.compile.builders import OpFromGraph
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.scan.op import Scan
from pytensor.tensor.basic import ScalarFromTensor, TensorFromScalar
from pytensor.tensor.optimize import ScipyWrapperOp
from pytensor.tensor.subtensor import (
    AdvancedIncSubtensor,
    AdvancedSubtensor,
    IncSubtensor,
    Subtensor,
)

from gpubackend.dispatch.jax.tracing import is_traced
from gpubackend.dispatch.subtensor_indices import integer_indices, out_of_bounds_message

_INDEXING_OPS = (Subtensor, IncSubtensor, AdvancedSubtensor, AdvancedIncSubtensor)


def run_time_indices(node: Apply) -> list[tuple[int, int]]:
    """``(axis, input position)`` of each integer index of ``node`` that is not a constant."""
    return [
        (axis, position)
        for axis, position in integer_indices(node)
        if not isinstance(node.inputs[position], Constant)
    ]


def constant_indices_checked(fn: Callable, node: Apply) -> Callable:
    """``fn``, first checking each integer index of ``node`` that is a constant against the length
    of the axis it indexes, which is concrete while tracing: one out of range raises the
    reference's ``IndexError`` when the call traces, and run time pays nothing."""
    if not isinstance(node.op, _INDEXING_OPS):
        return fn
    constants = [
        (axis, np.asarray(node.inputs[position].data))
        for axis, position in integer_indices(node)
        if isinstance(node.inputs[position], Constant)
    ]
    if not constants:
        return fn

    def indexing(*inputs):
        indexed = inputs[0]
        # The indexed value may be `JAXShapeTuple`'s tuple of lengths.
        shape = (len(indexed),) if isinstance(indexed, tuple) else jnp.shape(indexed)
        for axis, index in constants:
            index_in_range(index, shape[axis], axis)
        return fn(*inputs)

    return indexing


def index_checked_nodes(order: Sequence[Apply]) -> set[Apply]:
    """The indexing nodes with an integer index that is not a constant."""
    return {node for node in order if isinstance(node.op, _INDEXING_OPS) and run_time_indices(node)}


def index_in_range(index, size: int, axis: int) -> Any:
    """True where ``-size <= index < size`` holds while tracing, else the traced condition; a
    concrete index out of range raises the reference's error now."""
    if is_traced(index):
        index = jnp.asarray(index)
        above = index < size
        if jnp.issubdtype(index.dtype, jnp.unsignedinteger):
            return jnp.all(above)
        return jnp.all((index >= -size) & above)
    values = np.asarray(index)
    outside = (values < -size) | (values >= size)
    if np.any(outside):
        raise IndexError(
            f"index {values[outside].flat[0]} is out of bounds for axis {axis} with size {size}"
        )
    return True


def inner_graphs_index(order: Sequence[Apply]) -> bool:
    """Whether an inner graph of a Scan, an OpFromGraph or an optimize op among ``order`` (at any
    depth) indexes at a position known only at run time."""
    for node in order:
        if isinstance(node.op, Scan | OpFromGraph | ScipyWrapperOp):
            inner = node.op.fgraph.toposort()
            if index_checked_nodes(inner):
                return True
            # The graphs nested in an optimize op's objective are not checked.
            if not isinstance(node.op, ScipyWrapperOp) and inner_graphs_index(inner):
                return True
    return False


_SEQUENCE_RANGES: ContextVar[Mapping[tuple[Any, int], tuple[int, int]]] = ContextVar(
    "sequence_ranges", default=MappingProxyType({})
)
"""While a for-Scan's body is traced: ``(inner graph, input position) -> (least, greatest)`` for
each of its sequences that is known while tracing (``arange(len(x))``, as in a jacobian)."""


@contextmanager
def sequence_ranges(op: Scan, outer_sequences: Sequence) -> Iterator[None]:
    """While the block traces ``op``'s body: the range of each integer sequence known while
    tracing (one tap each: the body sees its entries, and nothing else)."""
    inner_sequences = op.inner_seqs(op.fgraph.inputs)
    ranges = dict(_SEQUENCE_RANGES.get())
    if len(inner_sequences) == len(outer_sequences):
        for position, sequence in enumerate(outer_sequences):
            if is_traced(sequence):
                continue
            values = np.asarray(sequence)
            if values.size and values.dtype.kind in "iu":
                ranges[(op.fgraph, position)] = (int(values.min()), int(values.max()))
    token = _SEQUENCE_RANGES.set(ranges)
    try:
        yield
    finally:
        _SEQUENCE_RANGES.reset(token)


_SAME_INTEGER = (ScalarFromTensor, TensorFromScalar)


def _origin(variable: Variable, inputs: Sequence[Variable]) -> int | None:
    """The position among ``inputs`` of the graph input ``variable`` is, through conversions that
    keep its value (scalar from tensor and back); None otherwise."""
    while variable.owner is not None and isinstance(variable.owner.op, _SAME_INTEGER):
        variable = variable.owner.inputs[0]
    return inputs.index(variable) if variable in inputs else None


def checkified_indexing(fn: Callable, node: Apply, fgraph) -> Callable:
    """``fn``, first checking each integer index of ``node`` that is not a constant with
    ``checkify.check`` (an index out of range while tracing raises the reference's error then).

    An index that is a for-Scan's sequence known while tracing, whose every entry is in range
    (`sequence_ranges`), is proven then and costs nothing: a jacobian's ``arange(len(x))``.
    """
    checked = [
        (axis, position, _origin(node.inputs[position], fgraph.inputs))
        for axis, position in run_time_indices(node)
    ]
    # checkify formats its message: the op's braces are literal.
    messages = [
        out_of_bounds_message(node.op, axis, node.inputs[0]).replace("{", "{{").replace("}", "}}")
        for axis, _, _ in checked
    ]

    def indexing(*inputs):
        shape = jnp.shape(inputs[0])
        ranges = _SEQUENCE_RANGES.get()
        for (axis, position, origin), message in zip(checked, messages, strict=True):
            size = shape[axis]
            known = ranges.get((fgraph, origin)) if origin is not None else None
            if known is not None and -size <= known[0] and known[1] < size:
                continue
            ok = index_in_range(inputs[position], size, axis)
            if ok is True:
                continue
            objective = _OBJECTIVE_CONDITIONS.get()
            if objective is None:
                check(ok, message)
            elif objective[0] is fgraph and objective[1] is not None:
                objective[1].append((ok, message))
        return fn(*inputs)

    return indexing


def check(ok, message: str) -> None:
    """``checkify.check(ok, message)``, or, while `checkified` first traces, a note that the graph
    needs it."""
    needed = _CHECKS_NEEDED.get()
    if needed is not None:
        needed.append(message)
    else:
        checkify.check(ok, message)


_OBJECTIVE_CONDITIONS: ContextVar[tuple[Any, list | None] | None] = ContextVar(
    "objective_conditions", default=None
)
"""While an optimize op's objective traces: its graph, and the list its own index conditions go
to (None while the solver's loops evaluate it: unchecked)."""


def check_objective_at(objective: Callable, fgraph, value, args) -> None:
    """Evaluate ``objective`` (whose graph is ``fgraph``) at ``value`` and check its indices there,
    unless this is itself an objective's evaluation (whose nested graphs are not checked)."""
    if _OBJECTIVE_CONDITIONS.get() is not None:
        return
    conditions: list = []
    with objective_index_conditions(fgraph, conditions):
        objective(value, args)
    for ok, message in conditions:
        check(ok, message)


@contextmanager
def objective_index_conditions(fgraph, conditions: list | None) -> Iterator[None]:
    """While the block traces the objective ``fgraph``: its index conditions, ``(ok, message)``,
    are appended to ``conditions`` rather than checked (None: dropped); those of graphs nested in
    it are dropped."""
    token = _OBJECTIVE_CONDITIONS.set((fgraph, conditions))
    try:
        yield
    finally:
        _OBJECTIVE_CONDITIONS.reset(token)


_CHECKS_NEEDED: ContextVar[list[str] | None] = ContextVar("checks_needed", default=None)
"""While `checkified` first traces a graph: the checks its inner graphs could not prove, instead
of ``checkify.check`` calls."""


def checkified(graph_fn: Callable, static_argnums: Sequence[int]) -> Callable:
    """``graph_fn`` returning ``(error, outputs)``: its ``checkify.check`` failures as a value
    (its static arguments stay Python values: checkify would trace them).

    The graph is first traced as it is, noting the checks it needs. Where every check was proven
    while tracing that trace is the computation, and the error is None: checkify's transformation
    of the whole computation (loops and solvers included) is paid only where a check remains.
    """

    def run(*args):
        needed: list[str] = []
        token = _CHECKS_NEEDED.set(needed)
        try:
            outputs = graph_fn(*args)
        finally:
            _CHECKS_NEEDED.reset(token)
        if not needed:
            return None, outputs
        dynamic = [position for position in range(len(args)) if position not in static_argnums]

        def on_dynamic(*values):
            full = list(args)
            for position, value in zip(dynamic, values, strict=True):
                full[position] = value
            return graph_fn(*full)

        return checkify.checkify(on_dynamic, errors=checkify.user_checks)(
            *(args[position] for position in dynamic)
        )

    return run
