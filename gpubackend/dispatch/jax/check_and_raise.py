"""JAX lowering of CheckAndRaise that also checks what is known while tracing.

The stock lowering drops every assertion, warning at compile time that it
does, because a traced condition cannot raise. Most assertions PyTensor inserts
compare shapes (broadcasting checks, scan lengths), and shape arithmetic is
concrete at trace time here (see `fgraph`). So this lowering is the stock
one (its compile-time error for a constant false condition and its warning
included), plus one check: a violated condition that is concrete while tracing
raises the op's own exception, as PyTensor's other backends do, instead of
letting a wrong shape run. Conditions that depend on array values are skipped,
as stock skips them.

The check gpubackend itself inserts on a Scan's sequences
(`gpubackend.rewrites.scan_lengths`) compares lengths, concrete while
tracing, so it is never skipped: it goes without stock's warning that it
would be, and a condition that is constant false raises when the call runs,
as the reference's does, not at compile time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pytensor.raise_op import CheckAndRaise

from gpubackend.dispatch.jax.replacements import replaces, stock_lowering
from gpubackend.dispatch.jax.tracing import is_traced
from gpubackend.errors import ScanSequenceLengthError


def _pass_through(x, *conditions):
    return x


@replaces(CheckAndRaise)
def jax_funcify_CheckAndRaise(op: CheckAndRaise, node, **kwargs) -> Callable:
    skip_check = (
        _pass_through
        if op.exc_type is ScanSequenceLengthError
        else stock_lowering(CheckAndRaise)(op, node=node, **kwargs)
    )

    def check_and_raise(x, *conditions):
        if not any(is_traced(condition) for condition in conditions):
            if not all(np.all(np.asarray(condition)) for condition in conditions):
                raise op.exc_type(op.msg)
        return skip_check(x, *conditions)

    return check_and_raise
