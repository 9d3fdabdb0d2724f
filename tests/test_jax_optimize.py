"""Optimize ops (minimize, root, minimize_scalar, root_scalar) lowered to optimistix under JAX and
JAX_GPU.

Every result is compared with the FAST_COMPILE backend, which runs scipy; the
gradients are PyTensor's implicit-function gradients, lowered like any graph.
"""

import dataclasses
import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.optimize
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.optimize import (
    MinimizeOp,
    minimize,
    minimize_scalar,
    root,
    root_scalar,
)

from gpubackend import UnsupportedMethod, UnsupportedOption
from gpubackend.conformance.method_cases import build_method_case
from gpubackend.scipy_options.methods import OP_OPTIONS
from tests.jax_lowering_harness import JAX_MODES, assert_matches_reference, compile_checked

A_VALUE = np.array([1.0, -2.0, 0.5])
X0 = np.zeros(3)


def _minimize_problem(method, hess=False, **optimizer_kwargs):
    x, a = pt.vector("x"), pt.vector("a")
    objective = ((x - a) ** 2).sum() + 0.1 * (x**4).sum()
    solution, success = minimize(
        objective, x, method=method, hess=hess, optimizer_kwargs=optimizer_kwargs
    )
    return [x, a], [solution, pt.grad(solution.sum(), a)], success


@pytest.mark.parametrize("mode", JAX_MODES)
def test_minimize_bfgs_and_its_gradient(mode):
    inputs, outputs, success = _minimize_problem("BFGS", tol=1e-10)
    assert_matches_reference(inputs, outputs, [X0, A_VALUE], mode)
    assert compile_checked(inputs, [success], [X0, A_VALUE], mode)[0]


@pytest.mark.parametrize(
    "method, optimizer_kwargs",
    [
        ("L-BFGS-B", {"tol": 1e-12}),
        ("CG", {"tol": 1e-6}),
    ],
)
def test_minimize_methods(method, optimizer_kwargs):
    # scipy often flags "precision loss" at tight tolerances, so only the
    # solution is compared; optimistix must report convergence.
    inputs, outputs, success = _minimize_problem(method, **optimizer_kwargs)
    assert_matches_reference(inputs, outputs, [X0, A_VALUE], "JAX_GPU", rtol=1e-6, atol=1e-9)
    assert compile_checked(inputs, [success], [X0, A_VALUE], "JAX_GPU")[0]


NELDER_MEAD_OPTIONS = {
    "tight": {"tol": 1e-10, "options": {"maxfev": 5000}},
    "adaptive": {"options": {"adaptive": True, "xatol": 1e-9, "fatol": 1e-12, "maxiter": 3000}},
    "bounded": {"tol": 1e-10, "bounds": [(None, 0.9), (-1.0, 2.0), (-0.2, 0.2)]},
    "out_of_iterations": {"options": {"maxiter": 20}},
    "out_of_evaluations": {"options": {"maxfev": 31}},
    "budget_spent_on_the_start_simplex": {"options": {"maxfev": 2}},
}


@pytest.mark.parametrize("name", list(NELDER_MEAD_OPTIONS))
def test_nelder_mead_takes_scipys_steps_and_verdict_and_its_gradient(name):
    # Before: NotImplementedError (no JAX equivalent). A budget scipy runs out of stops it where
    # scipy stops, so even unconverged solutions agree; the gradient is the implicit one.
    with warnings.catch_warnings():
        # scipy warns that Nelder-Mead does not use the gradient PyTensor's jac=True hands it.
        warnings.simplefilter("ignore", RuntimeWarning)
        inputs, outputs, success = _minimize_problem("Nelder-Mead", **NELDER_MEAD_OPTIONS[name])
        got = assert_matches_reference(inputs, [*outputs, success], [X0, A_VALUE], "JAX_GPU")
    assert bool(got[2]) == (name in ("tight", "adaptive", "bounded"))


def test_nelder_mead_refuses_an_initial_simplex_by_name():
    inputs, outputs, _ = _minimize_problem("Nelder-Mead", options={"initial_simplex": np.eye(4, 3)})
    with pytest.raises(NotImplementedError, match="initial_simplex"):
        pytensor.function(inputs, outputs, mode="JAX_GPU")


POWELL_OPTIONS = {
    "tight": {"tol": 1e-10},
    "xtol_and_ftol": {"options": {"xtol": 1e-6, "ftol": 1e-12}},
    "bounded": {"tol": 1e-10, "bounds": [(None, 0.9), (-1.0, 2.0), (-0.2, 0.2)]},
    "out_of_iterations": {"options": {"maxiter": 1}},
    "out_of_evaluations": {"options": {"maxfev": 20}},
}


@pytest.mark.parametrize("name", list(POWELL_OPTIONS))
def test_powell_takes_scipys_steps_and_verdict_and_its_gradient(name):
    # Before: NotImplementedError (no JAX equivalent). A budget scipy runs out of stops it where
    # scipy stops, so even unconverged solutions agree; the gradient is the implicit one.
    with warnings.catch_warnings():
        # scipy warns that Powell does not use the gradient PyTensor's jac=True hands it.
        warnings.simplefilter("ignore", RuntimeWarning)
        inputs, outputs, success = _minimize_problem("Powell", **POWELL_OPTIONS[name])
        got = assert_matches_reference(inputs, [*outputs, success], [X0, A_VALUE], "JAX_GPU")
    assert bool(got[2]) == (name in ("tight", "xtol_and_ftol", "bounded"))


def test_powell_refuses_initial_directions_by_name():
    inputs, outputs, _ = _minimize_problem("Powell", options={"direc": np.eye(3)})
    with pytest.raises(NotImplementedError, match="direc"):
        pytensor.function(inputs, outputs, mode="JAX_GPU")


TRUST_REGION_METHODS = ["trust-exact", "trust-krylov", "trust-ncg", "dogleg"]


@pytest.mark.parametrize("method", TRUST_REGION_METHODS)
def test_trust_region_methods_and_their_gradients(method):
    """Within gtol of the tightly solved minimum (BFGS at tol=1e-10, not scipy's answer at the
    same tol), with scipy's verdict; the gradient is PyTensor's implicit one, lowered."""
    tol = 1e-8
    inputs, outputs, success = _minimize_problem(method, hess=True, tol=tol)
    truth_inputs, truth_outputs, _ = _minimize_problem("BFGS", tol=1e-10)
    truth = pytensor.function(truth_inputs, truth_outputs, mode="FAST_COMPILE")(X0, A_VALUE)
    scipy_success = pytensor.function(inputs, success, mode="FAST_COMPILE")(X0, A_VALUE)
    *ours, our_success = compile_checked(inputs, [*outputs, success], [X0, A_VALUE], "JAX_GPU")
    # The Hessian's eigenvalues are at least 2: |x - x*| <= |grad| / 2.
    np.testing.assert_allclose(ours[0], truth[0], rtol=0, atol=tol)
    np.testing.assert_allclose(ours[1], truth[1], rtol=0, atol=10 * tol)
    assert our_success == scipy_success


def _double_well(method):
    """``sum((x^2 - b)^2)`` from a start of negative curvature: dogleg's Cholesky fails there
    (scipy's "linalg error"), the others leave along the negative curvature."""
    x, b = pt.vector("x"), pt.vector("b")
    objective = ((x**2 - b) ** 2).sum()
    solution, success = minimize(objective, x, method=method, hess=True)
    return [x, b], [solution, success]


@pytest.mark.parametrize("method", TRUST_REGION_METHODS)
def test_trust_region_verdicts_where_the_hessian_is_indefinite_are_scipys(method):
    inputs, outputs = _double_well(method)
    values = [np.array([0.1, -0.2, 0.05]), np.array([1.0, 2.0, 0.5])]
    (want, want_success), (got, got_success) = (
        pytensor.function(inputs, outputs, mode="FAST_COMPILE")(*values),
        compile_checked(inputs, outputs, values, "JAX_GPU"),
    )
    assert got_success == want_success == (method != "dogleg")
    # The same minimum (of eight), to scipy's default gtol=1e-4 (curvature 8 * b at least 4).
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


@pytest.mark.parametrize("method", TRUST_REGION_METHODS)
def test_trust_region_budgets_end_where_scipys_do(method):
    """scipy's trust-region methods need 5 or 6 iterations here: 2 fail, 20 succeed."""
    for maxiter, converges in [(2, False), (20, True)]:
        inputs, _, success = _minimize_problem(method, hess=True, options={"maxiter": maxiter})
        assert assert_matches_reference(inputs, [success], [X0, A_VALUE], "JAX_GPU")[0] == converges


@pytest.mark.parametrize("method", TRUST_REGION_METHODS)
def test_a_nan_parameter_gives_a_nan_solution_and_failure(method):
    """scipy's trust-exact raises at the NaN Hessian (NUMBA too); a traced function cannot."""
    inputs, outputs, success = _minimize_problem(method, hess=True)
    solution, solved = compile_checked(
        inputs, [outputs[0], success], [X0, np.array([1.0, np.nan, 0.5])], "JAX_GPU"
    )
    assert np.isnan(solution).all() and not solved


def test_trust_region_methods_without_the_hessian_raise_as_scipy_does():
    inputs, outputs, _ = _minimize_problem("trust-ncg")
    with pytest.raises(ValueError, match=r"trust-ncg.*hess=True"):
        pytensor.function(inputs, outputs, mode="JAX_GPU")


def test_an_option_that_changes_the_subproblem_is_refused_by_name():
    # The lowering solves every subproblem exactly: it cannot stop early as trlib does.
    inputs, outputs, _ = _minimize_problem("trust-krylov", hess=True, options={"inexact": True})
    with pytest.raises(UnsupportedOption, match="inexact"):
        pytensor.function(inputs, outputs, mode="JAX_GPU")


def _rosenbrock_newton_cg(hess: bool, **options):
    x = pt.vector("x")
    solution, success = minimize(
        _rosenbrock(x), x, method="Newton-CG", hess=hess, optimizer_kwargs={"options": options}
    )
    return [x], [solution, success]


ROSENBROCK_X0 = np.array([-1.2, 1.0, -0.5, 0.8])


@pytest.mark.parametrize(
    "options", [{}, {"xtol": 1e-10}, {"maxiter": 5}, {"maxiter": 0}, {"c1": 0.3, "c2": 0.5}]
)
def test_newton_cg_with_the_hessian_follows_scipys_iterates(options):
    """With the op's Hessian, scipy's own algorithm: the same iterates (to rounding) and verdict,
    converged or stopped by its budget (scipy needs 23 iterations here)."""
    inputs, outputs = _rosenbrock_newton_cg(True, **options)
    (want, want_success), (got, got_success) = (
        pytensor.function(inputs, outputs, mode="FAST_COMPILE")(ROSENBROCK_X0),
        compile_checked(inputs, outputs, [ROSENBROCK_X0], "JAX_GPU"),
    )
    assert got_success == want_success == ("maxiter" not in options)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


@pytest.mark.parametrize("xtol", [1e-5, 1e-10])
def test_newton_cg_without_the_hessian_is_within_xtol_of_scipy(xtol):
    """Without ``hess`` scipy multiplies by the Hessian through finite differences of the gradient;
    the lowering differentiates the gradient graph exactly: the same verdict, and points within
    the last update's size (``n * xtol`` in the 1-norm) of each other near the minimum."""
    inputs, outputs = _rosenbrock_newton_cg(False, xtol=xtol)
    (want, want_success), (got, got_success) = (
        pytensor.function(inputs, outputs, mode="FAST_COMPILE")(ROSENBROCK_X0),
        compile_checked(inputs, outputs, [ROSENBROCK_X0], "JAX_GPU"),
    )
    assert got_success and want_success
    # The Rosenbrock minimum is ill-conditioned (curvature ratio ~2500): 1e4 times the step.
    np.testing.assert_allclose(got, want, rtol=0, atol=1e4 * 4 * xtol)
    np.testing.assert_allclose(got, np.ones(4), rtol=0, atol=1e4 * 4 * xtol)


@pytest.mark.parametrize("hess", [True, False])
@pytest.mark.parametrize("mode", JAX_MODES)
def test_newton_cg_and_its_gradient(hess, mode):
    inputs, outputs, success = _minimize_problem("Newton-CG", hess=hess, tol=1e-10)
    # Without the Hessian, scipy's finite differences of the gradient move its last digits (1e-9).
    atol = 1e-10 if hess else 1e-8
    assert_matches_reference(inputs, outputs, [X0, A_VALUE], mode, rtol=0, atol=atol)
    assert compile_checked(inputs, [success], [X0, A_VALUE], mode)[0]


@pytest.mark.parametrize("hess", [True, False])
def test_newton_cg_verdicts_where_the_hessian_is_indefinite_are_scipys(hess):
    """From a start of negative curvature CG falls back to steepest descent, as scipy's does."""
    x, b = pt.vector("x"), pt.vector("b")
    solution, success = minimize(((x**2 - b) ** 2).sum(), x, method="Newton-CG", hess=hess)
    values = [np.array([0.1, -0.2, 0.05]), np.array([1.0, 2.0, 0.5])]
    (want, want_success), (got, got_success) = (
        pytensor.function([x, b], [solution, success], mode="FAST_COMPILE")(*values),
        compile_checked([x, b], [solution, success], values, "JAX_GPU"),
    )
    assert got_success == want_success
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


def test_newton_cg_with_a_nan_parameter_fails_as_scipys_does():
    inputs, outputs, success = _minimize_problem("Newton-CG", hess=True)
    values = [X0, np.array([1.0, np.nan, 0.5])]
    assert not pytensor.function(inputs, success, mode="FAST_COMPILE")(*values)
    solution, solved = compile_checked(inputs, [outputs[0], success], values, "JAX_GPU")
    assert np.isnan(solution).all() and not solved


def test_newton_cg_without_the_gradient_raises_as_scipy_does():
    x = pt.vector("x")
    solution, _ = minimize(_rosenbrock(x), x, method="Newton-CG", jac=False)
    with pytest.raises(ValueError, match=r"^Jacobian is required for Newton-CG method"):
        pytensor.function([x], solution, mode="FAST_COMPILE")(ROSENBROCK_X0)
    with pytest.raises(ValueError, match=r"^Jacobian is required for Newton-CG method$"):
        pytensor.function([x], solution, mode="JAX_GPU")


def _gradient_methods_problem(name: str, method: str, tol: float):
    x, a = pt.vector("x"), pt.vector("a")
    objective = {
        "quartic": ((x - a) ** 2).sum() + 0.1 * (x**4).sum(),
        "rosenbrock": ((1 - x[:-1]) ** 2 + 100 * (x[1:] - x[:-1] ** 2) ** 2).sum() + 0 * a.sum(),
    }[name]
    solution, success = minimize(objective, x, method=method, optimizer_kwargs={"tol": tol})
    gradient = graph_replace(pt.grad(objective, x), {x: solution})
    return [x, a], [success, pt.max(pt.abs(gradient))]


@pytest.mark.parametrize("tol", [1e-5, 1e-10, 1e-12, 1e-20])
@pytest.mark.parametrize("method", ["BFGS", "CG"])
@pytest.mark.parametrize("name", ["quartic", "rosenbrock"])
def test_gradient_methods_succeed_only_where_scipys_gradient_test_passes(name, method, tol):
    """scipy's BFGS and CG converge at ``max|grad| <= gtol`` (``gtol = tol``), and report
    failure where their line search gives up first ("precision loss"). optimistix's Cauchy
    test reported success at gradients far above ``tol`` (1e-2 for CG on the Rosenbrock
    function at the default tolerance)."""
    inputs, outputs = _gradient_methods_problem(name, method, tol)
    success, gradient_size = compile_checked(inputs, outputs, [X0, A_VALUE], "JAX_GPU")
    if success:
        assert gradient_size <= tol
    if tol == 1e-5:
        assert success, "scipy converges at the default tolerance on both problems"


def test_cg_reports_scipys_precision_loss_at_tol_1e_12():
    inputs, outputs = _gradient_methods_problem("quartic", "CG", 1e-12)
    reference = pytensor.function(inputs, outputs[0], mode="FAST_COMPILE")(X0, A_VALUE)
    assert not reference, "scipy's line search gives up before max|grad| <= 1e-12"
    assert not compile_checked(inputs, outputs[:1], [X0, A_VALUE], "JAX_GPU")[0]


@pytest.mark.parametrize(
    "problem, options",
    [
        ("quartic", {"gtol": 1e-8}),
        ("rosenbrock", {}),
        ("rosenbrock", {"gtol": 1e-8}),
        ("rosenbrock", {"maxiter": 10}),
        ("rosenbrock", {"maxiter": 0}),
    ],
)
def test_cg_follows_scipys_iterates_and_verdict(problem, options):
    """scipy's CG, Polak-Ribière+ with its Wolfe searches: the same verdict and point.
    optimistix's NonlinearCG, searching by backtracking, stalled at max|grad| 1e-8 (False where
    scipy reached gtol=1e-8) and ran out of budgets that scipy's CG met."""
    x, a = pt.vector("x"), pt.vector("a")
    objective = {
        "quartic": ((x - a) ** 2).sum() + 0.1 * (x**4).sum(),
        "rosenbrock": _rosenbrock(x) + 0 * a.sum(),
    }[problem]
    solution, success = minimize(objective, x, method="CG", optimizer_kwargs={"options": options})
    x0 = ROSENBROCK_X0 if problem == "rosenbrock" else np.zeros(4)
    values = [x0, np.array([1.0, -2.0, 0.5, 3.0])]
    (want, want_success), (got, got_success) = (
        pytensor.function([x, a], [solution, success], mode="FAST_COMPILE")(*values),
        compile_checked([x, a], [solution, success], values, "JAX_GPU"),
    )
    assert got_success == want_success
    # Rounding steers the last iterations on the ill-conditioned Rosenbrock valley: within gtol.
    np.testing.assert_allclose(got, want, rtol=0, atol=options.get("gtol", 1e-5))


def test_cg_that_converges_on_its_last_allowed_iteration_fails_as_scipys_does():
    """scipy's CG tests its budget before the gradient: converged on iteration ``maxiter``, it
    reports "maximum number of iterations exceeded"; one more iteration allowed, success."""
    a_value = np.array([1.0, -2.0, 0.5, 3.0])
    needed = scipy.optimize.minimize(
        lambda v: ((v - a_value) ** 2).sum() + 0.1 * (v**4).sum(),
        np.zeros(4),
        jac=lambda v: 2 * (v - a_value) + 0.4 * v**3,
        method="CG",
    ).nit
    x, a = pt.vector("x"), pt.vector("a")
    for maxiter, converges in [(needed, False), (needed + 1, True)]:
        solution, success = minimize(
            ((x - a) ** 2).sum() + 0.1 * (x**4).sum(),
            x,
            method="CG",
            optimizer_kwargs={"options": {"maxiter": maxiter}},
        )
        values = [np.zeros(4), a_value]
        (want, want_success), (got, got_success) = (
            pytensor.function([x, a], [solution, success], mode="FAST_COMPILE")(*values),
            compile_checked([x, a], [solution, success], values, "JAX_GPU"),
        )
        assert bool(want_success) == converges, (maxiter, "scipy's verdict")
        assert got_success == want_success, maxiter
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


@pytest.mark.parametrize("offset", [0.0, 100.0, 1e6])
def test_bfgs_converges_where_the_rounding_of_f_hides_the_decrease(offset):
    """Near a minimum a good step lowers ``f`` by less than ``f``'s rounding. optimistix's Armijo
    search then compared noise and stalled at max|grad| 3e-8 where scipy reached 2e-10 (f near
    100; on a GPU even near 1). At tol=1e-12 scipy gives up ("precision loss"); ours reach it."""
    x, a = pt.vector("x"), pt.vector("a")
    objective = ((x - a) ** 2).sum() + 0.1 * (x**4).sum() + offset
    gradient = pt.grad(objective, x)
    for tol, scipy_converges in [(1e-8, offset <= 100.0), (1e-12, False)]:
        solution, success = minimize(objective, x, method="BFGS", optimizer_kwargs={"tol": tol})
        outputs = [success, pt.max(pt.abs(graph_replace(gradient, {x: solution})))]
        scipy_success = pytensor.function([x, a], outputs[0], mode="FAST_COMPILE")(X0, A_VALUE)
        assert bool(scipy_success) == scipy_converges, (tol, "scipy's verdict")
        ours, gradient_size = compile_checked([x, a], outputs, [X0, A_VALUE], "JAX_GPU")
        assert ours and gradient_size <= tol, (tol, gradient_size)


@pytest.mark.parametrize("method", ["BFGS", "CG"])
def test_a_tolerance_below_the_gradients_rounding_fails_as_scipys_does(method):
    """No search gets max|grad| below its own rounding (about 1e-16 here): scipy reports
    "precision loss", and ours stop with ``success=False`` (64 trial points without progress)."""
    inputs, outputs = _gradient_methods_problem("quartic", method, 1e-20)
    reference = pytensor.function(inputs, outputs[0], mode="FAST_COMPILE")(X0, A_VALUE)
    assert not reference
    assert not compile_checked(inputs, outputs[:1], [X0, A_VALUE], "JAX_GPU")[0]


@pytest.mark.parametrize("mode", JAX_MODES)
@pytest.mark.parametrize("method", ["hybr", "lm"])
def test_root_and_its_gradient(method, mode):
    x, a = pt.vector("x"), pt.vector("a")
    equations = pt.stack([x[0] + 0.5 * x[1] ** 3 - a[0], 0.5 * (x[1] - x[0]) ** 3 + x[1] - a[1]])
    solution, success = root(equations, x, method=method, optimizer_kwargs={"tol": 1e-12})
    inputs = [x, a]
    outputs = [solution, pt.grad(solution.sum(), a), success]
    assert_matches_reference(inputs, outputs, [np.zeros(2), np.array([1.0, 0.3])], mode)


@pytest.mark.parametrize("mode", JAX_MODES)
@pytest.mark.parametrize(
    "options",
    [{}, {"line_search": "cheng", "M": 3}, {"maxfev": 6}],
    ids=["cruz", "cheng", "out_of_evaluations"],
)
def test_df_sane_and_its_gradient(options, mode):
    x, a = pt.vector("x"), pt.vector("a")
    equations = pt.stack([x[0] + 0.5 * x[1] ** 3 - a[0], 0.5 * (x[1] - x[0]) ** 3 + x[1] - a[1]])
    # jac=False: scipy's df-sane takes the equations alone.
    solution, success = root(
        equations, x, method="df-sane", jac=False, optimizer_kwargs={"options": options}
    )
    inputs = [x, a]
    outputs = [solution, pt.grad(solution.sum(), a), success]
    got = assert_matches_reference(
        inputs, outputs, [np.zeros(2), np.array([1.0, 0.3])], mode, rtol=1e-8
    )
    assert bool(got[2]) == ("maxfev" not in options)


@pytest.mark.parametrize("mode", JAX_MODES)
@pytest.mark.parametrize(
    "method, bracket, jac", [("brentq", (0.0, 5.0), False), ("newton", None, True)]
)
def test_root_scalar_and_its_gradient(method, bracket, jac, mode):
    y, c = pt.scalar("y"), pt.scalar("c")
    solution, success = root_scalar(y**3 + y - c, y, method=method, jac=jac, bracket=bracket)
    inputs = [y, c]
    outputs = [solution, pt.grad(solution, c), success]
    assert_matches_reference(inputs, outputs, [1.0, 3.0], mode, rtol=1e-9)


@pytest.mark.parametrize(
    "method, interval",
    [
        ("brent", {}),
        ("brent", {"bracket": (-4.0, -3.0)}),
        ("golden", {"bracket": (-3.0, 1.0, 4.0)}),
        ("bounded", {"bounds": (-2.0, 4.0)}),
    ],
)
def test_minimize_scalar_and_its_gradient(method, interval):
    y, c = pt.scalar("y"), pt.scalar("c")
    solution, success = minimize_scalar(
        (y - c) ** 2 + 0.1 * y**4, y, method=method, optimizer_kwargs={"tol": 1e-10}, **interval
    )
    inputs = [y, c]
    outputs = [solution, pt.grad(solution, c), success]
    for target in (0.5, -1.0):
        assert_matches_reference(inputs, outputs, [0.0, target], "JAX_GPU", rtol=1e-6)


LBFGSB_BOUNDS = [(None, 0.9), (-1.0, 2.0), (-0.2, 0.2)]
"""Active at the problem's minimum for ``a = A_VALUE`` on the second and third variables."""

LBFGSB_BOUNDED_OPTIONS = {
    "bounds_active": {"tol": 1e-12, "bounds": LBFGSB_BOUNDS},
    "bounds_inactive": {"tol": 1e-12, "bounds": [(-5.0, 5.0)] * 3},
    # Two iterations reach a corner of the box, for scipy as here; a third would find it converged.
    "out_of_iterations": {"bounds": LBFGSB_BOUNDS, "options": {"maxiter": 2}},
}


@pytest.mark.parametrize("name", list(LBFGSB_BOUNDED_OPTIONS))
def test_lbfgsb_with_bounds_agrees_with_scipy_and_its_gradient(name):
    # Before: NotImplementedError naming `bounds`. The solution, scipy's verdict and the
    # implicit gradient (with a bound active, the op's generic one, as FAST_COMPILE's) agree.
    inputs, outputs, success = _minimize_problem("L-BFGS-B", **LBFGSB_BOUNDED_OPTIONS[name])
    solution, _, converged = assert_matches_reference(
        inputs, [*outputs, success], [X0, A_VALUE], "JAX_GPU", rtol=1e-6, atol=1e-9
    )
    assert solution.dtype == np.float64
    at_bound = np.isin(solution, [-5.0, 5.0, 0.9, -1.0, 0.2, -0.2]).sum()
    assert at_bound == {"bounds_active": 2, "bounds_inactive": 0, "out_of_iterations": 3}[name]
    assert bool(converged) == (name != "out_of_iterations")


def test_lbfgsb_with_bounds_is_vmapped():
    inputs, outputs, success = _minimize_problem("L-BFGS-B", tol=1e-12, bounds=LBFGSB_BOUNDS)
    x, a = inputs
    batch_a = pt.matrix("batch_a")
    batched = vectorize_graph([*outputs, success], {a: batch_a})
    assert isinstance(batched[-1].owner.op, Blockwise)
    # Bounds active on two variables, on one, and on none.
    values = [X0, np.stack([A_VALUE, -A_VALUE, 0.1 * A_VALUE])]
    got = assert_matches_reference([x, batch_a], batched, values, "JAX_GPU", rtol=1e-6, atol=1e-9)
    assert got[-1].all()


@pytest.mark.parametrize("mode", JAX_MODES)
def test_blockwise_minimize_is_vmapped(mode):
    # At tol=1e-8 scipy converges on every batch entry (at 1e-10 it loses precision on two).
    inputs, outputs, success = _minimize_problem("BFGS", tol=1e-8)
    x, a = inputs
    batch_a = pt.matrix("batch_a")
    *batched, batched_success = vectorize_graph([*outputs, success], {a: batch_a})
    assert isinstance(batched_success.owner.op, Blockwise)
    values = [X0, np.stack([A_VALUE, -A_VALUE, 2 * A_VALUE])]
    assert_matches_reference([x, batch_a], batched, values, mode)
    assert compile_checked([x, batch_a], [batched_success], values, mode)[0].all()


@pytest.mark.parametrize("mode", JAX_MODES)
def test_success_is_false_when_the_budget_runs_out(mode):
    inputs, _, success = _minimize_problem("BFGS", options={"maxiter": 1})
    assert assert_matches_reference(inputs, [success], [X0, A_VALUE], mode)[0] == np.False_


def _rosenbrock(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


@pytest.mark.parametrize(
    "method",
    [
        "BFGS",
        "CG",
        "L-BFGS-B",
        "Newton-CG",
        "trust-exact",
        "trust-ncg",
        pytest.param(
            "trust-krylov",
            marks=pytest.mark.xfail(
                strict=True,
                reason="the exact subproblem stands in for trlib's inexact one: 14 iterations "
                "where scipy's default takes 46 (scipy's inexact=False takes 14)",
            ),
        ),
        # Not dogleg: the Rosenbrock Hessian at x0 is indefinite, where scipy's dogleg fails at
        # once (its budget: test_trust_region_budgets_end_where_scipys_do).
    ],
)
def test_maxiter_counts_scipy_iterations_not_evaluations(method):
    """Twice the iterations scipy needs is enough, a third is not: for scipy
    and for the lowering alike.

    optimistix counts every trial point as a step, several per iteration
    (BFGS: 72 steps for scipy's 33 iterations here), so a budget in its steps
    would fail where scipy succeeds.
    """
    x0 = np.array([-1.2, 1.0, -0.5, 0.8])
    # The trust-region methods take scipy's Rosenbrock derivatives, as the op takes its own.
    hess = method in (*TRUST_REGION_METHODS, "Newton-CG")
    derivatives = (
        {"jac": scipy.optimize.rosen_der, "hess": scipy.optimize.rosen_hess} if hess else {}
    )
    needed = scipy.optimize.minimize(_rosenbrock, x0, method=method, **derivatives).nit
    enough = 2 * needed
    x = pt.vector("x")
    for maxiter, converges in [(enough, True), (needed // 3, False)]:
        assert (
            scipy.optimize.minimize(
                _rosenbrock, x0, method=method, options={"maxiter": maxiter}, **derivatives
            ).success
            == converges
        )
        _, success = minimize(
            _rosenbrock(x),
            x,
            method=method,
            hess=hess,
            optimizer_kwargs={"options": {"maxiter": maxiter}},
        )
        assert bool(compile_checked([x], [success], [x0], "JAX_GPU")[0]) == converges, (
            maxiter,
            needed,
        )


@pytest.mark.parametrize("mode", JAX_MODES)
def test_newton_cg_converges_where_its_direction_vanishes(mode):
    """At the minimiser CG takes no step (the curvature along the tiny gradient is below scipy's
    floor): scipy's line search accepts the zero update, which converges. It failed here when the
    value at the trial point rounded apart from the iterate's own value."""
    case = build_method_case("minimize", "newton-cg")
    solution, success, _ = case.outputs
    got = assert_matches_reference(case.inputs, [solution, success], case.values, mode)
    assert got[1] == np.True_


def test_trust_krylov_takes_trlibs_exact_solve_by_name():
    """``inexact=False`` asks trlib to solve each subproblem exactly, as the lowering does: the
    same point, and the same verdict one iteration short of scipy's count and at it."""
    x0 = np.array([-1.2, 1.0, -0.5, 0.8])
    derivatives = {"jac": scipy.optimize.rosen_der, "hess": scipy.optimize.rosen_hess}
    options = {"inexact": False}
    count = scipy.optimize.minimize(
        _rosenbrock, x0, method="trust-krylov", options=options, **derivatives
    ).nit
    x = pt.vector("x")
    for maxiter in (count - 1, count):
        expected = scipy.optimize.minimize(
            _rosenbrock,
            x0,
            method="trust-krylov",
            options={**options, "maxiter": maxiter},
            **derivatives,
        )
        solution, success = minimize(
            _rosenbrock(x),
            x,
            method="trust-krylov",
            hess=True,
            optimizer_kwargs={"options": {**options, "maxiter": maxiter}},
        )
        got_x, got_success = compile_checked([x], [solution, success], [x0], "JAX_GPU")
        assert bool(got_success) == expected.success == (maxiter == count)
        np.testing.assert_allclose(got_x, expected.x, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("mode", JAX_MODES)
def test_method_without_jax_equivalent_is_refused_at_compile_time(mode, monkeypatch):
    # A refusal of its own (a subclass of stock's NotImplementedError), naming what is supported.
    # JAX lowers every minimize method, so the table here has COBYQA without its JAX entry.
    methods = OP_OPTIONS[MinimizeOp].methods
    monkeypatch.setitem(methods, "cobyqa", dataclasses.replace(methods["cobyqa"], jax=None))
    inputs, outputs, _ = _minimize_problem("COBYQA")
    with pytest.raises(UnsupportedMethod, match=r"'COBYQA'.*supported methods are BFGS, CG"):
        pytensor.function(inputs, outputs, mode=mode)


def test_root_without_a_root_reports_failure():
    x, a = pt.vector("x"), pt.vector("a")
    values = [np.array([0.5, -0.5]), np.array([0.0, 0.5])]
    _, hybr_success = root(x**2 + 1.0 + a, x, method="hybr")
    assert assert_matches_reference([x, a], [hybr_success], values, "JAX_GPU")[0] == np.False_
    # "lm" is MINPACK's least-squares solver: like scipy's, it reports the convergence of the fit,
    # root or none (before issue 27 the JAX lowering reported False here, NUMBA and scipy True).
    _, lm_success = root(x**2 + 1.0 + a, x, method="lm")
    assert assert_matches_reference([x, a], [lm_success], values, "JAX_GPU")[0] == np.True_


def test_float32_solves_terminate_at_float32_precision():
    y, c = pt.scalar("y", dtype="float32"), pt.scalar("c", dtype="float32")
    root_value, root_success = root_scalar(y**3 + y - c, y, method="brentq", bracket=[0.0, 5.0])
    x, a = pt.vector("x", dtype="float32"), pt.vector("a", dtype="float32")
    solution, success = minimize(((x - a) ** 2).sum() + 0.1 * (x**4).sum(), x)
    values = [
        np.float32(1.0),
        np.float32(3.0),
        np.zeros(3, "float32"),
        np.array([0.5, -1.0, 2.0], "float32"),
    ]
    # scipy's BFGS stops at its default gtol=1e-5, about 1e-5 away in x.
    assert_matches_reference([y, c, x, a], [root_value, solution], values, "JAX_GPU", rtol=1e-4)
    assert all(compile_checked([y, c, x, a], [root_success, success], values, "JAX_GPU"))


@pytest.mark.parametrize("method", ["hybr", "lm", "broyden1", "krylov"])
def test_a_float32_root_of_equations_that_upcast_solves_in_float32(method):
    # Before: the float64 equations widened the float32 iterate, and optimistix failed on the
    # objective it had traced ("Closure-converted function called with different dynamic
    # arguments"; hybr: "cond branches must have equal output types").
    x, a = pt.vector("x", dtype="float32"), pt.scalar("a", dtype="float32")
    equations = x**3 + x - a + pt.zeros(1)
    assert equations.dtype == "float64"
    solution, success = root(equations, x, method=method)
    values = [np.array([0.5, 0.3], "float32"), np.float32(2.0)]
    got = assert_matches_reference([x, a], [solution, success], values, "JAX_GPU", rtol=1e-5)
    assert np.asarray(got[0]).dtype == np.float32


def test_scalar_methods_that_take_no_start_ignore_a_nan_start():
    # scipy's bracketing root methods and minimize_scalar take no x0. Before: NaN, success False.
    y = pt.scalar("y")
    outputs = []
    for method in ("brentq", "ridder"):
        outputs += root_scalar(y**3 - 2.0, y, method=method, bracket=(0.0, 2.0))
    for method, interval in [("brent", {}), ("golden", {}), ("bounded", {"bounds": (-4.0, 4.0)})]:
        outputs += minimize_scalar((y - 1.0) ** 2 + 0.1 * y**4, y, method=method, **interval)
    assert_matches_reference([y], outputs, [np.nan], "JAX_GPU", rtol=1e-5)


BRACKETING_METHODS = ("brentq", "bisect", "brenth", "ridder", "toms748")


@pytest.mark.parametrize("method", BRACKETING_METHODS)
def test_a_bracket_without_a_sign_change_raises_scipys_error_on_jax_gpu(method):
    # JAX_GPU's read raises scipy's error (`while_scan.brackets`). Before: NaN, success False.
    y, c = pt.scalar("y"), pt.scalar("c")
    outputs = root_scalar(y**2 + c, y, method=method, bracket=(0.0, 2.0))
    fn = pytensor.function([y, c], outputs, mode="JAX_GPU")
    reference = pytensor.function([y, c], outputs, mode="FAST_COMPILE")
    # The same compiled function, on data with a sign change and without one.
    np.testing.assert_allclose(fn(0.5, -1.0)[0], reference(0.5, -1.0)[0], rtol=1e-8)
    for call in (fn, reference):
        with pytest.raises(ValueError, match=r"^f\(a\) and f\(b\) must have different signs"):
            call(0.5, 1.0)


@pytest.mark.parametrize("c", [0.0, -4.0, np.nan], ids=["zero_at_lower", "zero_at_upper", "nan"])
def test_a_bracket_ending_at_a_zero_or_a_nan_stops_there_as_scipy_does(c):
    # scipy accepts these brackets: a zero at an end is the root, a NaN stops without success.
    y, c_ = pt.scalar("y"), pt.scalar("c")
    outputs = []
    for method in BRACKETING_METHODS:
        outputs += root_scalar(y**2 + c_, y, method=method, bracket=(0.0, 2.0))
    want = pytensor.function([y, c_], outputs, mode="FAST_COMPILE")(0.5, c)
    got = compile_checked([y, c_], outputs, [0.5, c], "JAX_GPU")
    assert [bool(ok) for ok in got[1::2]] == [bool(ok) for ok in want[1::2]]
    if not np.isnan(c):
        np.testing.assert_allclose(got[0::2], want[0::2], atol=1e-12)


def test_a_bracket_without_a_sign_change_gives_nan_and_failure_under_stock_jax():
    # Without JAX_GPU's read a traced function cannot raise. Before: a finite value (an end of
    # the bracket).
    y = pt.scalar("y")
    outputs = []
    for method in BRACKETING_METHODS:
        outputs += root_scalar(y**2 + 1.0, y, method=method, bracket=(0.0, 2.0))
    got = compile_checked([y], outputs, [0.5], "JAX")
    assert np.isnan(got[0::2]).all(), dict(zip(BRACKETING_METHODS, got[0::2], strict=True))
    assert not np.any(got[1::2]), dict(zip(BRACKETING_METHODS, got[1::2], strict=True))


def test_toms748_takes_scipys_iterates_and_verdicts_per_maxiter():
    # scipy's TOMS 748 (k=1, as root_scalar passes it: 2-3 evaluations per iteration, the first
    # secant step counted). Before: bisection stood in, out of budget at maxiter=6 and 7 where
    # scipy converges, its iterates bisection's.
    z, a = pt.scalar("z"), pt.scalar("a")
    equation = z**3 + pt.cos(z) - a
    outputs = []
    for options in [{"maxiter": limit} for limit in range(1, 8)] + [{"xtol": 1e-3}]:
        solution, success = root_scalar(
            equation, z, method="toms748", bracket=(0.0, 3.0), optimizer_kwargs=options
        )
        outputs += [solution, success]
    outputs.append(pytensor.grad(solution, a))
    values = [np.array(1.0), np.array(3.0)]
    want = pytensor.function([z, a], outputs, mode="FAST_COMPILE")(*values)
    got = compile_checked([z, a], outputs, values, "JAX")
    assert [bool(s) for s in want[1:-1:2]] == [False] * 5 + [True] * 3
    assert [bool(s) for s in got[1:-1:2]] == [bool(s) for s in want[1:-1:2]]
    # The converged root within scipy's default xtol (2e-12): the last step depends on f's
    # last digits near the root, which the backends' cos need not share.
    np.testing.assert_allclose(got[0:-1:2], want[0:-1:2], rtol=1e-11)
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-6)


# The iterations scipy's bracketing methods take to converge on ``z**3 + cos(z) = a`` at a=3 in
# [0, 3], at default tolerances (the equation rising) and at xtol = rtol = 1e-3 (falling).
_BRACKETING_ITERATIONS = {
    "bisect": (41, 11),
    "brentq": (11, 8),
    "brenth": (11, 8),
    "ridder": (5, 3),
}
_LOOSE = {"xtol": 1e-3, "rtol": 1e-3}


def test_bracketing_methods_take_scipys_iterates_and_verdicts_per_maxiter():
    # scipy's C loops (bisect.c, brentq.c, brenth.c, ridder.c), one optimistix step per
    # iteration. Before: optimistix's Bisection stood in for all four, out of budget where brentq,
    # brenth and ridder converge, its iterates bisection's.
    z, a = pt.scalar("z"), pt.scalar("a")
    rising = z**3 + pt.cos(z) - a
    cases = []
    for method, (default_iterations, loose_iterations) in _BRACKETING_ITERATIONS.items():
        for equation, tolerances, iterations in [
            (rising, {}, default_iterations),
            (-rising, _LOOSE, loose_iterations),
        ]:
            # One past convergence too: scipy's verdicts go False ... False, True, True.
            cases += [
                (method, equation, {**tolerances, "maxiter": limit})
                for limit in range(1, iterations + 2)
            ]
    outputs = []
    for method, equation, options in cases:
        outputs += root_scalar(
            equation, z, method=method, bracket=(0.0, 3.0), optimizer_kwargs=options
        )
    gradients = [
        pytensor.grad(root_scalar(rising, z, method=method, bracket=(0.0, 3.0))[0], a)
        for method in _BRACKETING_ITERATIONS
    ]
    values = [np.array(1.0), np.array(3.0)]
    want = pytensor.function([z, a], outputs + gradients, mode="FAST_COMPILE")(*values)
    got = compile_checked([z, a], outputs + gradients, values, "JAX_GPU")
    # The table above is scipy's: each run converges exactly at its last two limits.
    assert [bool(s) for s in want[1 : len(outputs) : 2]] == [
        options["maxiter"] >= _BRACKETING_ITERATIONS[method][0 if "xtol" not in options else 1]
        for method, _, options in cases
    ]
    for position, (method, _, options) in enumerate(cases):
        case = f"{method} {options}"
        assert bool(got[2 * position + 1]) == bool(want[2 * position + 1]), case
        # Within scipy's default xtol (2e-12): the last steps depend on f's last digits near the
        # root, which the backends' cos need not share (scipy on JAX's cos gives these iterates
        # bit for bit).
        np.testing.assert_allclose(got[2 * position], want[2 * position], rtol=1e-11, err_msg=case)
    np.testing.assert_allclose(got[len(outputs) :], want[len(outputs) :], rtol=1e-6)


def test_bracketing_methods_stop_at_a_nan_value_and_at_an_exact_zero_as_scipy_does():
    # scipy stops at a NaN value of f (not converged) and at an exact zero (converged), tested
    # where scipy tests it: brentq's and brenth's zero found by the last step allowed is not
    # tested, so not converged. Before: bisection went on past both.
    z = pt.scalar("z")
    nan_inside = z - 0.3 + 1e-300 * pt.sqrt(z**2 - 0.25)  # NaN in (-0.5, 0.5)
    zero_at_middle = z - 1.5
    outputs = []
    for method in _BRACKETING_ITERATIONS:
        outputs += root_scalar(nan_inside, z, method=method, bracket=(-2.0, 2.5))[1:]
        for limit in (1, 2):
            outputs += root_scalar(
                zero_at_middle,
                z,
                method=method,
                bracket=(0.0, 3.0),
                optimizer_kwargs={"maxiter": limit},
            )
    want = pytensor.function([z], outputs, mode="FAST_COMPILE")(1.0)
    got = compile_checked([z], outputs, [1.0], "JAX_GPU")
    verdicts = [bool(s) for s in want[0::5] + want[2::5] + want[4::5]]
    assert verdicts == [False] * 4 + [True, False, False, True] + [True] * 4
    assert [bool(s) for s in got[0::5] + got[2::5] + got[4::5]] == verdicts
    np.testing.assert_array_equal(got[1::5] + got[3::5], want[1::5] + want[3::5])


def test_bounded_stops_within_xatol_as_scipy_does():
    # Before: xatol was a relative tolerance of the offset from the lower bound, and at
    # tol=1e-4 the solve stopped 6.5e-4 from the minimum (gradient 1e-2; scipy's 8e-5).
    y = pt.scalar("y")
    objective = (y - 3.3) ** 2 + 0.1 * y**4 - pt.cos(3 * y)
    solution, success = minimize_scalar(
        objective, y, method="bounded", bounds=(-10.0, 10.0), optimizer_kwargs={"tol": 1e-4}
    )
    tight, _ = minimize_scalar(
        objective, y, method="bounded", bounds=(-10.0, 10.0), optimizer_kwargs={"tol": 1e-12}
    )
    minimum = pytensor.function([y], tight, mode="FAST_COMPILE")(0.0)
    got, converged = compile_checked([y], [solution, success], [0.0], "JAX_GPU")
    assert converged
    assert abs(got - minimum) <= 1e-4


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_method_scipy_does_not_know_raises_scipys_error(mode):
    # FAST_COMPILE raises ValueError("Unknown solver newton") on the first call; before, JAX
    # raised NotImplementedError.
    x = pt.vector("x")
    solution, _ = root(x**3 + x - 1.0, x, method="newton")
    with pytest.raises(ValueError, match=r"^Unknown solver newton$"):
        pytensor.function([x], solution, mode=mode)


def _wavy(y, c, sin):
    return (y - c) ** 2 + 0.1 * y**4 + sin(3 * y)


# Per method: the intervals and options it is tried with, each at every maxiter from 1 up to the
# first at which scipy converges.
SCALAR_MINIMIZE_RUNS = {
    "brent": [
        ({}, {}),
        ({"bracket": (-4.0, -3.0)}, {}),
        ({"bracket": (-3.0, 0.0, 4.0)}, {}),
        ({}, {"xtol": 1e-4}),
    ],
    # At golden's default xtol (sqrt(eps)) its last comparisons are between values that differ in
    # their last bits, where the backends' rounding decides.
    "golden": [({}, {"xtol": 1e-6}), ({"bracket": (-3.0, 0.0, 4.0)}, {"xtol": 1e-5})],
    "bounded": [
        ({"bounds": (-2.0, 4.0)}, {}),
        ({"bounds": (-1.0, 0.3)}, {}),
        ({"bounds": (-2.0, 4.0)}, {"xatol": 1e-2}),
    ],
}


def _scipy_converges_at(method: str, interval: dict, options: dict, c: float) -> int:
    """The smallest ``maxiter`` at which scipy's ``minimize_scalar`` succeeds."""
    for maxiter in range(1, 200):
        result = scipy.optimize.minimize_scalar(
            lambda y: _wavy(y, c, np.sin),
            method=method,
            options={**options, "maxiter": maxiter},
            **interval,
        )
        if result.success:
            return maxiter
    raise AssertionError(f"scipy's {method} does not converge on the test problem")


@pytest.mark.parametrize("method", list(SCALAR_MINIMIZE_RUNS))
def test_minimize_scalar_takes_scipys_iterates_and_verdicts_per_maxiter(method):
    # Before: optimistix's golden-section search stood in for all three, from the middle of the
    # interval: other iterates under a tight maxiter, and other verdicts (brent and bounded
    # succeeded where scipy ran out of iterations, or failed where scipy converged).
    y, c = pt.scalar("y"), pt.scalar("c")
    values = [np.array(0.0), np.array(0.7)]
    outputs, gradients = [], []
    for interval, options in SCALAR_MINIMIZE_RUNS[method]:
        converges_at = _scipy_converges_at(method, interval, options, float(values[1]))
        for maxiter in range(1, converges_at + 1):
            outputs += minimize_scalar(
                _wavy(y, c, pt.sin),
                y,
                method=method,
                optimizer_kwargs={"options": {**options, "maxiter": maxiter}},
                **interval,
            )
        gradients.append(pytensor.grad(outputs[-2], c))
    want = pytensor.function([y, c], outputs + gradients, mode="FAST_COMPILE")(*values)
    got = compile_checked([y, c], outputs + gradients, values, "JAX_GPU")
    n = len(outputs)
    assert [bool(s) for s in got[1:n:2]] == [bool(s) for s in want[1:n:2]]
    # Short of convergence scipy fails (each run ends at its first success).
    assert sum(bool(s) for s in want[1:n:2]) == len(SCALAR_MINIMIZE_RUNS[method])
    # The iterates to rounding: the objective's last digits (sin, the powers) differ between
    # the backends, which moves a converged point by about 1e-12.
    np.testing.assert_allclose(got[0:n:2], want[0:n:2], rtol=1e-10)
    np.testing.assert_allclose(got[n:], want[n:], rtol=1e-6)


# --- Sizes from the shapes of the parameters ------------------------------------------------------
# Before, each raised a raw ConcretizationTypeError in jnp.split (stock JAX too): the sizes at which
# x is split, shape arithmetic known while tracing, passed through optimistix's jit as args, where
# they became tracers.


def _regression_minimands(method: str, hess: bool):
    """PyTensor's ``test_optimize_multiple_minimands``: a scalar and a vector of unknown length
    minimised together (packed into one x and split back at the vector's length)."""
    b0, b1 = pt.dscalar("b0"), pt.dvector("b1")
    x0, y = pt.dvector("x0"), pt.dvector("y")
    x1 = pt.dmatrix("x1")
    objective = ((y - x0 * b0 - x1 @ b1) ** 2).sum() + 0.1 * (b1**4).sum()
    (b0_star, b1_star), success = minimize(
        objective,
        [b0, b1],
        method=method,
        jac=True,
        hess=hess,
        use_vectorized_jac=True,
        # At 1e-10 scipy's BFGS stops on precision loss where ours converges (a deliberate
        # difference, in the README).
        optimizer_kwargs={"tol": 1e-8},
    )
    gradient = pt.grad(b0_star + b1_star.sum(), [x1, y])
    rng = np.random.default_rng(7)
    x0_value, x1_value = rng.normal(size=20), rng.normal(size=(20, 4))
    y_value = 0.5 * x0_value + x1_value @ np.array([1.0, -1.0, 0.5, 0.25])
    inputs = [b0, b1, x0, x1, y]
    values = [np.array(0.0), np.zeros(4), x0_value, x1_value, y_value]
    return inputs, [b0_star, b1_star, success, *gradient], values


@pytest.mark.parametrize("mode", JAX_MODES)
@pytest.mark.parametrize(
    "method, hess", [("BFGS", False), ("Newton-CG", True)], ids=["BFGS", "Newton-CG"]
)
def test_minimize_over_a_scalar_and_a_vector_of_unknown_length(method, hess, mode):
    inputs, outputs, values = _regression_minimands(method, hess)
    got = assert_matches_reference(inputs, outputs, values, mode, rtol=1e-6, atol=1e-9)
    assert got[2]


@pytest.mark.parametrize("mode", JAX_MODES)
def test_a_vectorized_root_of_several_variables_and_its_gradient(mode):
    # PyTensor's test_vectorize_root_gradients: root's Blockwise over a grid of parameters, and
    # the Blockwise of its gradient's scan, both splitting x at its variables' sizes.
    a, x, y = pt.dscalars("a", "x", "y")
    equations = pt.stack([a * x**2 - y - 1, x - a * y**2 + 1])
    (x_star, y_star), success = root(
        equations, [x, y], method="hybr", optimizer_kwargs={"tol": 1e-8}
    )
    solution = pt.stack([x_star, y_star])
    a_grid = pt.dmatrix("a_grid")
    outputs = vectorize_graph([solution, pt.grad(solution.sum(), a), success], {a: a_grid})
    assert isinstance(outputs[2].owner.op, Blockwise)
    values = [np.linspace(1, 10, 9).reshape((3, 3)), 1.0, 1.0]
    got = assert_matches_reference([a_grid, x, y], outputs, values, mode, rtol=1e-6)
    assert got[2].all()


SCALAR_SOLVES = {
    "minimize_scalar": lambda f, y: minimize_scalar(f**2, y, method="brent"),
    "root_scalar": lambda f, y: root_scalar(f + y**3, y, method="newton", jac=True),
}


@pytest.mark.parametrize("mode", JAX_MODES)
@pytest.mark.parametrize("solve", list(SCALAR_SOLVES))
def test_a_scalar_solve_split_at_the_length_of_a_parameter(solve, mode):
    # The sizes do not depend on y: they are a parameter of the op, computed outside it.
    y, v = pt.dscalar("y"), pt.dvector("v")
    head = v.shape[0] // 2
    first, second = pt.split(y * v, pt.stack([head, v.shape[0] - head]), n_splits=2)
    solution, success = SCALAR_SOLVES[solve]((first - 1).sum() + (second + 2).sum(), y)
    outputs = [solution, pt.grad(solution, v), success]
    for size in (3, 6):
        assert_matches_reference([y, v], outputs, [0.0, np.linspace(0.5, 1.5, size)], mode)
