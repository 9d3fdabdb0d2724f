"""JAX lowering of CheckAndRaise that checks what is known while tracing.

The stock lowering drops every assertion, because a traced condition cannot
raise. Most assertions PyTensor inserts compare shapes (broadcasting checks,
scan lengths), and shape arithmetic is concrete at trace time here (see
`jax_fgraph`), so those are checked: a violated one raises the op's own
exception when the function is traced, instead of letting a wrong shape run.
Conditions that depend on array values are still dropped, with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import jax
import numpy as np
from pytensor.graph.basic import Constant
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.raise_op import CheckAndRaise


@jax_funcify.register(CheckAndRaise)
def jax_funcify_CheckAndRaise(op: CheckAndRaise, node, **kwargs) -> Callable:
    if any(isinstance(condition, Constant) and not np.all(condition.data) for condition in node.inputs[1:]):
        raise op.exc_type(op.msg)

    def check_and_raise(x, *conditions):
        if all(not isinstance(condition, jax.core.Tracer) for condition in conditions):
            if not all(np.all(np.asarray(condition)) for condition in conditions):
                raise op.exc_type(op.msg)
        else:
            warnings.warn(f"Skipping {op} (assertion: {op.msg}): its condition is only known at run time", stacklevel=2)
        return x

    return check_and_raise
