"""PyMC end to end: every model of tests/pymc_models.py through every sampler path a user can take.

Most paths never see JAX_GPU whole: numpyro and blackjax build their logp with
``pymc.sampling.jax.get_jaxified_graph`` (stock ``jax_funcify``), nutpie
compiles with ``mode="JAX"``. They meet gpubackend through its global
``jax_funcify`` registrations inside stock JAX linkers, and these tests hold
them there.

Checks: posterior means against the closed form (or PyMC's own sampler on
NUMBA) within ``Z_SCORE`` Monte Carlo standard errors from ArviZ; MAP against
the closed form or NUMBA; posterior-predictive draws against the model's
noise; logp and its gradient at fixed points against NUMBA to the case's
``logp_rtol``. Draws are few (CI budget): the tolerances come from each run's
own MCSE, so they widen with fewer draws instead of flaking.
"""

from __future__ import annotations

import functools
import logging
import warnings

import arviz
import jax
import numpy as np
import pymc as pm
import pytest
import xarray as xr
from pymc.sampling.jax import get_jaxified_logp

from tests.pymc_models import CASES, OBSERVED, PyMCCase

# Five standard errors: under a correct sampler a mean is that far off with
# probability 6e-7 per check (Gaussian CLT), so the ~150 mean checks together
# flag a correct run far less than once in a thousand, while a wrong logp moves
# the mean by many standard errors at these sizes.
Z_SCORE = 5.0
DRAWS, TUNE, CHAINS, SEED = 100, 100, 2, 20261123
# find_MAP stops on scipy L-BFGS-B's default gradient tolerance (1e-5 on a unit-scale logp).
MAP_ATOL = 1e-4

BLACKJAX_PROGRESS_BAR = (
    "upstream: PyMC 6.4 passes `progress_bar` to blackjax 1.7.1's window "
    "adaptation kernel, which no longer takes it"
)


def expected_failure(case_name: str, path: str) -> str | None:
    """Why ``path`` cannot yet run ``case_name`` (None: it must pass)."""
    if path == "blackjax":
        return BLACKJAX_PROGRESS_BAR
    return None


def cell(case_name: str, path: str):
    reason = expected_failure(case_name, path)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(case_name, path, marks=marks, id=f"{case_name}-{path}")


@functools.cache
def model(case_name: str) -> pm.Model:
    """One model per case, shared by every path: JAX_GPU leaves the user's ``pm.Data`` values as
    they were."""
    return CASES[case_name].build()


def _sample_kwargs() -> dict:
    return {
        "draws": DRAWS,
        "tune": TUNE,
        "chains": CHAINS,
        "random_seed": SEED,
        "progressbar": False,
    }


def _numpyro(chain_method: str):
    return lambda m: pm.sample(
        nuts_sampler="numpyro", nuts={"chain_method": chain_method}, model=m, **_sample_kwargs()
    )


def _nutpie():
    # The test extra installs nutpie; a provisioned Python may lack it (the offline GPU machine).
    return pytest.importorskip("nutpie", reason="nutpie is not installed: `make venv` installs it")


def _nutpie_jax(gradient_backend: str):
    def sample(m):
        nutpie = _nutpie()

        compiled = nutpie.compile_pymc_model(m, backend="jax", gradient_backend=gradient_backend)
        return nutpie.sample(
            compiled, draws=DRAWS, tune=TUNE, chains=CHAINS, seed=SEED, progress_bar=False
        )

    return sample


def _pm_sample(nuts_sampler: str | None, mode: str, cores: int | None = None):
    """``pm.sample`` with ``nuts_sampler`` (None: PyMC's choice, nutpie where installed); PyMC's
    own sampler runs its chains in this process unless ``cores`` says otherwise."""

    def sample(m):
        if nuts_sampler == "nutpie":
            _nutpie()
        in_process = {"cores": cores or 1} if nuts_sampler == "pymc" else {}
        return pm.sample(
            nuts_sampler=nuts_sampler,
            compile_kwargs={"mode": mode},
            model=m,
            **in_process,
            **_sample_kwargs(),
        )

    return sample


# numpyro's sequential chain method runs, chain by chain, the one-chain computation that its
# parallel method maps over the devices: parallel covers it, in a third of the time.
SAMPLER_PATHS = {
    "numpyro_parallel": _numpyro("parallel"),
    "numpyro_vectorized": _numpyro("vectorized"),
    "blackjax": lambda m: pm.sample(nuts_sampler="blackjax", model=m, **_sample_kwargs()),
    "nutpie_jax_jax_gradient": _nutpie_jax("jax"),
    "nutpie_jax_pytensor_gradient": _nutpie_jax("pytensor"),
    "nutpie_JAX_GPU": _pm_sample("nutpie", "JAX_GPU"),
    "pymc_JAX_GPU": _pm_sample("pymc", "JAX_GPU"),
    "pymc_NUMBA": _pm_sample("pymc", "NUMBA"),
    "default_JAX_GPU": _pm_sample(None, "JAX_GPU"),
    "default_NUMBA": _pm_sample(None, "NUMBA"),
}
MODES = ("JAX_GPU", "NUMBA")


@pytest.fixture(autouse=True)
def quiet_pymc():
    logger = logging.getLogger("pymc")
    level = logger.level
    logger.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    logger.setLevel(level)


@functools.cache
def sampled_posterior(case_name: str, path: str):
    return SAMPLER_PATHS[path](model(case_name)).posterior


def numba_reference(case_name: str):
    """PyMC's own sampler on NUMBA: the reference where a case has no closed form."""
    return sampled_posterior(case_name, "pymc_NUMBA")


def _means_and_mcse(posterior, names) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    mcse = arviz.mcse(posterior, var_names=list(names), method="mean")
    return {
        name: (posterior[name].mean(("chain", "draw")).values, np.asarray(mcse[name]))
        for name in names
    }


def assert_posterior_means(case: PyMCCase, posterior) -> None:
    names = (
        list(case.posterior_mean)
        if case.posterior_mean
        else [rv.name for rv in model(case.name).free_RVs]
    )
    got = _means_and_mcse(posterior, names)
    if case.posterior_mean is not None:
        for name, want in case.posterior_mean.items():
            mean, mcse = got[name]
            assert np.all(np.abs(mean - want) <= Z_SCORE * mcse), (
                f"{name}: {mean} vs closed form {want}, MCSE {mcse}"
            )
        return
    reference = _means_and_mcse(numba_reference(case.name), names)
    for name in names:
        (mean, mcse), (numba_mean, numba_mcse) = got[name], reference[name]
        tolerance = Z_SCORE * np.hypot(mcse, numba_mcse)
        assert np.all(np.abs(mean - numba_mean) <= tolerance), (
            f"{name}: {mean} vs NUMBA {numba_mean}, tolerance {tolerance}"
        )


@pytest.mark.parametrize(("case_name", "path"), [cell(c, p) for c in CASES for p in SAMPLER_PATHS])
def test_posterior_means(case_name: str, path: str) -> None:
    assert_posterior_means(CASES[case_name], sampled_posterior(case_name, path))


def test_pymc_samples_jax_gpu_chains_in_worker_processes():
    """PyMC's own sampler with more than one core, its default without nutpie: each worker process
    loads the pickled step and links its function anew (forkserver, for a JAX linker). It failed
    with "cannot pickle 'jaxlib._jax.Device' object"."""
    case = CASES["while_scan_trace"]
    posterior = _pm_sample("pymc", "JAX_GPU", cores=CHAINS)(model(case.name)).posterior
    assert_posterior_means(case, posterior)


@functools.cache
def map_estimate(case_name: str, mode: str) -> dict[str, np.ndarray]:
    return pm.find_MAP(model=model(case_name), compile_kwargs={"mode": mode}, progressbar=False)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case_name", list(CASES))
def test_find_map(case_name: str, mode: str) -> None:
    case, m = CASES[case_name], model(case_name)
    found = map_estimate(case_name, mode)
    # Every closed-form posterior here is Gaussian, so its mode is its mean.
    want = case.posterior_mean or map_estimate(case_name, "NUMBA")
    for name in case.posterior_mean or [rv.name for rv in m.free_RVs]:
        np.testing.assert_allclose(found[name], want[name], atol=MAP_ATOL, err_msg=name)


def _posterior_draws(case: PyMCCase, m: pm.Model) -> xr.Dataset:
    """Independent draws standing in for a posterior: the closed form where there is one, else the
    prior."""
    rng = np.random.default_rng(SEED)
    prior = pm.sample_prior_predictive(
        draws=DRAWS * CHAINS, model=m, random_seed=SEED, var_names=[rv.name for rv in m.free_RVs]
    )
    draws = {}
    for rv in m.free_RVs:
        values = np.asarray(prior.prior[rv.name])
        draws[rv.name] = values.reshape(CHAINS, DRAWS, *values.shape[2:])
    if case.posterior_mean is not None:
        sd = 1 / np.sqrt(OBSERVED.size + 1)
        draws["mu"] = case.posterior_mean["mu"] + sd * rng.standard_normal((CHAINS, DRAWS))
    return xr.Dataset(
        {
            name: (("chain", "draw", *[f"{name}_dim_{i}" for i in range(v.ndim - 2)]), v)
            for name, v in draws.items()
        }
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case_name", list(CASES))
def test_posterior_predictive(case_name: str, mode: str) -> None:
    case, m = CASES[case_name], model(case_name)
    posterior = _posterior_draws(case, m)
    predicted = pm.sample_posterior_predictive(
        posterior, model=m, compile_kwargs={"mode": mode}, random_seed=SEED, progressbar=False
    ).posterior_predictive["y"]
    n = predicted.size
    if case.posterior_mean is not None:
        # y ~ Normal(mu, 1) given each draw of mu: the residuals are standard normal.
        residuals = (predicted - posterior["mu"]).values
        assert abs(residuals.mean()) <= Z_SCORE / np.sqrt(n), residuals.mean()
        assert abs(residuals.std() - 1) <= Z_SCORE / np.sqrt(2 * n), residuals.std()
        return
    reference = pm.sample_posterior_predictive(
        posterior,
        model=model(case_name),
        compile_kwargs={"mode": "NUMBA"},
        random_seed=SEED + 1,
        progressbar=False,
    ).posterior_predictive["y"]
    tolerance = Z_SCORE * np.hypot(predicted.std(), reference.std()) / np.sqrt(n)
    assert abs(float(predicted.mean() - reference.mean())) <= tolerance


def pytensor_logp_dlogp(mode: str):
    return lambda m: (m.compile_logp(mode=mode), m.compile_dlogp(mode=mode))


def _jaxified_logp_dlogp(m: pm.Model):
    """The numpyro/blackjax path: get_jaxified_graph, differentiated by jax.grad."""
    logp = get_jaxified_logp(m, negative_logp=True)
    names = [v.name for v in m.value_vars]
    value_and_grad = jax.jit(jax.value_and_grad(logp))

    def flat(point):
        values = [np.asarray(point[name]) for name in names]
        return value_and_grad(values)

    def logp_at(point):
        return float(flat(point)[0])

    def dlogp_at(point):
        return np.concatenate([np.ravel(g) for g in flat(point)[1]])

    return logp_at, dlogp_at


LOGP_PATHS = {
    "jaxified_jax_grad": _jaxified_logp_dlogp,  # numpyro, blackjax, nutpie gradient_backend="jax"
    "stock_JAX_pytensor_grad": pytensor_logp_dlogp("JAX"),  # nutpie gradient_backend="pytensor"
    "JAX_GPU": pytensor_logp_dlogp("JAX_GPU"),  # pm.sample, find_MAP
}
# The references: NUMBA here, and both in tests/test_kalman.py.
REFERENCE_LOGP_PATHS = {mode: pytensor_logp_dlogp(mode) for mode in ("NUMBA", "FAST_COMPILE")}


@functools.cache
def compiled_logp_dlogp(case_name: str, path: str):
    """A case's logp and gradient compiled once per path: pure functions of the point, so the
    tests here and in tests/test_kalman.py that evaluate them share them."""
    return (LOGP_PATHS | REFERENCE_LOGP_PATHS)[path](model(case_name))


def fixed_points(m: pm.Model) -> list[dict[str, np.ndarray]]:
    """The initial point and two points moved off it, in the value (transformed) space."""
    start = m.initial_point()
    return [{name: value + shift for name, value in start.items()} for shift in (0.0, 0.3, -0.45)]


@functools.cache
def numba_logp_at_points(case_name: str) -> list[tuple[float, np.ndarray]]:
    logp, dlogp = compiled_logp_dlogp(case_name, "NUMBA")
    return [
        (float(logp(point)), np.asarray(dlogp(point))) for point in fixed_points(model(case_name))
    ]


@pytest.mark.parametrize("path", list(LOGP_PATHS))
@pytest.mark.parametrize("case_name", list(CASES))
def test_logp_and_gradient_match_numba(case_name: str, path: str) -> None:
    case, m = CASES[case_name], model(case_name)
    logp, dlogp = compiled_logp_dlogp(case_name, path)
    for point, (want_logp, want_dlogp) in zip(
        fixed_points(m), numba_logp_at_points(case_name), strict=True
    ):
        np.testing.assert_allclose(float(logp(point)), want_logp, rtol=case.logp_rtol)
        np.testing.assert_allclose(
            np.asarray(dlogp(point)), want_dlogp, rtol=case.logp_rtol, atol=case.logp_rtol
        )


def test_numba_reads_shared_data_after_jax_gpu() -> None:
    m = CASES["scan_length_from_data"].build()
    point = m.initial_point()
    want = m.compile_logp(mode="NUMBA")(point)
    m.compile_logp(mode="JAX_GPU")(point)
    assert m.compile_logp(mode="NUMBA")(point) == pytest.approx(want, rel=1e-12)
