"""JAX samplers draw the distribution FAST_COMPILE (numpy) draws: two-sample tests, n=4000.

Each random variable PyTensor's JAX backend samples (all but choice and permutation, whose draws
are orderings) is drawn 4,000 times in one call under mode="JAX" (gpubackend's samplers
registered) and JAX_GPU, and by FAST_COMPILE, and the two samples are compared:
Kolmogorov-Smirnov for a continuous draw, a chi-square test of the counts for a discrete one. The
seeds are fixed, so the p-values are too; a p-value under 1e-4 fails. PyTensor's own categorical
sampler (logits ``logit(p)``) and binomial sampler (numpyro's, which fails on an integer count)
are held as strict xfails: they fail where gpubackend's replace them.

Random variables also keep their graph types inside the graph, not only at its outputs.
PyTensor's JAX Bernoulli returns a bool array for its int64 draws. Inside a graph JAX then reads
it as a mask: ``sigma[is_outlier]`` selects instead of gathering (pymc-extras'
``test_forward_after_sampling`` stopped at `BooleanMaskLengthError` under ``mode=JAX``), and
``b + b`` is a logical or (silently 1 where the reference gives 2). gpubackend's graph lowering
returns an integer-typed output that a lowering gives as bool as its integer type.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytensor.tensor.random.basic as ptr
import pytest
import scipy.stats as st

from gpubackend.mode import stock_jax_mode
from tests.jax_lowering_harness import JAX_MODES

N_DRAWS = 4000
SIGNIFICANCE = 1e-4

SAMPLES = {
    "beta": (lambda rng: ptr.beta(2.0, 3.0, size=N_DRAWS, rng=rng), False),
    "dirichlet": (
        lambda rng: ptr.dirichlet(np.array([1.0, 2.0, 3.0]), size=N_DRAWS, rng=rng)[:, 0],
        False,
    ),
    "poisson": (lambda rng: ptr.poisson(3.5, size=N_DRAWS, rng=rng), True),
    "cauchy": (lambda rng: ptr.cauchy(1.0, 2.0, size=N_DRAWS, rng=rng), False),
    "gumbel": (lambda rng: ptr.gumbel(1.0, 2.0, size=N_DRAWS, rng=rng), False),
    "laplace": (lambda rng: ptr.laplace(1.0, 2.0, size=N_DRAWS, rng=rng), False),
    "logistic": (lambda rng: ptr.logistic(1.0, 2.0, size=N_DRAWS, rng=rng), False),
    "normal": (lambda rng: ptr.normal(1.0, 2.0, size=N_DRAWS, rng=rng), False),
    "multivariate_normal": (
        lambda rng: ptr.multivariate_normal(
            np.array([1.0, -1.0]), np.array([[2.0, 0.5], [0.5, 1.0]]), size=N_DRAWS, rng=rng
        )[:, 1],
        False,
    ),
    "bernoulli": (lambda rng: ptr.bernoulli(0.3, size=N_DRAWS, rng=rng), True),
    "categorical": (
        lambda rng: ptr.categorical(np.array([0.2, 0.5, 0.3]), size=N_DRAWS, rng=rng),
        True,
    ),
    "categorical_two_categories_batched": (
        lambda rng: (
            ptr.categorical(
                np.array([[0.6, 0.4], [0.9, 0.1]]), size=(N_DRAWS // 2, 2), rng=rng
            ).ravel()
            + 2 * np.tile([0, 1], N_DRAWS // 2)
        ),
        True,
    ),
    "integers": (lambda rng: ptr.integers(2, 9, size=N_DRAWS, rng=rng), True),
    "uniform": (lambda rng: ptr.uniform(-1.0, 3.0, size=N_DRAWS, rng=rng), False),
    "pareto": (lambda rng: ptr.pareto(3.0, 2.0, size=N_DRAWS, rng=rng), False),
    "gamma": (lambda rng: ptr.gamma(2.5, 1.5, size=N_DRAWS, rng=rng), False),
    "exponential": (lambda rng: ptr.exponential(2.0, size=N_DRAWS, rng=rng), False),
    "t": (lambda rng: ptr.t(4.0, 1.0, 2.0, size=N_DRAWS, rng=rng), False),
    "binomial": (lambda rng: ptr.binomial(10, 0.3, size=N_DRAWS, rng=rng), True),
    "multinomial": (
        lambda rng: ptr.multinomial(10, np.array([0.2, 0.5, 0.3]), size=N_DRAWS, rng=rng)[:, 2],
        True,
    ),
    "vonmises": (lambda rng: ptr.vonmises(0.5, 2.0, size=N_DRAWS, rng=rng), False),
}
STOCK_BUGS = {
    "categorical": "upstream: PyTensor's JAX sampler passes logit(p) as jax.random.categorical's "
    "logits, which are log-probabilities",
    "categorical_two_categories_batched": "upstream: as categorical (logits logit(p))",
    "binomial": "upstream: numpyro's binomial, which PyTensor's JAX sampler calls, fails on an "
    "integer count (its lax.cond branches differ in dtype)",
}


def _draws(name: str, mode) -> np.ndarray:
    make, _ = SAMPLES[name]
    rng = pytensor.shared(np.random.default_rng(1))
    return np.asarray(pytensor.function([], make(rng), mode=mode)())


def _p_value(name: str, reference: np.ndarray, draws: np.ndarray) -> float:
    if SAMPLES[name][1]:
        values = np.union1d(reference, draws)
        counts = np.array([[np.sum(sample == v) for v in values] for sample in (reference, draws)])
        return float(st.chi2_contingency(counts + 0.5)[1])
    return float(st.ks_2samp(reference, draws).pvalue)


@pytest.mark.parametrize("mode", ["JAX", "JAX_GPU"])
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_jax_draws_have_the_distribution_of_fast_compile(name: str, mode: str) -> None:
    reference, draws = _draws(name, "FAST_COMPILE"), _draws(name, mode)
    assert draws.dtype == reference.dtype and draws.shape == reference.shape
    p_value = _p_value(name, reference, draws)
    assert p_value > SIGNIFICANCE, f"{name} under {mode}: two-sample p-value {p_value:.3g}"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=reason))
        for name, reason in STOCK_BUGS.items()
    ],
)
def test_pytensor_stock_jax_sampler_draws_the_distribution(name: str) -> None:
    """PyTensor's own samplers, which gpubackend's replace: a fixed upstream drops its xfail."""
    reference, draws = _draws(name, "FAST_COMPILE"), _draws(name, stock_jax_mode())
    assert _p_value(name, reference, draws) > SIGNIFICANCE


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


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_shared_generator_its_update_keeps_draws_again(mode):
    """An update that keeps a shared generator as it is (``{rng: rng}``, as PyMC makes for a
    ``Truncated``'s while-Scan) leaves a JAX state in it, not the original ``Generator``: stock
    ``mode="JAX"`` wrote that back and failed in ``jax.jit`` on the second call (issue 43)."""
    rng = pytensor.shared(np.random.default_rng(1))
    kept = pytensor.shared(np.random.default_rng(2))
    next_rng, draw = ptr.normal(rng=rng, size=2).owner.outputs
    updates = {rng: next_rng, kept: kept}
    reference = pytensor.function([], draw, updates=updates, mode="FAST_COMPILE")
    fn = pytensor.function([], draw, updates=updates, mode=mode)
    draws = [np.asarray(fn()) for _ in range(3)]
    expected = np.asarray(reference())
    assert all(d.shape == expected.shape and d.dtype == expected.dtype for d in draws)
    assert not np.array_equal(draws[0], draws[1])


def test_a_generator_given_as_an_input_draws_what_stock_jax_draws_from_a_shared_one():
    """JAX_GPU converts a numpy ``Generator`` given as an input on every call, as PyTensor's JAX
    linker converts a shared one (stock ``mode="JAX"`` passes it to ``jax.jit``, which refuses it
    with a ``TypeError``), and leaves the caller's generator as the reference does (issue 43)."""
    rng = pt.random.type.random_generator_type("rng")
    fn = pytensor.function([rng], ptr.normal(rng=rng, size=3), mode="JAX_GPU")
    reference = pytensor.function([rng], ptr.normal(rng=rng, size=3), mode="FAST_COMPILE")
    shared_rng = pytensor.shared(np.random.default_rng(1))
    with pytest.warns(UserWarning, match="RandomType SharedVariables"):
        stock = pytensor.function([], ptr.normal(rng=shared_rng, size=3), mode=stock_jax_mode())
    with pytest.raises(TypeError):
        pytensor.function([rng], ptr.normal(rng=rng, size=3), mode=stock_jax_mode())(
            np.random.default_rng(1)
        )

    def state_after(call) -> dict:
        generator = np.random.default_rng(1)
        call(generator)
        return generator.bit_generator.state

    assert state_after(fn) == state_after(reference)
    np.testing.assert_array_equal(np.asarray(fn(np.random.default_rng(1))), np.asarray(stock()))
