"""Run-time checks: conditions the reference checks when it runs, which a trace of run-time length
defers to run time.

A rule declares, at lowering, the checks it may need (`RuntimeCheck`: the
reference's error type and message). While tracing it gives one condition per
check: ``True`` where the bounds prove it, else a traced boolean. A graph's
conditions, in the order of its nodes, fold into one error code (`first_failure`):
0, or one more than the index of the first check that fails, as the reference
raises at the first failing node. Who reads the code decides what a check
costs:

- the JAX_GPU linker returns it beside the outputs and reads it in the one
  explicit read the call makes anyway, then raises the reference's error type
  (`gpubackend.host_reads.raise_failure`);
- every other caller (stock ``mode="JAX"``, ``get_jaxified_graph``, inner
  graphs) gets it checked inside the computation by Equinox's
  ``branched_error_if``, a host callback: the call then waits for the device, and
  the error is JAX's runtime error, whose message starts with the reference's
  error type (`raise_in_graph`; where every output is empty, a debug callback
  raising `CheckFailedInComputation` stands in, as XLA drops equinox's).

A graph whose checks are all proven while tracing has no code, and pays nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gpubackend.host_reads import RuntimeCheck


class NodeResult(NamedTuple):
    """What a rule that checks or runs out of capacity returns, rather than its outputs alone."""

    outputs: Any
    """One value, or a list for a node with several outputs."""

    oks: tuple = ()
    """One condition per check the rule declared: True where proven while tracing, else a traced
    boolean."""

    overflow: Any = False
    """A while-Scan that stopped because its buffers were full (a traced boolean), False where it
    cannot."""

    state: Any = None
    """What a while-Scan that overflowed continues from with more room (its `loop.LoopResult`)."""


def first_failure(oks: Sequence) -> Any:
    """0 when every condition holds, else 1 + the index of the first that fails; None when all are
    proven."""
    if all(ok is True for ok in oks):
        return None
    code = jnp.int32(0)
    for index in reversed(range(len(oks))):
        if oks[index] is not True:
            code = jnp.where(oks[index], code, jnp.int32(index + 1))
    return code


class CheckFailedInComputation(Exception):
    """A run-time check that failed inside a computation whose outputs are all empty; its message
    starts with the reference's error type."""


def _raise_first_failure(code, messages: tuple[str, ...]) -> None:
    codes = np.asarray(code)  # vmapped: one code per batch entry
    failed = codes[codes > 0]
    if failed.size:
        raise CheckFailedInComputation(messages[int(failed.flat[0]) - 1])


def raise_in_graph(values, code, checks: Sequence[RuntimeCheck]):
    """``values``, which raise the failing check's error when the computation runs (a host
    callback, made only where a check fails)."""
    if code is None:
        return values
    messages = tuple(check.describe() for check in checks)
    if all(np.size(leaf) == 0 for leaf in jax.tree.leaves(values)):
        # A check attached to outputs that are all empty never runs: XLA computes nothing for them,
        # equinox's pure callback included (a while-Scan of zero steps returns such traces). A
        # debug callback is an effect, which XLA keeps.
        jax.lax.cond(
            code > 0,
            lambda: jax.debug.callback(
                functools.partial(_raise_first_failure, messages=messages), code
            ),
            lambda: None,
        )
        return values
    import equinox as eqx  # equinox loads with the first while-Scan, not with gpubackend

    return eqx.branched_error_if(values, code > 0, jnp.maximum(code - 1, 0), list(messages))
