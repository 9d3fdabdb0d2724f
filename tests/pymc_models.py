"""PyMC models that stock JAX cannot lower, as data: each builder returns a model and what it should
give.

Kept apart from the checks (tests/test_pymc.py), in the style of the
conformance catalogue. Most models are a conjugate Normal model in disguise:
``mu ~ Normal(0, 1)``, ``y_i ~ Normal(m, 1)``, where ``m`` equals ``mu`` but
is computed through the op family under test (a while-Scan, a solver, an
OpFromGraph...). The posterior of ``mu`` is then known in closed form while
every logp gradient still runs through that family. Where no closed form
exists (censored Gamma, the Kalman filters), the reference is PyMC's own
sampler on NUMBA.

The Kalman-filter family is a local-level model (a random walk observed with
noise) whose likelihood is a Kalman filter written the way pymc-extras'
statespace filters are: a standard one (a for-Scan over every observation)
and a convergent one (a while-Scan until the Riccati recursion settles, then a
for-Scan with the steady-state gain over the remaining observations, in an
OpFromGraph with its own pullback).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph, SymbolicOp
from pytensor.gradient import pullback
from pytensor.graph.replace import vectorize_graph
from pytensor.scan import until
from pytensor.tensor.linalg import solve_triangular
from pytensor.tensor.optimize import minimize, minimize_scalar, root, root_scalar

OBSERVED = np.array([0.3, 1.1, 0.4, 0.9])
SOLVER_TOL = 1e-12


@dataclass(frozen=True)
class PyMCCase:
    """A model and its expected posterior means (None: compare with PyMC's NUMBA sampler instead).

    ``logp_rtol`` is how closely logp and its gradient must agree across paths;
    only solvers whose accuracy is bounded by the flatness of the objective
    (bracketing scalar minimisation: sqrt(machine epsilon) in x) loosen it.
    """

    name: str
    build: Callable[[], pm.Model] = field(repr=False)
    posterior_mean: dict[str, float] | None
    logp_rtol: float = 1e-10


def conjugate_posterior_mean(observed: np.ndarray = OBSERVED) -> float:
    """Posterior mean of mu for mu ~ N(0, 1), y_i ~ N(mu, 1)."""
    return float(observed.sum() / (observed.size + 1))


def _conjugate_model(disguise: Callable[[pt.TensorVariable], pt.TensorVariable]) -> pm.Model:
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", disguise(mu), 1.0, observed=OBSERVED)
    return model


def _newton_cube_trace(mu: pt.TensorVariable) -> pt.TensorVariable:
    """Every Newton iterate solving ``x**3 + x = mu**3 + mu`` from 0, stopping on convergence."""
    target = mu**3 + mu

    def newton_step(x, target):
        new_x = x - (x**3 + x - target) / (3 * x**2 + 1)
        return new_x, until(pt.abs(new_x - x) < 1e-13)

    x0 = pt.zeros((), dtype=mu.dtype)
    return pytensor.scan(
        newton_step, outputs_info=[x0], non_sequences=[target], n_steps=60, return_updates=False
    )


def while_scan_last() -> pm.Model:
    return _conjugate_model(lambda mu: _newton_cube_trace(mu)[-1])


def while_scan_trace() -> pm.Model:
    # The sums differ by the last iterate, so the value is mu, but the value and the
    # gradient run through every element of the trace.
    def telescoped(mu):
        trace = _newton_cube_trace(mu)
        return trace.sum() - trace[:-1].sum()

    return _conjugate_model(telescoped)


def scan_length_from_data() -> pm.Model:
    with pm.Model() as model:
        lengths = pm.Data("lengths", np.linspace(-1.0, 1.0, 5))
        mu = pm.Normal("mu", 0.0, 1.0)
        # One step per data point, so the Scan's length is the data's; the steps add up
        # to mu + mean(lengths), and the mean is taken off again.
        running = pytensor.scan(
            lambda x_t, total, mu: total + (mu + x_t) / lengths.shape[0],
            sequences=[lengths],
            outputs_info=[pt.zeros((), dtype=mu.dtype)],
            non_sequences=[mu],
            return_updates=False,
        )
        pm.Normal("y", running[-1] - lengths.mean(), 1.0, observed=OBSERVED)
    return model


def _quartic_bowl(x: pt.TensorVariable, centre: pt.TensorVariable) -> pt.TensorVariable:
    return ((x - centre) ** 2 + 0.1 * (x - centre) ** 4).sum()


def _cube_root_of(x: pt.TensorVariable, mu: pt.TensorVariable) -> pt.TensorVariable:
    return x**3 + x - (mu**3 + mu)


def optimize_starts() -> pm.Model:
    """Every optimize op, each start kind (constant, graph input, free variable) in scalar and
    vector form."""
    tol = {"tol": SOLVER_TOL}
    with pm.Model() as model:
        scalar_data, vector_data = (
            pm.Data("scalar_start", 0.25),
            pm.Data("vector_start", np.zeros(2)),
        )
        # A free start: the solutions do not depend on it, so its posterior is its prior.
        free = pm.Normal("start", 0.0, 1.0, shape=2)
        free_first = free[
            0
        ]  # one variable: a solver's start must appear in its equation as the same node
        mu = pm.Normal("mu", 0.0, 1.0)
        scalar_constant, vector_constant = (
            pt.constant(0.25, dtype=mu.dtype),
            pt.constant(np.zeros(2)),
        )

        def minimized(start):
            return minimize(_quartic_bowl(start, mu), start, method="BFGS", optimizer_kwargs=tol)[
                0
            ].mean()

        def rooted(start):
            return root(_cube_root_of(start, mu), start, method="hybr", optimizer_kwargs=tol)[
                0
            ].mean()

        solved = [
            minimized(free),
            minimized(scalar_data),
            minimized(vector_constant),
            rooted(vector_data),
            rooted(scalar_constant),
            root_scalar(
                _cube_root_of(free_first, mu),
                free_first,
                method="newton",
                optimizer_kwargs={"xtol": SOLVER_TOL},
            )[0],
            minimize_scalar(
                _quartic_bowl(scalar_constant, mu),
                scalar_constant,
                method="brent",
                optimizer_kwargs=tol,
            )[0],
        ]
        pm.Normal("y", pt.add(*solved) / len(solved), 1.0, observed=OBSERVED)
    return model


def minimize_blockwise() -> pm.Model:
    offsets = np.array([[0.5, -1.0], [2.0, 0.1], [-0.3, 1.2]])

    def solved(mu):
        x, centre = pt.vector("x"), pt.vector("centre")
        solution, _ = minimize(
            _quartic_bowl(x, centre), x, method="BFGS", optimizer_kwargs={"tol": SOLVER_TOL}
        )
        batched = vectorize_graph(solution, {x: pt.zeros(offsets.shape), centre: mu + offsets})
        return (batched - offsets).mean()

    return _conjugate_model(solved)


def censored_gamma() -> pm.Model:
    # The logp's gradient in alpha goes through gammainc's ScalarLoop.
    observed = np.array([0.8, 1.9, 3.0, 3.0, 0.4, 2.2, 3.0, 1.1])
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        beta = pm.Gamma("beta", 2.0, 1.0)
        pm.Censored("y", pm.Gamma.dist(alpha, beta), lower=None, upper=3.0, observed=observed)
    return model


def ofg_reused() -> pm.Model:
    a, b = pt.scalar("a"), pt.scalar("b")
    affine = OpFromGraph([a, b], [a * b + b], inline=False, name="affine")
    # affine(mu, 2) - affine(mu, 1) - 1 == mu: one OpFromGraph, applied twice.
    return _conjugate_model(
        lambda mu: (
            affine(mu, pt.constant(2.0, dtype=mu.dtype))
            - affine(mu, pt.constant(1.0, dtype=mu.dtype))
            - 1.0
        )
    )


# The local-level model: x_0 ~ N(0, LOCAL_LEVEL_P0), x_{t+1} ~ N(x_t, sigma_state),
# y_t ~ N(x_t, sigma_obs). Its observations are simulated once, with a fixed seed.
LOCAL_LEVEL_P0 = 1.0
LOCAL_LEVEL_TRUTH = {"sigma_state": 0.3, "sigma_obs": 0.5}
LOCAL_LEVEL_SEED, LOCAL_LEVEL_LENGTH = 20261124, 60
# pymc-extras' default: the Riccati recursion has settled once the Frobenius norm of
# the change in the predicted state covariance is below it.
RICCATI_TOL = 1e-10
LOG_2PI = float(np.log(2 * np.pi))


def simulate_local_level(
    sigma_state: float, sigma_obs: float, length: int, rng: np.random.Generator
) -> np.ndarray:
    walk = np.concatenate([[0.0], np.cumsum(sigma_state * rng.standard_normal(length - 1))])
    states = np.sqrt(LOCAL_LEVEL_P0) * rng.standard_normal() + walk
    return states + sigma_obs * rng.standard_normal(length)


LOCAL_LEVEL_OBSERVED = simulate_local_level(
    **LOCAL_LEVEL_TRUTH, length=LOCAL_LEVEL_LENGTH, rng=np.random.default_rng(LOCAL_LEVEL_SEED)
)


def local_level_system(
    sigma_state: pt.TensorVariable, sigma_obs: pt.TensorVariable
) -> tuple[pt.TensorVariable, ...]:
    """a0, P0, T, Z, R, H, Q (pymc-extras' names, no intercepts) of the local-level model."""
    one = np.ones((1, 1))
    return (
        pt.constant(np.zeros(1)),
        pt.constant(LOCAL_LEVEL_P0 * one),
        pt.constant(one),
        pt.constant(one),
        pt.constant(one),
        pt.reshape(sigma_obs**2, (1, 1)),
        pt.reshape(sigma_state**2, (1, 1)),
    )


def _gaussian_loglike(v: pt.TensorVariable, F_chol: pt.TensorVariable) -> pt.TensorVariable:
    """log N(v | 0, F), from the lower Cholesky factor of F."""
    scaled = solve_triangular(F_chol, v, lower=True)
    return -0.5 * (
        v.type.shape[0] * LOG_2PI + 2 * pt.log(pt.diag(F_chol)).sum() + (scaled**2).sum()
    )


def _kalman_step(y, a, P, T, Z, R, H, Q):
    """Update on y_t, then predict: a_{t+1|t}, P_{t+1|t} and log p(y_t | y_<t)."""
    v = y - Z @ a
    PZT = P @ Z.mT
    F_chol = pt.linalg.cholesky(Z @ PZT + H, lower=True)
    K = pt.linalg.cho_solve((F_chol, True), PZT.mT).mT
    I_KZ = pt.eye(T.type.shape[0]) - K @ Z
    a_filtered = a + K @ v
    # Joseph form, as pymc-extras: symmetric and positive semi-definite whatever the rounding.
    P_filtered = I_KZ @ P @ I_KZ.mT + K @ H @ K.mT
    return T @ a_filtered, T @ P_filtered @ T.mT + R @ Q @ R.mT, _gaussian_loglike(v, F_chol)


def _transient_step(y, a, P, *system):
    a_next, P_next, loglike = _kalman_step(y, a, P, *system)
    return (a_next, P_next, loglike), until(pt.sqrt(((P_next - P) ** 2).sum()) < RICCATI_TOL)


def _kalman_scan(step: Callable, data, a0, P0, *system) -> list[pt.TensorVariable]:
    """The predicted states, their covariances and the log-likelihoods, one per step taken."""
    return pytensor.scan(
        step,
        sequences=[data],
        outputs_info=[a0, P0, None],
        non_sequences=list(system),
        return_updates=False,
    )


def standard_filter_loglike(data, a0, P0, T, Z, R, H, Q) -> pt.TensorVariable:
    """log p(y_t | y_<t) for every t: pymc-extras' StandardFilter, one Kalman step per datum."""
    return _kalman_scan(_kalman_step, data, a0, P0, T, Z, R, H, Q)[2]


def _steady_state_loglike(data, a_star, P_star, T, Z, H) -> pt.TensorVariable:
    """The observations after the covariance has settled: the gain is fixed, no factorisation per
    step."""
    F_star = Z @ P_star @ Z.mT + H
    F_chol_star = pt.linalg.cholesky(F_star, lower=True)
    K_star = pt.linalg.solve(F_star.mT, (P_star @ Z.mT).mT, assume_a="pos").mT

    def steady_step(y, a, T, Z, K_star, F_chol_star):
        v = y - Z @ a
        return T @ (a + K_star @ v), _gaussian_loglike(v, F_chol_star)

    # Explicit non-sequences: from a closure, Scan takes the graph's root inputs (the sigmas)
    # and recomputes K_star inside its body, so the pullback, which differentiates with respect
    # to the op's inputs (H, Q: not roots), would miss every path through this Scan.
    return pytensor.scan(
        steady_step,
        sequences=[data],
        outputs_info=[a_star, None],
        non_sequences=[T, Z, K_star, F_chol_star],
        return_updates=False,
    )[1]


def _convergent_forward(data, a0, P0, T, Z, R, H, Q) -> list[pt.TensorVariable]:
    a_hat, P_hat, loglike_transient = _kalman_scan(_transient_step, data, a0, P0, T, Z, R, H, Q)
    # At most one step short of the series, so the steady-state scan always has a step (as
    # pymc-extras).
    steps = pt.minimum(a_hat.shape[0], data.shape[0] - 1)
    loglike_steady = _steady_state_loglike(
        data[steps:], a_hat[steps - 1], P_hat[steps - 1], T, Z, H
    )
    return [pt.concatenate([loglike_transient[:steps], loglike_steady]), steps]


def _split_filter_loglike(data, a0, P0, T, Z, R, H, Q, steps) -> pt.TensorVariable:
    """The convergent filter's log-likelihoods with the split at ``steps`` given: two for-Scans."""
    a_hat, P_hat, loglike_transient = _kalman_scan(
        _kalman_step, data[:steps], a0, P0, T, Z, R, H, Q
    )
    return pt.concatenate(
        [loglike_transient, _steady_state_loglike(data[steps:], a_hat[-1], P_hat[-1], T, Z, H)]
    )


class ConvergentKalmanFilter(SymbolicOp):
    """pymc-extras' convergent filter: log p(y_t | y_<t) for every t, and the number of transient
    steps.

    A while-Scan runs the full Kalman step until the predicted covariance
    settles, then a for-Scan runs the remaining observations with the
    steady-state gain. As in pymc-extras, the pullback is its own and never
    differentiates the while-Scan: it replays the pass with the split fixed at
    the steps taken (two for-Scans) and differentiates that (pymc-extras
    differentiates the steady-state part by hand instead).
    """

    inline = True

    def build_inner_graph(self, data, a0, P0, T, Z, R, H, Q):
        return _convergent_forward(data, a0, P0, T, Z, R, H, Q)

    def pullback(self, inputs, outputs, output_grads):
        data, a0, P0, T, Z, R, H, Q = inputs
        replayed = _split_filter_loglike(data, a0, P0, T, Z, R, H, Q, outputs[1])
        return pullback(replayed, list(inputs), output_grads[0], disconnected_inputs="ignore")


def convergent_filter_loglike(data, a0, P0, T, Z, R, H, Q) -> pt.TensorVariable:
    return ConvergentKalmanFilter()(data, a0, P0, T, Z, R, H, Q)[0]


def _local_level_draws(sigma_state, sigma_obs, size):
    """The generative process whose states the filters integrate out (prior and posterior predictive
    draws)."""
    initial = pm.Normal.dist(0.0, np.sqrt(LOCAL_LEVEL_P0))
    walk = pt.cumsum(pm.Normal.dist(0.0, sigma_state, shape=LOCAL_LEVEL_LENGTH - 1))
    return pm.Normal.dist(initial + pt.concatenate([pt.zeros(1), walk]), sigma_obs)


def _local_level_model(loglike: Callable[..., pt.TensorVariable]) -> pm.Model:
    def logp(value, sigma_state, sigma_obs):
        return loglike(value[:, None], *local_level_system(sigma_state, sigma_obs)).sum()

    with pm.Model() as model:
        sigma_state = pm.HalfNormal("sigma_state", 1.0)
        sigma_obs = pm.HalfNormal("sigma_obs", 1.0)
        pm.CustomDist(
            "y",
            sigma_state,
            sigma_obs,
            dist=_local_level_draws,
            logp=logp,
            signature="(),()->(t)",
            observed=LOCAL_LEVEL_OBSERVED,
        )
    return model


def kalman_standard() -> pm.Model:
    return _local_level_model(standard_filter_loglike)


def kalman_convergent() -> pm.Model:
    return _local_level_model(convergent_filter_loglike)


MU = {"mu": conjugate_posterior_mean()}
CASES = {
    case.name: case
    for case in [
        PyMCCase("while_scan_last", while_scan_last, MU),
        PyMCCase("while_scan_trace", while_scan_trace, MU),
        PyMCCase("scan_length_from_data", scan_length_from_data, MU),
        PyMCCase("optimize_starts", optimize_starts, MU | {"start": 0.0}, logp_rtol=1e-7),
        PyMCCase("minimize_blockwise", minimize_blockwise, MU),
        PyMCCase("censored_gamma", censored_gamma, None),
        PyMCCase("ofg_reused", ofg_reused, MU),
        PyMCCase("kalman_standard", kalman_standard, None),
        PyMCCase("kalman_convergent", kalman_convergent, None),
    ]
}
