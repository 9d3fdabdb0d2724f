"""The contract observer used by the JAX lowering tests can fail: it sees what it must forbid."""

import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.graph.fg import FunctionGraph

from gpubackend.conformance.probe import CALL, RewriteFreeProbe
from tests.jax_lowering_harness import compile_checked


def test_probe_counts_compiles_rewrites_and_graphs_only_in_a_phase_and_restores_pytensor():
    original_init = FunctionGraph.__init__
    x = pt.vector("x")
    probe = RewriteFreeProbe()
    with probe.installed():
        pytensor.function([x], x + 1, mode="FAST_COMPILE")
        assert probe.counts[CALL].clean
        with probe.phase(CALL):
            pytensor.function([x], x + 1, mode="FAST_COMPILE")
    counts = probe.counts[CALL]
    assert counts.compilations == 1
    assert counts.rewrites > 0
    assert counts.graphs_built > 0
    assert FunctionGraph.__init__ is original_init


def test_compile_checked_rejects_a_lowering_that_compiles_while_linking():
    # The stock perform path of the optimize ops compiles its inner function
    # while linking (prepare_node); that is exactly what the check forbids.
    from pytensor.tensor.optimize import minimize

    x, a = pt.vector("x"), pt.vector("a")
    solution, _ = minimize(((x - a) ** 2).sum(), x)
    with pytest.raises(AssertionError, match="rewriting or compiling during link/call"):
        compile_checked([x, a], [solution], [[0.0], [1.0]], "FAST_COMPILE")


def _doubling() -> OpFromGraph:
    x = pt.vector("x")
    return OpFromGraph([x], [x * 2])


def _replace_inner_graph(op, outputs):
    op.fgraph = _doubling().fgraph


def _replace_op(op, outputs):
    outputs[0].owner.op = _doubling()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (_replace_inner_graph, "inner graph 'fgraph' was replaced"),
        (_replace_op, "reachable inner-graph ops changed"),
    ],
    ids=["inner-graph-replaced", "op-replaced"],
)
def test_compile_checked_rejects_a_compile_that_changes_a_canonical_op(
    monkeypatch, mutate, message
):
    x = pt.vector("x")
    op = _doubling()
    outputs = [op(x)]
    compile_function = pytensor.function

    def compile_then_mutate(*args, **kwargs):
        fn = compile_function(*args, **kwargs)
        mutate(op, outputs)
        return fn

    monkeypatch.setattr(pytensor, "function", compile_then_mutate)
    with pytest.raises(AssertionError, match=f"the user's graph changed: .*{message}"):
        compile_checked([x], outputs, [[1.0]], "JAX")
