"""ScalarLoop under JAX and JAX_GPU: for-loops, until-loops, and the gammainc gradients built on
them."""

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from pytensor.scalar.loop import ScalarLoop
from pytensor.tensor.elemwise import Elemwise

from tests.jax_lowering_harness import JAX_MODES, assert_matches_reference


@pytest.mark.parametrize("mode", JAX_MODES)
def test_for_and_while_scalar_loops_in_elemwise(mode):
    state, rate = ps.float64("state"), ps.float64("rate")
    affine = ScalarLoop(init=[state], update=[state * rate + 1.0], constant=[rate])
    doubling = ps.float64("doubling")
    until_ten = ScalarLoop(init=[doubling], update=[doubling * 2.0], until=doubling * 2.0 > 10.0)
    n_steps, x0, r = pt.lscalar("n_steps"), pt.vector("x0"), pt.vector("r")
    final, done = Elemwise(until_ten)(n_steps, x0)
    outputs = [Elemwise(affine)(n_steps, x0, r), final, done]
    for steps in (7, 2):
        values = [
            np.asarray(steps),
            np.array([0.3, 1.0, 4.0, 20.0]),
            np.array([0.1, 0.2, 0.3, 0.4]),
        ]
        assert_matches_reference([n_steps, x0, r], outputs, values, mode)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_gammainc_gradients(mode):
    k, x = pt.vector("k"), pt.vector("x")
    grads = [
        *pytensor.grad(pt.gammainc(k, x).sum(), [k, x]),
        *pytensor.grad(pt.gammaincc(k, x).sum(), [k, x]),
        pytensor.grad(pt.betainc(k, x, 0.4).sum(), k),
    ]
    values = [np.array([0.5, 1.5, 3.0]), np.array([0.7, 2.0, 1.2])]
    assert_matches_reference([k, x], grads, values, mode, rtol=1e-6)
