"""``minimize(method="COBYQA")`` natively under NUMBA (`gpubackend.solvers.cobyqa`) against scipy's
vendored COBYQA.

Two levels, each compiled once:

- PyTensor: one function holding a few COBYQA problems (``tol``, bounds, budgets
  too small, a batch over Blockwise, one implicit-function gradient) compiled
  under NUMBA (no object mode) and under FAST_COMPILE (scipy itself).
- The solver on a hand-written objective that logs its calls, against scipy
  called on the same objective: the same points, to the last bit, and scipy's
  ``x``, ``fun``, ``nfev``, ``nit``, ``status`` and ``success``.
"""

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.optimize
from numba import njit
from pytensor.graph.replace import vectorize_graph
from pytensor.tensor.blockwise import BlockwiseWithCoreShape
from pytensor.tensor.optimize import minimize

from gpubackend.scipy_options.settings import COBYQASettings
from gpubackend.solvers.cobyqa import make_cobyqa_minimize
from tests.blas_rounding import expect_parted_paths
from tests.test_numba_optimize import REFERENCE_MODE, numba_function, rosenbrock

BOX = [(-2.0, 0.5), (-1.0, 2.0)]
OPTIONS = {
    "default": {},
    "tight": {"tol": 1e-10},
    "box": {"bounds": BOX},
    "out_of_evaluations": {"options": {"maxfev": 30}},
    "out_of_iterations": {"options": {"maxiter": 10}},
}
RTOL = {
    "default": 1e-4,
    "tight": 1e-7,
    "box": 1e-7,
    "out_of_evaluations": 1e-6,
    "out_of_iterations": 1e-6,
}
"""How close x comes to scipy's. NUMBA compiles the objective with fastmath, so its last bits
differ from scipy's and the two runs part after a few steps; they end within COBYQA's final
trust-region radius of each other (the solver on one objective takes scipy's very points: the
tests at the end)."""
START = np.array([-1.2, 1.0])
BATCH_A = np.array([0.7, 1.3, 2.0])


@pytest.fixture(scope="module")
def cobyqa_results():
    """Per problem ((solution, success) under NUMBA, the same under FAST_COMPILE); "gradient":
    d sum(solution) / da of ``tight``; "batch": ``tight`` vectorized over ``a``."""
    x = pt.vector("x")
    a = pt.scalar("a")
    batch_a = pt.vector("batch_a")
    objective = rosenbrock(x, a)
    outputs = []
    for options in OPTIONS.values():
        outputs += minimize(objective, x, method="COBYQA", optimizer_kwargs=options)
    tight = outputs[2 * list(OPTIONS).index("tight")]
    tight_success = outputs[2 * list(OPTIONS).index("tight") + 1]
    outputs.append(pytensor.grad(tight.sum(), a))
    outputs += vectorize_graph([tight, tight_success], {a: batch_a})
    inputs = [x, a, batch_a]
    with warnings.catch_warnings():
        # scipy warns that COBYQA does not use the gradient PyTensor's jac=True hands it.
        warnings.simplefilter("ignore", RuntimeWarning)
        native = numba_function(inputs, outputs)
        got = native(START, 1.3, BATCH_A)
        want = pytensor.function(inputs, outputs, mode=REFERENCE_MODE)(START, 1.3, BATCH_A)
    results = {
        name: (got[2 * i : 2 * i + 2], want[2 * i : 2 * i + 2]) for i, name in enumerate(OPTIONS)
    }
    results["gradient"] = (got[-3], want[-3])
    results["batch"] = (got[-2:], want[-2:])
    results["fn"] = native
    return results


@pytest.mark.parametrize("name", OPTIONS)
def test_cobyqa_matches_scipy(cobyqa_results, name, request):
    if name == "out_of_evaluations":
        expect_parted_paths(request)
    (solution, success), (want_solution, want_success) = cobyqa_results[name]
    assert bool(success) == bool(want_success)
    np.testing.assert_allclose(solution, want_solution, rtol=RTOL[name])


def test_cobyqa_verdicts_include_scipys_failures_out_of_budget(cobyqa_results):
    verdicts = {name: bool(cobyqa_results[name][1][1]) for name in OPTIONS}
    assert verdicts == {
        "default": True,
        "tight": True,
        "box": True,
        "out_of_evaluations": False,
        "out_of_iterations": False,
    }


def test_cobyqa_implicit_gradient_matches_scipy(cobyqa_results):
    gradient, want_gradient = cobyqa_results["gradient"]
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-6)
    # Closed form for Rosenbrock: x* = (a, a^2), so d(sum x*)/da = 1 + 2a.
    np.testing.assert_allclose(gradient, 1 + 2 * 1.3, rtol=1e-6)


def test_cobyqa_batched_over_blockwise_matches_scipy(cobyqa_results):
    [_] = [
        node
        for node in cobyqa_results["fn"].maker.fgraph.apply_nodes
        if isinstance(node.op, BlockwiseWithCoreShape) and node.op.core_op.method == "COBYQA"
    ]
    (solutions, successes), (want_solutions, want_successes) = cobyqa_results["batch"]
    np.testing.assert_allclose(solutions, want_solutions, rtol=RTOL["tight"])
    assert successes.all() and want_successes.all()


@pytest.mark.parametrize("mode", ["NUMBA", REFERENCE_MODE])
def test_cobyqa_radii_out_of_order_raise_scipys_error(mode):
    x = pt.vector("x")
    solution, _ = minimize(
        ((x - 1.0) ** 2).sum(),
        x,
        method="COBYQA",
        optimizer_kwargs={"options": {"initial_tr_radius": 1e-3, "final_tr_radius": 1e-2}},
    )
    with pytest.raises(ValueError, match="initial trust-region radius must be greater"):
        pytensor.function([x], solution, mode=mode)(np.zeros(2))


@pytest.mark.parametrize("mode", ["NUMBA", REFERENCE_MODE])
def test_cobyqa_every_variable_fixed_raises_scipys_error(mode):
    # Before: NUMBA returned x0 with success (the COBYQA package's own status 2), where scipy's
    # COBYQA raises on the empty bounds of its free variables.
    x = pt.vector("x")
    solution, _ = minimize(
        ((x - 1.0) ** 2).sum(), x, method="COBYQA", optimizer_kwargs={"bounds": [(0, 0), (2, 2)]}
    )
    with pytest.raises(ValueError, match="`lb` and `ub` must be non-empty"):
        pytensor.function([x], solution, mode=mode)(np.zeros(2))


# --- The solver itself, logging its evaluations -----------------------------------------------


@njit
def _logged_objective(x, args):
    """Rosenbrock's function with ``a`` (``kind`` 0), or ``sum((x_i - a i)^2 (i + 1))`` (1);
    logs each point in ``log`` (its first row counts them)."""
    kind, a, log = args
    k = int(log[0, 0])
    log[0, 0] += 1.0
    log[k + 1, : x.shape[0]] = x
    f = 0.0
    if kind == 0:
        for i in range(x.shape[0] - 1):
            f += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (a - x[i]) ** 2
    else:
        for i in range(x.shape[0]):
            f += (x[i] - a * i) ** 2 * (i + 1)
    return f


_cobyqa_minimize = make_cobyqa_minimize(_logged_objective)


@njit
def _native_cobyqa(x0, kind, a, log, settings):
    return _cobyqa_minimize(x0, (kind, a, log), settings)


def _settings(bounds, options):
    given = dict(options)
    if bounds is not None:
        lower, upper = zip(*bounds, strict=True)
        given["bounds"] = (tuple(map(float, lower)), tuple(map(float, upper)))
    return COBYQASettings(**given)


SOLVER_CASES = {
    "rosenbrock2": (0, np.array([-1.2, 1.0]), None, {}),
    "rosenbrock4": (0, np.array([-1.2, 1.0, -1.2, 1.0]), None, {}),
    "quadratic3": (1, np.array([3.0, -2.0, 0.5]), None, {}),
    "box": (0, np.array([-1.2, 1.0]), BOX, {}),
    "outside_the_box": (0, np.array([-3.0, 1.0]), BOX, {}),
    "start_near_the_bounds": (0, np.array([-1.2, 1.0]), [(-1.5, 2.0), (0.9, 3.0)], {}),
    "fixed_variable": (0, np.array([-1.2, 1.0, 0.3]), [(-2, 2), (0.5, 0.5), (-1, 3)], {}),
    "scaled": (0, np.array([-1.2, 1.0]), BOX, {"scale": True}),
    "quadratic_on_a_narrow_box": (1, np.array([3.0, -2.0]), [(2.5, 3.5), (-2.0, 0.0)], {}),
    "radii": (0, np.array([-1.2, 1.0]), None, {"initial_tr_radius": 0.3, "final_tr_radius": 1e-9}),
    "out_of_evaluations": (0, np.array([-1.2, 1.0]), None, {"maxfev": 30}),
    "out_of_evaluations_before_the_model": (0, np.array([-1.2, 1.0]), None, {"maxfev": 3}),
    "out_of_iterations": (0, np.array([-1.2, 1.0]), None, {"maxiter": 10}),
    "target": (0, np.array([-1.2, 1.0]), None, {"f_target": 1e-3}),
    "negative_feasibility_tol": (1, np.array([3.0, -2.0]), None, {"feasibility_tol": -1.0}),
}


def _scipy_cobyqa(kind, x0, a, bounds, options):
    points = []

    def logged(x):
        points.append(np.array(x, dtype=float))
        return _logged_objective.py_func(x, (kind, a, np.zeros((2, x.shape[0]))))

    result = scipy.optimize.minimize(logged, x0, method="COBYQA", bounds=bounds, options=options)
    return result, np.array(points)


@pytest.mark.parametrize("case", SOLVER_CASES)
def test_cobyqa_solver_takes_scipys_points_and_evaluations(case, request):
    if case in ("outside_the_box", "start_near_the_bounds", "scaled"):
        expect_parted_paths(request)
    kind, x0, bounds, options = SOLVER_CASES[case]
    want, want_points = _scipy_cobyqa(kind, x0, 1.0, bounds, options)
    log = np.zeros((3000, x0.shape[0]))
    x, fun, nfev, nit, status, success = _native_cobyqa(
        x0, kind, 1.0, log, _settings(bounds, options)
    )
    np.testing.assert_array_equal(log[1 : int(log[0, 0]) + 1], want_points)
    np.testing.assert_array_equal(x, want.x)
    assert (fun, nfev, nit, status, success) == (
        want.fun,
        want.nfev,
        want.nit,
        want.status,
        want.success,
    )
