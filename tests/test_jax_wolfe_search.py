"""scipy's ``_line_search_wolfe12`` in JAX (`gpubackend.dispatch.jax.wolfe_search`) against
scipy's own, on searches that end in each of its branches."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import _linesearch, _optimize, rosen, rosen_der

from gpubackend.dispatch.jax.wolfe_search import line_search_wolfe12

X = np.array([-1.2, 1.0, -0.5, 0.8])
TARGET = np.array([1.0, 2.0, 3.0, 4.0])
SLOPE = np.array([1.0, 2.0, -1.0, 0.5])


def _rosenbrock(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def _quadratic(x):
    return ((x - TARGET) ** 2).sum()


def _kinked(x):
    return jnp.abs(x).sum() + (x**2).sum()


def _old_value_for_first_step(f, g, pk, step):
    """The previous value with which scipy's first trial step is ``step``."""
    return f(X) - step * (g(X) @ pk) / 2.02


# (objective in JAX, its value and gradient in numpy, direction, previous value or None, c2)
CASES = {
    # Moré-Thuente converges.
    "steepest descent": (_rosenbrock, rosen, rosen_der, -rosen_der(X), None, 0.9),
    "extrapolated first step": (_rosenbrock, rosen, rosen_der, -rosen_der(X), rosen(X) + 1.0, 0.9),
    "kink": (
        _kinked,
        lambda x: np.abs(x).sum() + (x**2).sum(),
        lambda x: np.sign(x) + 2 * x,
        -3 * np.sign(X),
        None,
        0.1,
    ),
    # A first step below Moré-Thuente's 1e-8: the strong-Wolfe search takes over, accepting it...
    "tiny first step": (_rosenbrock, rosen, rosen_der, -rosen_der(X), rosen(X) + 1e-12, 0.9),
    # ... doubling it past the minimum and zooming back...
    "zoom": (
        _quadratic,
        lambda x: ((x - TARGET) ** 2).sum(),
        lambda x: 2 * (x - TARGET),
        1e6 * (TARGET - X),
        "5e-9",
        0.1,
    ),
    # ... or, without a minimum along the line, doubling 10 times and taking the last step.
    "unbounded": (lambda x: -SLOPE @ x, lambda x: -SLOPE @ x, lambda x: -SLOPE, SLOPE, None, 0.9),
    # An ascent direction: both searches fail (scipy's _LineSearchError).
    "ascent": (_rosenbrock, rosen, rosen_der, rosen_der(X), None, 0.9),
}


@pytest.mark.parametrize("name", CASES)
def test_the_step_is_scipys(name):
    assert jax.config.jax_enable_x64, "gpubackend computes in float64 where floatX is float64"
    objective, f, g, pk, previous, c2 = CASES[name]
    if isinstance(previous, str):
        previous = _old_value_for_first_step(f, g, pk, float(previous))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns where its searches fail
        wolfe1 = _linesearch.line_search_wolfe1(f, g, X, pk, g(X), f(X), previous, c2=c2)[0]
        try:
            want = _optimize._line_search_wolfe12(f, g, X, pk, g(X), f(X), previous, c2=c2)
        except _optimize._LineSearchError:
            want = None
    # The cases reach the branches their names say.
    assert (wolfe1 is not None) == (name in {"steepest descent", "extrapolated first step", "kink"})

    def value_and_gradient(x):
        return objective(x), jax.grad(objective)(x)

    got = jax.jit(
        lambda xk, pk, f0, g0, old: line_search_wolfe12(
            value_and_gradient, xk, pk, f0, g0, old, 1e-4, c2, 1e-8, 50.0
        )
    )(X, pk, f(X), g(X), np.nan if previous is None else previous)
    assert bool(got.found) == (want is not None)
    if want is not None:
        np.testing.assert_allclose(got.alpha, want[0], rtol=1e-12)
        np.testing.assert_allclose(got.f, want[3], rtol=1e-12, atol=1e-12)
