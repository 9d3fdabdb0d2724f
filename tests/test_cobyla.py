"""``minimize(method="COBYLA")`` natively under NUMBA (`gpubackend.solvers.cobyla`) against scipy.

Two levels, each compiled as few times as it can be:

- PyTensor: one function holding COBYLA on Rosenbrock's function with several
  option sets (bounds active at the solution, a budget too small, a target
  value, tuned radii), its implicit-function gradient and a Blockwise batch,
  compiled under NUMBA (no object mode) and under FAST_COMPILE (scipy itself).
- The solver on hand-written objectives, against scipy called on the same
  objective: the same result fields (``x``, ``fun``, ``nfev``, ``status``,
  ``success``, ``maxcv``).
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

from gpubackend.dispatch.numba.optimize_plan import solver_plan
from gpubackend.scipy_options.settings import COBYLASettings
from gpubackend.solvers.cobyla import make_cobyla_minimize
from tests.test_numba_optimize import REFERENCE_MODE, numba_function

BOX = [(-2.0, 0.5), (-1.0, 2.0)]
"""The minimum (about (1.1, 1.1) at a = 1.3) lies outside: the upper bound on x[0] is active."""
COBYLA_OPTIONS = {
    "default": {},
    "tight": {"tol": 1e-10},
    "box": {"tol": 1e-10, "bounds": BOX},
    "tuned": {"options": {"rhobeg": 0.3, "tol": 1e-9, "maxiter": 3000, "catol": 1e-6}},
    "target": {"options": {"f_target": 1.0}},
    "out_of_evaluations": {"options": {"maxiter": 8}},
}
CONVERGED = ["default", "tight", "box", "tuned", "target"]
ATOL = {
    "default": 1e-3,
    "tight": 1e-7,
    "box": 1e-7,
    "tuned": 1e-6,
    "target": 0.5,
    "out_of_evaluations": 0.5,
}
"""How close x comes to scipy's. The objective's last bits differ between the backends (NUMBA
compiles the rewritten graph with fastmath), and COBYLA compares step lengths with the
trust-region radius they equal, so the two runs share their first steps only: once converged they
agree to about ``tol``; at a target or out of evaluations, to scipy's own distance from the
minimum."""
START = np.array([-1.2, 1.0])
A_VALUE = 1.3
BATCH_A = np.array([0.7, 1.3, 2.0])


def objective(x, a):
    """A coupled convex quartic, its minimum near (a, a) - (a**3 / 10, a**3 / 10)."""
    return ((x - a) ** 2).sum() + 0.1 * (x**4).sum() + 0.5 * (x[0] - x[1]) ** 2


@pytest.fixture(scope="module")
def cobyla_results():
    """Per problem: ((solution, success, f(solution)) under NUMBA, the same under FAST_COMPILE);
    "gradient": d sum(solution) / da of ``tight``; "batch": ``tight`` over ``BATCH_A``."""
    x = pt.vector("x")
    a = pt.scalar("a")
    batch_a = pt.vector("batch_a")
    outputs = []
    for options in COBYLA_OPTIONS.values():
        solution, success = minimize(objective(x, a), x, method="COBYLA", optimizer_kwargs=options)
        outputs += [solution, success, objective(solution, a)]
    tight = 3 * list(COBYLA_OPTIONS).index("tight")
    tight_solution, tight_success = outputs[tight], outputs[tight + 1]
    outputs.append(pytensor.grad(tight_solution.sum(), a))
    outputs += vectorize_graph([tight_solution, tight_success], {a: batch_a})
    inputs = [x, a, batch_a]
    native = numba_function(inputs, outputs)
    reference = pytensor.function(inputs, outputs, mode=REFERENCE_MODE)
    got, want = native(START, A_VALUE, BATCH_A), reference(START, A_VALUE, BATCH_A)
    results = {
        name: (got[3 * i : 3 * i + 3], want[3 * i : 3 * i + 3])
        for i, name in enumerate(COBYLA_OPTIONS)
    }
    results["gradient"] = (got[-3], want[-3])
    results["batch"] = (got[-2:], want[-2:])
    results["fn"] = native
    return results


@pytest.mark.parametrize("name", COBYLA_OPTIONS)
def test_cobyla_matches_scipy(cobyla_results, name):
    (solution, success, value), (want_solution, want_success, want_value) = cobyla_results[name]
    assert bool(success) == bool(want_success)
    np.testing.assert_allclose(solution, want_solution, rtol=0, atol=ATOL[name])
    np.testing.assert_allclose(value, want_value, rtol=0, atol=ATOL[name])


def test_cobyla_verdicts_include_scipys_failure_out_of_evaluations(cobyla_results):
    verdicts = {name: bool(cobyla_results[name][1][1]) for name in COBYLA_OPTIONS}
    assert verdicts == {**dict.fromkeys(CONVERGED, True), "out_of_evaluations": False}


def test_cobyla_bounds_are_active_at_the_solution(cobyla_results):
    (solution, _, _), (want_solution, _, _) = cobyla_results["box"]
    np.testing.assert_allclose([solution[0], want_solution[0]], BOX[0][1], rtol=0, atol=1e-7)


def test_cobyla_implicit_gradient_matches_scipy(cobyla_results):
    gradient, want_gradient = cobyla_results["gradient"]
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-5)


def test_cobyla_batched_over_blockwise_matches_scipy(cobyla_results):
    [_] = [
        node
        for node in cobyla_results["fn"].maker.fgraph.apply_nodes
        if isinstance(node.op, BlockwiseWithCoreShape) and node.op.core_op.method == "COBYLA"
    ]
    (solutions, successes), (want_solutions, want_successes) = cobyla_results["batch"]
    np.testing.assert_allclose(solutions, want_solutions, rtol=0, atol=ATOL["tight"])
    assert successes.all() and want_successes.all()


def test_cobyla_is_native_and_takes_its_options():
    x = pt.vector("x")
    for options in COBYLA_OPTIONS.values():
        solution, _ = minimize(((x - 1.0) ** 2).sum(), x, method="COBYLA", optimizer_kwargs=options)
        assert solver_plan(solution.owner.op).solver == "cobyla"


@pytest.mark.parametrize("mode", ["NUMBA", REFERENCE_MODE])
def test_cobyla_with_crossed_bounds_raises_scipys_error(mode):
    x = pt.vector("x")
    solution, _ = minimize(
        ((x - 1.0) ** 2).sum(), x, method="COBYLA", optimizer_kwargs={"bounds": [(0, 1), (2, -2)]}
    )
    with pytest.raises(ValueError, match="upper bound is less than the corresponding lower"):
        pytensor.function([x], solution, mode=mode)(np.zeros(2))


# --- The solver itself, counting evaluations -------------------------------------------------

QUADRATIC, ROSENBROCK = 0, 1


@njit
def _objective(x, args):
    """``QUADRATIC``: sum((i + 1) * (x_i - 1)^2); ``ROSENBROCK``: Rosenbrock's function with
    ``a = 1``. Counts calls in ``args[1]``."""
    kind, counter = args
    counter[0] += 1
    f = 0.0
    if kind == QUADRATIC:
        for i in range(x.shape[0]):
            f += (i + 1) * (x[i] - 1.0) ** 2
        return f
    for i in range(x.shape[0] - 1):
        f += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return f


_minimize = make_cobyla_minimize(_objective)


@njit
def _native_cobyla(x0, kind, counter, settings):
    return _minimize(x0, (kind, counter), settings)


def _scipy_cobyla(x0, kind, bounds, options):
    def counted(x):
        return _objective.py_func(x, (kind, np.zeros(1)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return scipy.optimize.minimize(counted, x0, method="COBYLA", bounds=bounds, options=options)


def _settings(bounds, options):
    given = dict(options)
    if bounds is not None:
        lower, upper = zip(*bounds, strict=True)
        given["bounds"] = (
            tuple(-np.inf if lo is None else float(lo) for lo in lower),
            tuple(np.inf if hi is None else float(hi) for hi in upper),
        )
    return COBYLASettings(**given)


QUADRATIC_START = np.array([3.0, -2.0, 0.5])
QUADRATIC_BOX = [(-1.0, 0.5), (None, 2.0), (1.5, 3.0)]
SAME_PATH_CASES = {
    "quadratic": (QUADRATIC_START, QUADRATIC, None, {}),
    "quadratic_active_bounds": (np.zeros(3), QUADRATIC, QUADRATIC_BOX, {"tol": 1e-8}),
    "budget_below_n_plus_2": (QUADRATIC_START, QUADRATIC, None, {"maxiter": 2}),
    "target": (QUADRATIC_START, QUADRATIC, None, {"f_target": 1.0}),
}
"""Problems on which the solver takes scipy's very points: the same result, evaluation count
included."""
CONVERGED_CASES = {
    "quadratic_tight": (QUADRATIC_START, QUADRATIC, None, {"tol": 1e-10}),
    "fixed_variable": (
        np.array([-1.2, 1.0, 0.3]),
        QUADRATIC,
        [(-2, 2), (0.5, 0.5), (-1, 3)],
        {"tol": 1e-8},
    ),
    "rhoend_above_rhobeg": (QUADRATIC_START, QUADRATIC, None, {"rhobeg": 0.1, "tol": 0.5}),
    # The same path as scipy's on some BLAS kernels; OpenBLAS's Haswell kernels on an AMD EPYC
    # part them at the end (72 evaluations against scipy's 71).
    "quadratic_outside_the_box": (
        np.array([5.0, -4.0, 0.0]),
        QUADRATIC,
        QUADRATIC_BOX,
        {"tol": 1e-8},
    ),
}
"""Longer solves: numpy's BLAS fuses multiply-adds where the solver rounds twice, and a step as
long as the trust-region radius then takes another branch of a test (see the README), so the
solver converges where scipy does by another path (another number of evaluations)."""
OUT_OF_EVALUATIONS_CASES = {
    "rosenbrock_default_budget": (np.array([-1.2, 1.0]), ROSENBROCK, None, {}),
    "rosenbrock_short_budget": (np.array([-1.2, 1.0]), ROSENBROCK, None, {"maxiter": 30}),
}


def _solve_both(case):
    x0, kind, bounds, options = case
    want = _scipy_cobyla(x0, kind, bounds, options)
    counter = np.zeros(1)
    got = _native_cobyla(x0, kind, counter, _settings(bounds, options))
    assert int(counter[0]) == got.nfev
    return got, want


@pytest.mark.parametrize("case", SAME_PATH_CASES)
def test_cobyla_solver_returns_scipys_result(case):
    got, want = _solve_both(SAME_PATH_CASES[case])
    assert (got.nfev, got.status, got.success) == (want.nfev, want.status, want.success)
    np.testing.assert_allclose(got.x, want.x, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got.fun, want.fun, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got.maxcv, want.maxcv, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("case", CONVERGED_CASES)
def test_cobyla_solver_converges_where_scipy_does(case):
    got, want = _solve_both(CONVERGED_CASES[case])
    assert (got.status, got.success) == (want.status, want.success) == (0, True)
    np.testing.assert_allclose(got.x, want.x, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got.maxcv, want.maxcv, rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", OUT_OF_EVALUATIONS_CASES)
def test_cobyla_solver_runs_out_of_evaluations_as_scipy_does(case):
    got, want = _solve_both(OUT_OF_EVALUATIONS_CASES[case])
    assert (got.nfev, got.status, got.success) == (want.nfev, want.status, want.success)
    assert want.status == 3
    assert got.fun <= _objective.py_func(
        OUT_OF_EVALUATIONS_CASES[case][0], (ROSENBROCK, np.zeros(1))
    )


def test_cobyla_solver_cases_cover_scipys_verdicts():
    statuses = {_scipy_cobyla(*case).status for case in SAME_PATH_CASES.values()}
    assert statuses == {0, 1, 3}
