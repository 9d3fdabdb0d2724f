"""JAX lowering of Scan: for-loops by PyTensor's own lowering, while-loops (``until``) by a JAX
while loop.

A while-Scan whose traces PyTensor never trims (full ring buffers: ``xs[-1]``,
``xs[-2]``) lowers here, to the loop of `while_scan.loop` with its buffers
rotated into PyTensor's order. One whose traces may be trimmed to the steps
taken is lowered with the graph around it (`fgraph` and `while_scan`), which
alone knows what follows the trace; met on its own, it is refused.

A for-Scan whose lengths are all known goes to PyTensor's lowering, with the
lengths handed over as Python ints so its trace-time comparisons stay concrete.
Its non-sequences known while tracing (shape arithmetic: the split sizes of a
concatenation's gradient, say) stay known in the body (`known_inputs`):
PyTensor's lowering passes them through the loop's carry, where JAX makes them
tracers, and ``jnp.split`` or a reshape in the body failed on values that were
known.

A trace with room for more entries than the steps write (the gradient of a
Scan with ``truncate_gradient``: its backward Scan runs the last few steps into
outputs of full length) is zero past what is written, as the reference's
Scan leaves it. PyTensor's lowering asserts that a trace fills its buffer, so
it gets the trace at the size written, and the zeros are appended. A for-Scan of
no step returns its nit-sots empty, with the lengths their types know (0 elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from pytensor.scan.op import Scan

from gpubackend.dispatch.jax.index_checks import sequence_ranges
from gpubackend.dispatch.jax.known_inputs import is_shape_value, known_inputs
from gpubackend.dispatch.jax.replacements import replaces, stock_lowering
from gpubackend.dispatch.jax.tracing import is_traced
from gpubackend.dispatch.jax.while_scan.loop import possibly_trimmed_traces, scan_loop
from gpubackend.dispatch.jax.while_scan.traces import untrimmed_outputs
from gpubackend.errors import DataDependentLengthError


def _host_int(value):
    return value if is_traced(value) else int(np.asarray(value))


@replaces(Scan)
def jax_funcify_Scan(op: Scan, node=None, **kwargs) -> Callable:
    if op.info.as_while:
        trimmable = possibly_trimmed_traces(op, node) if node is not None else []
        if any(trimmable):
            raise DataDependentLengthError(
                f"{op}: a traced output may be trimmed to the "
                "steps taken, so it is lowered with the graph "
                "that holds it; lower that graph rather than the Scan on its own."
            )
        run = scan_loop(op, trimmable, **kwargs)

        def while_scan(*outer_inputs):
            outputs = untrimmed_outputs(run(list(outer_inputs), None))
            return outputs[0] if len(outputs) == 1 else outputs

        return while_scan
    for_scan = stock_lowering(Scan)(op, node=node, **kwargs)
    info = op.info
    nit_sot_end = info.n_outer_inputs - info.n_non_seqs
    nit_sot_positions = range(nit_sot_end - info.n_nit_sot, nit_sot_end)
    length_positions = (0, *nit_sot_positions)
    first_non_seq = len(op.fgraph.inputs) - info.n_non_seqs
    first_tap_trace = 1 + info.n_seqs + info.n_mit_mot
    # (outer input, entries before the first step) of each mit-sot and sit-sot trace, then each
    # nit-sot's size with none.
    trace_inputs = [
        (first_tap_trace + position, -min(taps))
        for position, taps in enumerate((*info.mit_sot_in_slices, *info.sit_sot_in_slices))
    ] + [(position, 0) for position in nit_sot_positions]

    def for_scan_with_host_lengths(*given_inputs):
        outer_inputs = list(given_inputs)
        for position in length_positions:
            outer_inputs[position] = _host_int(outer_inputs[position])
        no_step = not is_traced(outer_inputs[0]) and outer_inputs[0] == 0
        # Stock's lowering asserts that a trace fills its buffer: it gets the written entries.
        unwritten = _cut_to_written(outer_inputs, trace_inputs, nit_sot_positions)
        non_seqs = op.outer_non_seqs(outer_inputs)
        known = {
            first_non_seq + position: value
            for position, value in enumerate(non_seqs)
            if is_shape_value(value)
        }
        # Index checks in the body read the ranges of sequences known while tracing.
        with sequence_ranges(op, op.outer_seqs(outer_inputs)), known_inputs(op.fgraph, known):
            outputs = for_scan(*outer_inputs)
        if no_step:
            return _without_nit_sot_entries(op, node, outputs)
        if not any(unwritten):
            return outputs
        outputs = [outputs] if len(node.outputs) == 1 else list(outputs)
        for trace, rows in enumerate(unwritten, start=info.n_mit_mot):
            if rows:
                written = outputs[trace]
                zeros = jnp.zeros((rows, *written.shape[1:]), written.dtype)
                outputs[trace] = jnp.concatenate([written, zeros])
        return outputs[0] if len(outputs) == 1 else outputs

    return for_scan_with_host_lengths


def _cut_to_written(outer_inputs: list, trace_inputs, nit_sot_positions) -> list[int]:
    """Cut, in ``outer_inputs``, each trace's room to the entries its steps write; return, per
    trace, the rows cut (0 where its room is what they write, or where a length is traced)."""
    n_steps = outer_inputs[0]
    unwritten = [0] * len(trace_inputs)
    if is_traced(n_steps):
        return unwritten
    for trace, (position, initial) in enumerate(trace_inputs):
        written = n_steps + initial
        if position in nit_sot_positions:
            room = outer_inputs[position]
            if not is_traced(room) and room > written:
                outer_inputs[position] = written
                unwritten[trace] = room - written
        elif jnp.shape(outer_inputs[position])[0] > written:
            unwritten[trace] = jnp.shape(outer_inputs[position])[0] - written
            outer_inputs[position] = outer_inputs[position][:written]
    return unwritten


def _without_nit_sot_entries(op: Scan, node, outputs):
    """The outputs of a Scan that took no step, as PyTensor's returns them: every nit-sot empty,
    each other axis as long as the output's type says (0 where it does not know, as
    ``Scan.perform`` makes every axis)."""
    values = [outputs] if len(op.fgraph.outputs) == 1 else list(outputs)
    first = op.n_tap_outs
    for position in range(first, first + op.info.n_nit_sot):
        lengths = (length or 0 for length in node.outputs[position].type.shape[1:])
        values[position] = jnp.zeros((0, *lengths), values[position].dtype)
    return values[0] if len(values) == 1 else values
