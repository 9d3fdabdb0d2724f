"""gpubackend's entries on PyTensor's ``jax_funcify``: one per op type it replaces, each choosing.

Each replacement keeps the lowering it displaces (PyTensor's own) by reference
(`Replacement.stock`) and is meant as a strict superset of it: where the stock
lowering handles a node, ours gives the same values, errors and warnings, and it
adds behaviour only where the stock one would fail (tests/test_stock_superset.py
checks this side by side).

`replaces` registers, for each op type, one function that calls ours or the
stock one, whichever `gpubackend.registration.selected_lowerings` names when it
is called: that is while a graph is lowered (a linker selects for the whole of
its lowering), never while JAX traces. Lowerings, ours and PyTensor's, reach
inner graphs through PyTensor's module-global ``jax_funcify``, so an inner graph
gets the lowerings its linker selected: a while-Scan in the body of a
stock-lowered for-Scan still gets gpubackend's under JAX_GPU, and the stock
baseline never reaches one of ours.

A lowering module registers its lowerings when it is imported, as PyTensor's
do, right after PyTensor's JAX dispatch (``gpubackend.dispatch.jax``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from gpubackend.registration import selected_lowerings


@dataclass(frozen=True)
class Replacement:
    stock: Callable
    """The lowering registered before gpubackend's: PyTensor's own."""
    ours: Callable
    """What gpubackend registered: its lowering where gpubackend's are selected, else `stock`."""


REPLACED: dict[type, Replacement] = {}


def replaces(*op_types: type) -> Callable[[Callable], Callable]:
    """Register the decorated function as gpubackend's lowering of ``op_types``, beside stock's.

    Importing PyTensor's JAX dispatch package here makes sure the stock
    lowerings are registered before they are kept.
    """

    def register(lowering: Callable) -> Callable:
        from pytensor.link.jax.dispatch import jax_funcify

        for op_type in op_types:
            if op_type in REPLACED:
                raise RuntimeError(f"gpubackend replaces {op_type.__name__}'s lowering twice")
            stock = jax_funcify.dispatch(op_type)
            REPLACED[op_type] = Replacement(stock, _selecting(lowering, stock))
            jax_funcify.register(op_type, REPLACED[op_type].ours)
        return lowering

    return register


def _selecting(ours: Callable, stock: Callable) -> Callable:
    # Named as ours (the registry shows gpubackend's lowering, and where it lives).
    @functools.wraps(ours)
    def selected(op, *args, **kwargs) -> Callable:
        lowering = ours if selected_lowerings() == "gpubackend" else stock
        return lowering(op, *args, **kwargs)

    return selected


def stock_lowering(op_type: type) -> Callable:
    """PyTensor's own lowering of ``op_type`` (it lowers inner graphs through ``jax_funcify``)."""
    return REPLACED[op_type].stock
