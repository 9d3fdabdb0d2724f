"""Which of PyTensor's ``jax_funcify`` lowerings gpubackend replaces, and dispatchers that choose between them.

Each replacement keeps PyTensor's own lowering by reference (`Replacement.stock`)
and is meant as a strict superset of it: where the stock lowering handles a node,
ours gives the same values, errors and warnings, and it adds behaviour only where
the stock one would fail (tests/test_stock_superset.py checks this side by side).

By default (``GPUBACKEND_REGISTER`` unset or ``global``) the replacements are
registered on PyTensor's global ``jax_funcify``, so stock ``mode="JAX"`` and
PyMC's ``get_jaxified_graph`` get them too. With ``GPUBACKEND_REGISTER=jax_gpu``
the global registry stays PyTensor's own, and only the JAX_GPU linker reaches
gpubackend's lowerings, through `jax_gpu_funcify`.

A `JAXDispatch` resolves an op like the global registry, except that a replaced
op type gets the lowering it picks (ours or stock). Lowerings recurse into inner
graphs by calling ``jax_funcify`` (a for-Scan lowers its body with it), so a
dispatcher runs each registered lowering as a function whose global name
``jax_funcify`` means the dispatcher itself: PyTensor's code unchanged, with its
recursion kept inside the dispatcher. A while-Scan nested in a stock-lowered
for-Scan body thus still gets gpubackend's lowering under JAX_GPU in scoped mode,
and the stock dispatcher never reaches one of ours.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import FunctionType
from typing import Any

from gpubackend.registration import DispatchName


def _jax_registry() -> Callable:
    """PyTensor's ``jax_funcify``, with its lowerings and gpubackend's recorded.

    Imported on use, not at module level: importing PyTensor's JAX dispatch runs
    `gpubackend.dispatch.jax.register_lowerings`, whose modules import this one.
    """
    from pytensor.link.jax.dispatch.basic import jax_funcify

    return jax_funcify


@dataclass(frozen=True)
class Replacement:
    stock: Callable
    ours: Callable


_OURS: dict[type, Callable] = {}
REPLACED: dict[type, Replacement] = {}
"""Filled once PyTensor's JAX dispatch has loaded (`take_over_registry`)."""

_installs_globally: bool | None = None
"""None until PyTensor's JAX dispatch has loaded; then whether ours go on its global registry."""


def replaces(*op_types: type) -> Callable[[Callable], Callable]:
    """Record the decorated function as gpubackend's lowering of ``op_types``.

    Before PyTensor's JAX dispatch has loaded, recording does not touch its
    registry, so a lowering module can be imported first. A module whose
    import is what loads PyTensor's JAX dispatch (through `fgraph`) records
    after `take_over_registry` has run, so its replacements are taken over here.
    """

    def record(lowering: Callable) -> Callable:
        for op_type in op_types:
            _OURS[op_type] = lowering
            if _installs_globally is not None:
                _take_over(op_type)
        return lowering

    return record


def take_over_registry(install_globally: bool) -> None:
    """Keep, by reference, PyTensor's lowering of each op type gpubackend replaces; install ours if asked.

    Runs right after PyTensor's JAX dispatch has loaded (its registry is then
    PyTensor's own) and gpubackend's lowering modules have been imported.
    """
    global _installs_globally
    _installs_globally = install_globally
    for op_type in list(_OURS):
        _take_over(op_type)


def _take_over(op_type: type) -> None:
    jax_funcify = _jax_registry()
    if op_type not in REPLACED:
        REPLACED[op_type] = Replacement(stock=jax_funcify.dispatch(op_type), ours=_OURS[op_type])
    if _installs_globally:
        jax_funcify.register(op_type, REPLACED[op_type].ours)


class JAXDispatch:
    """``jax_funcify`` with the lowering ``pick`` chooses for each replaced op type, PyTensor's registry elsewhere."""

    def __init__(self, name: str, pick: Callable[[Replacement], Callable]):
        self.name = name
        self._pick = pick
        self._rebound: weakref.WeakKeyDictionary[FunctionType, FunctionType] = weakref.WeakKeyDictionary()

    def __call__(self, op, node=None, **kwargs: Any) -> Callable:
        return self.recursing_here(self.lowering_for(type(op)))(op, node=node, **kwargs)

    def lowering_for(self, op_type: type) -> Callable:
        """The lowering of ``op_type``: the picked one where the registry holds a replaced or replacing lowering."""
        registered = _jax_registry().dispatch(op_type)
        replaced = next((REPLACED[cls] for cls in op_type.__mro__ if cls in REPLACED), None)
        if replaced is not None and registered in (replaced.stock, replaced.ours):
            return self._pick(replaced)
        # Someone else's lowering (a stock one not replaced, or a library's for its own op subclass).
        return registered

    def stock(self, op_type: type) -> Callable:
        """PyTensor's own lowering of ``op_type``, recursing through this dispatcher."""
        return self.recursing_here(REPLACED[op_type].stock)

    def recursing_here(self, lowering: Callable) -> Callable:
        """``lowering`` with each global name bound to PyTensor's ``jax_funcify`` bound to this dispatcher."""
        if not isinstance(lowering, FunctionType):
            return lowering
        rebound = self._rebound.get(lowering)
        if rebound is None:
            jax_funcify = _jax_registry()
            names = [name for name, value in lowering.__globals__.items() if value is jax_funcify]
            if not names:
                return lowering
            namespace = {**lowering.__globals__, **dict.fromkeys(names, self)}
            rebound = FunctionType(lowering.__code__, namespace, lowering.__name__, lowering.__defaults__, lowering.__closure__)
            rebound.__kwdefaults__ = lowering.__kwdefaults__
            self._rebound[lowering] = rebound
        return rebound

    def __repr__(self) -> str:
        return f"JAXDispatch({self.name!r})"


jax_gpu_funcify = JAXDispatch("gpubackend", lambda replacement: replacement.ours)
"""gpubackend's lowerings (what JAX_GPU uses, and what every gpubackend lowering recurses through)."""

stock_jax_funcify = JAXDispatch("stock", lambda replacement: replacement.stock)
"""PyTensor's own lowerings, whatever the global registry holds (the conformance suite's stock baseline)."""

DISPATCHERS: dict[DispatchName, JAXDispatch] = {"gpubackend": jax_gpu_funcify, "stock": stock_jax_funcify}
