"""Shared checks for the JAX lowering tests: reference comparison and the rewrite-free contract.

`compile_checked` compiles a graph under a JAX mode while observing PyTensor:
during linking (`FunctionMaker.create`, after the rewrites) and during two calls it counts every rewriter pass, every
`FunctionGraph` built, and every nested ``pytensor.function`` / `FunctionMaker`;
all must stay at zero. It also snapshots every canonical inner-graph op of the
user's graph and checks, after the calls, that each is the same object holding
the same frozen graph. The wrappers only observe and are removed afterwards.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
import pytensor
from pytensor.compile import maker as function_maker
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import GraphRewriter, NodeRewriter
from pytensor.graph.traversal import ancestors

JAX_MODES = ("JAX", "JAX_GPU")
REFERENCE_MODE = "FAST_COMPILE"


class _Observer:
    """Counts calls to PyTensor's rewrite/compile entry points while armed."""

    ENTRY_POINTS = (
        (GraphRewriter, "rewrite"),
        (NodeRewriter, "transform"),
        (FunctionGraph, "__init__"),
        (function_maker.FunctionMaker, "__init__"),
    )

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.armed = False

    def _counting(self, owner, name, original):
        observer = self

        def counted(*args, **kwargs):
            if observer.armed:
                observer.calls[f"{owner.__name__}.{name}"] += 1
            return original(*args, **kwargs)

        return counted

    @contextlib.contextmanager
    def installed(self) -> Iterator[_Observer]:
        originals = [(owner, name, owner.__dict__[name]) for owner, name in self.ENTRY_POINTS]
        original_create = function_maker.FunctionMaker.create
        original_function = pytensor.function
        observer = self

        def observed_create(maker, *args, **kwargs):
            with observer.arm():
                return original_create(maker, *args, **kwargs)

        def observed_function(*args, **kwargs):
            if observer.armed:
                observer.calls["pytensor.function"] += 1
            return original_function(*args, **kwargs)

        try:
            for owner, name, original in originals:
                setattr(owner, name, self._counting(owner, name, original))
            function_maker.FunctionMaker.create = observed_create
            pytensor.function = observed_function
            yield self
        finally:
            for owner, name, original in originals:
                setattr(owner, name, original)
            function_maker.FunctionMaker.create = original_create
            pytensor.function = original_function

    @contextlib.contextmanager
    def arm(self) -> Iterator[None]:
        previous, self.armed = self.armed, True
        try:
            yield
        finally:
            self.armed = previous


def _inner_graph_ops(outputs: Sequence[Variable]) -> list:
    ops = []
    for variable in ancestors(outputs):
        if variable.owner is None:
            continue
        op = variable.owner.op
        for candidate in (op, getattr(op, "core_op", None), getattr(op, "scalar_op", None)):
            if candidate is not None and hasattr(candidate, "fgraph") and candidate not in ops:
                ops.append(candidate)
    return ops


def _frozen_snapshot(fgraph) -> tuple:
    return tuple(
        (node, tuple(node.inputs), tuple(sorted(getattr(node.op, "destroy_map", {}).items())))
        for node in fgraph.toposort()
    )


def compile_checked(inputs, outputs, values, mode: str, **function_kwargs):
    """Compile under ``mode``, call twice, check the contract, return the second call's outputs."""
    canonical = [(op, op.fgraph, _frozen_snapshot(op.fgraph)) for op in _inner_graph_ops(outputs)]
    observer = _Observer()
    with observer.installed():
        fn = pytensor.function(inputs, outputs, mode=mode, **function_kwargs)
        with observer.arm():
            fn(*values)
            result = fn(*values)
    assert not observer.calls, f"rewriting or compiling during link/call: {dict(observer.calls)}"
    for op, fgraph, snapshot in canonical:
        assert op.fgraph is fgraph, f"{op} got a new inner graph"
        assert _frozen_snapshot(op.fgraph) == snapshot, f"{op}'s inner graph changed"
    assert _inner_graph_ops(outputs) == [op for op, _, _ in canonical], "the user's graph changed"
    return result


def reference(inputs, outputs, values):
    return pytensor.function(inputs, outputs, mode=REFERENCE_MODE)(*values)


def assert_matches_reference(inputs, outputs, values, mode: str, rtol: float = 1e-6, atol: float = 0.0):
    """The ``mode`` result of the graph equals the FAST_COMPILE (Python) one."""
    expected = reference(inputs, outputs, values)
    actual = compile_checked(inputs, outputs, values, mode)
    for position, (want, got) in enumerate(zip(expected, actual, strict=True)):
        np.testing.assert_allclose(
            np.asarray(got), np.asarray(want), rtol=rtol, atol=atol, err_msg=f"output {position} under {mode}"
        )
    return actual
