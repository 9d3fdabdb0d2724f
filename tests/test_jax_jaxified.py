"""The lowerings serve PyMC's JAX samplers, which call jax_funcify directly, not pytensor.function.

`jaxified` repeats the steps of ``pymc.sampling.jax.get_jaxified_graph`` (PyMC
is not a dependency): rewrite a FunctionGraph with the JAX mode's optimizer,
then ``jax_funcify`` it. The samplers differentiate the result with ``jax.grad``.
"""

import jax
import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import JAX
from pytensor.graph.fg import FunctionGraph
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.tensor.optimize import minimize


def jaxified(inputs, outputs):
    fgraph = FunctionGraph(inputs, outputs, clone=True)
    JAX.optimizer.rewrite(fgraph)
    return jax_funcify(fgraph)


def test_logp_with_a_minimize_and_an_ofg_is_jitted_and_differentiated_by_jax():
    x, a = pt.vector("x"), pt.vector("a")
    solution, _ = minimize(
        ((x - a) ** 2).sum() + 0.1 * (x**4).sum(), x, optimizer_kwargs={"tol": 1e-10}
    )
    square = pytensor.compile.builders.OpFromGraph([a], [a**2], inline=False)
    logp = -(square(solution) * a).sum()
    graph_fn = jaxified([x, a], [logp])
    logp_fn = jax.jit(lambda x_value, a_value: graph_fn(x_value, a_value)[0])
    x0, a_value = np.zeros(3), np.array([0.5, -1.0, 2.0])
    reference = pytensor.function([x, a], [logp, pytensor.grad(logp, a)], mode="FAST_COMPILE")
    want_logp, want_grad = reference(x0, a_value)
    np.testing.assert_allclose(logp_fn(x0, a_value), want_logp, rtol=1e-6)
    # optimistix differentiates its solve implicitly, as PyTensor does symbolically.
    np.testing.assert_allclose(jax.grad(logp_fn, argnums=1)(x0, a_value), want_grad, rtol=1e-5)


def test_logp_with_a_while_scan_is_differentiated_by_jax():
    from pytensor.scan.utils import until

    x0, a = pt.vector("x0"), pt.vector("a")

    def newton_step(x, a):
        new_x = x - (x**2 - a) / (2 * x)
        return new_x, until(pt.max(pt.abs(new_x - x)) < 1e-12)

    roots = pytensor.scan(
        newton_step, outputs_info=[x0], non_sequences=[a], n_steps=50, return_updates=False
    )
    logp = -(roots[-1] ** 3).sum()
    graph_fn = jaxified([x0, a], [logp])
    logp_fn = jax.jit(lambda x0_value, a_value: graph_fn(x0_value, a_value)[0])
    x0_value, a_value = np.ones(3), np.array([2.0, 3.0, 40.0])
    reference = pytensor.function([x0, a], [logp, pytensor.grad(logp, a)], mode="FAST_COMPILE")
    want_logp, want_grad = reference(x0_value, a_value)
    np.testing.assert_allclose(logp_fn(x0_value, a_value), want_logp, rtol=1e-10)
    np.testing.assert_allclose(
        jax.grad(logp_fn, argnums=1)(x0_value, a_value), want_grad, rtol=1e-8
    )
