"""Shape arithmetic under JAX and JAX_GPU: evaluated while tracing, so shapes and assertions are
concrete."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

# Not Assert: importing pymc.sampling.jax registers a pass-through JAX lowering for
# Assert (and tests share a process with the PyMC tests); CheckAndRaise is PyTensor's own.
from pytensor.raise_op import CheckAndRaise

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
