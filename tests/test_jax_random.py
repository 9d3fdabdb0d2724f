"""Random variables under JAX keep their graph types inside the graph, not only at its outputs.

PyTensor's JAX Bernoulli returns a bool array for its int64 draws. Inside a
graph JAX then reads it as a mask: ``sigma[is_outlier]`` selects instead of
gathering (pymc-extras' ``test_forward_after_sampling`` stopped at
`BooleanMaskLengthError` under ``mode=JAX``), and ``b + b`` is a logical or
(silently 1 where the reference gives 2). gpubackend's graph lowering returns an
integer-typed output that a lowering gives as bool as its integer type.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytensor.tensor.random.basic as ptr
import pytest

from tests.jax_lowering_harness import JAX_MODES

SIGMA = np.array([0.5, 2.0])


@pytest.mark.parametrize("mode", JAX_MODES)
def test_bernoulli_draws_are_integers_inside_the_graph(mode):
    rng = pytensor.shared(np.random.default_rng(0))
    draws = ptr.bernoulli(0.5, size=1000, rng=rng)
    gathered = pt.constant(SIGMA)[draws]
    fn = pytensor.function([], [(draws + draws).max(), gathered, draws], mode=mode)
    twice_max, gathered_value, draws_value = (np.asarray(value) for value in fn())
    # 1000 fair draws hold a 1 (the probability of none is 2**-1000): 1 + 1 is 2.
    assert twice_max == 2
    assert gathered_value.shape == (1000,)
    np.testing.assert_array_equal(gathered_value, SIGMA[draws_value])
    assert draws_value.dtype == np.int64
