"""JAX_GPU's calls that read back: one explicit read per call, of what only the data settle.

The JAX_GPU linker's lowering of its graph is a `LoweredGraph`
(`dispatch.jax.fgraph.lowered_graph`): the graph's function, and, where a call
has something to read (the lengths of outputs of run-time length, the error code
of run-time checks, the step counts of while-Scans specialised on them), the
`HostReadPlan` saying how to call it: ``fn(step_counts, *inputs) -> (outputs,
HostReads)``, with ``step_counts`` a static argument (the counts assumed for the
while-Scans specialised on theirs, the rung of a graph that climbs the ladder
of capacities, empty otherwise). `HostReadingFunction`
calls the jitted function and:

- returns at once when there is nothing to read (``HostReads`` empty: every
  output of static shape, every check proven), so the call stays asynchronous;
- runs a while-Scan graph's ladder split where the linker asks for that (the
  host platform; elsewhere a graph whose one computation's temporaries exceed
  the memory budget, `memory_budget`): the higher rungs only where the lower
  ones overflowed, read in between (`SplitLadder`);
- otherwise reads everything in one read (`read_back`): the lengths of the
  outputs of run-time length (each is then cut to its length on the device),
  the error code of the run-time checks (raising the reference's error type),
  and, for a specialised graph, the step counts taken and whether they match
  the ones assumed. On a mismatch it runs again with the counts taken, until
  they match (chained while-Scans settle one per run), so a wrong-length answer
  is never returned. For a graph with outputs of run-time length, whose
  buffers are sized by the rung, it reads with them whether the rung
  overflowed, and then runs the next rung (`HostReadPlan.climbs`).

A function whose inner graphs check their indices with ``checkify``
(`dispatch.jax.index_checks`) reads its error with `read_back` too, where a
check is left unproven (`raise_checked`).

Nothing is shared between calls but the last counts or rung seen (a rung too
low is climbed again, a higher one gives the same values), and which input
signatures run as one computation and which split (each set replaced whole).
"""

from __future__ import annotations

import os
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
    overflow: Any = None
    """A climbing graph's loop ran out of the rung's room: the call runs the next rung (None on
    the last rung, or where the graph does not climb)."""

    def empty(self) -> bool:
        return (
            not self.lengths
            and self.error_code is None
            and not self.step_counts
            and self.overflow is None
        )


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
    climbs: bool = False
    """The static first argument is a rung of the while-Scans' ladder (0 first), not step counts:
    where a call reads that the rung overflowed, it runs the next (`interpreter.LadderedGraph`'s
    `at_rung`). Its outputs are then sized by the rung that sufficed, never by the bound. A call may
    then run twice, so it donates nothing."""
    continuation: Callable | None = None
    """Where the graph may run as a split ladder (`interpreter.LadderedGraph`): ``fn`` returns
    ``(outputs, HostReads, overflow)``, and where ``overflow`` is set (read back),
    ``continuation(rung, *inputs) -> (outputs, HostReads, overflow)`` runs the graph again with the
    room of the higher rung ``rung`` (0 first), each while the one before overflowed. Only the
    last rung donates."""
    whole: Callable | None = None
    """With a continuation: the graph as one computation, every rung in it, called as ``fn`` is
    (its overflow None), which the linker runs off the host platform where its temporaries fit
    the memory budget (`SplitLadder`)."""


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
    call the mapping of its temporaries on the CPU (about 50 µs at a
    10,000-step bound of a 1000-wide gradient), and a dispatch. The
    continuation climbs one rung per computation, each only where the one below
    overflowed (read likewise), so its temporaries follow the steps taken,
    never the bound; a call starts on the higher rung the last call ended on.

    On the host platform the flag is host memory: the read waits for the lower
    rungs and copies nothing, and every call runs split. Elsewhere a read is a
    device-to-host sync, so a call runs split only where memory is at stake:
    ``fits`` says, once per signature (the inputs' shapes and static values),
    whether the graph as one computation, `alone`, keeps its temporaries
    within the memory budget; if so the signature runs it, reading nothing.

    Each needs the call's inputs while another may follow, so none donates but
    `alone`, which runs by itself: the one computation where it fits, or, on
    the host platform, the lower rungs of a graph whose ladder has no higher
    rung (for the signature), learnt on its first call. It donates the buffers
    of updated shared variables.
    """

    def __init__(
        self,
        lower: Callable,
        alone: Callable,
        higher: Callable,
        *,
        on_host_platform: bool,
        fits: Callable[..., bool] | None = None,
    ):
        self._lower = lower
        self._run_alone = alone
        self._higher = higher
        self._on_host_platform = on_host_platform
        self._fits = fits
        self._alone: frozenset = frozenset()
        """Signatures that run `alone` (replaced whole, never mutated)."""
        self._split: frozenset = frozenset()
        """Signatures that ``fits`` found over the budget (replaced whole, never mutated)."""
        self._rung = 0
        """The higher rung the last call that climbed ended on."""

    def __call__(self, step_counts: tuple, *args):
        signature = (step_counts, *(_signature(arg) for arg in args))
        if signature not in self._alone and self._fits is not None:
            if signature not in self._split:
                if self._fits(step_counts, *args):
                    self._alone = self._alone | {signature}
                else:
                    self._split = self._split | {signature}
        if signature in self._alone:
            outputs, reads, _ = self._run_alone(step_counts, *args)
            return outputs, reads
        outputs, reads, overflow = self._lower(step_counts, *args)
        if overflow is None:
            self._alone = self._alone | {signature}
            return outputs, reads
        rung = self._rung
        while overflow is not None and read_back((overflow,), self._on_host_platform)[0]:
            outputs, reads, overflow = self._higher(rung, *args)
            self._rung, rung = rung, rung + 1
        return outputs, reads


MEMORY_BUDGET_ENV = "GPUBACKEND_WHILE_SCAN_MEMORY_BUDGET"
DEFAULT_MEMORY_BUDGET = 1 << 30
"""Bytes, where neither the environment nor the device says (a device without memory stats)."""
MEMORY_BUDGET_SHARE = 16
"""The budget's share of the smallest device memory limit: one 16th."""


def memory_budget(devices: Sequence[jax.Device]) -> int:
    """The bytes of temporaries a while-Scan graph may take as one computation off the host
    platform (`SplitLadder`): ``$GPUBACKEND_WHILE_SCAN_MEMORY_BUDGET``, else a 16th of the
    smallest memory limit of ``devices``, else 1 GiB."""
    value = os.environ.get(MEMORY_BUDGET_ENV, "").strip()
    if value:
        try:
            budget = int(value)
        except ValueError:
            budget = -1
        if budget < 0:
            raise ValueError(
                f"${MEMORY_BUDGET_ENV}={value!r}: expected a number of bytes (a non-negative "
                "integer), the temporaries a while-Scan graph may take as one computation on a "
                "GPU; unset it for the default, a 16th of the device's memory"
            )
        return budget
    limits = [
        stats["bytes_limit"]
        for stats in (device.memory_stats() for device in devices)
        if stats and "bytes_limit" in stats
    ]
    return min(limits) // MEMORY_BUDGET_SHARE if limits else DEFAULT_MEMORY_BUDGET


def fits_budget(jitted: Callable, budget: int) -> Callable[..., bool]:
    """Whether ``jitted``'s computation for a call's arguments keeps its temporaries within
    ``budget`` bytes, as XLA sizes them when it compiles it (the compile the call then reuses).
    A backend that does not say is taken to fit."""
    # A function that reads its checks (`raise_checked`) lowers as the jitted call it wraps.
    jit = jitted if hasattr(jitted, "lower") else jitted.__wrapped__  # type: ignore[attr-defined]

    def fits(*args) -> bool:
        analysis = jit.lower(*args).compile().memory_analysis()
        return analysis is None or analysis.temp_size_in_bytes <= budget

    return fits


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
        self._climbs = plan.climbs
        self._rung = 0
        """The rung the last call of a climbing graph ended on, where the next one starts."""
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
        rung, runs = self._rung, 0
        while runs < len(step_counts) + 2:
            outputs, reads = self._run(rung if self._climbs else step_counts, *args)
            if reads.empty():
                return outputs
            lengths, error_code, counts, overflow = read_back(
                (reads.lengths, reads.error_code, reads.step_counts, reads.overflow),
                self._on_host_platform,
            )
            if overflow is not None and bool(overflow):
                # The lengths and error code of a rung that overflowed are not the graph's.
                rung += 1
                continue
            runs += 1
            if not all(bool(matched) for _, matched in counts):
                step_counts = tuple(int(taken) for taken, _ in counts)
                continue
            self._step_counts, self._rung = step_counts, rung
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

    read_then_return.__wrapped__ = call  # type: ignore[attr-defined]
    return read_then_return
