"""The models of bench_models.py, written as a PyMC user would, each scaled by one size.

- ``hierarchical``: a varying-intercept regression, ``n`` observations in 20
  groups (non-centred intercepts, one slope);
- ``local_level``: a random walk observed with noise, its states integrated out
  by a Kalman filter written as a Scan over the ``T`` observations;
- ``laplace``: Poisson counts in ``G`` groups, each group's log-rate a latent
  Normal(mu, tau) integrated out by a Laplace approximation whose modes
  ``minimize`` (BFGS) finds inside the logp, all groups in one minimisation.
  Written per group instead (one ``minimize`` vectorized over the groups, a
  Blockwise), its gradient compiles with a ``SplitDims`` that PyTensor leaves
  in the graph and that neither Numba (object mode) nor JAX lowers.

Data are simulated with a fixed seed per model and size.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pytensor.tensor.optimize import minimize

SEED = 20261129
LOG_2PI = float(np.log(2 * np.pi))
GROUPS = 20
COUNTS_PER_GROUP = 10
# The Laplace mode to near machine precision, so that every backend's logp is the same function.
MODE_TOL = 1e-10


def hierarchical(n: int) -> pm.Model:
    rng = np.random.default_rng(SEED)
    group = rng.integers(GROUPS, size=n)
    x = rng.standard_normal(n)
    intercepts = 1.0 + 0.5 * rng.standard_normal(GROUPS)
    y = intercepts[group] + 0.7 * x + 0.8 * rng.standard_normal(n)
    with pm.Model() as model:
        x_data = pm.Data("x", x)
        group_data = pm.Data("group", group)
        mu_a = pm.Normal("mu_a", 0.0, 5.0)
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        z = pm.Normal("z", 0.0, 1.0, shape=GROUPS)
        a = pm.Deterministic("a", mu_a + sigma_a * z)
        b = pm.Normal("b", 0.0, 5.0)
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.Normal("y", a[group_data] + b * x_data, sigma, observed=y)
    return model


def local_level(length: int) -> pm.Model:
    rng = np.random.default_rng(SEED)
    states = np.cumsum(0.3 * rng.standard_normal(length))
    observed = states + 0.5 * rng.standard_normal(length)

    def kalman_step(y_t, level, variance, state_var, obs_var):
        """log p(y_t | y_<t), then the level and its variance predicted for t + 1."""
        innovation_var = variance + obs_var
        innovation = y_t - level
        gain = variance / innovation_var
        loglike = -0.5 * (LOG_2PI + pt.log(innovation_var) + innovation**2 / innovation_var)
        return level + gain * innovation, variance * (1 - gain) + state_var, loglike

    with pm.Model() as model:
        y = pm.Data("y", observed)
        sigma_state = pm.HalfNormal("sigma_state", 1.0)
        sigma_obs = pm.HalfNormal("sigma_obs", 1.0)
        _, _, loglike = pytensor.scan(
            kalman_step,
            sequences=[y],
            outputs_info=[pt.as_tensor(0.0, dtype=y.dtype), pt.as_tensor(1.0, dtype=y.dtype), None],
            non_sequences=[sigma_state**2, sigma_obs**2],
            return_updates=False,
        )
        pm.Potential("kalman_loglike", loglike.sum())
    return model


def laplace(groups: int) -> pm.Model:
    rng = np.random.default_rng(SEED)
    log_rates = 0.5 + 0.4 * rng.standard_normal(groups)
    totals = rng.poisson(np.exp(log_rates)[:, None], size=(groups, COUNTS_PER_GROUP)).sum(axis=1)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        tau = pm.HalfNormal("tau", 1.0)

        # Every group's joint log density in its latent log-rate (up to the counts' factorials),
        # summed: the groups are independent given mu and tau, so one minimisation over all the
        # latents finds every group's mode, sought from the log of the group's mean count.
        theta = pt.constant(np.log((totals + 0.5) / COUNTS_PER_GROUP), name="theta")

        def log_joint(theta):
            return (
                totals * theta
                - COUNTS_PER_GROUP * pt.exp(theta)
                - 0.5 * ((theta - mu) / tau) ** 2
                - pt.log(tau)
                - 0.5 * LOG_2PI
            )

        mode, _ = minimize(
            -log_joint(theta).sum(),
            theta,
            optimizer_kwargs={"tol": MODE_TOL},
            use_vectorized_jac=True,
        )
        # Each group's negative curvature at its mode, and the Laplace approximation of its
        # integral over the latent.
        curvature = COUNTS_PER_GROUP * pt.exp(mode) + 1 / tau**2
        per_group = log_joint(mode) + 0.5 * LOG_2PI - 0.5 * pt.log(curvature)
        pm.Potential("laplace_loglike", per_group.sum())
    return model


MODELS: dict[str, tuple[str, Callable[[int], pm.Model]]] = {
    "hierarchical": ("observations n", hierarchical),
    "local_level": ("time steps T", local_level),
    "laplace": ("groups G", laplace),
}
