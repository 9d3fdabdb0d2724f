"""Keep the reference's check that a Scan has no more steps than a sequence has entries.

PyTensor's Scan checks it when it runs (``Scan.perform``: "Sequence 0 has shape
(2,) but the Scan's required number of steps is 5"), and so does
``FAST_COMPILE``. PyTensor's rewrites lose it: a step that only maps its
sequence is pushed out of the loop (``x[:k] * 2``), and the Scan that would
check goes with it; the Scans left are lowered by JAX and Numba without it,
reading past the sequence's end (``scan(f, sequences=[x], n_steps=k)`` with
``k > len(x)``, or a for-Scan over a while-Scan's trace that stopped early).

This rewrite runs first (before PyTensor's Scan rewrites) and routes each
sequence of each Scan through a `CheckAndRaise` of that condition, raising
`ScanSequenceLengthError`, a ``ValueError``. The condition is PyTensor's own
shape arithmetic, so the canonical rewrites fold it to ``True`` and drop the
check where they can prove it; the one case they cannot, ``scan`` with no
``n_steps`` over several sequences (``x[:n]`` with ``n`` the least of their
lengths), gets no check (`_at_most_its_length`). What remains costs a
comparison of two integers per call: under
JAX, lengths are concrete while tracing (`gpubackend.dispatch.jax.check_and_raise`
raises then); a while-Scan's trace, whose length only the run settles, gets a
run-time check (`gpubackend.dispatch.jax.while_scan.lengths`); Numba checks
it as it runs the graph.

JAX_GPU includes it by its ``gpubackend`` tag, NUMBA by ``numba``, stock
``mode="JAX"`` by ``jax`` only when gpubackend's lowerings serve it (stock's
lowering of `CheckAndRaise` drops the check, with a warning).
"""

from __future__ import annotations

from pytensor.compile import optdb
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import graph_rewriter
from pytensor.raise_op import CheckAndRaise
from pytensor.scalar import Minimum
from pytensor.scan.op import Scan
from pytensor.tensor.basic import ScalarFromTensor
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.math import ge
from pytensor.tensor.shape import Shape, Shape_i
from pytensor.tensor.subtensor import Subtensor

from gpubackend.errors import ScanSequenceLengthError
from gpubackend.registration import DEFAULT_LOWERINGS, REWRITE_TAG


def _is_checked(sequence: Variable) -> bool:
    owner = sequence.owner
    return (
        owner is not None
        and isinstance(owner.op, CheckAndRaise)
        and owner.op.exc_type is ScanSequenceLengthError
    )


def _lengths_bounding(n_steps: Variable) -> list[Variable]:
    """The arrays whose length ``n_steps`` is read as: ``x.shape[0]``, or the least of such."""
    owner = n_steps.owner
    if owner is None:
        return []
    if isinstance(owner.op, Elemwise) and isinstance(owner.op.scalar_op, Minimum):
        return [array for operand in owner.inputs for array in _lengths_bounding(operand)]
    if isinstance(owner.op, Shape_i) and owner.op.i == 0:
        return [owner.inputs[0]]
    shape = owner.inputs[0].owner if isinstance(owner.op, Subtensor) else None
    if shape is not None and isinstance(shape.op, Shape) and owner.op.idx_list == (0,):
        return [shape.inputs[0]]
    return []


def _at_most_its_length(sequence: Variable, n_steps: Variable) -> bool:
    """Whether ``sequence`` is ``x[:n_steps]`` with ``n_steps`` at most ``len(x)`` by its graph:
    what ``scan`` builds where no ``n_steps`` is given."""
    owner = sequence.owner
    if owner is None or not isinstance(owner.op, Subtensor) or len(owner.inputs) != 2:
        return False
    [index] = owner.op.idx_list
    stop = owner.inputs[1]
    if stop.owner is not None and isinstance(stop.owner.op, ScalarFromTensor):
        stop = stop.owner.inputs[0]
    return (
        isinstance(index, slice)
        and index.start is None
        and index.step is None
        and stop is n_steps
        and owner.inputs[0] in _lengths_bounding(n_steps)
    )


@graph_rewriter
def check_scan_sequence_lengths(fgraph: FunctionGraph) -> None:
    for node in fgraph.toposort():
        if not isinstance(node.op, Scan):
            continue
        n_steps = node.inputs[0]
        for position, sequence in enumerate(node.op.outer_seqs(node.inputs)):
            if _is_checked(sequence) or _at_most_its_length(sequence, n_steps):
                continue
            check = CheckAndRaise(
                ScanSequenceLengthError,
                f"Sequence {position} of {node.op} has fewer entries than the Scan's required "
                "number of steps (n_steps): give n_steps at most the sequence's length, or leave "
                "it out to scan over the shortest sequence",
            )
            fgraph.change_node_input(
                node,
                1 + position,
                check(sequence, ge(sequence.shape[0], n_steps)),
                reason="check_scan_sequence_lengths",
            )


# Before PyTensor's first Scan rewrites (position 0.05), which push a mapping step out of its Scan.
optdb.register(
    "check_scan_sequence_lengths",
    check_scan_sequence_lengths,
    REWRITE_TAG,
    "numba",
    *(["jax"] if DEFAULT_LOWERINGS == "gpubackend" else []),
    position=0.04,
)
