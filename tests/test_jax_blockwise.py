"""Blockwise with length-1-batched inputs: what marginalised models (pymc-extras) generate.

gpubackend's Blockwise lowering reduces an input whose batch dimensions are
all broadcastable to its core value. When that value is concrete (a constant
table), the core function may still index it with the batched, traced indices:
the regression of issue 24 handed it a numpy array there, and numpy's indexing
called ``__array__`` on the tracer (``TracerArrayConversionError``), where the
stock lowering runs. Each graph runs under mode="JAX", JAX_GPU and the
jaxified path under ``jit``, ``vmap`` and ``grad``, against FAST_COMPILE.
"""

from __future__ import annotations

import jax
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import JAX, Mode
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.replace import clone_replace, vectorize_graph
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.link.jax.linker import JAXLinker
from pytensor.tensor.blockwise import Blockwise

TABLE = np.array([[0.5, 2.0, -1.5, 3.0]])


def _table_read_by_batched_index():
    """``table[i] * w`` vectorised over ``i``, with the table a constant of batch shape (1,)."""
    table_core, i, w = (
        pt.vector("table_core", shape=(4,)),
        pt.scalar("i", dtype="int64"),
        pt.scalar("w"),
    )
    core = table_core[i] * w
    indices, weights = pt.vector("indices", dtype="int64"), pt.vector("weights")
    batched = vectorize_graph(core, {table_core: pt.constant(TABLE), i: indices, w: weights})
    return [indices, weights], batched


def _table_read_by_batched_mask():
    """``table[mask].sum()`` vectorised over a batch of constant-length boolean masks."""
    table_core, mask = (
        pt.vector("table_core", shape=(4,)),
        pt.vector("mask", dtype="bool", shape=(4,)),
    )
    core = pt.switch(mask, table_core, 0.0).sum() + table_core[pt.argmax(mask)]
    masks, weights = pt.matrix("masks", dtype="bool", shape=(None, 4)), pt.vector("weights")
    batched = vectorize_graph(core, {table_core: pt.constant(TABLE), mask: masks}) * weights
    return [masks, weights], batched


GRAPHS = {
    "integer index": (
        _table_read_by_batched_index,
        [np.array([0, 3, 1]), np.array([1.0, 2.0, 3.0])],
    ),
    "boolean mask": (
        _table_read_by_batched_mask,
        [np.array([[True, False, True, False], [False, True, True, True]]), np.array([1.0, -1.0])],
    ),
}


def _blockwise_nodes(outputs) -> list:
    fgraph = FunctionGraph(outputs=[outputs], clone=False)
    return [node for node in fgraph.apply_nodes if isinstance(node.op, Blockwise)]


@pytest.fixture(params=sorted(GRAPHS))
def graph(request):
    build, values = GRAPHS[request.param]
    inputs, output = build()
    assert _blockwise_nodes(output), "the graph must hold the Blockwise it tests"
    reference = pytensor.function(inputs, output, mode="FAST_COMPILE")(*values)
    return inputs, output, values, reference


@pytest.mark.parametrize(
    "mode",
    [Mode(JAXLinker(), None), JAX, "JAX_GPU"],
    ids=["JAX unrewritten", "JAX", "JAX_GPU"],
)
def test_a_constant_table_indexed_by_a_batched_index_compiles(graph, mode) -> None:
    inputs, output, values, reference = graph
    fn = pytensor.function(inputs, output, mode=mode)
    np.testing.assert_allclose(np.asarray(fn(*values)), reference, rtol=1e-12)


def test_a_constant_table_indexed_by_a_batched_index_under_jit_vmap_and_grad(graph) -> None:
    """numpyro's and blackjax's path: the unrewritten graph, jax_funcify'd, jitted, vmapped over
    chains and differentiated."""
    inputs, output, values, reference = graph
    graph_fn = jax_funcify(FunctionGraph(inputs, [output.sum()], clone=True))

    def total(weights, first):
        return graph_fn(first, weights)[0]

    first, weights = values
    np.testing.assert_allclose(jax.jit(total)(weights, first), reference.sum(), rtol=1e-12)
    chains = np.stack([weights, 2 * weights])
    np.testing.assert_allclose(
        jax.jit(jax.vmap(total, in_axes=(0, None)))(chains, first),
        [reference.sum(), 2 * reference.sum()],
        rtol=1e-12,
    )
    # The sum is linear in the weights: its gradient is the output at unit weights.
    np.testing.assert_allclose(
        jax.jit(jax.grad(total))(weights, first), reference / weights, rtol=1e-12
    )


def test_a_vectorised_reshape_of_a_shared_length_runs_jaxified() -> None:
    """``arange(2 n).reshape((n, 2))`` vectorised with ``n`` a shared (1,) vector, made a constant
    as ``get_jaxified_graph`` does: the shape vector is a (1, 2) matrix, concrete while tracing.

    Stock refuses the arange while lowering. Ours accepts it, and used to refuse the reshape
    (another error than stock's) because its shape matrix was staged rather than evaluated.
    """
    n_core, w = pt.scalar("n", dtype="int64"), pt.scalar("w")
    length = pytensor.shared(np.array([2]), shape=(1,), name="n")
    weights = pt.vector("weights")
    core = pt.arange(n_core * 2).reshape((n_core, 2)) * w
    batched = vectorize_graph(core, {n_core: length, w: weights})
    constant_length = clone_replace([batched], {length: pt.constant(length.get_value())})
    graph_fn = jax_funcify(FunctionGraph([weights], constant_length, clone=True))
    values = np.array([1.0, -2.0, 0.5])
    reference = pytensor.function([weights], batched, mode="FAST_COMPILE")(values)
    np.testing.assert_array_equal(np.asarray(jax.jit(graph_fn)(values)[0]), reference)
