"""JAX lowerings of IfElse and LazyIfElse that keep concrete (shape) values concrete.

The gradient of an ifelse routes shapes through the branches: an eager
``if{shape}`` choosing between two equal ``Shape_i`` values, and a lazy branch
that allocates zeros of a ``Shape_i`` size. Passed through ``lax.cond`` such
values become tracers, and the allocation inside the branch fails with "Shapes
must be 1D sequences of concrete values". Here a choice between equal concrete
values is that value (any other choice is the stock lowering's ``lax.cond``),
and concrete operands of a lazy branch are closed over instead of passed
through ``lax.cond`` (with none, the call is the stock lowering's).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np
from pytensor.conditional.op import IfElse, LazyIfElse
from pytensor.link.jax.dispatch.basic import jax_funcify

from gpubackend.dispatch.jax.replacements import replaces, stock_lowering
from gpubackend.dispatch.jax.tracing import is_traced


def _is_concrete(value) -> bool:
    return not is_traced(value)


def _same_concrete(first, second) -> bool:
    return (
        _is_concrete(first)
        and _is_concrete(second)
        and np.array_equal(np.asarray(first), np.asarray(second))
    )


@replaces(IfElse)
def jax_funcify_IfElse(op: IfElse, **kwargs) -> Callable:
    n_outs = op.n_outs
    stock_ifelse = stock_lowering(IfElse)(op, **kwargs)

    def ifelse(cond, *branches):
        if_true, if_false = branches[:n_outs], branches[n_outs:]
        if all(_same_concrete(a, b) for a, b in zip(if_true, if_false, strict=True)):
            return tuple(if_true) if n_outs > 1 else if_true[0]
        return stock_ifelse(cond, *branches)

    return ifelse


@replaces(LazyIfElse)
def jax_funcify_LazyIfElse(op: LazyIfElse, **kwargs) -> Callable:
    kwargs.pop("storage_map", None)
    true_fn = jax_funcify(op.true_branch, **kwargs)
    false_fn = jax_funcify(op.false_branch, **kwargs)

    def lazy_ifelse(cond, *operands):
        traced = [position for position, value in enumerate(operands) if not _is_concrete(value)]

        def with_concrete(branch_fn):
            def branch(*traced_values):
                values = list(operands)
                for position, value in zip(traced, traced_values, strict=True):
                    values[position] = value
                return branch_fn(*values)

            return branch

        return jax.lax.cond(
            cond,
            with_concrete(true_fn),
            with_concrete(false_fn),
            *(operands[position] for position in traced),
        )

    return lazy_ifelse
