"""JAX lowering of Scan: for-loops by PyTensor's own lowering, while-loops (``until``) by a JAX while loop.

A while-Scan runs at most ``n_steps`` iterations and stops after the first one
whose ``until`` condition is true. With a step bound known while tracing, the
loop is Equinox's checkpointed while loop, so ``jax.grad`` of the lowered graph
works (PyMC's JAX samplers need it); it does not support forward mode (jvp).

Its traced outputs live in buffers of the size the graph declares (the outer
buffers, or the nit-sot sizes), written at ``(init + step) % size`` as
PyTensor's own Scan does, so a buffer shortened by PyTensor's memory rewrites
is a ring buffer. After the loop each buffer is
rotated into PyTensor's order (oldest entry first).

PyTensor trims a buffer that is longer than the states written to it down to
the steps actually taken: that output's length depends on the data, which
``jax.jit`` alone cannot return. The last value (``trace[-1]``), which PyTensor
rewrites to an untraced state or a one-entry buffer, always lowers. A full
trace (and so the gradient of a while-Scan) lowers when the linker specialises
the compiled function on step counts (`jax_while_steps`, JAX_GPU); otherwise
it is refused with `DataDependentLengthError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain

import jax
import jax.numpy as jnp
from pytensor.scan.op import Scan

from gpubackend.dispatch.jax_replacements import jax_gpu_funcify, replaces
from gpubackend.dispatch.jax_while_steps import WHILE_STEPS_KEY, WhileStepSpecialisation


class DataDependentLengthError(NotImplementedError):
    """A while-Scan output whose length would depend on the number of steps taken."""


def _data_dependent_length_error(op: Scan, position: int, size: int, init_len: int) -> DataDependentLengthError:
    return DataDependentLengthError(
        f"{op}: traced output {position} keeps {size} entries ({init_len} initial), so its length after the "
        "loop depends on how many steps the `until` condition allows; jax.jit cannot return a data-dependent "
        "shape. Compile with mode='JAX_GPU' (which specialises on the step count), or use its last value "
        "(trace[-1]) or a for-Scan of fixed length."
    )


def _keeps_every_step(store: int, init_len: int) -> bool:
    """True if the ring buffer is full after any first step, so PyTensor never trims it."""
    return store <= init_len + 1


@replaces(Scan)
def jax_funcify_Scan(op: Scan, node=None, **kwargs) -> Callable:
    if not op.info.as_while:
        return jax_gpu_funcify.stock(Scan)(op, node=node, **kwargs)
    info = op.info
    if info.n_mit_mot:
        raise NotImplementedError(f"{op}: a while-Scan with mit-mot states has no JAX lowering")
    kwargs.pop("storage_map", None)
    steps_context: WhileStepSpecialisation | None = kwargs.get(WHILE_STEPS_KEY)
    specialisable = steps_context is not None and node in steps_context.top_level_nodes
    inner_fn = jax_gpu_funcify(op.fgraph, **kwargs)
    tap_slices = [*info.mit_sot_in_slices, *info.sit_sot_in_slices]
    init_lens = [-min(taps) for taps in tap_slices]
    traced_slots = [*init_lens, *([0] * info.n_nit_sot)]
    if not specialisable:
        _refuse_static_data_dependent_lengths(op, node, traced_slots)

    def while_scan(*outer_inputs):
        outer_inputs = list(outer_inputs)
        n_steps = outer_inputs[0]
        seqs = op.outer_seqs(outer_inputs)
        tap_buffers = [*op.outer_mitsot(outer_inputs), *op.outer_sitsot(outer_inputs)]
        untraced = list(op.outer_untraced_sit_sot(outer_inputs))
        non_seqs = op.outer_non_seqs(outer_inputs)
        nit_sizes = [int(size) for size in op.outer_nitsot(outer_inputs)]

        def inner_inputs(step, buffers, untraced_values):
            taps = chain.from_iterable(
                (buffer[(step + init_len + tap) % buffer.shape[0]] for tap in taps)
                for buffer, taps, init_len in zip(buffers, tap_slices, init_lens, strict=True)
            )
            return (*(seq[step] for seq in seqs), *taps, *untraced_values, *non_seqs)

        def step_outputs(step, buffers, untraced_values):
            outputs = list(inner_fn(*inner_inputs(step, buffers, untraced_values)))
            tap_outs = [*op.inner_mitsot_outs(outputs), *op.inner_sitsot_outs(outputs)]
            return tap_outs, op.inner_nitsot_outs(outputs), op.inner_untraced_sit_sot_outs(outputs), outputs[-1]

        nit_specs = jax.eval_shape(lambda: step_outputs(0, tap_buffers, untraced)[1])
        nit_buffers = [jnp.zeros((size, *spec.shape), spec.dtype) for size, spec in zip(nit_sizes, nit_specs, strict=True)]

        def keep_going(carry):
            step, stop, *_ = carry
            return (step < n_steps) & ~stop

        def body(carry):
            step, _, buffers, nit_bufs, untraced_values = carry
            tap_outs, nit_outs, untraced_outs, stop = step_outputs(step, buffers, untraced_values)
            buffers = [
                buffer.at[(step + init_len) % buffer.shape[0]].set(value.astype(buffer.dtype))
                for buffer, value, init_len in zip(buffers, tap_outs, init_lens, strict=True)
            ]
            nit_bufs = [
                buffer.at[step % buffer.shape[0]].set(value.astype(buffer.dtype))
                for buffer, value in zip(nit_bufs, nit_outs, strict=True)
            ]
            untraced_values = [
                jnp.asarray(value, dtype=jnp.asarray(old).dtype) for old, value in zip(untraced_values, untraced_outs, strict=True)
            ]
            return step + 1, jnp.asarray(stop, bool), buffers, nit_bufs, untraced_values

        init = (jnp.asarray(0, dtype=jnp.asarray(n_steps).dtype), jnp.asarray(False), tap_buffers, nit_buffers, untraced)
        steps_taken, _, buffers, nit_bufs, untraced_final = _while_loop(keep_going, body, init, n_steps)

        trace_buffers = [*buffers, *nit_bufs]
        if all(_keeps_every_step(buffer.shape[0], slot) for buffer, slot in zip(trace_buffers, traced_slots, strict=True)):
            traces = [_rotated(buffer, slot, steps_taken) for buffer, slot in zip(trace_buffers, traced_slots, strict=True)]
        else:
            if not specialisable or isinstance(n_steps, jax.core.Tracer):
                position, size, slot = next(
                    (position, buffer.shape[0], slot)
                    for position, (buffer, slot) in enumerate(zip(trace_buffers, traced_slots, strict=True))
                    if not _keeps_every_step(buffer.shape[0], slot)
                )
                raise _data_dependent_length_error(op, position, size, slot)
            assumed = steps_context.steps_to_assume(node, int(n_steps))
            steps_context.observe(node, assumed, steps_taken)
            traces = [
                _as_pytensor_returns(buffer, slot, assumed, int(n_steps))
                for buffer, slot in zip(trace_buffers, traced_slots, strict=True)
            ]
        outputs = [*traces, *untraced_final]
        return outputs[0] if len(outputs) == 1 else outputs

    return while_scan


def _while_loop(keep_going: Callable, body: Callable, init, max_steps):
    """``lax.while_loop``, reverse-differentiable by JAX when the step bound is known while tracing.

    PyMC's JAX samplers take ``jax.grad`` of the lowered graph, which a plain
    ``lax.while_loop`` does not support. Equinox's checkpointed loop runs the
    same loop forwards and supports reverse mode (not forward mode, jvp).
    """
    if isinstance(max_steps, jax.core.Tracer):
        return jax.lax.while_loop(keep_going, body, init)
    import equinox.internal as eqxi  # equinox loads with the first while-Scan, not with gpubackend

    return eqxi.while_loop(keep_going, body, init, max_steps=int(max_steps), kind="checkpointed")


def _refuse_static_data_dependent_lengths(op: Scan, node, traced_slots: Sequence[int]) -> None:
    """Refuse at compile time the outputs whose declared buffer size is already known to be too long."""
    if node is None:
        return
    outer = list(node.inputs)
    buffers = [*op.outer_mitsot(outer), *op.outer_sitsot(outer)]
    sizes = [buffer.type.shape[0] for buffer in buffers]
    sizes += [getattr(size, "data", None) for size in op.outer_nitsot(outer)]
    for position, (size, init_len) in enumerate(zip(sizes, traced_slots, strict=True)):
        if size is not None and not _keeps_every_step(int(size), init_len):
            raise _data_dependent_length_error(op, position, int(size), init_len)


def _rotated(buffer: jax.Array, init_len: int, steps_taken) -> jax.Array:
    """A full ring buffer rotated so that its oldest entry comes first, as PyTensor returns it."""
    store = buffer.shape[0]
    if store <= 1:
        return buffer
    return jnp.roll(buffer, -((steps_taken + init_len) % store), axis=0)


def _as_pytensor_returns(buffer: jax.Array, init_len: int, steps: int, max_steps: int) -> jax.Array:
    """The trace PyTensor's Scan returns after ``steps`` (a static count) of at most ``max_steps``."""
    written = steps + init_len
    store = buffer.shape[0]
    if store <= written:
        return jnp.roll(buffer, -(written % store), axis=0)
    # Entries never written are zeroed, then the tail of steps not taken is cut off.
    buffer = buffer.at[written:].set(0)
    return buffer[: -(max_steps - steps)] if steps < max_steps else buffer
