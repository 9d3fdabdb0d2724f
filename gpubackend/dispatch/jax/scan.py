"""JAX lowering of Scan: for-loops by PyTensor's own lowering, while-loops (``until``) by a JAX while loop.

A while-Scan runs at most ``n_steps`` iterations and stops after the first one
whose ``until`` condition is true. With a step bound known while tracing, the
loop is Equinox's bounded while loop, so ``jax.grad`` (also under ``pmap``, as
numpyro's default chain method uses it) and ``jax.jvp`` of the lowered graph
work; without one, or when the linker says JAX will not differentiate the
graph (JAX_GPU), it is ``lax.while_loop``, which exits as soon as it stops.

Its traced outputs live in buffers of the size the graph declares (the outer
buffers, or the nit-sot sizes), written at ``(init + step) % size`` as
PyTensor's own Scan does, so a buffer shortened by PyTensor's memory rewrites
is a ring buffer. After the loop each buffer is put in PyTensor's order
(oldest entry first).

PyTensor trims a buffer that is longer than the states written to it down to
the steps actually taken, so that output's length depends on the data. The
last value (``trace[-1]``), which PyTensor rewrites to an untraced state or a
one-entry buffer, always lowers. Otherwise the graph's lowering
(`while_steps`) picks one of:

- ``bounded_jax_funcify`` (`bounded`): the trace stays a maximum-length
  buffer plus its length, and so do the for-Scans (a gradient's), slices and
  allocations that follow it. No read, any linker; needs every output to have
  a static shape.
- `specialised_while_scan`: the trace is cut to a step count assumed while
  tracing, and the actual count is returned for the linker to check (JAX_GPU).
- neither: `DataDependentLengthError` at compile time.

A for-Scan whose lengths are all known goes to PyTensor's lowering, with the
lengths handed over as Python ints so its trace-time comparisons stay concrete.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from pytensor.scan.op import Scan

from gpubackend.dispatch.jax.bounded import Bounded, BoundedInt, Kind, as_bounded, bounded_jax_funcify, value_of
from gpubackend.dispatch.jax.lowering_context import lowering_context
from gpubackend.dispatch.jax.replacements import jax_gpu_funcify, replaces
from gpubackend.errors import DataDependentLengthError


def data_dependent_length_error(op: Scan, detail: str) -> DataDependentLengthError:
    return DataDependentLengthError(
        f"{op}: {detail}, so its length depends on how many steps the `until` condition allows; jax.jit cannot "
        "return a data-dependent shape. Compile with mode='JAX_GPU' (which specialises on the step count), "
        "reduce the trace to values of static shape (trace[-1], sums, gradients), or use a for-Scan."
    )


def _keeps_every_step(store: int, init_len: int) -> bool:
    """True if the ring buffer is full after any first step, so PyTensor never trims it."""
    return store <= init_len + 1


def _traced_slots(op: Scan) -> list[int]:
    """Initial entries per traced output (mit-sot, sit-sot, then nit-sot)."""
    return [*(-min(taps) for taps in (*op.info.mit_sot_in_slices, *op.info.sit_sot_in_slices)), *([0] * op.info.n_nit_sot)]


def static_trace_sizes(op: Scan, node) -> list[int | None]:
    """The declared buffer size of each traced output, where the graph fixes it."""
    outer = list(node.inputs)
    sizes = [buffer.type.shape[0] for buffer in (*op.outer_mitsot(outer), *op.outer_sitsot(outer))]
    return sizes + [None if getattr(size, "data", None) is None else int(size.data) for size in op.outer_nitsot(outer)]


def possibly_trimmed_traces(op: Scan, node) -> list[bool]:
    """Per traced output of a while-Scan: whether PyTensor may trim it to the steps taken."""
    return [
        size is None or not _keeps_every_step(size, slot)
        for size, slot in zip(static_trace_sizes(op, node), _traced_slots(op), strict=True)
    ]


def _host_int(value):
    return value if isinstance(value, jax.core.Tracer) else int(np.asarray(value))


@replaces(Scan)
def jax_funcify_Scan(op: Scan, node=None, **kwargs) -> Callable:
    if op.info.as_while:
        # The graph lowering (`while_steps`) takes the while-Scans whose traces may be trimmed.
        if node is not None and any(possibly_trimmed_traces(op, node)):
            raise data_dependent_length_error(op, "a traced output keeps more entries than its initial ones")
        return _loop_lowering(op, _untrimmed_outputs, **kwargs)
    for_scan = jax_gpu_funcify.stock(Scan)(op, node=node, **kwargs)
    nit_sot_end = op.info.n_outer_inputs - op.info.n_non_seqs
    length_positions = (0, *range(nit_sot_end - op.info.n_nit_sot, nit_sot_end))

    def for_scan_with_host_lengths(*outer_inputs):
        outer_inputs = list(outer_inputs)
        for position in length_positions:
            outer_inputs[position] = _host_int(outer_inputs[position])
        return for_scan(*outer_inputs)

    return for_scan_with_host_lengths


class LoopResult(NamedTuple):
    """Everything a Scan loop leaves, before its traces are put in PyTensor's order."""

    n_steps: Any
    steps_taken: Any
    mit_mot: list[tuple[jax.Array, Any]]
    traces: list[tuple[jax.Array, Any, int]]  # buffer, its meaningful size, its initial entries
    untraced: list[Any]


def _steps_and_bound(value) -> tuple[Any, int | None]:
    """A length and its bound known while tracing (None: only known at run time, unbounded)."""
    if isinstance(value, BoundedInt):
        return value.value, value.high
    if isinstance(value, jax.core.Tracer):
        return value, None
    return int(np.asarray(value)), int(np.asarray(value))


def _scan_loop(op: Scan, **kwargs) -> Callable[[list], LoopResult]:
    """The loop of any Scan, over lengths and buffers that may be known only at run time (`bounded`).

    Where nothing will differentiate the lowered graph with JAX
    (`LoweringContext.jax_differentiable`), the loop is ``lax.while_loop``,
    which exits as soon as it stops instead of stepping through its bound.
    """
    kwargs.pop("storage_map", None)
    jax_differentiable = lowering_context(kwargs).jax_differentiable
    inner_fn = jax_gpu_funcify(op.fgraph, **kwargs)
    info = op.info
    tap_slices = [*info.mit_sot_in_slices, *info.sit_sot_in_slices]
    slots = _traced_slots(op)
    mit_mot_in, mit_mot_out = info.normalized_mit_mot_in_slices, info.normalized_mit_mot_out_slices

    def run(outer_inputs: list) -> LoopResult:
        n_steps, max_steps = _steps_and_bound(outer_inputs[0])
        seqs = [as_bounded(seq).buffer for seq in op.outer_seqs(outer_inputs)]
        mit_mot = [tuple(as_bounded(buffer)) for buffer in op.outer_mitmot(outer_inputs)]
        taps = [tuple(as_bounded(buffer)) for buffer in (*op.outer_mitsot(outer_inputs), *op.outer_sitsot(outer_inputs))]
        untraced = list(op.outer_untraced_sit_sot(outer_inputs))
        non_seqs = [value_of(value) for value in op.outer_non_seqs(outer_inputs)]
        nit_sizes = [_steps_and_bound(size) for size in op.outer_nitsot(outer_inputs)]
        if any(bound is None for _, bound in nit_sizes):
            raise NotImplementedError(f"{op}: a nit-sot length known only at run time, with no bound")
        tap_sizes = [size for _, size in taps]
        mit_mot_sizes = [size for _, size in mit_mot]

        def inner_inputs(step, mit_mot_buffers, tap_buffers, untraced_values):
            mit_mot_taps = chain.from_iterable(
                (buffer[step + tap] for tap in in_taps) for buffer, in_taps in zip(mit_mot_buffers, mit_mot_in, strict=True)
            )
            tap_values = chain.from_iterable(
                (buffer[(step + slot + tap) % size] for tap in in_taps)
                for buffer, in_taps, slot, size in zip(tap_buffers, tap_slices, slots, tap_sizes, strict=False)
            )
            return (*(seq[step] for seq in seqs), *mit_mot_taps, *tap_values, *untraced_values, *non_seqs)

        def step_outputs(step, mit_mot_buffers, tap_buffers, untraced_values):
            outputs = list(inner_fn(*inner_inputs(step, mit_mot_buffers, tap_buffers, untraced_values)))
            stop = outputs[-1] if info.as_while else False
            return (
                op.inner_mitmot_outs_grouped(outputs),
                [*op.inner_mitsot_outs(outputs), *op.inner_sitsot_outs(outputs)],
                op.inner_nitsot_outs(outputs),
                op.inner_untraced_sit_sot_outs(outputs),
                stop,
            )

        mit_mot_buffers = [buffer for buffer, _ in mit_mot]
        tap_buffers = [buffer for buffer, _ in taps]
        nit_specs = jax.eval_shape(lambda: step_outputs(0, mit_mot_buffers, tap_buffers, untraced)[2])
        nit_buffers = [
            jnp.zeros((bound, *spec.shape), spec.dtype) for (_, bound), spec in zip(nit_sizes, nit_specs, strict=True)
        ]

        def keep_going(carry):
            step, stop, *_ = carry
            return (step < n_steps) & ~stop

        def body(carry):
            step, _, mit_mot_bufs, tap_bufs, nit_bufs, untraced_values = carry
            mit_mot_outs, tap_outs, nit_outs, untraced_outs, stop = step_outputs(step, mit_mot_bufs, tap_bufs, untraced_values)
            mit_mot_bufs = [
                _written_at_taps(buffer, step, out_taps, values)
                for buffer, values, out_taps in zip(mit_mot_bufs, mit_mot_outs, mit_mot_out, strict=True)
            ]
            tap_bufs = [
                buffer.at[(step + slot) % size].set(jnp.asarray(value, buffer.dtype))
                for buffer, value, slot, size in zip(tap_bufs, tap_outs, slots, tap_sizes, strict=False)
            ]
            nit_bufs = [
                buffer.at[step % size].set(jnp.asarray(value, buffer.dtype))
                for buffer, value, (size, _) in zip(nit_bufs, nit_outs, nit_sizes, strict=True)
            ]
            untraced_values = [
                jnp.asarray(value, dtype=jnp.asarray(old).dtype) for old, value in zip(untraced_values, untraced_outs, strict=True)
            ]
            return step + 1, jnp.asarray(stop, bool), mit_mot_bufs, tap_bufs, nit_bufs, untraced_values

        step_dtype = jnp.asarray(n_steps).dtype
        init = (jnp.asarray(0, step_dtype), jnp.asarray(False), mit_mot_buffers, tap_buffers, nit_buffers, untraced)
        steps_taken, _, mit_mot_final, tap_final, nit_final, untraced_final = _while_loop(
            keep_going, body, init, max_steps if jax_differentiable else None
        )
        sizes = [*tap_sizes, *(size for size, _ in nit_sizes)]
        traces = list(zip([*tap_final, *nit_final], sizes, slots, strict=True))
        return LoopResult(n_steps, steps_taken, list(zip(mit_mot_final, mit_mot_sizes, strict=True)), traces, untraced_final)

    return run


def _written_at_taps(buffer: jax.Array, step, taps: Sequence[int], values: Sequence) -> jax.Array:
    # One scalar-indexed write per tap is a dynamic-update-slice, which XLA does in place in a loop.
    for tap, value in zip(taps, values, strict=True):
        buffer = buffer.at[step + tap].set(jnp.asarray(value, buffer.dtype))
    return buffer


def _while_loop(keep_going: Callable, body: Callable, init, max_steps: int | None):
    """``lax.while_loop``, differentiable by JAX in both modes when the step bound is known while tracing.

    PyMC's JAX samplers take ``jax.grad`` of the lowered graph, which a plain
    ``lax.while_loop`` does not support. Equinox's bounded loop does, in both
    modes; its checkpointed loop fails under ``jax.pmap`` of ``jax.grad``
    (numpyro's default chain method) with "Closure-converted function called
    with different dynamic arguments".
    """
    if max_steps is None:
        return jax.lax.while_loop(keep_going, body, init)
    import equinox.internal as eqxi  # equinox loads with the first while-Scan, not with gpubackend

    return eqxi.while_loop(keep_going, body, init, max_steps=max(int(max_steps), 1), kind="bounded")


def _is_static(*values) -> bool:
    return not any(isinstance(value, jax.core.Tracer) for value in values)


def _oldest_first(buffer: jax.Array, size, written):
    """A trace in PyTensor's order: the entries written, oldest first, at most ``size`` of them."""
    if _is_static(size, written):
        size, written = int(size), int(written)
        if written < size:
            return buffer[:written]
        return jnp.roll(buffer[:size], -(written % size), axis=0)
    shift = jnp.where(written >= size, written % size, 0)
    positions = (jnp.arange(buffer.shape[0]) + shift) % size
    return Bounded(buffer[positions], jnp.minimum(written, size))


def _untrimmed_outputs(op: Scan, loop: LoopResult) -> list:
    """Outputs of a while-Scan whose traces PyTensor never trims (full ring buffers)."""
    traces = [_rotated(buffer, slot, loop.steps_taken) for buffer, _, slot in loop.traces]
    return [*(buffer for buffer, _ in loop.mit_mot), *traces, *loop.untraced]


def _rotated(buffer: jax.Array, init_len: int, steps_taken) -> jax.Array:
    """A full ring buffer rotated so that its oldest entry comes first, as PyTensor returns it."""
    store = buffer.shape[0]
    if store <= 1:
        return buffer
    return jnp.roll(buffer, -((steps_taken + init_len) % store), axis=0)


def _bounded_outputs(op: Scan, loop: LoopResult) -> list:
    """Every output as a plain array where its length is static, `Bounded` where it is known only at run time."""
    mit_mot = [buffer if _is_static(size) else Bounded(buffer, size) for buffer, size in loop.mit_mot]
    steps = loop.steps_taken if op.info.as_while else loop.n_steps
    trimmable = _needs_general_order(op, loop)
    traces = [
        _oldest_first(buffer, size, steps + slot) if trim else _rotated(buffer, slot, steps)
        for (buffer, size, slot), trim in zip(loop.traces, trimmable, strict=True)
    ]
    return [*mit_mot, *traces, *loop.untraced]


def _needs_general_order(op: Scan, loop: LoopResult) -> list[bool]:
    """Traces that need the general ordering: trimmable, or of a size known only at run time."""
    return [
        not (_is_static(size) and buffer.shape[0] == int(size) and (not op.info.as_while or _keeps_every_step(int(size), slot)))
        for buffer, size, slot in loop.traces
    ]


def _loop_lowering(op: Scan, finish: Callable[[Scan, LoopResult], list], **kwargs) -> Callable:
    run = _scan_loop(op, **kwargs)

    def scan(*outer_inputs):
        outputs = finish(op, run(list(outer_inputs)))
        return outputs[0] if len(outputs) == 1 else outputs

    return scan


@bounded_jax_funcify.register(Scan)
def bounded_scan(op: Scan, node, input_kinds: Sequence[Kind], **kwargs):
    """A Scan whose lengths, inputs or trimmed traces are known only at run time (`bounded`)."""
    if op.info.as_while and op.info.n_mit_mot:
        raise NotImplementedError(f"{op}: a while-Scan with mit-mot states has no JAX lowering")
    outer = list(node.inputs)
    kinds = dict(zip(outer, input_kinds, strict=True))
    if any(kinds[value] == "array" for value in (*op.outer_non_seqs(outer), *op.outer_untraced_sit_sot(outer))):
        raise NotImplementedError(f"{op}: a non-sequence or untraced state with a run-time length")
    trimmable = possibly_trimmed_traces(op, node) if op.info.as_while else [False] * len(_traced_slots(op))
    traced_inputs = [*op.outer_mitsot(outer), *op.outer_sitsot(outer), *op.outer_nitsot(outer)]
    output_kinds: list[Kind] = [kinds[buffer] for buffer in op.outer_mitmot(outer)]
    output_kinds += ["array" if trim or kinds[value] is not None else None for trim, value in zip(trimmable, traced_inputs, strict=True)]
    output_kinds += [None] * op.info.n_untraced_sit_sot
    return _loop_lowering(op, _bounded_outputs, **kwargs), tuple(output_kinds)


def specialised_while_scan(op: Scan, node, **kwargs) -> Callable:
    """A while-Scan whose trimmed traces are cut to a step count assumed while tracing.

    The returned function takes ``assumed_steps`` (None: the bound) and returns
    the outputs, the steps actually taken, and whether they match the
    assumption; a caller that gets a mismatch must run it again with the
    actual count (`while_steps.StepSpecialisedFunction`).
    """
    run = _scan_loop(op, **kwargs)
    trimmable = possibly_trimmed_traces(op, node)

    def scan(*outer_inputs, assumed_steps: int | None):
        loop = run(list(outer_inputs))
        max_steps = loop.n_steps
        if isinstance(max_steps, jax.core.Tracer):
            raise data_dependent_length_error(op, "its step bound is only known at run time")
        steps = max_steps if assumed_steps is None else assumed_steps
        traces = [
            _as_pytensor_returns(buffer, slot, steps, max_steps) if trim else _rotated(buffer, slot, loop.steps_taken)
            for (buffer, _, slot), trim in zip(loop.traces, trimmable, strict=True)
        ]
        outputs = [*traces, *loop.untraced]
        return (outputs[0] if len(outputs) == 1 else outputs), loop.steps_taken, loop.steps_taken == steps

    return scan


def _as_pytensor_returns(buffer: jax.Array, init_len: int, steps: int, max_steps: int) -> jax.Array:
    """The trace PyTensor's Scan returns after ``steps`` (a static count) of at most ``max_steps``."""
    written = steps + init_len
    store = buffer.shape[0]
    if store <= written:
        return _rotated(buffer, init_len, steps)
    # Entries never written are zeroed, then the tail of steps not taken is cut off.
    buffer = buffer.at[written:].set(0)
    return buffer[: -(max_steps - steps)] if steps < max_steps else buffer
