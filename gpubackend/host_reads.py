"""JAX_GPU's calls that read back: one explicit read per call, of what only the data settle.

The JAX_GPU linker's lowering of its graph is a `LoweredGraph`
(`dispatch.jax.fgraph.lowered_graph`): the graph's function, and, where a call
has something to read (the lengths of outputs of run-time length, the error code
of run-time checks, the step counts of while-Scans specialised on them), the
`HostReadPlan` saying how to call it: ``fn(step_counts, *inputs) -> (outputs,
HostReads)``, with ``step_counts`` a static argument (the counts assumed for the
while-Scans specialised on theirs, empty otherwise). `HostReadingFunction`
calls the jitted function and:

- returns at once when there is nothing to read (``HostReads`` empty: every
  output of static shape, every check proven), so the call stays asynchronous;
- runs it as two computations where the linker asks for that
  (`LoweringContext.split_ladder`, the host platform only): the higher rungs
  only where the lower ones overflowed, read in between (`SplitLadder`);
- otherwise reads everything in one read (`read_back`): the lengths of the
  outputs of run-time length (each is then cut to its length on the device),
  the error code of the run-time checks (raising the reference's error type),
  and, for a specialised graph, the step counts taken and whether they match
  the ones assumed. On a mismatch it runs again with the counts taken, until
  they match (chained while-Scans settle one per run), so a wrong-length answer
  is never returned.

A function whose inner graphs check their indices with ``checkify``
(`dispatch.jax.index_checks`) reads its error with `read_back` too, where a
check is left unproven (`raise_checked`).

Nothing is shared between calls but the last counts seen, and which input
signatures need no continuation (each replaced whole).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import numpy as np

# Bound once: a counter that wraps both jax.device_get and `read_back` counts a read once.
_device_get = jax.device_get


@dataclass(frozen=True)
class RuntimeCheck:
    """A condition the reference checks when it runs, and the error it raises when the condition
    fails (a graph's error code, read back, names the first that failed: `raise_failure`)."""

    error: type[Exception]
    message: str

    def describe(self) -> str:
        """The message of a check failed inside a computation: the reference's (built-in) error
        type first, then gpubackend's own error class where it raises a subclass."""
        reference = next(cls for cls in self.error.__mro__ if cls.__module__ == "builtins")
        if reference is self.error:
            return f"{reference.__name__}: {self.message}"
        return f"{reference.__name__}: {self.error.__name__}: {self.message}"


class HostReads(NamedTuple):
    """What a call reads back: empty (nothing to read) unless the graph has something only the data
    settle."""

    lengths: tuple = ()
    """One per output of run-time length, in output order."""
    error_code: Any = None
    step_counts: tuple = ()
    """``(steps_taken, matched)`` per specialised while-Scan."""

    def empty(self) -> bool:
        return not self.lengths and self.error_code is None and not self.step_counts


@dataclass(frozen=True)
class HostReadPlan:
    """How to call a graph's function that reads back, ``fn(step_counts, *inputs)``.

    It returns ``(outputs, HostReads)``.
    """

    checks: tuple[RuntimeCheck, ...] = ()
    """What each nonzero error code raises (a graph with checks donates nothing: a failed one must
    leave the shared variables as they were)."""
    run_time_lengths: tuple[int, ...] = ()
    """Positions of the outputs returned at the size of their buffer, to cut to the lengths read."""
    n_specialised: int = 0
    """While-Scans specialised on their step counts (a call may then run twice, so it donates
    nothing)."""
    continuation: Callable | None = None
    """Where the graph runs as two computations (`interpreter.LadderedGraph`): ``fn`` returns
    ``(outputs, HostReads, overflow)``, and where ``overflow`` is set (read back),
    ``continuation(step_counts, *inputs) -> (outputs, HostReads)`` runs the graph again with more
    room. Only the second donates."""


class LoweredGraph(NamedTuple):
    """A whole graph lowered for a linker that reads back (JAX_GPU's top graph)."""

    fn: Callable
    plan: HostReadPlan | None = None
    """How to call ``fn``. None where the graph has nothing to read back: ``fn`` is then the
    graph's plain function."""


class SplitLadder:
    """A graph function and continuation, jitted: the lower rungs, then the higher ones on overflow.

    The continuation runs only where the lower rungs overflowed, which the call
    reads (one `read_back` of the flag): dispatched unread, it would cost every
    call the mapping of its temporaries, sized for the bound (about 50 µs at a
    10,000-step bound of a 1000-wide gradient), and a dispatch. The ladder is
    split only on the host platform, where the flag is host memory: the read
    waits for the lower rungs and copies nothing.

    Both need the call's inputs, so the lower rungs donate nothing while a
    continuation may follow. A graph whose ladder has no higher rung (for the
    inputs' shapes and static values) is learnt on its first call and from
    then on runs alone, donating the buffers of updated shared variables.
    """

    def __init__(self, lower: Callable, lower_donating: Callable, higher: Callable):
        self._lower = lower
        self._lower_donating = lower_donating
        self._higher = higher
        self._alone: frozenset = frozenset()
        """Signatures whose ladder has no higher rung (replaced whole, never mutated)."""

    def __call__(self, step_counts: tuple, *args):
        signature = (step_counts, *(_signature(arg) for arg in args))
        if signature in self._alone:
            outputs, reads, _ = self._lower_donating(step_counts, *args)
            return outputs, reads
        outputs, reads, overflow = self._lower(step_counts, *args)
        if overflow is None:
            self._alone = self._alone | {signature}
            return outputs, reads
        [overflowed] = read_back((overflow,), on_host_platform=True)
        if not overflowed:
            return outputs, reads
        return self._higher(step_counts, *args)


def _signature(value):
    """What a jitted function's compile depends on: shape and dtype of arrays, the value of static
    scalars.

    The dtype itself, not its name: ``str(dtype)`` costs about 5 µs, and the call makes one
    signature per input.
    """
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return value.shape, value.dtype
    if isinstance(value, int | float | bool | np.generic):
        return value
    return repr(jax.tree.map(lambda leaf: (np.shape(leaf), np.result_type(leaf).str), value))


def read_back[Tree](values: Tree, on_host_platform: bool) -> Tree:
    """The backend's one explicit read per run (the conformance suite counts its calls).

    ``jax.device_get`` on an accelerator. On the host platform a device buffer
    is host memory already: a numpy view of each array waits for the
    computation as ``device_get`` does, without its copy and its Python cost
    (about 20 µs a call on the CPU, where the view costs 1).
    """
    if on_host_platform:
        return jax.tree.map(np.asarray, values)
    return _device_get(values)


def raise_failure(code: int, checks: Sequence[RuntimeCheck]) -> None:
    """Raise the reference's error for an error code read from the device (`while_scan.checks`)."""
    if code:
        check = checks[code - 1]
        raise check.error(check.message)


class HostReadingFunction:
    """Call a graph's jitted function (or its `SplitLadder`), reading back at most once per run
    (besides a split ladder's overflow flag)."""

    def __init__(self, run: Callable, plan: HostReadPlan, *, on_host_platform: bool):
        self._run = run
        self._on_host_platform = on_host_platform
        self._checks = plan.checks
        self._cut = plan.run_time_lengths
        self._step_counts: tuple[int | None, ...] = (None,) * plan.n_specialised

    @property
    def specialised(self) -> bool:
        """Whether the graph is compiled once per distinct tuple of step counts."""
        return bool(self._step_counts)

    def __call__(self, *args):
        step_counts = self._step_counts
        if not step_counts and not self._cut:
            # Nothing to read but checks (index bounds, a while-Scan's): one run, at most one read.
            outputs, reads = self._run(step_counts, *args)
            if reads.error_code is not None:
                [error_code] = read_back((reads.error_code,), self._on_host_platform)
                raise_failure(int(error_code), self._checks)
            return outputs
        for _ in range(len(step_counts) + 2):
            outputs, reads = self._run(step_counts, *args)
            if reads.empty():
                return outputs
            lengths, error_code, counts = read_back(
                (reads.lengths, reads.error_code, reads.step_counts), self._on_host_platform
            )
            if not all(bool(matched) for _, matched in counts):
                step_counts = tuple(int(taken) for taken, _ in counts)
                continue
            self._step_counts = step_counts
            if error_code is not None:
                raise_failure(int(error_code), self._checks)
            outputs = list(outputs)
            for position, length in zip(self._cut, lengths, strict=True):
                outputs[position] = jax.lax.slice_in_dim(outputs[position], 0, int(length))
            return outputs
        raise RuntimeError("while-Scan step counts changed between runs on the same inputs")


def raise_checked(call: Callable, on_host_platform: bool) -> Callable:
    """``call`` (jitted from `index_checks.checkified`, returning ``(error, outputs)``) returning
    its outputs after reading its error: the reference's ``IndexError`` where a check failed."""

    def read_then_return(*args):
        error, outputs = call(*args)
        # Where every check was proven while tracing there is no error to read.
        if error is None:
            return outputs
        # Else one explicit read of its few flags and codes.
        failure = read_back(error, on_host_platform).get()
        if failure is not None:
            raise IndexError(failure.removesuffix(" (`check` failed)"))
        return outputs

    return read_then_return
