"""minimize(method="trust-constr", bounds=...) lowered on JAX: scipy's ``tr_interior_point``.

The solver (`gpubackend.dispatch.jax.tr_interior_point`) is run directly to
compare its iterates, ``nit``, ``nfev`` and status with scipy's on the same
problem; the lowering is compared with scipy (FAST_COMPILE) through
PyTensor: solution, success, implicit gradient, a Blockwise batch.
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
from pytensor.tensor.optimize import minimize

from gpubackend import ObjectModeFallbackWarning, UnsupportedOption
from gpubackend.dispatch.jax.optimize_methods import solver_for_size
from gpubackend.dispatch.jax.tr_interior_point import TrustRegionInteriorPoint
from gpubackend.dispatch.jax.trust_region import DERIVATIVES_OPTION

A_VALUE = 1.3
X0 = np.array([-1.2, 1.0, 0.0])


def objective(x, a=A_VALUE):
    return (a - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2 + 0.1 * (x[2] - 1) ** 4


PROBLEMS = {
    "both-ends": (X0, [(None, 0.9), (0.0, 2.0), (-1.0, 0.5)]),
    "an-open-variable": (X0, [(None, 0.9), (None, None), (-1.0, 0.5)]),
    "upper-only": (X0, [(None, 0.9)] * 3),
    "start-outside": (np.array([3.0, -1.0, 2.0]), [(0.0, 2.0)] * 3),
}
"""Start and bounds: finite at both ends, at one end (scipy's three canonical forms), one
variable unbounded, and a start outside the box."""


def _bounds(pairs):
    lower = [-np.inf if low is None else low for low, _ in pairs]
    upper = [np.inf if high is None else high for _, high in pairs]
    return scipy.optimize.Bounds(lower, upper)


def _op(pairs, hess, options):
    x = pt.vector("x")
    solution, _ = minimize(
        objective(x),
        x,
        method="trust-constr",
        hess=hess,
        optimizer_kwargs={"bounds": pairs, "options": options},
    )
    return solution.owner.op


def _solved(start, pairs, hess=False, **options):
    """``(x, nit, nfev, status, success)`` of the JAX solver and scipy's result."""
    choice = solver_for_size(_op(pairs, hess, options), "float64")(start.size)
    assert isinstance(choice.solver, TrustRegionInteriorPoint)
    gradient, hessian = jax.grad(objective), jax.hessian(objective)
    own = {DERIVATIVES_OPTION: lambda y, _: (objective(y), gradient(y), hessian(y))}
    solution = optx.minimise(
        lambda y, _: objective(y),
        choice.solver,
        jnp.asarray(start),
        options=own if hess else None,
        max_steps=choice.max_steps,
        throw=False,
    )
    state = solution.state
    got = (
        np.asarray(solution.value),
        int(state.iterations),
        int(state.evaluations),
        int(state.status),
        bool(solution.result == optx.RESULTS.successful),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's "delta_grad == 0.0" of its BFGS
        want = scipy.optimize.minimize(
            lambda v: float(objective(v)),
            start,
            jac=lambda v: np.asarray(gradient(jnp.asarray(v))),
            hess=(lambda v: np.asarray(hessian(jnp.asarray(v)))) if hess else None,
            method="trust-constr",
            bounds=_bounds(pairs),
            options=options,
        )
    return got, want


@pytest.mark.parametrize("problem", PROBLEMS)
def test_with_the_ops_hessian_iterates_and_counts_are_scipys(problem):
    # The exact Hessian leaves nothing but rounding between the two: the same path to the end.
    (x, nit, nfev, status, success), want = _solved(*PROBLEMS[problem], hess=True)
    np.testing.assert_allclose(x, want.x, rtol=1e-9, atol=1e-12)
    assert (nit, status, success) == (want.nit, want.status, want.success)
    # One evaluation either way: whether a trial point repeats the last one exactly is a matter
    # of rounding (OpenBLAS's Haswell kernels on an AMD EPYC: 31 against scipy's 32 on both-ends).
    assert abs(nfev - want.nfev) <= 1
    assert success


@pytest.mark.parametrize("problem", PROBLEMS)
def test_bfgs_iterates_are_scipys_until_maxiter_and_fail_as_scipys(problem):
    # Before the first second-order correction (see below) the BFGS paths are one.
    (x, nit, nfev, status, success), want = _solved(*PROBLEMS[problem], maxiter=8)
    np.testing.assert_allclose(x, want.x, rtol=0, atol=1e-9)
    assert (nit, nfev, status, success) == (want.nit, want.nfev, want.status, want.success)
    assert not success


@pytest.mark.parametrize("problem", PROBLEMS)
def test_bfgs_solves_as_scipy_does(problem):
    # scipy's second-order correction of a bounds' step is rounding (their linearization is
    # exact), and its BFGS updates on it: past the first one the two paths part, to the same
    # minimum within the accuracy of scipy's default tolerances (the quartic term is flat there:
    # its variable is not resolved, by scipy neither).
    start, pairs = PROBLEMS[problem]
    (x, _, _, status, success), want = _solved(start, pairs)
    tight = scipy.optimize.minimize(
        objective, start, method="L-BFGS-B", bounds=_bounds(pairs), tol=1e-14
    ).x
    assert success and want.success and status == want.status
    for solution in (want.x, x):
        np.testing.assert_allclose(solution[:2], tight[:2], rtol=0, atol=1e-4)
        np.testing.assert_allclose(objective(solution), objective(tight), rtol=0, atol=1e-4)


def _compile(inputs, outputs, mode):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObjectModeFallbackWarning)
        return pytensor.function(inputs, outputs, mode=mode)


def test_lowering_matches_scipy_with_its_ift_gradient_budget_and_batch():
    x, a, batch_a = pt.vector("x"), pt.scalar("a"), pt.vector("batch_a")
    _, pairs = PROBLEMS["an-open-variable"]

    def solve(**options):
        return minimize(
            objective(x, a),
            x,
            method="trust-constr",
            hess=True,
            optimizer_kwargs={"bounds": pairs, "options": options},
        )

    solution, success = solve()
    outputs = [solution, success, pytensor.grad(solution.sum(), a)]
    outputs += [solve(maxiter=8)[1]]
    outputs += vectorize_graph([solution, success], {a: batch_a})
    inputs, values = [x, a, batch_a], (X0, A_VALUE, np.array([0.7, 1.3, 2.0]))
    got = _compile(inputs, outputs, "JAX_GPU")(*values)
    want = pytensor.function(inputs, outputs, mode="FAST_COMPILE")(*values)
    assert [bool(s) for s in (got[1], got[3])] == [bool(s) for s in (want[1], want[3])]
    assert bool(want[1]) and not bool(want[3])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-6)
    np.testing.assert_allclose(got[4], want[4], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(got[5], want[5])


def test_infinite_bounds_solve_as_no_bounds():
    # scipy drops infinite bounds: with none finite it runs its SQP without constraints.
    x = pt.vector("x")
    open_bounds, _ = minimize(
        objective(x), x, method="trust-constr", optimizer_kwargs={"bounds": [(None, None)] * 3}
    )
    unbounded, _ = minimize(objective(x), x, method="trust-constr")
    got_open, got_unbounded = _compile([x], [open_bounds, unbounded], "JAX_GPU")(X0)
    np.testing.assert_array_equal(got_open, got_unbounded)


def test_bounds_kept_feasible_are_refused_by_name():
    # scipy's trust-constr keeps the iterates strictly inside such bounds; before, the flag was
    # dropped and the bounds solved as plain ones.
    x = pt.vector("x")
    kept = scipy.optimize.Bounds([0.0] * 3, [1.0] * 3, keep_feasible=True)
    solution, _ = minimize(
        objective(x), x, method="trust-constr", optimizer_kwargs={"bounds": kept}
    )
    with pytest.raises(UnsupportedOption, match="keep_feasible"):
        pytensor.function([x], solution, mode="JAX_GPU")


def test_float32_x_solves_as_scipy_does_in_float64():
    _, pairs = PROBLEMS["both-ends"]

    def solve(dtype):
        x = pt.vector("x", dtype=dtype)
        solution, success = minimize(
            objective(x), x, method="trust-constr", optimizer_kwargs={"bounds": pairs}
        )
        return [x], [solution, success]

    got = _compile(*solve("float32"), "JAX_GPU")(X0.astype("float32"))
    want = pytensor.function(*solve("float64"), mode="FAST_COMPILE")(X0)
    assert got[0].dtype == np.float32
    assert bool(got[1]) and bool(want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-5)
