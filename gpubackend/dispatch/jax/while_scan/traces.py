"""A Scan's outputs in PyTensor's order, and the Scan rules built on `loop`.

PyTensor returns each trace oldest entry first. A ring buffer that is full
after any step (``xs[-1]``, ``xs[-2]``) is never trimmed, so it is rotated.
Any other trace of a while-Scan holds as many entries as the steps taken
allow: it becomes `Bounded` (`bounded_scan`), or, where the graph needs its
exact length, it is cut to a step count assumed while tracing
(`specialised_scan`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from pytensor.graph.basic import Constant
from pytensor.scan.op import Scan

from gpubackend.dispatch.jax.while_scan.checks import NodeResult
from gpubackend.dispatch.jax.while_scan.loop import (
    NEGATIVE_STEPS_MESSAGE,
    LoopResult,
    Trace,
    is_static,
    possibly_trimmed_traces,
    rotated,
    scan_loop,
)
from gpubackend.dispatch.jax.while_scan.rules import BoundedLowering, bounded_jax_funcify
from gpubackend.dispatch.jax.while_scan.values import (
    Bounded,
    Kind,
    Table,
    bounds_of,
    common_tables,
    known_value,
    length_between,
    tabulated,
    value_of,
)
from gpubackend.host_reads import RuntimeCheck


def untrimmed_outputs(loop: LoopResult) -> list:
    """Outputs of a while-Scan whose traces PyTensor never trims (full ring buffers)."""
    traces = [rotated(trace.buffer, trace.slot, loop.steps_taken) for trace in loop.traces]
    return [*(buffer for buffer, _ in loop.mit_mot), *traces, *loop.untraced]


def _oldest_first(
    trace: Trace, steps, steps_bounds: tuple[float, float], steps_table: Table | None = None
):
    """A trace in PyTensor's order: the entries written, oldest first, at most ``size`` of them.

    ``steps_table`` (the steps as a function of one length) keeps a trace that never wraps
    tabulated on that length: joined to the trace that length measures, the total is known.
    """
    buffer, slot = trace.buffer, trace.slot
    size_low, size_high = (float(bound) for bound in bounds_of(trace.size))
    written_low, written_high = steps_bounds[0] + slot, steps_bounds[1] + slot
    written, size = steps + slot, value_of(trace.size)
    if is_static(size, written):
        size, written = int(size), int(written)
        return (
            buffer[:written]
            if written < size
            else jnp.roll(buffer[:size], -(written % size), axis=0)
        )
    length = length_between(
        jnp.minimum(written, size), min(written_low, size_low), min(written_high, size_high)
    )
    written_table = (
        None
        if steps_table is None
        else Table(steps_table.atom, steps_table.first, steps_table.values + slot)
    )
    if written_high <= size_low or _fits(written_table, trace.size):
        # Never wrapped: the entries are in order already, as many as were written.
        if written_table is not None:
            length = tabulated(length.value, written_table)
        return Bounded(buffer, length)
    shift = jnp.where(written >= size, written % size, 0)
    return Bounded(buffer[(jnp.arange(buffer.shape[0]) + shift) % size], length)


def _fits(written: Table | None, size) -> bool:
    """Whether the entries written never exceed the buffer's size, for every value of the length
    both are tabulated on (a for-Scan over the steps a while-Scan left: ``n - len(head)``)."""
    if written is None:
        return False
    common = common_tables([tabulated(written.atom, written), size])
    return common is not None and bool(np.all(common[1][0] <= common[1][1]))


def _in_order_already(trace: Trace, trimmable: bool) -> bool:
    """A full buffer of static size, which only needs rotating."""
    size = known_value(trace.size)
    return size is not None and trace.buffer.shape[0] == size and not trimmable


def bounded_outputs(op: Scan, loop: LoopResult, trimmable: Sequence[bool]) -> list:
    """Every output as a plain array where its length is static, `Bounded` where it is known only at
    run time."""
    mit_mot = [
        buffer if known_value(size) == buffer.shape[0] else Bounded(buffer, size)
        for buffer, size in loop.mit_mot
    ]
    traces = [
        rotated(trace.buffer, trace.slot, loop.steps_taken)
        if _in_order_already(trace, trim)
        else _oldest_first(trace, loop.steps_taken, loop.steps_bounds, loop.steps_table)
        for trace, trim in zip(loop.traces, trimmable, strict=True)
    ]
    return [*mit_mot, *traces, *loop.untraced]


NEGATIVE_STEPS_CHECK = RuntimeCheck(IndexError, f"{NEGATIVE_STEPS_MESSAGE} (n_steps < 0)")


@bounded_jax_funcify.register(Scan)
def bounded_scan(op: Scan, node, input_kinds: Sequence[Kind], **kwargs) -> BoundedLowering:
    """A Scan whose lengths, inputs or trimmed traces are known only at run time."""
    if op.info.as_while and op.info.n_mit_mot:
        raise NotImplementedError(f"{op}: a while-Scan with mit-mot states has no JAX lowering")
    outer = list(node.inputs)
    kinds = dict(zip(outer, input_kinds, strict=True))
    if any(
        kinds[value] == "array"
        for value in (*op.outer_non_seqs(outer), *op.outer_untraced_sit_sot(outer))
    ):
        raise NotImplementedError(f"{op}: a non-sequence or untraced state with a run-time length")
    trimmable = possibly_trimmed_traces(op, node)
    traced_inputs = [*op.outer_mitsot(outer), *op.outer_sitsot(outer), *op.outer_nitsot(outer)]
    output_kinds: list[Kind] = [kinds[buffer] for buffer in op.outer_mitmot(outer)]
    output_kinds += [
        "array" if trim or kinds[value] is not None else None
        for trim, value in zip(trimmable, traced_inputs, strict=True)
    ]
    output_kinds += [None] * op.info.n_untraced_sit_sot
    run = scan_loop(op, trimmable, **kwargs)
    # A step count known only at run time may be negative, where the reference raises.
    checks = () if isinstance(node.inputs[0], Constant) else (NEGATIVE_STEPS_CHECK,)

    def scan(*outer_inputs, capacity: int | None, resume: LoopResult | None = None) -> NodeResult:
        loop = run(list(outer_inputs), capacity, resume)
        outputs = bounded_outputs(op, loop, trimmable)
        n_low, _ = bounds_of(outer_inputs[0])
        oks = (True if n_low >= 0 else loop.n_steps >= 0,) if checks else ()
        return NodeResult(outputs[0] if len(outputs) == 1 else outputs, oks, loop.overflow, loop)

    return BoundedLowering(scan, tuple(output_kinds), checks, capacity_limited=True)


def specialised_scan(op: Scan, node, **kwargs) -> Callable:
    """A while-Scan whose trimmed traces are cut to a step count assumed while tracing.

    The returned function takes ``assumed_steps`` (None: the bound) and returns
    the outputs, the steps actually taken, and whether they match the
    assumption; a caller that gets a mismatch runs it again with the actual
    count (`gpubackend.host_reads.HostReadingFunction`).
    """
    trimmable = possibly_trimmed_traces(op, node)
    run = scan_loop(op, [False] * len(trimmable), **kwargs)

    def scan(*outer_inputs, assumed_steps: int | None):
        loop = run(list(outer_inputs), None)
        max_steps = known_value(outer_inputs[0])
        if max_steps is None:
            raise NotImplementedError(f"{op}: its step bound is only known at run time")
        steps = max_steps if assumed_steps is None else assumed_steps
        traces = [
            _as_pytensor_returns(trace.buffer, trace.slot, steps, max_steps)
            if trim
            else rotated(trace.buffer, trace.slot, loop.steps_taken)
            for trace, trim in zip(loop.traces, trimmable, strict=True)
        ]
        outputs = [*traces, *loop.untraced]
        return (
            (outputs[0] if len(outputs) == 1 else outputs),
            loop.steps_taken,
            loop.steps_taken == steps,
        )

    return scan


def _as_pytensor_returns(buffer: jax.Array, init_len: int, steps: int, max_steps: int) -> jax.Array:
    """The trace PyTensor's Scan returns after ``steps`` (a static count) of at most
    ``max_steps``."""
    written = steps + init_len
    store = buffer.shape[0]
    if store <= written:
        return rotated(buffer, init_len, steps)
    # Entries never written are zeroed, then the tail of steps not taken is cut off.
    buffer = buffer.at[written:].set(0)
    return buffer[: -(max_steps - steps)] if steps < max_steps else buffer
