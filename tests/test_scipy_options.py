"""The JAX and Numba lowerings read an optimize op's scipy options alike
(`gpubackend.scipy_options`).

Three checks: both backends resolve the same op to the same settings and
spend the budget the caller gave (``maxiter`` counts what scipy counts);
bad options get clear errors; and, run against scipy itself, a budget scipy
runs out of leaves ``success`` False on both backends while twice scipy's own
count lets both succeed. Each backend compiles all problems in one function.
"""

import subprocess
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.optimize
from pytensor.tensor.optimize import (
    MinimizeOp,
    RootScalarOp,
    minimize,
    minimize_scalar,
    root,
    root_scalar,
)

from gpubackend import ObjectModeFallbackWarning, UnsupportedOption
from gpubackend.dispatch.jax.optimize_methods import JAX_SOLVERS, ScipyIterations, solver_choice
from gpubackend.dispatch.numba.optimize_plan import has_native_solver, solver_plan
from gpubackend.scipy_options import OP_OPTIONS, resolve
from tests.jax_lowering_harness import compile_checked

X = pt.vector("x", shape=(4,))
XR = pt.vector("xr", shape=(2,))
Z = pt.scalar("z")
INPUTS = [X, XR, Z]
VALUES = [np.array([-1.2, 1.0, -0.5, 0.8]), np.zeros(2), np.array(1.0)]
ROOT_TARGET = np.array([1.0, 0.3])


def _rosenbrock(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def _rosenbrock_gradient(x):
    gradient = np.zeros_like(x)
    rise = x[1:] - x[:-1] ** 2
    gradient[:-1] += -400 * rise * x[:-1] - 2 * (1 - x[:-1])
    gradient[1:] += 200 * rise
    return gradient


def _equations(x, a, stack):
    return stack([x[0] + 0.5 * x[1] ** 3 - a[0], 0.5 * (x[1] - x[0]) ** 3 + x[1] - a[1]])


def _jacobian(x):
    cubed = 1.5 * (x[1] - x[0]) ** 2
    return np.array([[1.0, 1.5 * x[1] ** 2], [-cubed, cubed + 1.0]])


def _scalar_objective(z):
    return (z - 1.5) ** 2 + 0.1 * z**4


def _scalar_equation(z):
    return z**3 + z - 3.0


@dataclass(frozen=True, eq=False)
class Case:
    """One scipy method on one problem; ``budget`` is the option that bounds its work."""

    kind: str
    method: str
    budget: str
    interval: dict[str, Any]

    def op_outputs(self, limit: int):
        """``(solution, success)`` of the PyTensor op with ``budget=limit``."""
        method, interval = self.method, self.interval
        if self.kind == "minimize":
            return minimize(
                _rosenbrock(X),
                X,
                method=method,
                hess=self.needs_hessian,
                optimizer_kwargs={"options": {self.budget: limit}},
            )
        if self.kind == "root":
            equations = _equations(XR, pt.constant(ROOT_TARGET), pt.stack)
            return root(
                equations, XR, method=method, optimizer_kwargs={"options": {self.budget: limit}}
            )
        if self.kind == "minimize_scalar":
            options = {"options": {self.budget: limit}}
            return minimize_scalar(
                _scalar_objective(Z), Z, method=method, optimizer_kwargs=options, **interval
            )
        jac = method == "newton"
        equation = _scalar_equation(Z)
        return root_scalar(
            equation, Z, method=method, jac=jac, optimizer_kwargs={self.budget: limit}, **interval
        )

    def scipy(self, limit: int | None = None) -> tuple[int, bool]:
        """scipy's own ``(count, success)`` on the same problem, counting what ``budget`` counts."""
        options = {} if limit is None else {self.budget: limit}
        start_x, start_z = VALUES[0], float(VALUES[2])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if self.kind == "minimize":
                result = scipy.optimize.minimize(
                    _rosenbrock,
                    start_x,
                    jac=_rosenbrock_gradient,
                    hess=scipy.optimize.rosen_hess if self.needs_hessian else None,
                    method=self.method,
                    options=options,
                )
                return result.nit, result.success
            if self.kind == "root":
                result = scipy.optimize.root(
                    lambda x: _equations(x, ROOT_TARGET, np.array),
                    VALUES[1],
                    jac=_jacobian,
                    method=self.method,
                    options=options,
                )
                return result.nfev, result.success
            if self.kind == "minimize_scalar":
                result = scipy.optimize.minimize_scalar(
                    _scalar_objective, method=self.method, options=options, **self.interval
                )
                return (result.nfev if self.method == "bounded" else result.nit), result.success
            extra = {"fprime": lambda z: 3 * z**2 + 1} if self.method == "newton" else {}
            result = scipy.optimize.root_scalar(
                _scalar_equation,
                method=self.method,
                x0=start_z,
                **extra,
                **self.interval,
                **options,
            )
            return result.iterations, result.converged

    @property
    def needs_hessian(self) -> bool:
        return (
            self.kind == "minimize"
            and OP_OPTIONS[MinimizeOp].methods[self.method.lower()].needs_hessian
        )

    def __str__(self) -> str:
        return f"{self.kind}-{self.method}"


# Every (op, method) both backends lower natively.
CASES = [
    Case("minimize", "BFGS", "maxiter", {}),
    Case("minimize", "L-BFGS-B", "maxiter", {}),
    Case("minimize", "trust-exact", "maxiter", {}),
    Case("minimize", "Nelder-Mead", "maxiter", {}),
    Case("root", "hybr", "maxfev", {}),
    Case("root", "lm", "maxiter", {}),
    Case("minimize_scalar", "brent", "maxiter", {}),
    Case("minimize_scalar", "golden", "maxiter", {}),
    Case("minimize_scalar", "bounded", "maxiter", {"bounds": (-2.0, 4.0)}),
    Case("root_scalar", "brentq", "maxiter", {"bracket": (0.0, 5.0)}),
    Case("root_scalar", "bisect", "maxiter", {"bracket": (0.0, 5.0)}),
    Case("root_scalar", "newton", "maxiter", {}),
    Case("root_scalar", "secant", "maxiter", {}),
]
SHORT_BUDGET = 2


def _op(case: Case, limit: int):
    return case.op_outputs(limit)[0].owner.op


@pytest.mark.parametrize("case", CASES, ids=str)
def test_both_backends_resolve_the_same_settings_and_budget(case):
    limit = 7
    op = _op(case, limit)
    settings = resolve(op).settings
    assert getattr(settings, case.budget) == limit
    assert solver_plan(op).settings == settings
    n_variables = 4 if case.kind == "minimize" else 2 if case.kind == "root" else 1
    choice = solver_choice(op, n_variables=n_variables, dtype="float64")
    if isinstance(choice.solver, ScipyIterations):
        assert choice.solver.max_iterations == limit
    else:
        assert choice.max_steps == limit


@pytest.fixture(scope="module")
def budget_runs():
    """Per case: scipy's count, and (scipy, JAX_GPU, NUMBA) successes at a short and at twice
    scipy's budget."""
    limits = {}
    for case in CASES:
        count, converged = case.scipy()
        assert converged, f"{case}: scipy itself fails on the test problem"
        limits[case] = (SHORT_BUDGET, 2 * count)
    outputs = [case.op_outputs(limit)[1] for case in CASES for limit in limits[case]]
    jax_successes = compile_checked(INPUTS, outputs, VALUES, "JAX_GPU")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObjectModeFallbackWarning)
        numba_successes = pytensor.function(INPUTS, outputs, mode="NUMBA")(*VALUES)
    runs = {}
    for i, case in enumerate(CASES):
        runs[case] = [
            (
                limit,
                case.scipy(limit)[1],
                bool(jax_successes[2 * i + j]),
                bool(numba_successes[2 * i + j]),
            )
            for j, limit in enumerate(limits[case])
        ]
    return runs


@pytest.mark.parametrize("case", CASES, ids=str)
def test_numba_succeeds_where_scipy_does(budget_runs, case):
    for limit, scipy_success, _, numba_success in budget_runs[case]:
        assert numba_success == scipy_success, (case.budget, limit, scipy_success)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_jax_succeeds_where_scipy_does(budget_runs, case):
    for limit, scipy_success, jax_success, _ in budget_runs[case]:
        assert jax_success == scipy_success, (case.budget, limit, scipy_success)


def test_short_budget_fails_and_twice_scipys_count_succeeds_under_scipy(budget_runs):
    """The budgets above discriminate: scipy fails at the short one and succeeds at the long one."""
    for case, ((_, short_success, _, _), (_, long_success, _, _)) in budget_runs.items():
        assert (short_success, long_success) == (False, True), case


def test_an_option_the_method_lacks_is_named_with_the_expected_ones():
    solution, _ = minimize(
        _rosenbrock(X), X, method="BFGS", optimizer_kwargs={"options": {"maxfun": 10}}
    )
    op = solution.owner.op
    with pytest.raises(UnsupportedOption, match=r"\['maxfun'\].*'gtol', 'norm', 'maxiter'"):
        resolve(op)
    # Numba keeps scipy (object mode) for it; JAX refuses it at compile time.
    assert not has_native_solver(op)
    with pytest.raises(NotImplementedError, match="maxfun"):
        solver_choice(op, n_variables=4, dtype="float64")


def test_a_budget_that_is_not_a_count_is_a_clear_error():
    solution, _ = root_scalar(
        _scalar_equation(Z), Z, method="newton", jac=True, optimizer_kwargs={"maxiter": -3}
    )
    with pytest.raises(ValueError, match=r"'maxiter' must be a whole number >= 0, got -3"):
        resolve(solution.owner.op)


def test_tol_sets_what_scipy_sets_and_explicit_options_win():
    solution, _ = minimize(
        _rosenbrock(X),
        X,
        method="L-BFGS-B",
        optimizer_kwargs={"tol": 1e-9, "options": {"gtol": 1e-3}},
    )
    settings = resolve(solution.owner.op).settings
    assert (settings.ftol, settings.gtol) == (1e-9, 1e-3)


def test_scipy_options_imports_neither_jax_nor_numba():
    code = (
        "import sys, gpubackend.scipy_options; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'numba', 'optimistix')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert loaded.strip() == "[]"


def _marked(backend: str) -> set[tuple[type, str]]:
    return {
        (op_type, key)
        for op_type, options in OP_OPTIONS.items()
        for key, method in options.methods.items()
        if getattr(method, backend) is not None
    }


def test_each_backend_runs_exactly_the_methods_the_table_gives_it():
    """The one table of methods (scipy_options.methods) and each backend's solvers name the same
    methods."""
    from gpubackend.dispatch.numba.optimize import NATIVE_SOLVERS

    assert set(JAX_SOLVERS) == _marked("jax")
    # Newton without a derivative output runs on a forward difference: a second solver, one method.
    # trust-constr with the op's Hessian is a second solver too, and so is its interior-point method
    # (with bounds), with the BFGS approximation or the Hessian.
    variants = {
        (RootScalarOp, "newton-forward-difference"),
        (MinimizeOp, "trust-constr-hessian"),
        (MinimizeOp, "trust-constr-interior-point"),
        (MinimizeOp, "trust-constr-interior-point-hessian"),
    }
    assert set(NATIVE_SOLVERS) - variants == _marked("numba")


BOUNDED_METHODS = [
    name for name, method in OP_OPTIONS[MinimizeOp].methods.items() if "bounds" in method.options()
]


@pytest.mark.parametrize("mode", ["FAST_COMPILE", "NUMBA", "JAX_GPU"])
@pytest.mark.parametrize("method", BOUNDED_METHODS)
def test_crossed_bounds_raise_scipys_error_for_every_bounded_method(method, mode):
    """scipy refuses a box whose upper bound is below its lower one, whatever the method; the
    lowerings refuse it when they compile (before: NUMBA's L-BFGS-B solved on the crossed box)."""
    bounds = {"bounds": [(0.0, 1.0), (0.0, 1.0), (2.0, -2.0), (None, None)]}
    solution, _ = minimize(_rosenbrock(X), X, method=method, optimizer_kwargs=bounds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ObjectModeFallbackWarning)
        with pytest.raises(ValueError, match="An upper bound is less than the corresponding lower"):
            pytensor.function([X], solution, mode=mode)(VALUES[0])


DERIVATIVE_METHODS = [
    (name, derivatives)
    for name, method in OP_OPTIONS[MinimizeOp].methods.items()
    for derivatives in ({"jac": False}, {"jac": True, "hess": False})
    if method.needs_hessian or (method.needs_gradient and not derivatives["jac"])
]


@pytest.mark.parametrize("mode", ["FAST_COMPILE", "NUMBA", "JAX_GPU"])
@pytest.mark.parametrize(("method", "derivatives"), DERIVATIVE_METHODS, ids=str)
def test_a_method_without_the_derivatives_scipy_needs_raises_scipys_error(
    method, derivatives, mode
):
    """scipy's ValueError, on its first call under FAST_COMPILE and when the lowerings compile
    (before: NUMBA handed such an op to scipy in object mode, a fallback that could only
    raise)."""
    solution, _ = minimize(_rosenbrock(X), X, method=method, **derivatives)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObjectModeFallbackWarning)
        with pytest.raises(ValueError, match=r"Jacobian is required|Hessian"):
            pytensor.function([X], solution, mode=mode)(VALUES[0])


@pytest.mark.parametrize("mode", ["FAST_COMPILE", "NUMBA", "JAX_GPU"])
@pytest.mark.parametrize("wolfe", [{"c1": 0.5, "c2": 0.4}, {"c1": 0.0}, {"c2": 1.0}], ids=str)
@pytest.mark.parametrize("method", ["BFGS", "CG", "Newton-CG"])
def test_wolfe_constants_out_of_order_raise_scipys_error(method, wolfe, mode):
    """scipy refuses Wolfe constants unless ``0 < c1 < c2 < 1``. Before: NUMBA searched with them,
    JAX_GPU refused BFGS's and CG's as unsupported options and ran Newton-CG's."""
    hess = method == "Newton-CG"
    solution, _ = minimize(
        _rosenbrock(X), X, method=method, hess=hess, optimizer_kwargs={"options": wolfe}
    )
    with pytest.raises(ValueError, match=r"'c1' and 'c2' do not satisfy'0 < c1 < c2 < 1'"):
        pytensor.function([X], solution, mode=mode)(VALUES[0])
