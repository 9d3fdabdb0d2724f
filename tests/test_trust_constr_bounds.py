"""minimize(method="trust-constr", bounds=...) native on NUMBA: scipy's interior-point method.

The solver itself is compared with scipy on Rosenbrock's function, counting
evaluations: the solution, ``success``, scipy's ``nit`` and its calls of the
objective, with bounds active and inactive, one-sided and infinite, a start
outside the bounds, every barrier option, and a ``maxiter`` that stops it early;
with the op's Hessian and with scipy's BFGS approximation. The lowering is
compared with scipy (FAST_COMPILE) on one compiled function: solutions,
``success``, the implicit gradient and a batch over a parameter (Blockwise).
"""

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.optimize
from numba import njit
from pytensor.graph.replace import vectorize_graph
from pytensor.tensor.optimize import minimize
from scipy.optimize import Bounds

from gpubackend import ObjectModeFallbackWarning
from gpubackend.scipy_options.settings import TrustConstrSettings
from gpubackend.solvers.tr_interior_point import (
    make_tr_interior_point_counting_iterations,
    make_tr_interior_point_hessian_counting_iterations,
)
from tests.test_sqp_methods import A_VALUE, ACTIVE_BOUNDS, BATCH_A, X0, objective
from tests.test_tnc import _counted_rosenbrock

# --- The solver itself, counting evaluations -------------------------------------------------


@njit
def _rosenbrock_hessian(x, a):
    n = x.shape[0]
    h = np.zeros((n, n))
    for i in range(n - 1):
        h[i, i] += 1200.0 * x[i] ** 2 - 400.0 * x[i + 1] + 2.0
        h[i, i + 1] -= 400.0 * x[i]
        h[i + 1, i] -= 400.0 * x[i]
        h[i + 1, i + 1] += 200.0
    return h


@njit
def _counted_rosenbrock_with_hessian(x, args):
    f, g = _counted_rosenbrock(x, args)
    return f, g, _rosenbrock_hessian(x, args[0])


_solve_bfgs = make_tr_interior_point_counting_iterations(_counted_rosenbrock)
_solve_hessian = make_tr_interior_point_hessian_counting_iterations(
    _counted_rosenbrock_with_hessian
)


@njit
def _native_bfgs(x0, a, counter, settings):
    return _solve_bfgs(x0, (a, counter), settings)


@njit
def _native_hessian(x0, a, counter, settings):
    return _solve_hessian(x0, (a, counter), settings)


def _scipy_trust_constr(x0, a, bounds, options, hess):
    calls = [0]

    def counted(x):
        calls[0] += 1
        return _counted_rosenbrock.py_func(x, (a, np.zeros(1)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # scipy's "delta_grad == 0.0" notice
        result = scipy.optimize.minimize(
            counted,
            x0,
            jac=True,
            hess=(lambda x: _rosenbrock_hessian.py_func(x, a)) if hess else None,
            method="trust-constr",
            bounds=bounds,
            options=options,
        )
    return result, calls[0]


def _settings(bounds, options):
    lower, upper = zip(*bounds, strict=True)
    return TrustConstrSettings(
        **options,
        bounds=(
            tuple(-np.inf if lo is None else float(lo) for lo in lower),
            tuple(np.inf if hi is None else float(hi) for hi in upper),
        ),
    )


START = np.array([-1.2, 1.0])
ACTIVE = [(-2.0, 0.5), (-1.0, 3.0)]
SOLVER_CASES = {
    "inactive": (START, [(-2.0, 2.0), (-2.0, 3.0)], {}),
    "active": (START, ACTIVE, {}),
    "one_sided": (START, [(None, 0.8), (0.1, None)], {}),
    "one_variable_free": (START, [(None, None), (0.5, 3.0)], {}),
    "start_outside": (np.array([3.0, -2.0]), [(-1.0, 0.5), (0.0, 2.0)], {}),
    "barrier_options": (
        START,
        ACTIVE,
        {
            "initial_barrier_parameter": 0.5,
            "initial_barrier_tolerance": 0.05,
            "initial_tr_radius": 0.3,
            "initial_constr_penalty": 2.0,
            "barrier_tol": 1e-6,
        },
    ),
    "out_of_iterations": (START, ACTIVE, {"maxiter": 15}),
}

_ROUNDING_LEVEL_CORRECTION = (
    "scipy tries a second-order correction after a rejected step and evaluates the corrected point "
    "only where it differs from the trial point; where the correction is rounding noise (the "
    "constraints already met), whether it does depends on the last bits of the projections "
    "(scipy's sparse LU, here their closed form)"
)
_COUNTS_DIFFER = {"barrier_options"}
"""Cases where the op's-Hessian runs differ from scipy's by more than one such evaluation. With
BFGS, whose update follows every evaluation, one such evaluation changes the path (to the same
solution), so its counts are not compared."""


def _solver_results(hessian: str, case: str):
    x0, bounds, options = SOLVER_CASES[case]
    counter = np.zeros(1)
    native = _native_hessian if hessian == "hessian" else _native_bfgs
    x, success, iterations = native(x0, 1.0, counter, _settings(bounds, options))
    want, want_calls = _scipy_trust_constr(x0, 1.0, bounds, options, hessian == "hessian")
    return (x, success, iterations, int(counter[0])), (want.x, want.success, want.nit, want_calls)


@pytest.mark.parametrize("case", SOLVER_CASES)
@pytest.mark.parametrize("hessian", ["hessian", "bfgs"])
def test_solver_takes_scipys_points_and_verdict(hessian, case):
    (x, success, _, _), (want_x, want_success, _, _) = _solver_results(hessian, case)
    assert success == want_success
    if hessian == "hessian":
        np.testing.assert_allclose(x, want_x, rtol=1e-10, atol=1e-12)
    elif case != "out_of_iterations":
        # BFGS updates after every evaluation, so a rounding-level one (`_COUNTS_DIFFER`) parts
        # the paths: the same minimiser to scipy's tolerance (seen 1.9e-8 apart in one
        # environment, 2e-11 in another).
        np.testing.assert_allclose(x, want_x, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            case,
            marks=pytest.mark.xfail(strict=True, reason=_ROUNDING_LEVEL_CORRECTION)
            if case in _COUNTS_DIFFER
            else (),
        )
        for case in SOLVER_CASES
    ],
)
def test_solver_counts_scipys_iterations_and_evaluations_on_the_ops_hessian(case):
    (_, _, iterations, calls), (_, _, want_iterations, want_calls) = _solver_results(
        "hessian", case
    )
    # scipy's evaluation of a rounding-level second-order correction depends on the last bits of
    # the projections (`_ROUNDING_LEVEL_CORRECTION`): one evaluation more or less, by environment.
    assert iterations == want_iterations
    assert abs(calls - want_calls) <= 1, (calls, want_calls)


# --- The lowering --------------------------------------------------------------------------------

LOWERING_CASES = {
    "bfgs": ({"bounds": ACTIVE_BOUNDS, "tol": 1e-10}, False, 1e-5),
    "hessian": ({"bounds": ACTIVE_BOUNDS}, True, 1e-6),
    "infinite_and_outside": (
        {"bounds": Bounds([-np.inf, 1.5, -np.inf], [0.5, np.inf, np.inf])},
        True,
        1e-6,
    ),
}
"""(optimizer_kwargs, hess, rtol) per case; the last starts outside its bounds (x[1] = 1 < 1.5).
With BFGS the path differs from scipy's after an evaluation more or less (see
`_ROUNDING_LEVEL_CORRECTION`) and both stop within scipy's ``xtol`` of the active bounds, a
barrier's width (here 1e-6) apart."""


@pytest.fixture(scope="module")
def lowered():
    """(NUMBA's, scipy's) outputs: per case solution, success and d sum(solution) / da; the
    ``maxiter`` verdict; the batch."""
    x, a, batch_a = pt.vector("x"), pt.scalar("a"), pt.vector("batch_a")
    outputs = []
    for optimizer_kwargs, hess, _ in LOWERING_CASES.values():
        solution, success = minimize(
            objective(x, a), x, method="trust-constr", hess=hess, optimizer_kwargs=optimizer_kwargs
        )
        outputs += [solution, success, pytensor.grad(solution.sum(), a)]
    _, out_of_iterations = minimize(
        objective(x, a),
        x,
        method="trust-constr",
        hess=True,
        optimizer_kwargs={"bounds": ACTIVE_BOUNDS, "options": {"maxiter": 10}},
    )
    batched = minimize(
        objective(x, a),
        x,
        method="trust-constr",
        hess=True,
        optimizer_kwargs={"bounds": ACTIVE_BOUNDS},
    )
    outputs += [out_of_iterations, *vectorize_graph(list(batched), {a: batch_a})]
    inputs, values = [x, a, batch_a], (X0, A_VALUE, BATCH_A)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObjectModeFallbackWarning)
        got = pytensor.function(inputs, outputs, mode="NUMBA")(*values)
    want = pytensor.function(inputs, outputs, mode="FAST_COMPILE")(*values)
    return got, want


@pytest.mark.parametrize("index, case", list(enumerate(LOWERING_CASES)))
def test_lowering_matches_scipy_including_ift_gradient(lowered, index, case):
    got, want = lowered
    solution, success, gradient = got[3 * index : 3 * index + 3]
    want_solution, want_success, want_gradient = want[3 * index : 3 * index + 3]
    rtol = LOWERING_CASES[case][2]
    assert bool(success) and bool(want_success)
    np.testing.assert_allclose(solution, want_solution, rtol=rtol, atol=1e-9)
    np.testing.assert_allclose(gradient, want_gradient, rtol=rtol)


def test_out_of_iterations_fails_as_scipy_does(lowered):
    got, want = lowered
    end = 3 * len(LOWERING_CASES)
    assert not bool(want[end])
    assert not bool(got[end])


def test_batched_over_blockwise_matches_scipy(lowered):
    got, want = lowered
    end = 3 * len(LOWERING_CASES) + 1
    (solution, success), (want_solution, want_success) = got[end:], want[end:]
    assert success.all() and want_success.all()
    np.testing.assert_allclose(solution, want_solution, rtol=1e-9)


def test_bounds_kept_feasible_are_refused_by_name():
    x = pt.vector("x")
    solution, _ = minimize(
        (x**2).sum(),
        x,
        method="trust-constr",
        optimizer_kwargs={"bounds": Bounds([0.0, 0.0], [1.0, 1.0], keep_feasible=True)},
    )
    with pytest.warns(ObjectModeFallbackWarning, match="keep_feasible"):
        pytensor.function([x], solution, mode="NUMBA")
