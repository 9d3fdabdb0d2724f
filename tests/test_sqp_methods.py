"""minimize(method="SLSQP" | "trust-constr") without constraints: native on NUMBA, lowered on JAX.

Each backend is compared with scipy (FAST_COMPILE) on one compiled function
per backend and method: the solution and its implicit gradient at a tight
tolerance, with active bounds (SLSQP) or the op's Hessian (trust-constr), the
``success`` verdicts of a budget just below and at scipy's own iteration
count, and a batch over the parameter (Blockwise).
"""

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.optimize
from pytensor.graph.replace import vectorize_graph
from pytensor.tensor.optimize import minimize

from gpubackend import ObjectModeFallbackWarning, UnsupportedOption

MODES = ["NUMBA", "JAX_GPU"]
A_VALUE = 1.3
X0 = np.array([-1.2, 1.0, 0.0])
BATCH_A = np.array([0.7, 1.3, 2.0])
ACTIVE_BOUNDS = [(None, 0.9), (0.0, 2.0), (-1.0, 0.5)]
"""At the minimum the first and third bounds are active (unbounded: x = (a, a^2, 1))."""


def objective(x, a):
    return (a - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2 + 0.1 * (x[2] - 1) ** 4


def _scipy_iterations(method: str) -> int:
    """scipy's own iteration count on `objective` from X0 at its default options."""

    def gradient(x):
        return np.array(
            [
                -2 * (A_VALUE - x[0]) - 400 * x[0] * (x[1] - x[0] ** 2),
                200 * (x[1] - x[0] ** 2),
                0.4 * (x[2] - 1) ** 3,
            ]
        )

    result = scipy.optimize.minimize(
        lambda x: objective(x, A_VALUE), X0, jac=gradient, method=method
    )
    assert result.success, result.message
    return result.nit


def _compile(inputs, outputs, mode):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObjectModeFallbackWarning)
        return pytensor.function(inputs, outputs, mode=mode)


CASES = {
    "SLSQP": {
        "tight": ({"tol": 1e-10}, False),
        "bounded": ({"tol": 1e-10, "bounds": ACTIVE_BOUNDS}, False),
    },
    "trust-constr": {
        "tight": ({"tol": 1e-10}, False),
        "hessian": ({"tol": 1e-10}, True),
    },
}
"""Per method, the cases checked against scipy: (optimizer_kwargs, hess)."""


@pytest.fixture(
    scope="module",
    params=[(m, method) for m in MODES for method in CASES],
    ids=lambda param: "-".join(param),
)
def results(request):
    """(got, scipy's) per case: solution, success and d sum(solution) / da; budget verdicts; the
    batch."""
    mode, method = request.param
    x, a, batch_a = pt.vector("x"), pt.scalar("a"), pt.vector("batch_a")

    def solve(hess=False, **optimizer_kwargs):
        return minimize(
            objective(x, a), x, method=method, hess=hess, optimizer_kwargs=optimizer_kwargs
        )

    cases = {name: solve(hess, **kwargs) for name, (kwargs, hess) in CASES[method].items()}
    outputs = []
    for solution, success in cases.values():
        outputs += [solution, success, pytensor.grad(solution.sum(), a)]
    count = _scipy_iterations(method)
    outputs += [solve(options={"maxiter": limit})[1] for limit in (count - 1, count)]
    outputs += vectorize_graph(list(cases["tight"]), {a: batch_a})
    inputs, values = [x, a, batch_a], (X0, A_VALUE, BATCH_A)
    got = _compile(inputs, outputs, mode)(*values)
    want = pytensor.function(inputs, outputs, mode="FAST_COMPILE")(*values)
    by_case = {
        name: (got[3 * i : 3 * i + 3], want[3 * i : 3 * i + 3]) for i, name in enumerate(cases)
    }
    end = 3 * len(cases)
    return {
        **by_case,
        "budget": (got[end : end + 2], want[end : end + 2]),
        "batch": (got[end + 2 :], want[end + 2 :]),
        "method": method,
    }


def test_matches_scipy_including_ift_gradient(results):
    for case in CASES[results["method"]]:
        (solution, success, gradient), (want_solution, want_success, want_gradient) = results[case]
        assert bool(success) and bool(want_success), case
        np.testing.assert_allclose(solution, want_solution, rtol=1e-6, atol=1e-9, err_msg=case)
        np.testing.assert_allclose(gradient, want_gradient, rtol=1e-6, err_msg=case)


def test_slsqp_stops_on_the_active_bounds():
    want = np.array([0.9, 0.81, 0.5])
    x, a = pt.vector("x"), pt.scalar("a")
    solution, _ = minimize(
        objective(x, a), x, method="SLSQP", optimizer_kwargs={"bounds": ACTIVE_BOUNDS}
    )
    for mode in MODES:
        np.testing.assert_allclose(_compile([x, a], solution, mode)(X0, A_VALUE), want, rtol=1e-6)


def test_budget_verdict_matches_scipy_around_its_own_count(results):
    got, want = results["budget"]
    assert [bool(s) for s in want] == [False, True]
    assert [bool(s) for s in got] == [False, True]


def test_batched_over_blockwise_matches_scipy(results):
    (solution, success), (want_solution, want_success) = results["batch"]
    assert success.all() and want_success.all()
    np.testing.assert_allclose(solution, want_solution, rtol=1e-6)


@pytest.mark.parametrize(
    "method, refused",
    [
        ("SLSQP", {"constraints": [{"type": "eq", "fun": lambda v: v[0] - 1}]}),
        ("trust-constr", {"constraints": [{"type": "eq", "fun": lambda v: v[0] - 1}]}),
    ],
)
@pytest.mark.parametrize("mode", MODES)
def test_what_is_not_lowered_is_refused_by_name(mode, method, refused):
    x = pt.vector("x")
    solution, _ = minimize((x**2).sum(), x, method=method, optimizer_kwargs=refused)
    [name] = refused
    if mode == "NUMBA":
        with pytest.warns(ObjectModeFallbackWarning, match=name):
            pytensor.function([x], solution, mode=mode)
    else:
        with pytest.raises(UnsupportedOption, match=name):
            pytensor.function([x], solution, mode=mode)


@pytest.mark.parametrize("mode", ["FAST_COMPILE", *MODES])
def test_slsqp_bounds_crossing_raise_scipys_error(mode):
    x = pt.vector("x")
    solution, _ = minimize(
        (x**2).sum(), x, method="SLSQP", optimizer_kwargs={"bounds": [(1.0, 0.0), (0.0, 1.0)]}
    )
    with pytest.raises(ValueError, match="upper bound is less than the corresponding lower bound"):
        _compile([x], solution, mode)(np.zeros(2))


@pytest.mark.parametrize("method", CASES)
def test_float32_x_solves_on_jax_as_scipy_does_in_float64(method):
    # scipy 1.18's SLSQP refuses a float32 x (its C wrapper): the reference runs in float64.
    def solve(dtype):
        x, a = pt.vector("x", dtype=dtype), pt.scalar("a", dtype=dtype)
        solution, success = minimize(objective(x, a), x, method=method)
        return [x, a], [solution, success]

    got = _compile(*solve("float32"), "JAX_GPU")(X0.astype("float32"), np.float32(A_VALUE))
    want = pytensor.function(*solve("float64"), mode="FAST_COMPILE")(X0, A_VALUE)
    assert got[0].dtype == np.float32
    assert bool(got[1]) and bool(want[1])
    # The quartic term is flat at its minimum: compare the objective, which float32 resolves.
    got_value = objective(got[0].astype("float64"), A_VALUE)
    np.testing.assert_allclose(got_value, objective(want[0], A_VALUE), rtol=0, atol=1e-6)
