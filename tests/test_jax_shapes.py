"""Shape arithmetic under JAX and JAX_GPU: evaluated while tracing, so shapes and assertions are
concrete."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph

# Not Assert: importing pymc.sampling.jax registers a pass-through JAX lowering for
# Assert (and tests share a process with the PyMC tests); CheckAndRaise is PyTensor's own.
from pytensor.raise_op import CheckAndRaise

from gpubackend import ShapeMismatchError
from tests.jax_lowering_harness import JAX_MODES, assert_matches_reference


@pytest.mark.parametrize("mode", JAX_MODES)
def test_arange_reshape_and_alloc_from_shape_arithmetic(mode):
    x = pt.vector("x")
    half = (x.shape[0] + 1) // 2
    outputs = [
        pt.arange(half) * x[:half],
        x[: 2 * (x.shape[0] // 2)].reshape((x.shape[0] // 2, 2)),
        pt.zeros((half, 3)) + x.sum(),
    ]
    for size in (4, 6):
        assert_matches_reference([x], outputs, [np.linspace(0.0, 1.0, size)], mode)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_shape_assertion_is_checked_when_traced(mode):
    x = pt.vector("x")
    checked = CheckAndRaise(AssertionError, "x must have 3 entries")(x, pt.eq(x.shape[0], 3))
    fn = pytensor.function([x], checked * 2, mode=mode)
    np.testing.assert_allclose(np.asarray(fn(np.ones(3))), 2 * np.ones(3))
    with pytest.raises(AssertionError, match="x must have 3 entries"):
        fn(np.ones(4))


@pytest.mark.parametrize("mode", JAX_MODES)
def test_specify_shape_at_a_length_evaluated_while_tracing(mode):
    # Before: TracerBoolConversionError (stock JAX too): the length, a concrete jax.Array, was
    # compared with x's inside jit, which staged the comparison. A graph inside an OpFromGraph
    # (or an optimize op's objective) keeps such a length from rewrites.
    inner_x, inner_sizes = pt.dvector("inner_x"), pt.lvector("inner_sizes")
    specified = OpFromGraph(
        [inner_x, inner_sizes], [pt.specify_shape(inner_x, (inner_sizes[0],)) * 2]
    )
    x, y = pt.dvector("x"), pt.dvector("y")
    out = specified(y, pt.stack([x.shape[0]]))
    assert_matches_reference([x, y], [out], [np.ones(3), np.linspace(0, 1, 3)], mode)
    with pytest.raises(ShapeMismatchError, match=r"has shape \(3,\), expected \(2,\)"):
        pytensor.function([x, y], out, mode=mode)(np.ones(2), np.ones(3))


def _reference_error(inputs, outputs, values) -> type[BaseException]:
    with pytest.raises(Exception) as reference:
        pytensor.function(inputs, outputs, mode="FAST_COMPILE")(*values)
    return reference.type


@pytest.mark.parametrize("mode", JAX_MODES)
def test_specify_shape_mismatch_raises_the_references_error_type(mode):
    # Before: stock's ValueError("Invalid shape ..."), where the reference raises AssertionError.
    x = pt.vector("x")
    out = pt.specify_shape(x, (3,)) * 2
    assert_matches_reference([x], [out], [np.ones(3)], mode)
    reference_error = _reference_error([x], [out], [np.ones(2)])
    with pytest.raises(reference_error, match=r"SpecifyShape: x has shape \(2,\), expected \(3,\)"):
        pytensor.function([x], out, mode=mode)(np.ones(2))
    # Stock's error type too: code catching stock's ValueError still catches it.
    with pytest.raises(ValueError):
        pytensor.function([x], out, mode=mode)(np.ones(2))


def test_specify_shape_of_a_run_time_length_is_checked_at_run_time_on_jax_gpu():
    # Before: TracerBoolConversionError while tracing, whatever the length (stock mode="JAX" keeps
    # it: a run-time check there would cost a host callback).
    x, n = pt.vector("x"), pt.scalar("n", dtype="int64")
    out = pt.specify_shape(x, (n,)) * 2
    assert_matches_reference([x, n], [out], [np.ones(3), np.asarray(3)], "JAX_GPU")
    reference_error = _reference_error([x, n], [out], [np.ones(2), np.asarray(3)])
    fn = pytensor.function([x, n], out, mode="JAX_GPU")
    with pytest.raises(
        reference_error, match=r"the shape of x differs from the one specified, \(n\)"
    ):
        fn(np.ones(2), np.asarray(3))
    with pytest.raises(ShapeMismatchError):
        fn(np.ones(3), np.asarray(2))
