"""JAX lowering of ScalarLoop: ``lax.fori_loop`` for a fixed count, ``lax.while_loop`` with
``until``.

The loop is written for one element and vectorised with ``jnp.vectorize`` (vmap),
so it serves `Elemwise` (including the gradients of ``gammainc`` and friends)
and a `Composite` that holds it. Under vmap a while-loop runs until every
element is done, each element keeping its own state from its own stopping step,
which is what PyTensor's elementwise loop computes.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.scalar.loop import ScalarLoop

from gpubackend.dispatch.jax.replacements import replaces


@replaces(ScalarLoop)
def jax_funcify_ScalarLoop(op: ScalarLoop, node=None, **kwargs) -> Callable:
    kwargs.pop("storage_map", None)
    inner_fn = jax_funcify(op.fgraph, **kwargs)
    n_state = len(op.fgraph.outputs) - (1 if op.is_while else 0)
    state_dtypes = [variable.type.dtype for variable in op.fgraph.inputs[:n_state]]

    def step(state, constant):
        outputs = inner_fn(*state, *constant)
        return _cast_state(outputs[:n_state], state_dtypes), outputs[n_state:]

    def for_loop(n_steps, *inputs):
        state, constant = _cast_state(inputs[:n_state], state_dtypes), inputs[n_state:]
        return jax.lax.fori_loop(0, n_steps, lambda _, state: step(state, constant)[0], state)

    def while_loop(n_steps, *inputs):
        state, constant = _cast_state(inputs[:n_state], state_dtypes), inputs[n_state:]

        def keep_going(carry):
            count, _, done = carry
            return (count < n_steps) & ~done

        def body(carry):
            count, state, _ = carry
            new_state, (done,) = step(state, constant)
            return count + 1, new_state, jnp.asarray(done, bool)

        _, state, done = jax.lax.while_loop(
            keep_going, body, (jnp.zeros_like(n_steps), state, jnp.asarray(False))
        )
        return (*state, done)

    loop = jnp.vectorize(while_loop if op.is_while else for_loop)
    if len(op.fgraph.outputs) == 1:
        return lambda *inputs: loop(*inputs)[0]
    return loop


def _cast_state(values, dtypes) -> tuple:
    return tuple(jnp.asarray(value, dtype) for value, dtype in zip(values, dtypes, strict=True))
