"""OpFromGraph and Composite under JAX and JAX_GPU: one lowering per distinct op, nesting,
gradients."""

from unittest import mock

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.tensor.elemwise import Elemwise

from gpubackend.dispatch.jax import ofg as jax_ofg
from tests.jax_lowering_harness import JAX_MODES, assert_matches_reference


@pytest.mark.parametrize("mode", JAX_MODES)
def test_ofg_with_many_call_sites_is_funcified_once(mode):
    a, b = pt.vector("a"), pt.vector("b")
    step = OpFromGraph([a, b], [pt.sin(a) + 0.5 * b, a * b], inline=False, name="step")
    start_x, start_y = pt.vector("x"), pt.vector("y")
    x, y = start_x, start_y
    for _ in range(30):
        x, y = step(x, y)
    inner_lowerings = []
    original = jax_ofg.jax_funcify

    def counting_funcify(obj, *args, **kwargs):
        inner_lowerings.append(obj)
        return original(obj, *args, **kwargs)

    with mock.patch.object(jax_ofg, "jax_funcify", counting_funcify):
        values = [np.linspace(-1, 1, 4), np.linspace(0, 1, 4)]
        assert_matches_reference(
            [start_x, start_y], [x, y, pytensor.grad((x * y).sum(), start_x)], values, mode
        )
    # The compiled graph calls the (baked) step op and its pullback op 30 times each.
    assert len(inner_lowerings) == len({id(fgraph) for fgraph in inner_lowerings}) == 2


@pytest.mark.parametrize("mode", JAX_MODES)
def test_nested_ofgs_and_explicit_composite(mode):
    x, y = pt.vector("x"), pt.vector("y")
    inner = OpFromGraph([x, y], [x * y + pt.exp(x)], inline=False, name="inner")
    outer = OpFromGraph([x, y], [inner(x, y) * 2 - y, inner(y, x)], inline=False, name="outer")
    s, t = ps.float64("s"), ps.float64("t")
    composite = Elemwise(ps.Composite([s, t], [ps.exp(s) * t + ps.sin(s)]))
    first, second = outer(x, y)
    outputs = [first, second, composite(x, y), pytensor.grad((first * second).sum(), [x, y])[0]]
    assert_matches_reference(
        [x, y], outputs, [np.array([0.1, 0.5, -0.3]), np.array([1.0, 2.0, -1.0])], mode
    )


@pytest.mark.parametrize("mode", JAX_MODES)
def test_gradient_rederived_after_compiling_and_calling(mode):
    from pytensor.tensor.optimize import minimize

    x, a = pt.vector("x"), pt.vector("a")
    solution, _ = minimize(
        ((x - a) ** 2).sum() + 0.1 * (x**4).sum(), x, optimizer_kwargs={"tol": 1e-10}
    )
    xs = pytensor.scan(
        lambda h, a: pt.tanh(h + a),
        outputs_info=[a],
        non_sequences=[a],
        n_steps=4,
        return_updates=False,
    )
    op = OpFromGraph([x, a], [xs[-1] + solution], inline=False, name="mixed")
    values = [np.zeros(3), np.array([0.5, -1.0, 2.0])]
    assert_matches_reference([x, a], [op(x, a)], values, mode)
    # The compiled function must have left every canonical op usable for grad.
    assert_matches_reference([x, a], [pytensor.grad(op(x, a).sum(), a)], values, mode)
