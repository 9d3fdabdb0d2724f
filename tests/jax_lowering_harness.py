"""Shared checks for the JAX lowering tests: reference comparison and the rewrite-free contract.

`compile_checked` compiles a graph under a JAX mode while the conformance
suite's `RewriteFreeProbe` observes PyTensor: during linking (after the
rewrites) and during two calls, every rewriter pass, every `FunctionGraph`
built and every nested ``pytensor.function`` / `FunctionMaker` must stay at
zero. It also snapshots every canonical inner-graph op of the user's graph and
checks, after the calls, that each is the same object holding the same frozen
graph.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytensor
from pytensor.graph.basic import Variable
from pytensor.graph.traversal import ancestors

from gpubackend.conformance.probe import CALL, LINK, RewriteFreeProbe

JAX_MODES = ("JAX", "JAX_GPU")
REFERENCE_MODE = "FAST_COMPILE"


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
    probe = RewriteFreeProbe()
    with probe.installed():
        fn = probe.compile(lambda: pytensor.function(inputs, outputs, mode=mode, **function_kwargs))
        with probe.phase(CALL):
            fn(*values)
            result = fn(*values)
    assert probe.counts[LINK].clean and probe.counts[CALL].clean, (
        f"rewriting or compiling during link/call: link: {probe.counts[LINK].describe()}; calls: {probe.counts[CALL].describe()}"
    )
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
