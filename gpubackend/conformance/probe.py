"""Observe rewriter runs, graphs built and nested function compilations while linking and calling.

The probe wraps PyTensor entry points only inside `RewriteFreeProbe.installed`
and restores the originals on exit, whatever happens. It only counts; it never
changes what the wrapped functions do. Optimisation of the function under test
(where baking happens) is not counted: counting starts when that function's
`FunctionMaker.create` links it, and again around each call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FunctionType
from typing import Any

from pytensor.compile.maker import FunctionMaker
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import GraphRewriter, NodeRewriter

LINK = "link"
CALL = "call"

_REWRITER_METHODS = ((GraphRewriter, ("rewrite", "apply")), (NodeRewriter, ("transform",)))


@dataclass
class PhaseCounts:
    rewrites: int = 0
    compilations: int = 0
    graphs_built: int = 0
    rewriter_names: list[str] = field(default_factory=list)
    compiled_makers: set[int] = field(default_factory=set, repr=False)

    @property
    def clean(self) -> bool:
        return self.rewrites == 0 and self.compilations == 0 and self.graphs_built == 0

    def describe(self) -> str:
        text = (
            f"{self.rewrites} rewriter runs, {self.compilations} "
            f"nested compilations, {self.graphs_built} FunctionGraphs built"
        )
        if self.rewriter_names:
            text += f" (e.g. {', '.join(sorted(set(self.rewriter_names))[:3])})"
        return text


def _subclasses[T](cls: type[T]) -> Iterator[type[T]]:
    yield cls
    for subclass in cls.__subclasses__():
        yield from _subclasses(subclass)


class RewriteFreeProbe:
    """Counts, per phase, rewriter invocations, `FunctionGraph`s built and `FunctionMaker`s built or
    created."""

    def __init__(self) -> None:
        self.counts = {LINK: PhaseCounts(), CALL: PhaseCounts()}
        self._phase: str | None = None
        self._outer_maker: FunctionMaker | None = None
        self._armed = False

    @contextmanager
    def installed(self) -> Iterator[RewriteFreeProbe]:
        originals: list[tuple[type, str, Any]] = []
        try:
            for base, names in _REWRITER_METHODS:
                for cls in set(_subclasses(base)):
                    for name in names:
                        method = cls.__dict__.get(name)
                        if isinstance(method, FunctionType):
                            originals.append((cls, name, method))
                            setattr(cls, name, self._counting_rewriter(method, cls.__name__))
            for name, wrap in (
                ("__init__", self._watching_init),
                ("create", self._watching_create),
            ):
                method = FunctionMaker.__dict__[name]
                originals.append((FunctionMaker, name, method))
                setattr(FunctionMaker, name, wrap(method))
            graph_init = FunctionGraph.__dict__["__init__"]
            originals.append((FunctionGraph, "__init__", graph_init))
            FunctionGraph.__init__ = self._counting_graph_init(graph_init)
            yield self
        finally:
            for cls, name, method in reversed(originals):
                setattr(cls, name, method)

    def compile(self, build: Callable[[], Any]) -> Any:
        """Run ``build`` (a `pytensor.function` call); count inside its link step only."""
        self._armed = True
        try:
            return build()
        finally:
            self._armed = False
            self._outer_maker = None

    @contextmanager
    def phase(self, name: str) -> Iterator[PhaseCounts]:
        previous, self._phase = self._phase, name
        try:
            yield self.counts[name]
        finally:
            self._phase = previous

    def _counting_rewriter(self, method: FunctionType, owner: str) -> Callable:
        @functools.wraps(method)
        def counted(rewriter, *args, **kwargs):
            if self._phase is not None:
                counts = self.counts[self._phase]
                counts.rewrites += 1
                counts.rewriter_names.append(getattr(rewriter, "name", None) or owner)
            return method(rewriter, *args, **kwargs)

        return counted

    def _counting_graph_init(self, method: FunctionType) -> Callable:
        @functools.wraps(method)
        def init(graph, *args, **kwargs):
            if self._phase is not None:
                self.counts[self._phase].graphs_built += 1
            return method(graph, *args, **kwargs)

        return init

    def _count_compilation(self, maker: FunctionMaker) -> None:
        if self._phase is not None:
            counts = self.counts[self._phase]
            if id(maker) not in counts.compiled_makers:
                counts.compiled_makers.add(id(maker))
                counts.compilations += 1

    def _watching_init(self, method: FunctionType) -> Callable:
        @functools.wraps(method)
        def init(maker, *args, **kwargs):
            if self._armed and self._outer_maker is None and self._phase is None:
                self._outer_maker = maker
            else:
                self._count_compilation(maker)
            return method(maker, *args, **kwargs)

        return init

    def _watching_create(self, method: FunctionType) -> Callable:
        @functools.wraps(method)
        def create(maker, *args, **kwargs):
            if maker is self._outer_maker and self._phase is None:
                with self.phase(LINK):
                    return method(maker, *args, **kwargs)
            self._count_compilation(maker)
            return method(maker, *args, **kwargs)

        return create
