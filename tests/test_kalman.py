"""The Kalman-filter models of tests/pymc_models.py against a pure-numpy Kalman filter, on every
logp path.

The reference is the local-level model's scalar recursion, with its gradient
carried along in forward mode: no PyTensor, no matrices, no Scan. Both filters
must match it: the standard one to rounding, the convergent one to the error
of freezing the gain once the covariance change is below ``RICCATI_TOL``.
The convergent filter must also stop where the reference's Riccati recursion
settles, and JAX_GPU must not compile once per step count.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

from tests.jax_lowering_harness import backend_compiles
from tests.pymc_models import (
    CASES,
    LOCAL_LEVEL_LENGTH,
    LOCAL_LEVEL_OBSERVED,
    LOCAL_LEVEL_P0,
    LOG_2PI,
    RICCATI_TOL,
    ConvergentKalmanFilter,
    local_level_system,
)
from tests.test_pymc import LOGP_PATHS, REFERENCE_LOGP_PATHS, compiled_logp_dlogp, model

# The convergent filter's error is the gain frozen a step or so before the fixed point:
# a covariance off by about RICCATI_TOL over the remaining steps, far above rounding.
RTOL = {"kalman_standard": 1e-10, "kalman_convergent": 1e-8}
PATHS = [*REFERENCE_LOGP_PATHS, *LOGP_PATHS]
# (sigma_state, sigma_obs): the covariance settles after 13 steps, 19, never (only the
# last observation runs with the steady gain), 4.
SIGMA_POINTS = ((1.0, 1.0), (0.3, 0.5), (0.1, 1.0), (2.0, 0.2))
# From a covariance that never settles to one that settles in 6 steps: over 20 distinct step counts.
WALK = tuple(zip(np.geomspace(0.05, 2.0, 30), np.full(30, 0.5), strict=True))
# Emitted by JAX around every XLA compilation, or load from its persistent cache.


def kalman_reference(sigma_state: float, sigma_obs: float) -> tuple[float, np.ndarray]:
    """log p(y) of the local-level model, and its gradient in (sigma_state, sigma_obs)."""
    q, h = sigma_state**2, sigma_obs**2
    dq, dh = np.array([2 * sigma_state, 0.0]), np.array([0.0, 2 * sigma_obs])
    a, P, da, dP = 0.0, LOCAL_LEVEL_P0, np.zeros(2), np.zeros(2)
    loglike, dloglike = 0.0, np.zeros(2)
    for y in LOCAL_LEVEL_OBSERVED:
        F, dF = P + h, dP + dh
        v, dv = y - a, -da
        loglike -= 0.5 * (LOG_2PI + np.log(F) + v**2 / F)
        dloglike -= 0.5 * (dF / F + 2 * v * dv / F - v**2 * dF / F**2)
        K, dK = P / F, dP / F - P * dF / F**2
        a, da = a + K * v, da + dK * v + K * dv
        P, dP = P * h / F + q, (dP * h + P * dh) / F - P * h * dF / F**2 + dq
    return loglike, dloglike


def riccati_settling_steps(sigma_state: float, sigma_obs: float) -> int:
    """The convergent filter's transient steps: until the covariance change is below tolerance, one
    short of the series at most."""
    q, h, P = sigma_state**2, sigma_obs**2, LOCAL_LEVEL_P0
    for step in range(1, LOCAL_LEVEL_LENGTH):
        P, previous = P * h / (P + h) + q, P
        if abs(P - previous) < RICCATI_TOL:
            return step
    return LOCAL_LEVEL_LENGTH - 1


def value_point(m: pm.Model, sigmas: tuple[float, float]) -> dict[str, np.ndarray]:
    """The model's (log-transformed) value point at (sigma_state, sigma_obs), in value-variable
    order."""
    logs = {
        m.rvs_to_values[m[name]].name: np.log(sigma)
        for name, sigma in zip(("sigma_state", "sigma_obs"), sigmas, strict=True)
    }
    return {value.name: np.asarray(logs[value.name]) for value in m.value_vars}


def model_reference(sigmas: tuple[float, float]) -> tuple[float, np.ndarray]:
    """The model's logp and its gradient in the log values: HalfNormal(1) priors, the log-Jacobian,
    the filter."""
    sigma = np.asarray(sigmas)
    loglike, dloglike = kalman_reference(*sigmas)
    logp = loglike + np.sum(0.5 * np.log(2 / np.pi) - sigma**2 / 2 + np.log(sigma))
    return logp, (dloglike - sigma) * sigma + 1


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case_name", list(RTOL))
def test_logp_and_gradient_match_numpy_kalman_filter(case_name: str, path: str) -> None:
    m = model(case_name)
    assert [rv.name for rv in m.free_RVs] == ["sigma_state", "sigma_obs"]
    logp, dlogp = compiled_logp_dlogp(case_name, path)
    for sigmas in SIGMA_POINTS:
        point = value_point(m, sigmas)
        want_logp, want_dlogp = model_reference(sigmas)
        np.testing.assert_allclose(
            float(logp(point)), want_logp, rtol=RTOL[case_name], err_msg=str(sigmas)
        )
        np.testing.assert_allclose(
            np.asarray(dlogp(point)), want_dlogp, rtol=RTOL[case_name], err_msg=str(sigmas)
        )


@pytest.mark.parametrize("mode", ["NUMBA", "JAX_GPU"])
def test_convergent_filter_stops_when_the_covariance_settles(mode: str) -> None:
    sigma_state, sigma_obs = pt.dscalars("sigma_state", "sigma_obs")
    data = pt.constant(LOCAL_LEVEL_OBSERVED[:, None])
    _, steps = ConvergentKalmanFilter()(data, *local_level_system(sigma_state, sigma_obs))
    steps_at = pytensor.function([sigma_state, sigma_obs], steps, mode=mode)
    got = [int(steps_at(*sigmas)) for sigmas in SIGMA_POINTS]
    assert got == [riccati_settling_steps(*sigmas) for sigmas in SIGMA_POINTS]
    assert len(set(got)) == len(SIGMA_POINTS), "every point must split the series elsewhere"


def test_jax_gpu_compiles_are_bounded_while_the_step_count_changes() -> None:
    # A model of its own: the shared one's logp+gradient function may be compiled and warm already.
    m = CASES["kalman_convergent"].build()
    assert len({riccati_settling_steps(*sigmas) for sigmas in WALK}) > 20
    logp_dlogp = m.logp_dlogp_function(ravel_inputs=True, mode="JAX_GPU")
    points = [
        np.concatenate([np.ravel(v) for v in value_point(m, sigmas).values()]) for sigmas in WALK
    ]
    with backend_compiles() as first:
        logp_dlogp(points[0])
    # A fresh function that compiles nothing on its first call means the listener heard nothing.
    assert first, "the first call compiled nothing: the compile listener is not hearing JAX"
    with backend_compiles() as later:
        for point in points[1:]:
            logp_dlogp(point)
    # The step count changes at almost every point; the compiled graph serves them all.
    assert not later, later
