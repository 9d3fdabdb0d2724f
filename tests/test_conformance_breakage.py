"""The suite catches real breakage: deliberately bad lowerings are reported with the right check.

Each test registers a lowering for a test-only OpFromGraph subclass, runs it
through the same runner as the catalogue, and restores the dispatch afterwards.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import singledispatch

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.graph.rewriting.basic import GraphRewriter, NodeRewriter
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.link.numba.dispatch.basic import numba_funcify, numba_funcify_and_cache_key
from pytensor.tensor.optimize import minimize

from gpubackend.conformance.backends import BACKENDS
from gpubackend.conformance.catalogue import Case, CaseGraph
from gpubackend.conformance.probe import CALL, LINK, RewriteFreeProbe
from gpubackend.conformance.results import FAIL, OBJECT_MODE, UNSUPPORTED
from gpubackend.conformance.runner import prepare, run_on
from gpubackend.devices import DEVICE_ENV_VAR

JAX_DEVICE = os.environ.get(DEVICE_ENV_VAR, "cpu:1")


@contextmanager
def temporary_lowering(
    dispatchers: list[singledispatch], op_type: type, lowering: Callable, base: type = OpFromGraph
) -> Iterator[None]:
    """Register ``lowering`` for ``op_type``; afterwards route ``op_type`` back to ``base``'s
    lowering."""
    originals = [(dispatcher, dispatcher.dispatch(base)) for dispatcher in dispatchers]
    for dispatcher, _ in originals:
        dispatcher.register(op_type, lowering)
    try:
        yield
    finally:
        for dispatcher, original in originals:
            dispatcher.register(op_type, original)


def ofg_case(op_type: type[OpFromGraph], name: str, inplace_opportunity: bool = False) -> Case:
    def build() -> CaseGraph:
        a, b = pt.vector("a"), pt.vector("b")
        op = op_type([a, b], [a * b], inline=False)
        x, y = pt.vector("x"), pt.vector("y")
        x_v, y_v = np.arange(3.0), np.linspace(1.0, 2.0, 3)
        return CaseGraph([x, y], [op(x, y)], [x_v, y_v], [x_v * y_v])

    return Case(name, "breakage", build, inplace_opportunity=inplace_opportunity)


def failed_check_names(result) -> set[str]:
    return {check.name for check in result.checks if not check.ok}


def _nested_ofg_case(inner_type: type[OpFromGraph]) -> Case:
    """``inner_type`` inside a plain OpFromGraph: reachable only through an inner graph."""

    def build() -> CaseGraph:
        a, b = pt.vector("a"), pt.vector("b")
        inner = inner_type([a, b], [a * b], inline=False)
        c, d = pt.vector("c"), pt.vector("d")
        outer = OpFromGraph([c, d], [inner(c, d) - d], inline=False)
        x, y = pt.vector("x"), pt.vector("y")
        x_v, y_v = np.arange(3.0), np.linspace(1.0, 2.0, 3)
        return CaseGraph([x, y], [outer(x, y)], [x_v, y_v], [x_v * y_v - y_v])

    return Case("nested_mutated_ofg", "breakage", build)


@pytest.mark.parametrize("nested", [False, True], ids=["top-level", "nested"])
def test_a_lowering_that_mutates_the_canonical_graph_fails_canonical_intact(nested):
    class MutatedOFG(OpFromGraph):
        pass

    stock = jax_funcify.dispatch(OpFromGraph)

    def mutating_lowering(op, node=None, **kwargs):
        # The anti-pattern: "fix up" the op's own inner graph instead of baking a new op.
        inner = op.fgraph.unfreeze()
        out = inner.outputs[0]
        inner.replace(out, out + 0.0, import_missing=True)
        op.fgraph = inner.freeze()
        return stock(op, node=node, **kwargs)

    case = _nested_ofg_case(MutatedOFG) if nested else ofg_case(MutatedOFG, "mutated_ofg")
    with temporary_lowering([jax_funcify], MutatedOFG, mutating_lowering):
        result = run_on(prepare(case), BACKENDS["jax"], JAX_DEVICE)
    assert result.status == FAIL
    assert "canonical_intact" in failed_check_names(result)
    assert jax_funcify.dispatch(MutatedOFG) is stock


def _rewriting_lowering(stock: Callable) -> Callable:
    def rewriting_lowering(op, node=None, **kwargs):
        # The anti-pattern: optimise and compile the inner graph while linking.
        inner = op.fgraph.unfreeze()
        rewrite_graph(inner, include=("canonicalize",))
        pytensor.function(list(inner.inputs), list(inner.outputs), mode="FAST_COMPILE")
        return stock(op, node=node, **kwargs)

    return rewriting_lowering


def test_a_jax_lowering_that_rewrites_at_link_time_fails_rewrite_free():
    class RewritingOFG(OpFromGraph):
        pass

    stock = jax_funcify.dispatch(OpFromGraph)
    with temporary_lowering([jax_funcify], RewritingOFG, _rewriting_lowering(stock)):
        result = run_on(
            prepare(ofg_case(RewritingOFG, "rewriting_ofg")), BACKENDS["jax"], JAX_DEVICE
        )
    assert result.status == FAIL
    assert failed_check_names(result) == {"rewrite_free"}
    detail = next(check.detail for check in result.checks if check.name == "rewrite_free")
    assert detail.startswith("link:") and "link: 0 rewriter runs, 0 nested" not in detail


def test_a_numba_lowering_that_rewrites_at_link_time_fails_rewrite_free():
    class RewritingOFG(OpFromGraph):
        pass

    stock_with_key = numba_funcify_and_cache_key.dispatch(OpFromGraph)
    stock = numba_funcify.dispatch(OpFromGraph)
    with (
        temporary_lowering(
            [numba_funcify_and_cache_key], RewritingOFG, _rewriting_lowering(stock_with_key)
        ),
        temporary_lowering([numba_funcify], RewritingOFG, _rewriting_lowering(stock)),
    ):
        result = run_on(
            prepare(ofg_case(RewritingOFG, "rewriting_ofg_numba")), BACKENDS["numba"], "cpu"
        )
    assert result.status == FAIL
    assert "rewrite_free" in failed_check_names(result)
    assert numba_funcify_and_cache_key.dispatch(RewritingOFG) is stock_with_key


def test_numba_baked_check_fails_when_promised_inplace_is_not_baked():
    # a * b reads only the op's own inputs, which are never destroyable: no inplace can be baked.
    result = run_on(
        prepare(ofg_case(OpFromGraph, "no_inplace_possible", inplace_opportunity=True)),
        BACKENDS["numba"],
        "cpu",
    )
    assert failed_check_names(result) == {"baked"}


def test_resident_check_fails_for_a_backend_that_transfers_on_every_call():
    stock_claiming_residency = dataclasses.replace(BACKENDS["jax-stock"], device_resident=True)
    result = run_on(
        prepare(ofg_case(OpFromGraph, "stock_transfers")), stock_claiming_residency, JAX_DEVICE
    )
    assert failed_check_names(result) == {"resident"}


def test_probe_counts_only_inside_phases_and_restores_entry_points():
    originals = {
        "rewrite": GraphRewriter.__dict__["rewrite"],
        "transform": NodeRewriter.__dict__.get("transform"),
    }
    x = pt.vector("x")
    probe = RewriteFreeProbe()
    with probe.installed():
        pytensor.function([x], x * 2, mode="FAST_COMPILE")
        with probe.phase(CALL):
            pytensor.function([x], x + 1, mode="FAST_COMPILE")
    assert probe.counts[LINK].clean
    assert probe.counts[CALL].compilations == 1 and probe.counts[CALL].rewrites > 0
    assert GraphRewriter.__dict__["rewrite"] is originals["rewrite"]
    assert NodeRewriter.__dict__.get("transform") is originals["transform"]


@pytest.mark.parametrize("raise_inside", [True, False])
def test_probe_restores_entry_points_even_when_the_check_raises(raise_inside):
    from pytensor.compile.maker import FunctionMaker

    create = FunctionMaker.__dict__["create"]
    with pytest.raises(RuntimeError) if raise_inside else _no_error():
        with RewriteFreeProbe().installed():
            assert FunctionMaker.__dict__["create"] is not create
            if raise_inside:
                raise RuntimeError("boom")
    assert FunctionMaker.__dict__["create"] is create


@contextmanager
def _no_error() -> Iterator[None]:
    yield


def _minimize_case(method: str, **optimizer_kwargs) -> Case:
    def build() -> CaseGraph:
        x, a = pt.vector("x"), pt.scalar("a")
        solution, _ = minimize(
            ((x - a) ** 2).sum(), x, method=method, optimizer_kwargs=optimizer_kwargs
        )
        return CaseGraph(
            [x, a],
            [solution],
            [np.zeros(2), np.array(0.5)],
            [np.full(2, 0.5)],
            rtol=1e-4,
            atol=1e-6,
        )

    return Case(f"minimize_{method.lower()}", "status", build)


def test_a_numba_object_mode_fallback_is_reported_as_object_mode_not_pass():
    # BFGS's norm other than inf has no native solver.
    case = _minimize_case("BFGS", options={"norm": 2})
    result = run_on(prepare(case), BACKENDS["numba"], "cpu")
    assert result.status == OBJECT_MODE, result.detail
    assert "BFGS" in result.detail


def test_an_option_jax_refuses_is_reported_as_unsupported():
    # JAX lowers every minimize method; it refuses Powell's `direc` by name (UnsupportedOption).
    case = _minimize_case("Powell", options={"direc": np.eye(2)})
    result = run_on(prepare(case), BACKENDS["jax"], JAX_DEVICE)
    assert result.status == UNSUPPORTED, result.detail
    assert "direc" in result.detail
