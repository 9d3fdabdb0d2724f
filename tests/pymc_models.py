"""PyMC models that stock JAX cannot lower, as data: each builder returns a model and what it should give.

Kept apart from the checks (tests/test_pymc.py), in the style of the
conformance catalogue. Most models are a conjugate Normal model in disguise:
``mu ~ Normal(0, 1)``, ``y_i ~ Normal(m, 1)``, where ``m`` equals ``mu`` but
is computed through the op family under test (a while-Scan, a solver, an
OpFromGraph...). The posterior of ``mu`` is then known in closed form while
every logp gradient still runs through that family. Where no closed form
exists (censored Gamma), the reference is PyMC's own sampler on NUMBA.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.graph.replace import vectorize_graph
from pytensor.scan import until
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
    return pytensor.scan(newton_step, outputs_info=[x0], non_sequences=[target], n_steps=60, return_updates=False)


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
    """Every optimize op, each start kind (constant, graph input, free variable) in scalar and vector form."""
    tol = {"tol": SOLVER_TOL}
    with pm.Model() as model:
        scalar_data, vector_data = pm.Data("scalar_start", 0.25), pm.Data("vector_start", np.zeros(2))
        # A free start: the solutions do not depend on it, so its posterior is its prior.
        free = pm.Normal("start", 0.0, 1.0, shape=2)
        free_first = free[0]  # one variable: a solver's start must appear in its equation as the same node
        mu = pm.Normal("mu", 0.0, 1.0)
        scalar_constant, vector_constant = pt.constant(0.25, dtype=mu.dtype), pt.constant(np.zeros(2))

        def minimized(start):
            return minimize(_quartic_bowl(start, mu), start, method="BFGS", optimizer_kwargs=tol)[0].mean()

        def rooted(start):
            return root(_cube_root_of(start, mu), start, method="hybr", optimizer_kwargs=tol)[0].mean()

        solved = [
            minimized(free),
            minimized(scalar_data),
            minimized(vector_constant),
            rooted(vector_data),
            rooted(scalar_constant),
            root_scalar(_cube_root_of(free_first, mu), free_first, method="newton", optimizer_kwargs={"xtol": SOLVER_TOL})[0],
            minimize_scalar(_quartic_bowl(scalar_constant, mu), scalar_constant, method="brent", optimizer_kwargs=tol)[0],
        ]
        pm.Normal("y", pt.add(*solved) / len(solved), 1.0, observed=OBSERVED)
    return model


def minimize_blockwise() -> pm.Model:
    offsets = np.array([[0.5, -1.0], [2.0, 0.1], [-0.3, 1.2]])

    def solved(mu):
        x, centre = pt.vector("x"), pt.vector("centre")
        solution, _ = minimize(_quartic_bowl(x, centre), x, method="BFGS", optimizer_kwargs={"tol": SOLVER_TOL})
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
    return _conjugate_model(lambda mu: affine(mu, pt.constant(2.0, dtype=mu.dtype)) - affine(mu, pt.constant(1.0, dtype=mu.dtype)) - 1.0)


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
    ]
}
