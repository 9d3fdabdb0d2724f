"""The JAX lowerings of PyTensor's optimize ops, registered by op type, loaded on first use.

`gpubackend.dispatch.jax.optimize_lowering` needs optimistix, equinox and lineax, which
take about a second to import. ``jax_funcify`` dispatches on PyTensor's op
classes, so registering needs none of them: each registration here imports the
lowering module only when an optimize op is first lowered.
"""

from __future__ import annotations

from collections.abc import Callable

from pytensor.tensor.optimize import MinimizeOp, MinimizeScalarOp, RootOp, RootScalarOp

from gpubackend.dispatch.jax.replacements import replaces


def _register_on_first_use(op_class: type) -> None:
    def lower(op, node=None, **kwargs) -> Callable:
        from gpubackend.dispatch.jax.optimize_lowering import LOWERINGS

        return LOWERINGS[op_class](op, node=node, **kwargs)

    lower.__name__ = lower.__qualname__ = f"jax_funcify_{op_class.__name__}"
    replaces(op_class)(lower)


for _op_class in (MinimizeOp, RootOp, MinimizeScalarOp, RootScalarOp):
    _register_on_first_use(_op_class)
