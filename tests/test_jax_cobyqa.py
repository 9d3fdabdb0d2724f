"""minimize(method="COBYQA") under JAX: scipy's vendored COBYQA without constraints but bounds.

The solutions, verdicts and implicit gradients are compared with FAST_COMPILE
(scipy itself); the solver, run on its own, with scipy's ``x``, ``fun``,
``nfev``, ``nit``, ``status`` and ``success``: equal where no comparison is
decided by the last bits (10 of the 13 problems below), else the same verdict and
answer within COBYQA's final radius after a different number of evaluations.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.optimize
from pytensor.graph.replace import vectorize_graph
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.optimize import minimize

from gpubackend.dispatch.jax.optimize_methods import _cobyqa
from gpubackend.scipy_options.settings import COBYQASettings
from tests.blas_rounding import expect_parted_paths
from tests.jax_lowering_harness import JAX_MODES, assert_matches_reference, compile_checked

A_VALUE = np.array([1.0, -2.0, 0.5])
X0 = np.zeros(3)
BOUNDS = [(None, 0.9), (-1.0, 2.0), (-0.2, 0.2)]
ROSENBROCK_START = np.array([-1.2, 1.0])


def _quartic(x, a):
    return ((x - a) ** 2).sum() + 0.1 * (x**4).sum()


def _rosenbrock(x, a):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (a[:-1] - x[:-1]) ** 2).sum()


OBJECTIVES = {"quartic": _quartic, "rosenbrock": _rosenbrock}

CASES = {
    # name: (objective, x0, a, minimize keyword arguments)
    "quartic": ("quartic", X0, A_VALUE, {}),
    "active_bounds": ("quartic", X0, A_VALUE, {"bounds": BOUNDS}),
    "scaled_bounds": (
        "quartic",
        X0,
        A_VALUE,
        {"bounds": [(-3.0, 0.9), (-1.0, 2.0), (-0.2, 0.2)], "options": {"scale": True}},
    ),
    "fixed_variable": ("quartic", X0, A_VALUE, {"bounds": [(1, 1), (-1, 2), (0, 0)]}),
    "radii": (
        "quartic",
        np.ones(3),
        A_VALUE,
        {"options": {"initial_tr_radius": 0.3, "final_tr_radius": 1e-8}},
    ),
    "out_of_evaluations": ("rosenbrock", ROSENBROCK_START, np.ones(2), {"options": {"maxfev": 30}}),
    "out_of_evaluations_at_start": (
        "rosenbrock",
        ROSENBROCK_START,
        np.ones(2),
        {"options": {"maxfev": 3}},
    ),
    "out_of_iterations": ("rosenbrock", ROSENBROCK_START, np.ones(2), {"options": {"maxiter": 10}}),
    "f_target": ("quartic", X0, A_VALUE, {"options": {"f_target": 1.0}}),
    # A lower bound at +inf: scipy's infeasible bounds, x0 evaluated once and returned.
    "infeasible_bounds": (
        "quartic",
        X0,
        A_VALUE,
        {"bounds": [(np.inf, np.inf), (-1, 2), (None, None)]},
    ),
}
ROUNDING_APART = {
    # Paths that part from scipy's at rounding (jnp.linalg.eigh against LAPACK's dsyevr, XLA's
    # products against BLAS: the trial points differ by 1e-15 at first, more as Rosenbrock's
    # valley amplifies it) and reach scipy's answer with as many evaluations give or take 20%.
    "rosenbrock": ("rosenbrock", ROSENBROCK_START, np.ones(2), {}),
    "rosenbrock_4d": ("rosenbrock", np.tile(ROSENBROCK_START, 2), np.ones(4), {}),
    "rosenbrock_tight": ("rosenbrock", ROSENBROCK_START, np.ones(2), {"tol": 1e-10}),
}
ALL_CASES = {**CASES, **ROUNDING_APART}


def _options(kwargs) -> dict:
    options = dict(kwargs.get("options", {}))
    if "tol" in kwargs:
        options.setdefault("final_tr_radius", kwargs["tol"])
    return options


def _scipy(case):
    objective, x0, a, kwargs = case
    fun = OBJECTIVES[objective]
    return scipy.optimize.minimize(
        lambda x: float(fun(x, a)),
        x0,
        method="COBYQA",
        bounds=kwargs.get("bounds"),
        options=_options(kwargs),
    )


def _solver_outcome(case):
    """``(x, fun, nfev, nit, status, success)`` of the JAX solver on its own, with scipy's
    settings."""
    objective, x0, a, kwargs = case
    options = _options(kwargs)
    bounds = kwargs.get("bounds")
    if bounds is not None:
        options["bounds"] = (
            tuple(-np.inf if low is None else float(low) for low, _ in bounds),
            tuple(np.inf if high is None else float(high) for _, high in bounds),
        )
    choice = _cobyqa(COBYQASettings()._replace(**options), x0.size, "float64")
    fun = OBJECTIVES[objective]

    @jax.jit
    def solve(start):
        solution = optx.minimise(
            lambda y, args: fun(y, jnp.asarray(a)),
            choice.solver,
            start,
            max_steps=choice.max_steps,
            throw=False,
        )
        return choice.solver.outcome(start, solution.state)

    return solve(jnp.asarray(x0))


@pytest.mark.parametrize("name", list(CASES))
def test_the_solver_takes_scipys_steps(name):
    want = _scipy(CASES[name])
    x, fun, nfev, nit, status, success = _solver_outcome(CASES[name])
    assert (int(status), bool(success), int(nfev), int(nit)) == (
        want.status,
        want.success,
        want.nfev,
        want.nit,
    )
    # The same points up to rounding, which COBYQA's solves amplify (1e-15 at first, 1e-8 after
    # 30 evaluations on Rosenbrock).
    np.testing.assert_allclose(np.asarray(x), want.x, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(float(fun), want.fun, rtol=1e-6, atol=1e-15)


@pytest.mark.parametrize("name", list(ROUNDING_APART))
def test_the_solver_reaches_scipys_answer_where_rounding_parts_the_paths(name, request):
    if name == "rosenbrock_4d":
        expect_parted_paths(request)
    want = _scipy(ROUNDING_APART[name])
    x, fun, nfev, _, status, success = _solver_outcome(ROUNDING_APART[name])
    assert (int(status), bool(success)) == (want.status, want.success)
    np.testing.assert_allclose(np.asarray(x), want.x, rtol=0, atol=1e-6)
    np.testing.assert_allclose(float(fun), want.fun, rtol=1e-6, atol=1e-12)
    assert abs(int(nfev) - want.nfev) <= 0.2 * want.nfev


def _graph(case):
    objective, _, _, kwargs = case
    x, a = pt.vector("x"), pt.vector("a")
    solution, success = minimize(
        OBJECTIVES[objective](x, a), x, method="COBYQA", optimizer_kwargs=kwargs
    )
    return [x, a], [solution, pt.grad(solution.sum(), a)], success


@pytest.mark.parametrize("name", ["quartic", "active_bounds", "out_of_evaluations"])
def test_minimize_cobyqa_matches_scipy_with_its_gradient(name):
    # Before: UnsupportedMethod (no JAX lowering). The gradient is the implicit one.
    case = ALL_CASES[name]
    inputs, outputs, success = _graph(case)
    values = [case[1], case[2]]
    with warnings.catch_warnings():
        # scipy warns that COBYQA does not use the gradient PyTensor's jac=True hands it.
        warnings.simplefilter("ignore", RuntimeWarning)
        got = assert_matches_reference(
            inputs, [*outputs, success], values, "JAX_GPU", rtol=1e-5, atol=1e-9
        )
    assert bool(got[2]) == (name != "out_of_evaluations")


@pytest.mark.parametrize("mode", JAX_MODES)
def test_blockwise_cobyqa_is_vmapped(mode):
    inputs, outputs, success = _graph(CASES["active_bounds"])
    x, a = inputs
    batch_a = pt.matrix("batch_a")
    *batched, batched_success = vectorize_graph([*outputs, success], {a: batch_a})
    assert isinstance(batched_success.owner.op, Blockwise)
    values = [X0, np.stack([A_VALUE, -A_VALUE, 2 * A_VALUE])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert_matches_reference([x, batch_a], batched, values, mode, rtol=1e-6, atol=1e-6)
    assert compile_checked([x, batch_a], [batched_success], values, mode)[0].all()


def test_cobyqa_refuses_what_scipy_refuses_by_name():
    inputs, outputs, _ = _graph(
        ("quartic", X0, A_VALUE, {"options": {"initial_tr_radius": 1e-3, "final_tr_radius": 1.0}})
    )
    with pytest.raises(ValueError, match="initial trust-region radius"):
        pytensor.function(inputs, outputs, mode="JAX_GPU")(X0, A_VALUE)


def test_cobyqa_refuses_every_variable_fixed_as_scipy_does():
    inputs, outputs, _ = _graph(("quartic", X0, A_VALUE, {"bounds": [(1, 1), (2, 2), (0, 0)]}))
    with pytest.raises(ValueError, match="fixed"):
        pytensor.function(inputs, outputs, mode="JAX_GPU")(X0, A_VALUE)


def test_a_float32_solve_stays_float32():
    # Before: the scaled bounds' float64 constants promoted the trial points, which optimistix's
    # closure-converted objective refused.
    x, a = pt.vector("x", dtype="float32"), pt.vector("a", dtype="float32")
    solution, success = minimize(
        _quartic(x, a),
        x,
        method="COBYQA",
        optimizer_kwargs={"tol": 1e-4, **CASES["scaled_bounds"][3]},
    )
    values = [X0.astype("float32"), A_VALUE.astype("float32")]
    got = assert_matches_reference(
        [x, a], [solution, success], values, "JAX_GPU", rtol=1e-3, atol=1e-3
    )
    assert np.asarray(got[0]).dtype == np.float32
    assert bool(got[1])
