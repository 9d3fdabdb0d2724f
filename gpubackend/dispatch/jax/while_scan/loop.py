"""The loop of a Scan over lengths and buffers that may be known only at run time, with room for
``capacity`` steps.

A while-Scan runs at most ``n_steps`` iterations and stops after the first one
whose ``until`` condition is true. Its traced outputs live in buffers written
at ``(init + step) % size``, as PyTensor's own Scan writes them, so a buffer
shortened by PyTensor's memory rewrites is a ring buffer.

A trace PyTensor may trim to the steps taken is given room for ``capacity``
steps rather than for its bound (`LoopResult.overflow` tells when the loop
stopped only because that room was full): every op after it then works on
``capacity`` entries, so a graph costs the steps it takes, not its bound
(`interpreter` climbs to more room when it is not enough). Only the initial
entries of the graph's own buffer are read, so XLA drops the allocation of
its full size.

Where JAX may differentiate the lowered graph (`LoweringContext.jax_differentiable`),
the loop is a bounded loop of nested scans (`_reverse_differentiable_loop`),
which ``jax.grad`` (also under ``vmap`` and ``pmap``) and ``jax.jvp`` support;
elsewhere it is ``lax.while_loop``, which exits as soon as it stops.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from pytensor.graph.basic import Constant
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.scan.op import Scan

from gpubackend.dispatch.jax.lowering_context import lowering_context
from gpubackend.dispatch.jax.tracing import is_traced
from gpubackend.dispatch.jax.while_scan.values import (
    Table,
    as_bounded,
    as_bounded_int,
    bounds_of,
    known_value,
    length_between,
    value_of,
    with_capacity,
)


class Trace(NamedTuple):
    buffer: jax.Array
    size: Any
    """The size entries wrap at: an int, or a `BoundedInt` (a for-Scan's buffer sized by a
    trace)."""
    slot: int
    """Initial entries (a tap's depth; 0 for a nit-sot)."""


class LoopResult(NamedTuple):
    """Everything a Scan loop leaves, before its traces are put in PyTensor's order."""

    n_steps: Any
    steps_taken: Any
    steps_bounds: tuple[float, float]
    """The interval of ``steps_taken`` known while tracing."""
    mit_mot: list[tuple[jax.Array, Any]]
    traces: list[Trace]
    untraced: list[Any]
    overflow: Any
    """The loop stopped only because a buffer was full (a traced boolean), or False where it
    cannot."""
    stopped: Any
    """The ``until`` condition held at the last step taken."""
    steps_table: Table | None = None
    """The steps taken as a function of one length: a while-Scan's steps themselves (its traces'
    lengths then share that atom), and a for-Scan that runs all its steps, where its ``n_steps``
    is a tabulated length (the steps left after a while-Scan: ``n - len(head)``)."""


def traced_slots(op: Scan) -> list[int]:
    """Initial entries per traced output (mit-sot, sit-sot, then nit-sot)."""
    return [
        *(-min(taps) for taps in (*op.info.mit_sot_in_slices, *op.info.sit_sot_in_slices)),
        *([0] * op.info.n_nit_sot),
    ]


def _keeps_every_step(store: int, init_len: int) -> bool:
    """True if the ring buffer is full after any first step, so PyTensor never trims it."""
    return store <= init_len + 1


def static_trace_sizes(op: Scan, node) -> list[int | None]:
    """The declared buffer size of each traced output, where the graph fixes it."""
    outer = list(node.inputs)
    sizes = [buffer.type.shape[0] for buffer in (*op.outer_mitsot(outer), *op.outer_sitsot(outer))]
    return sizes + [
        None if getattr(size, "data", None) is None else int(size.data)
        for size in op.outer_nitsot(outer)
    ]


def _may_take_no_step(node) -> bool:
    """Whether the Scan's ``n_steps`` may be 0: PyTensor then returns every nit-sot empty, full
    ring buffer or not (a while-Scan takes at least one step of a positive count)."""
    n_steps = node.inputs[0]
    return not (isinstance(n_steps, Constant) and int(n_steps.data) >= 1)


def possibly_trimmed_traces(op: Scan, node) -> list[bool]:
    """Per traced output of a while-Scan: whether PyTensor may trim it to the steps taken."""
    if not op.info.as_while:
        return [False] * len(traced_slots(op))
    no_step = _may_take_no_step(node)
    return [
        size is None or not _keeps_every_step(size, slot) or (slot == 0 and no_step)
        for size, slot in zip(static_trace_sizes(op, node), traced_slots(op), strict=True)
    ]


def _with_room(buffer: jax.Array, slot: int, capacity: int) -> jax.Array:
    """The first ``slot`` (initial) entries of ``buffer`` in a buffer with room for ``capacity``
    steps."""
    room = jnp.zeros((capacity + slot, *buffer.shape[1:]), buffer.dtype)
    return room.at[:slot].set(buffer[:slot]) if slot else room


def _like(new, old):
    """``new`` in the dtype of the carried ``old`` (leaf by leaf: a random generator's state is a
    dict)."""
    return jax.tree.map(
        lambda value, previous: jnp.asarray(value, dtype=jnp.asarray(previous).dtype), new, old
    )


NEGATIVE_STEPS_MESSAGE = "Scan was asked to run for negative number of step"
"""The reference's message (PyTensor's Scan.perform), before the count it names."""


class LoopCarry(NamedTuple):
    """What one step of the loop hands the next."""

    step: jax.Array
    stopped: jax.Array
    """The ``until`` condition held at the last step taken."""
    mit_mot: list[jax.Array]
    taps: list[jax.Array]
    """The traces read through taps (mit-sot, then sit-sot); the steps read them in ``windows``."""
    windows: list[jax.Array]
    nit_sot: list[jax.Array]
    untraced: list[Any]


@dataclass(frozen=True)
class _LoopLayout:
    """What the loop reads of its Scan, analysed once when the Scan is lowered."""

    op: Scan
    inner_fn: Callable
    trimmable: Sequence[bool]
    jax_differentiable: bool
    slots: list[int]
    tap_slices: list[Sequence[int]]
    mit_mot_in: Sequence[Sequence[int]]
    mit_mot_out: Sequence[Sequence[int]]


@dataclass(frozen=True)
class _StepPlan:
    """What every step of one run reads besides its carry."""

    layout: _LoopLayout
    n_steps: Any
    seqs: list[jax.Array]
    non_seqs: list
    tap_sizes: list[Any]
    nit_sizes: list[Any]
    limit: float
    """The most steps the loop may take: its bound, or ``capacity``."""
    capacity: int | None
    """The room given where a trimmable trace had more (the loop stops when it is full), or None."""
    masked: bool
    """Writes are masked where the loop has stopped: `_reverse_differentiable_loop` runs the
    body for every batch member while any goes on (under vmap); `lax.while_loop` only while it
    goes on."""


def scan_loop(op: Scan, trimmable: Sequence[bool], **kwargs) -> Callable[..., LoopResult]:
    """The loop of any Scan: ``run(outer_inputs, capacity, resume=None)``.

    ``capacity`` None gives the trimmable traces their bound. ``resume``, the
    result of the same loop with less room that overflowed, is continued where
    it stopped, its buffers grown to this room: no step is taken twice.
    """
    kwargs.pop("storage_map", None)
    layout = _LoopLayout(
        op,
        jax_funcify(op.fgraph, **kwargs),
        trimmable,
        lowering_context(kwargs).jax_differentiable,
        traced_slots(op),
        [*op.info.mit_sot_in_slices, *op.info.sit_sot_in_slices],
        op.info.normalized_mit_mot_in_slices,
        op.info.normalized_mit_mot_out_slices,
    )
    return partial(_run, layout)


def _run(
    layout: _LoopLayout, outer: list, capacity: int | None, resume: LoopResult | None = None
) -> LoopResult:
    op, slots = layout.op, layout.slots
    n_steps = value_of(outer[0])
    n_low, n_high = (float(bound) for bound in bounds_of(outer[0]))
    if n_high < 0:
        # Known while tracing (a constant, an integer input JAX specialises on): the
        # reference's error, with its message, when the call traces.
        raise IndexError(f"{NEGATIVE_STEPS_MESSAGE} {int(n_low) if n_low == n_high else ''}")
    mit_mot = [as_bounded(buffer) for buffer in op.outer_mitmot(outer)]
    taps = [as_bounded(buffer) for buffer in (*op.outer_mitsot(outer), *op.outer_sitsot(outer))]
    untraced = list(op.outer_untraced_sit_sot(outer))
    nit_sizes = [as_bounded_int(size) for size in op.outer_nitsot(outer)]
    if any(not np.isfinite(size.high) for size in nit_sizes):
        raise NotImplementedError(f"{op}: a nit-sot length known only at run time, with no bound")
    tap_buffers = [tap.buffer for tap in taps]
    tap_sizes: list[Any] = [tap.length for tap in taps]
    nit_rooms = [int(size.high) for size in nit_sizes]
    nit_sizes_in_loop: list[Any] = list(nit_sizes)
    limiting: int | None = None  # capacity, where a trimmable trace had more room
    if capacity is not None and capacity < n_high:
        for position, (tap, slot) in enumerate(zip(taps, slots, strict=False)):
            if layout.trimmable[position] and tap.capacity > capacity + slot:
                tap_buffers[position] = _with_room(tap.buffer, slot, capacity)
                tap_sizes[position] = capacity + slot
                limiting = capacity
        for position, room in enumerate(nit_rooms):
            if layout.trimmable[len(taps) + position] and room > capacity:
                nit_rooms[position] = nit_sizes_in_loop[position] = limiting = capacity
    limited = limiting is not None
    limit = n_high if limiting is None else limiting
    seqs = [as_bounded(seq).buffer for seq in op.outer_seqs(outer)]
    non_seqs = [value_of(value) for value in op.outer_non_seqs(outer)]
    masked = layout.jax_differentiable and bool(np.isfinite(limit))
    plan = _StepPlan(
        layout, n_steps, seqs, non_seqs, tap_sizes, nit_sizes_in_loop, limit, limiting, masked
    )
    windows = _windows_at(plan, 0, tap_buffers)
    step = jnp.asarray(0, jnp.asarray(n_steps).dtype)
    mit_mot_buffers = [buffer.buffer for buffer in mit_mot]
    start = LoopCarry(step, jnp.asarray(False), mit_mot_buffers, tap_buffers, windows, [], untraced)
    # PyTensor's random variables write a new key into the generator's dict: trace on a copy of it.
    copied = start._replace(untraced=jax.tree.map(lambda leaf: leaf, untraced))
    nit_specs = jax.eval_shape(lambda: op.inner_nitsot_outs(_inner_outputs(plan, copied)))
    nit_sot = [
        jnp.zeros((room, *spec.shape), spec.dtype)
        for room, spec in zip(nit_rooms, nit_specs, strict=True)
    ]
    start = start._replace(nit_sot=nit_sot)
    if resume is not None:
        start = _resumed(plan, start, resume)
    keep_going, body = partial(_keep_going, plan), partial(_body, plan)
    if masked:
        final = _reverse_differentiable_loop(keep_going, body, start, int(limit))
    else:
        final = jax.lax.while_loop(keep_going, body, start)
    steps_taken, stopped = final.step, final.stopped
    overflow = (steps_taken >= limit) & (steps_taken < n_steps) & ~stopped if limited else False
    sizes = [*tap_sizes, *nit_sizes_in_loop]
    steps_bounds = (max(min(1.0, n_low) if op.info.as_while else n_low, 0.0), limit)
    if op.info.as_while:
        # The steps tabulated on themselves: every trace's length is then a function of this one
        # atom, so lengths taken from two traces (the convergent Kalman filter cuts one trace
        # at the length of another) stay known relative to each other.
        steps_table = length_between(steps_taken, *steps_bounds).table
    else:
        # Unlimited, a for-Scan takes exactly its n_steps.
        steps_table = None if limited else getattr(outer[0], "table", None)
    return LoopResult(
        n_steps,
        steps_taken,
        steps_bounds,
        [(buffer, given.length) for buffer, given in zip(final.mit_mot, mit_mot, strict=True)],
        [
            Trace(buffer, size, slot)
            for buffer, size, slot in zip([*final.taps, *final.nit_sot], sizes, slots, strict=True)
        ],
        final.untraced,
        overflow,
        stopped,
        steps_table,
    )


def _resumed(plan: _StepPlan, start: LoopCarry, resume: LoopResult) -> LoopCarry:
    """The carry ``resume`` stopped with, its buffers grown to the room of ``start``."""
    grown = [
        with_capacity(trace.buffer, room.shape[0])
        for trace, room in zip(resume.traces, [*start.taps, *start.nit_sot], strict=True)
    ]
    taps, nit_sot = grown[: len(start.taps)], grown[len(start.taps) :]
    windows = _windows_at(plan, resume.steps_taken, taps)
    return LoopCarry(
        resume.steps_taken, resume.stopped, start.mit_mot, taps, windows, nit_sot, resume.untraced
    )


def _wrapped(plan: _StepPlan, position, size, slot: int):
    """A ring buffer's position; a buffer with room for every step never wraps, and needs no
    remainder."""
    known = known_value(size)
    wraps = known is None or known < plan.limit + slot
    return position % value_of(size) if wraps else position


def _windows_at(plan: _StepPlan, step, buffers: list[jax.Array]) -> list[jax.Array]:
    """The last ``slot`` entries of each tap buffer before ``step``, oldest first."""
    return [
        jnp.stack([_entry(buffer, _wrapped(plan, step + held, size, slot)) for held in range(slot)])
        for buffer, slot, size in zip(buffers, plan.layout.slots, plan.tap_sizes, strict=False)
    ]


def _inner_outputs(plan: _StepPlan, carry: LoopCarry) -> list:
    """The inner graph's outputs at the step of ``carry``."""
    layout, step = plan.layout, carry.step
    mit_mot_taps = _read_before_written(
        _entry(buffer, step + tap)
        for buffer, taps in zip(carry.mit_mot, layout.mit_mot_in, strict=True)
        for tap in taps
    )
    # Taps are read from the carried windows, never from the buffers the loop writes: XLA
    # then updates those in place instead of copying them on every step.
    tap_values = chain.from_iterable(
        (window[slot + tap] for tap in taps)
        for window, taps, slot in zip(carry.windows, layout.tap_slices, layout.slots, strict=False)
    )
    seq_values = (_entry(seq, step) for seq in plan.seqs)
    inputs = (*seq_values, *mit_mot_taps, *tap_values, *carry.untraced, *plan.non_seqs)
    return list(layout.inner_fn(*inputs))


def _keep_going(plan: _StepPlan, carry: LoopCarry):
    going = (carry.step < plan.n_steps) & ~carry.stopped
    return going if plan.capacity is None else going & (carry.step < plan.capacity)


def _body(plan: _StepPlan, carry: LoopCarry) -> LoopCarry:
    going = _keep_going(plan, carry) if plan.masked else True
    op, step = plan.layout.op, carry.step
    outputs = _inner_outputs(plan, carry)
    mit_mot_outputs = op.inner_mitmot_outs_grouped(outputs)
    nit_outputs = op.inner_nitsot_outs(outputs)
    tap_outputs = [*op.inner_mitsot_outs(outputs), *op.inner_sitsot_outs(outputs)]
    mit_mot = [
        _written_at_taps(buffer, step, out_taps, values, going)
        for buffer, values, out_taps in zip(
            carry.mit_mot, mit_mot_outputs, plan.layout.mit_mot_out, strict=True
        )
    ]
    taps = [
        _written(buffer, _wrapped(plan, step + slot, size, slot), value, going)
        for buffer, value, slot, size in zip(
            carry.taps, tap_outputs, plan.layout.slots, plan.tap_sizes, strict=False
        )
    ]
    windows = [
        _shifted(window, value, going)
        for window, value in zip(carry.windows, tap_outputs, strict=True)
    ]
    nit_sot = [
        _written(buffer, _wrapped(plan, step, size, 0), value, going)
        for buffer, value, size in zip(carry.nit_sot, nit_outputs, plan.nit_sizes, strict=True)
    ]
    untraced = _like(op.inner_untraced_sit_sot_outs(outputs), carry.untraced)
    stop = jnp.asarray(outputs[-1] if op.info.as_while else False, bool)
    if going is not True:
        untraced = jax.tree.map(partial(jnp.where, going), untraced, carry.untraced)
        stop = jnp.where(going, stop, carry.stopped)
    return LoopCarry(
        step + jnp.asarray(going, step.dtype), stop, mit_mot, taps, windows, nit_sot, untraced
    )


def _entry(buffer: jax.Array, position) -> jax.Array:
    """``buffer[position]`` for a position in range: a plain dynamic slice (NumPy-style indexing
    adds wrap-around).

    A buffer with no room (a loop of zero steps: an empty sequence or trace) is never read when
    the loop runs, but its body is still traced: it reads zeros of an entry's shape.
    """
    if buffer.shape[0] == 0:
        return jnp.zeros(buffer.shape[1:], buffer.dtype)
    return jax.lax.dynamic_index_in_dim(buffer, position, keepdims=False)


def _read_before_written(entries: Iterable[jax.Array]) -> tuple[jax.Array, ...]:
    """Entries read from buffers the loop then writes (a mit-mot's taps), each its own value.

    XLA fuses a dynamic slice into every op that uses it; an entry used by two
    ops, one of them writing elsewhere (a gradient's mit-mot entry feeds both
    the mit-mot and a sit-sot), is then read by a fusion XLA may schedule after
    the buffer's update, and XLA copies the whole buffer on every step to keep
    the old one. Held apart by an optimisation barrier, the entries are read
    first and the buffer is updated in place.
    """
    entries = tuple(entries)
    return jax.lax.optimization_barrier(entries) if entries else entries


def _written(buffer: jax.Array, position, value, going) -> jax.Array:
    """``buffer`` with ``value`` at ``position`` (in range) where the loop goes on.

    A plain dynamic-update-slice, which XLA does in place in a loop; ``.at[].set``
    guards against positions out of range with a select, and then XLA copies the
    whole buffer on every step.
    """
    if buffer.shape[0] == 0:
        # No room: a loop of zero steps, whose body is traced but never runs (see `_entry`).
        return buffer
    value = jnp.asarray(value, buffer.dtype)
    if going is not True:
        value = jnp.where(going, value, _entry(buffer, position))
    return jax.lax.dynamic_update_index_in_dim(buffer, value, position, axis=0)


def _shifted(window: jax.Array, value, going) -> jax.Array:
    """The window of the last entries, with ``value`` the newest where the loop goes on."""
    shifted = jnp.concatenate([window[1:], jnp.asarray(value, window.dtype)[None]])
    return shifted if going is True else jnp.where(going, shifted, window)


def _written_at_taps(
    buffer: jax.Array, step, taps: Sequence[int], values: Sequence, going
) -> jax.Array:
    for tap, value in zip(taps, values, strict=True):
        buffer = _written(buffer, step + tap, value, going)
    return buffer


_LOOP_BASE = 16


def _reverse_differentiable_loop(keep_going: Callable, body: Callable, init, max_steps: int):
    """A while loop ``jax.grad`` can differentiate: Equinox's bounded loop, without its batch check.

    PyMC's JAX samplers take ``jax.grad`` of the lowered graph, which
    ``lax.while_loop`` does not support. As Equinox's ``bounded_while_loop``,
    this nests scans of `_LOOP_BASE` steps, each skipped by ``lax.cond`` once
    the loop has stopped (so skipping costs a few conds per level), and
    checkpoints all levels but the lowest (so the reverse pass stores a few
    states per level). ``keep_going`` must bound the steps (here: by the room
    the loop was given, which `interpreter`'s capacity ladder keeps near the
    steps taken). Under ``vmap`` the conds skip once every batch member has
    stopped, and ``body`` leaves a stopped member unchanged. Equinox's own loop
    checks at run time that its predicate is not batched, which numpyro's
    vectorized chains break through a while-Scan over a sequence ("Nonconstant
    batch"), so the nesting is written here.
    """
    import equinox.internal as eqxi  # equinox loads with the first while-Scan, not with gpubackend

    def any_going(carry):
        return eqxi.unvmap_any(keep_going(carry))

    def level(carry, steps: int):
        if steps == 1:
            return body(carry)

        def step_or_skip(value, _):
            return jax.lax.cond(
                any_going(value),
                lambda going: level(going, steps // _LOOP_BASE),
                lambda stopped: stopped,
                value,
            ), None

        if steps != _LOOP_BASE:
            step_or_skip = jax.checkpoint(step_or_skip, prevent_cse=False)
        return jax.lax.scan(step_or_skip, carry, length=_LOOP_BASE)[0]

    return level(init, _LOOP_BASE ** max(1, math.ceil(math.log(max(max_steps, 2), _LOOP_BASE))))


def is_static(*values) -> bool:
    return not any(is_traced(value) for value in values)


def rotated(buffer: jax.Array, init_len: int, steps_taken) -> jax.Array:
    """A full ring buffer rotated so that its oldest entry comes first, as PyTensor returns it."""
    store = buffer.shape[0]
    if store <= 1:
        return buffer
    return jnp.roll(buffer, -((steps_taken + init_len) % store), axis=0)
