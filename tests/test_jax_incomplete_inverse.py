"""The JAX lowerings of gammaincinv, gammainccinv and betaincinv
(`gpubackend.dispatch.jax.incomplete_inverse`) against scipy.special: float64 accuracy on a
grid with both tails and extreme shapes, scipy's values at the edges, implicit derivatives,
and a PyTensor graph with PyTensor's own gradient. Each check is one jitted call, as compiling
these functions dominates the cost (tests/test_jax_truncated.py covers stock mode="JAX")."""

from __future__ import annotations

import jax
import numpy as np
import pytensor
import pytensor.link.jax.dispatch  # loads first, and registers gpubackend's lowerings
import pytensor.tensor as pt
import pytest
from scipy import special

from gpubackend.dispatch.jax import incomplete_inverse
from tests.jax_lowering_harness import assert_matches_reference

LOWER_TAIL = [1e-300, 1e-250, 1e-100, 1e-20, 1e-10, 1e-5, 1e-3, 0.1, 0.3, 0.5]
UPPER_TAIL = [0.7, 0.9, 1 - 1e-3, 1 - 1e-6, 1 - 1e-10, 1 - 1e-15]
PROBABILITIES = np.array([*LOWER_TAIL, *UPPER_TAIL])
GAMMA_SHAPES = np.array([1e-3, 0.01, 0.1, 0.5, 1, 1.5, 2.5, 10, 100, 1e3, 1e4, 1e5])
BETA_SHAPES = np.array([0.1, 0.5, 1, 2, 10, 300, 1e3])
NAN, INF = np.nan, np.inf
# (shape, p): both ends, invalid shapes and probabilities, NaN, an infinite shape.
GAMMA_EDGES = np.array(
    [(2, 0), (2, 1), (0, 0.5), (-1, 0.5), (2, -0.1), (2, 1.1), (NAN, 0.5), (2, NAN), (INF, 0.5)]
).T
INVALID_BETAS = [(0, 3, 0.5), (2, 0, 0.5), (-1, 3, 0.5), (2, 3, -0.1), (2, 3, 1.1)]
NAN_BETAS = [(NAN, 3, 0.5), (2, NAN, 0.5), (2, 3, NAN), (INF, 3, 0.5)]
BETA_EDGES = np.array([(2, 3, 0), (2, 3, 1), *INVALID_BETAS, *NAN_BETAS]).T


def _grid_and_edges(shapes, edges, n_shapes: int, probabilities) -> list[np.ndarray]:
    """Every combination of ``n_shapes`` shapes and a probability, then the edge cases: flat."""
    grid = np.meshgrid(*[shapes] * n_shapes, probabilities, indexing="ij")
    return [
        np.concatenate([column.ravel(), edge]) for column, edge in zip(grid, edges, strict=True)
    ]


def _check(got, want, n_edges: int, rtol: float) -> None:
    got, want = np.asarray(got), np.asarray(want)
    np.testing.assert_array_equal(got[-n_edges:], want[-n_edges:])
    # Where scipy's solution underflows, it is not a float64 to compare with.
    representable = want[:-n_edges] > 1e-300
    np.testing.assert_allclose(got[:-n_edges][representable], want[:-n_edges][representable], rtol)


@pytest.mark.parametrize(
    ("ours", "scipy_inverse"),
    [
        (incomplete_inverse.gammaincinv, special.gammaincinv),
        (incomplete_inverse.gammainccinv, special.gammainccinv),
    ],
    ids=["gammaincinv", "gammainccinv"],
)
def test_gamma_inverses_are_float64_exact_and_scipy_s_at_the_edges(ours, scipy_inverse):
    """Measured: at most 1.9e-12 (a = 1e-3, where 1 / a magnifies gammainc's own rounding, and
    a = 1e5); about 1e-15 for moderate shapes."""
    arguments = _grid_and_edges(GAMMA_SHAPES, GAMMA_EDGES, 1, PROBABILITIES)
    _check(jax.jit(ours)(*arguments), scipy_inverse(*arguments), GAMMA_EDGES.shape[1], 5e-12)


def test_betaincinv_is_float64_exact_and_scipy_s_at_the_edges():
    """Measured: at most 4.5e-12 for a, b in [0.1, 1000] and p >= 1e-250."""
    arguments = _grid_and_edges(BETA_SHAPES, BETA_EDGES, 2, PROBABILITIES[1:])
    got = jax.jit(incomplete_inverse.betaincinv)(*arguments)
    _check(got, special.betaincinv(*arguments), BETA_EDGES.shape[1], 2e-11)


def test_derivatives_are_the_implicit_ones():
    a, b, p = 2.5, 0.7, np.array([1e-8, 0.3, 0.9, 0.97])

    @jax.jit
    def derivatives(a, b, p):
        along = jax.vmap(jax.grad(incomplete_inverse.gammaincinv, argnums=(0, 1)), (None, 0))
        upper = jax.vmap(jax.grad(incomplete_inverse.gammainccinv, argnums=1), (None, 0))
        beta = jax.vmap(jax.grad(incomplete_inverse.betaincinv, argnums=2), (None, None, 0))
        return *along(a, p), upper(a, 1 - p), beta(a, b, p)

    d_da, d_dp, dc_dq, beta_d_dp = derivatives(a, b, p)
    x = special.gammaincinv(a, p)
    density = np.exp(-x + (a - 1) * np.log(x) - special.gammaln(a))
    np.testing.assert_allclose(d_dp, 1 / density, rtol=1e-11)
    # 1 - p rounds: its relative error, 1e-9 at p = 1e-8, carries into the density at x.
    np.testing.assert_allclose(dc_dq, -1 / density, rtol=1e-8)
    # d x / d a, against a central difference of scipy's inverse.
    step = 1e-6
    difference = (special.gammaincinv(a + step, p) - special.gammaincinv(a - step, p)) / (2 * step)
    np.testing.assert_allclose(d_da, difference, rtol=1e-7)
    x = special.betaincinv(a, b, p)
    log_density = (a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - special.betaln(a, b)
    np.testing.assert_allclose(beta_d_dp, np.exp(-log_density), rtol=1e-9)
    # As JAX's betainc, and PyTensor's BetaIncInv: no derivative in the shapes.
    with pytest.raises(ValueError, match="with respect to a and b"):
        jax.jit(jax.grad(incomplete_inverse.betaincinv)).lower(a, b, 0.3)


def test_a_pytensor_graph_and_its_gradient():
    a, b, p = pt.vector("a"), pt.vector("b"), pt.vector("p")
    outputs = [pt.gammaincinv(a, p), pt.gammainccinv(a, p), pt.betaincinv(a, b, p)]
    # PyTensor's gradients in p are graphs of the inverses themselves.
    gradient = pytensor.grad(sum(output.sum() for output in outputs), p)
    values = [np.array([0.3, 2.0, 40.0]), np.array([0.5, 3.0, 7.0]), np.array([1e-9, 0.4, 0.97])]
    assert_matches_reference([a, b, p], [*outputs, gradient], values, "JAX_GPU", rtol=1e-11)
