"""The contract observer used by the JAX lowering tests can fail: it sees what it must forbid."""

import pytensor
import pytensor.tensor as pt
import pytest

from tests.jax_lowering_harness import _Observer, compile_checked


def test_observer_counts_a_compile_while_armed_and_restores_pytensor():
    original_function = pytensor.function
    x = pt.vector("x")
    with _Observer().installed() as observer:
        pytensor.function([x], x + 1, mode="FAST_COMPILE")
        assert not observer.calls
        with observer.arm():
            pytensor.function([x], x + 1, mode="FAST_COMPILE")
    assert observer.calls["pytensor.function"] == 1
    assert observer.calls["FunctionMaker.__init__"] == 1
    assert observer.calls["GraphRewriter.rewrite"] > 0
    assert pytensor.function is original_function


def test_compile_checked_rejects_a_lowering_that_compiles_while_linking():
    # The stock perform path of the optimize ops compiles its inner function
    # while linking (prepare_node); that is exactly what the check forbids.
    from pytensor.tensor.optimize import minimize

    x, a = pt.vector("x"), pt.vector("a")
    solution, _ = minimize(((x - a) ** 2).sum(), x)
    with pytest.raises(AssertionError, match="rewriting or compiling during link/call"):
        compile_checked([x, a], [solution], [[0.0], [1.0]], "FAST_COMPILE")
