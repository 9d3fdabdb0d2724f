"""Integer-array indices out of range under NUMBA: the reference's ``IndexError``, not a read or a
write past the array.

PyTensor's Numba lowering of integer-array indexing compiles without bounds
checks: with ``x`` of length 3, ``x[[0, 5]]`` read memory past ``x`` (``[0,
5.3e-315]``) and ``inc_subtensor(x[[0, 5]], 1)`` wrote past it without error,
as did the reads and writes that ``FusedElemwise`` fuses into its loop
(``x[idx].sum()``). gpubackend's lowerings check each index first.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from gpubackend.dispatch.numba.subtensor import _index_checks

x = pt.vector("x")
X = pt.matrix("X")
idx = pt.lvector("idx")
jdx = pt.lvector("jdx")
X_VALUE = np.arange(12.0).reshape(3, 4)

# name: (inputs, output, bad index values, good index values); x has length 3, X shape (3, 4).
GRAPHS = {
    "x[idx]": ([x, idx], x[idx], [[0, 5], [-4]], [[0, 2], [-3, -1]]),
    "x[idx].sum(), fused": ([x, idx], x[idx].sum(), [[0, 5], [-4]], [[0, 2, 2], [-3]]),
    "exp(x[idx]) * 2, fused": ([x, idx], pt.exp(x[idx]) * 2, [[3]], [[1, 0]]),
    "inc_subtensor(x[idx], 1)": ([x, idx], pt.inc_subtensor(x[idx], 1.0), [[0, 5]], [[0, 0]]),
    "set_subtensor(x[idx], 9)": ([x, idx], pt.set_subtensor(x[idx], 9.0), [[-4]], [[-1, 1]]),
    "X[idx, jdx]": ([X, idx, jdx], X[idx, jdx], [([0], [4]), ([3], [0])], [([0, 2], [3, -4])]),
    "X[:, jdx]": ([X, jdx], X[:, jdx], [[4]], [[0, 3]]),
    "scan body x[idx]": (
        [x, idx],
        pytensor.scan(
            lambda step, x, idx: x[idx].sum() + step,
            sequences=[pt.arange(2.0)],
            non_sequences=[x, idx],
            return_updates=False,
        ).sum(),
        [[0, 5]],
        [[1, 2]],
    ),
}


def _arguments(inputs, indices) -> list[np.ndarray]:
    array = X_VALUE if inputs[0] is X else np.arange(3.0)
    index_values = indices if isinstance(indices, tuple) else (indices,)
    return [array, *(np.asarray(value, dtype="int64") for value in index_values)]


@pytest.mark.parametrize("name", list(GRAPHS))
def test_out_of_range_raises_the_references_error_and_in_range_gives_its_values(name):
    inputs, output, bad, good = GRAPHS[name]
    reference = pytensor.function(inputs, output, mode="FAST_COMPILE")
    numba = pytensor.function(inputs, output, mode="NUMBA")
    for indices in bad:
        arguments = _arguments(inputs, indices)
        with pytest.raises(IndexError):
            reference(*arguments)
        with pytest.raises(IndexError, match="out of bounds for axis"):
            numba(*arguments)
    for indices in good:
        arguments = _arguments(inputs, indices)
        np.testing.assert_array_equal(numba(*arguments), reference(*arguments))


xs = pt.tensor("xs", shape=(3,), dtype="float64")
# Issue 43: constant integer-array indices (`take` of a literal) were not checked either.
LITERAL_INDICES = {
    "take(x, 9)": ([x], pt.take(x, 9)),
    "take(x, -4)": ([x], pt.take(x, -4)),
    "take(xs, 9), static shape": ([xs], pt.take(xs, 9)),
    "(take(x, 9) + x).sum()": ([x], (pt.take(x, 9) + x).sum()),
    "inc_subtensor(x[[5]], 1)": ([x], pt.inc_subtensor(x[[5]], 1.0)),
}


@pytest.mark.parametrize("name", list(LITERAL_INDICES))
def test_a_literal_index_out_of_range_raises_the_references_error(name):
    inputs, output = LITERAL_INDICES[name]
    with pytest.raises(IndexError):
        pytensor.function(inputs, output, mode="FAST_COMPILE")(np.arange(3.0))
    with pytest.raises(IndexError, match="out of bounds for axis 0"):
        pytensor.function(inputs, output, mode="NUMBA")(np.arange(3.0))


def test_a_literal_index_proven_in_range_is_not_checked():
    fn = pytensor.function([xs], pt.take(xs, -3), mode="NUMBA")
    np.testing.assert_array_equal(fn(np.arange(3.0)), 0.0)
    [node] = fn.maker.fgraph.apply_nodes
    assert not _index_checks(node)


def test_the_no_step_wrapper_is_jitted_through_pytensors_numba_njit(monkeypatch):
    """The Scan wrapper jits through ``pytensor.link.numba.dispatch.basic.numba_njit``, as
    PyTensor's own Scan lowering does: PyTensor's tests run the lowerings as plain Python by
    replacing it there, and a wrapper that had imported it by name stayed jitted around a plain
    Python Scan (a typing error in two of PyTensor's own Scan tests)."""
    from pytensor.graph.fg import FunctionGraph
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch import numba_funcify
    from pytensor.scan.op import Scan

    jitted = []
    original = numba_basic.numba_njit

    def recording(fn, *args, **kwargs):
        jitted.append(fn.__name__)
        return original(fn, *args, **kwargs)

    monkeypatch.setattr(numba_basic, "numba_njit", recording)
    steps = pt.lscalar("steps")
    start = pt.scalar("start")
    _, doubled = pytensor.scan(
        lambda total: (total + 1.0, total * 2.0),
        outputs_info=[start, None],
        n_steps=steps,
        return_updates=False,
    )
    graph = FunctionGraph([steps, start], [doubled], clone=False)
    (node,) = [node for node in graph.toposort() if isinstance(node.op, Scan)]
    numba_funcify(node.op, node=node)
    assert "scan_without_steps" in jitted
