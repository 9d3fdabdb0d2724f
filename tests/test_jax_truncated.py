"""PyMC's truncated distributions draw on JAX (issue 26): each ``pm.Truncated`` that NUMBA
draws also draws under ``mode="JAX_GPU"`` and stock ``mode="JAX"``, from the same distribution.

Each case takes 2,000 draws per mode (fixed seeds, so the test is deterministic) and compares
them with NUMBA's by a two-sample Kolmogorov-Smirnov test. The same test rejects the untruncated
base distribution, so it would catch draws that ignore the bounds.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import numpy as np
import pymc as pm
import pytensor
import pytest
from pytensor.tensor.random.type import RandomGeneratorType
from scipy import stats

from tests.jax_lowering_harness import JAX_MODES

N_DRAWS = 2_000
# Under the same distribution a p-value below this happens once in 10,000 seeds.
ALPHA = 1e-4
SEEDS = {"NUMBA": 1, "JAX": 2, "JAX_GPU": 3}

CASES = {
    # PyMC's own TruncatedNormal op; 6 standard deviations out, erf rounds to 1.
    "Normal": (lambda: pm.Normal.dist(1.0, 2.0), 0.0, 4.0),
    "Normal, far right tail": (lambda: pm.Normal.dist(1.0, 2.0), 13.0, None),
    # Inverse-CDF draws: gammaincinv, betaincinv (StudentT's icdf is betaincinv too).
    "Gamma": (lambda: pm.Gamma.dist(alpha=2.0, beta=1.0), 1.0, 3.0),
    "StudentT": (lambda: pm.StudentT.dist(nu=3.0, mu=0.0, sigma=1.0), -1.0, 2.5),
    "Beta": (lambda: pm.Beta.dist(alpha=0.5, beta=3.0), 0.2, 0.7),
    # No icdf: PyMC's rejection loop, a while-Scan writing through a boolean mask.
    "Poisson": (lambda: pm.Poisson.dist(3.0), 1, 4),
}


def _truncated(name: str):
    base, lower, upper = CASES[name]
    return pm.Truncated.dist(base(), lower=lower, upper=upper, size=N_DRAWS)


@functools.cache
def _draws(name: str, mode: str) -> np.ndarray:
    return np.asarray(pm.draw(_truncated(name), mode=mode, random_seed=SEEDS[mode]))


@pytest.mark.parametrize("mode", JAX_MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_truncated_draws_agree_with_numba(name: str, mode: str):
    draws, reference = _draws(name, mode), _draws(name, "NUMBA")
    _, lower, upper = CASES[name]
    assert draws.shape == (N_DRAWS,)
    assert lower <= draws.min() and (upper is None or draws.max() <= upper)
    assert stats.ks_2samp(draws, reference).pvalue > ALPHA


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_comparison_would_catch_untruncated_draws(name: str):
    """The KS test has the power to see the bounds (the draws of every mode are compared with
    NUMBA's, so a wrong JAX distribution differs from these)."""
    base, _, _ = CASES[name]
    untruncated = np.asarray(pm.draw(base(), draws=N_DRAWS, random_seed=SEEDS["NUMBA"]))
    assert stats.ks_2samp(untruncated, _draws(name, "NUMBA")).pvalue < ALPHA


IMPORT_ORDER = """
import json, sys
import gpubackend
{first}
{second}
from pymc.distributions.continuous import TruncatedNormalRV
from pytensor.link.jax.dispatch.random import jax_sample_fn
print(json.dumps(jax_sample_fn.dispatch(TruncatedNormalRV).__module__))
"""


@pytest.mark.parametrize("pymc_first", [True, False], ids=["pymc first", "jax dispatch first"])
def test_the_truncated_normal_registers_in_either_import_order(pymc_first: bool):
    imports = ["import pymc", "import pytensor.link.jax.dispatch"]
    first, second = imports if pymc_first else imports[::-1]
    script = IMPORT_ORDER.format(first=first, second=second)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    assert json.loads(result.stdout.splitlines()[-1]) == "gpubackend.dispatch.jax.truncated_normal"


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_while_scan_truncation_draws_more_than_once(mode: str):
    """``pm.draw(draws=3)`` calls one function three times; PyMC's updates keep one of the
    Truncated Poisson's generators as it is, which stock ``mode="JAX"``'s linker wrote back as the
    original ``Generator``: the second call failed in ``jax.jit`` (issue 43). Stock PyTensor does
    not lower the while-Scan, so the draws are checked against the reference's shape and the
    distribution's support."""
    lower, upper = 2, 9
    dist = pm.Truncated.dist(pm.Poisson.dist(4.0, size=3), lower=lower, upper=upper)
    reference = np.asarray(pm.draw(dist, draws=3, mode="FAST_COMPILE", random_seed=1))
    draws = np.asarray(pm.draw(dist, draws=3, mode=mode, random_seed=1))
    assert draws.shape == reference.shape and draws.dtype == reference.dtype
    assert lower <= draws.min() and draws.max() <= upper


def test_a_while_scan_truncation_takes_its_generator_as_an_input():
    """A numpy ``Generator`` given as an input to a Truncated Poisson's graph (a while-Scan) draws
    under JAX_GPU; stock ``mode="JAX"``'s linker hands it to ``jax.jit``, which refuses it with
    the ``TypeError`` stock PyTensor raises for any graph given a ``Generator`` (issue 43)."""
    lower, upper = 2, 9
    dist = pm.Truncated.dist(pm.Poisson.dist(4.0, size=3), lower=lower, upper=upper)
    generators = [
        variable
        for variable in pytensor.graph.traversal.ancestors([dist])
        if isinstance(variable.type, RandomGeneratorType)
    ]
    rng = RandomGeneratorType()("rng")
    graph = pytensor.graph.clone_replace(dist, dict.fromkeys(generators, rng))
    reference = np.asarray(
        pytensor.function([rng], graph, mode="FAST_COMPILE")(np.random.default_rng(1))
    )
    draws = np.asarray(pytensor.function([rng], graph, mode="JAX_GPU")(np.random.default_rng(1)))
    assert draws.shape == reference.shape and draws.dtype == reference.dtype
    assert lower <= draws.min() and draws.max() <= upper
    with pytest.raises(TypeError, match="Generator"):
        pytensor.function([rng], graph, mode="JAX")(np.random.default_rng(1))
