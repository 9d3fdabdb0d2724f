"""scipy's ``nonlin_solve`` family (``root(method="broyden1" | ...)``), native under NUMBA and
lowered to optimistix under JAX_GPU.

The reference is scipy run by PyTensor's Python backend (``FAST_COMPILE``) at
the same options. The native solvers follow scipy's iteration step for step,
so they stop at scipy's iterate (not merely within ``tol`` of the root), and
report scipy's ``success``, including failure when ``maxiter`` or ``nit``
runs out. Gradients are PyTensor's implicit-function gradients of the op.
"""

import warnings

import jax
import jax.numpy as jnp
import numba
import numpy as np
import optimistix as optx
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.linalg
import scipy.optimize
from pytensor.tensor.optimize import RootOp, root

from gpubackend import ObjectModeFallbackWarning, UnsupportedOption
from gpubackend.dispatch.jax import anderson as jax_anderson
from gpubackend.dispatch.jax.optimize_methods import solver_choice
from gpubackend.dispatch.numba.optimize import NATIVE_SOLVERS
from gpubackend.dispatch.numba.optimize_plan import solver_plan
from gpubackend.solvers import anderson

BROYDEN = ["broyden1", "broyden2"]
DIAGONAL = ["diagbroyden", "linearmixing", "excitingmixing"]
METHODS = [*BROYDEN, "anderson", *DIAGONAL]
A_VALUE = 1.0
X0 = np.zeros(2)
Y0 = np.zeros(3)
Z0 = np.array(0.5)
Z0_VECTOR = Z0.reshape(1)
# Same iteration as scipy: agreement down to rounding, far below any tolerance.
RTOL, ATOL = 1e-7, 1e-10


def _pair_terms(x, a):
    """A coupled cubic pair (scipy's broyden1 example, shifted by ``a``), for any array library."""
    return x[0] + 0.5 * (x[0] - x[1]) ** 3 - a, 0.5 * (x[1] - x[0]) ** 3 + x[1]


def _equations(x, y, z, a):
    """The cubic pair, a tridiagonal triple and a cubic in ``z`` (0-d, or one element)."""
    pair = pt.stack(_pair_terms(x, a))
    triple = pt.stack(
        [
            2 * y[0] - y[1] + 0.1 * y[0] ** 3 - a,
            -y[0] + 2 * y[1] - y[2] + 0.1 * y[1] ** 3,
            -y[1] + 2 * y[2] + 0.1 * y[2] ** 3 - 1.0,
        ]
    )
    return pair, triple, z**3 + z - a


def _jac_option_cases(method):
    if method in BROYDEN:
        return {
            "simple_rank": {"max_rank": 2, "reduction_method": "simple"},
            "svd_rank": {"max_rank": 3, "reduction_method": "svd"},
            "alpha": {"alpha": 0.3},
        }
    if method == "excitingmixing":
        return {"alpha_alphamax": {"alpha": 0.2, "alphamax": 0.5}}
    if method == "anderson":
        # One pair kept, unregularised: the 1x1 system, solved by division as scipy does. (With
        # w0=0 and more pairs the system is singular to rounding, rcond ~1e-18: no two solves of
        # it agree.)
        return {"alpha_w0_M": {"alpha": 0.3, "w0": 0.1, "M": 3}, "one_pair": {"w0": 0.0, "M": 1}}
    return {"alpha": {"alpha": 0.3}}


def _problems(method, x, y, z, a):
    """name -> ((solution, success), whether scipy converges: None where it depends on the method);
    each problem compiled once per backend.

    A 0-d ``z`` crashes the reference (scipy's flattened ``x`` handed to PyTensor's compiled inner
    function: a segmentation fault), so it is given as a vector of one element: scipy solves a 0-d
    ``x`` flattened, the same iteration."""
    pair, triple, cubic = _equations(x, y, z, a)
    if method in DIAGONAL:
        # The diagonal approximations start from ``J = -I / alpha`` (linear mixing keeps it): they
        # converge where the Jacobian is near a negative multiple of the identity.
        pair, triple, cubic = -pair, -triple, -cubic

    def solve(equations, variables, **kwargs):
        return root(equations, variables, method=method, optimizer_kwargs=kwargs)

    problems = {
        "default": (solve(pair, x), True),
        "no_line_search": (solve(pair, x, options={"line_search": None}), True),
        "tol": (solve(triple, y, tol=1e-9), True),
        "fatol_xtol": (solve(triple, y, options={"fatol": 1e-10, "xtol": 1e-8}), True),
        "0d": (solve(cubic, z), True),
        "maxiter": (solve(pair, x, options={"maxiter": 2}), False),
        "nit": (solve(triple, y, options={"nit": 3}), False),
    }
    for name, jac_options in _jac_option_cases(method).items():
        # Whether these converge depends on the method (broyden2 keeping one term does not).
        problems[name] = (solve(pair, x, options={"jac_options": jac_options}), None)
    return problems


def _solve_both(method, mode):
    """Per problem: (ours, scipy's, converges), each ``[solution, success, gradient wrt a]``."""
    x, y, a = pt.vector("x"), pt.vector("y"), pt.scalar("a")

    def outputs_of(problems):
        outputs = []
        for (solution, success), converges in problems.values():
            gradient = solution if converges is False else pytensor.grad(solution.sum(), a)
            outputs += [solution.reshape((-1,)), success, gradient]
        return outputs

    z, z_vector = pt.scalar("z"), pt.vector("z")
    problems = _problems(method, x, y, z, a)
    reference_problems = _problems(method, x, y, z_vector, a)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObjectModeFallbackWarning)
        ours = pytensor.function([x, y, z, a], outputs_of(problems), mode=mode)(X0, Y0, Z0, A_VALUE)
    with warnings.catch_warnings():
        # scipy warns that these methods do not use the Jacobian PyTensor hands it.
        warnings.filterwarnings("ignore", "Method .* does not use the jacobian")
        # scipy's anderson warns on its ill-conditioned small systems, near the root.
        warnings.filterwarnings("ignore", "An ill-conditioned matrix detected")
        want = pytensor.function(
            [x, y, z_vector, a], outputs_of(reference_problems), mode="FAST_COMPILE"
        )(X0, Y0, Z0_VECTOR, A_VALUE)
    return {
        name: (ours[3 * i : 3 * i + 3], want[3 * i : 3 * i + 3], converges)
        for i, (name, (_, converges)) in enumerate(problems.items())
    }


@pytest.fixture(scope="module", params=METHODS)
def numba_results(request):
    return request.param, _solve_both(request.param, "NUMBA")


def _assert_agrees(results):
    for name, (ours, want, converges) in results.items():
        if converges is not None:
            assert bool(want[1]) == converges, f"{name}: the reference's verdict changed"
        assert bool(ours[1]) == bool(want[1]), name
        compared = zip(ours[::2], want[::2], strict=True) if want[1] else [(ours[0], want[0])]
        for got, expected in compared:
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL, err_msg=name)


def test_numba_matches_scipy_values_verdicts_and_gradients(numba_results):
    _method, results = numba_results
    _assert_agrees(results)


@pytest.mark.parametrize("method", METHODS)
def test_jax_matches_scipy_values_verdicts_and_gradients(method):
    _assert_agrees(_solve_both(method, "JAX_GPU"))


@pytest.mark.parametrize("mode", ["NUMBA", "JAX_GPU"])
def test_wolfe_line_search_is_refused_by_name(mode):
    x = pt.vector("x")
    solution, _ = root(
        x**3 - 1.0, x, method="broyden1", optimizer_kwargs={"options": {"line_search": "wolfe"}}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObjectModeFallbackWarning)
        with pytest.raises((UnsupportedOption, ObjectModeFallbackWarning), match="wolfe"):
            pytensor.function([x], solution, mode=mode)


def test_unknown_jac_option_is_scipys_type_error():
    x = pt.vector("x")
    solution, _ = root(
        x**3 - 1.0, x, method="broyden1", optimizer_kwargs={"options": {"jac_options": {"M": 3}}}
    )
    with pytest.raises(TypeError, match=r"\['M'\]"):
        pytensor.function([x], solution, mode="NUMBA")


ANDERSON_COUNTED = {
    "default": {},
    "maxiter": {"maxiter": 3},
    "no_line_search": {"line_search": None},
    "jac_options": {"jac_options": {"alpha": 0.3, "w0": 0.1, "M": 3}},
}
"""Options under which each backend's anderson evaluates the equations as often as scipy."""


_jitted_pair_terms = numba.njit(_pair_terms)


@numba.njit
def _counted_pair(x, args):
    a, counts = args
    counts[0] += 1
    return np.array(_jitted_pair_terms(x, a))


def _anderson_op(options):
    x = pt.vector("x")
    solution, _ = root(
        pt.stack(_pair_terms(x, A_VALUE)),
        x,
        method="anderson",
        optimizer_kwargs={"options": options},
    )
    return solution.owner.op


def _scipy_evaluations(options):
    calls = np.zeros(1, dtype=np.int64)
    result = scipy.optimize.root(
        lambda x: _counted_pair(x, (A_VALUE, calls)), X0, method="anderson", options=options
    )
    return result.x, result.success, int(calls[0])


def _numba_evaluations(solve, options):
    settings = solver_plan(_anderson_op(options)).settings
    calls = np.zeros(1, dtype=np.int64)
    x, success = solve(X0, (A_VALUE, calls), settings)
    return x, success, int(calls[0])


def _jax_evaluations(options):
    choice = solver_choice(_anderson_op(options), X0.size, "float64")
    calls = [0]

    def count():
        calls[0] += 1

    def pair(x, a):
        jax.debug.callback(count)
        return jnp.stack(_pair_terms(x, a))

    solution = optx.root_find(
        pair, choice.solver, jnp.asarray(X0), A_VALUE, max_steps=choice.max_steps, throw=False
    )
    success = solution.result == optx.RESULTS.successful
    return np.asarray(solution.value), bool(success), calls[0]


@pytest.fixture(scope="module")
def numba_anderson():
    """One compile of the native anderson on the counting equations, for every options case."""
    inner = NATIVE_SOLVERS[(RootOp, "anderson")][1](_counted_pair)

    @numba.njit
    def solve(x0, args, settings):
        return inner(x0, args, settings)

    return solve


@pytest.mark.parametrize("name", list(ANDERSON_COUNTED))
def test_anderson_evaluates_the_equations_as_often_as_scipy(numba_anderson, name):
    options = ANDERSON_COUNTED[name]
    want_x, want_success, want_calls = _scipy_evaluations(options)
    assert want_success == (name != "maxiter")
    for backend, (x, success, calls) in {
        "NUMBA": _numba_evaluations(numba_anderson, options),
        "JAX": _jax_evaluations(options),
    }.items():
        assert (bool(success), calls) == (want_success, want_calls), backend
        np.testing.assert_allclose(x, want_x, rtol=RTOL, atol=ATOL, err_msg=backend)


MIXING_SYSTEMS = {
    "positive_definite": [[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]],
    "indefinite": [[1.0, 2.0, 0.0], [2.0, 1.0, 1.0], [0.0, 1.0, 1.0]],
    "diagonal": [[2.0, 0.0], [0.0, 5.0]],
    "singular_diagonal": [[2.0, 0.0], [0.0, 0.0]],
    "singular": [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]],
    "not_finite": [[1.0, np.nan], [np.nan, 1.0]],
}
"""Anderson's small systems of each kind scipy's ``linalg.solve`` tells apart."""


@pytest.fixture(scope="module")
def numba_solve_mixing():
    @numba.njit
    def solve(a, rhs):
        return anderson.solve_mixing(a, rhs)

    return solve


@pytest.mark.parametrize("name", list(MIXING_SYSTEMS))
def test_anderson_small_system_is_solved_or_refused_as_scipy_does(numba_solve_mixing, name):
    a = np.array(MIXING_SYSTEMS[name])
    rhs = np.arange(1.0, a.shape[0] + 1.0)
    try:
        want, want_solved = scipy.linalg.solve(a, rhs), True
    except np.linalg.LinAlgError:
        want, want_solved = None, False
    except ValueError:
        with pytest.raises(ValueError, match="infs or NaNs"):
            numba_solve_mixing(a, rhs)
        # Nothing raises under JAX: the step is NaN, and the solve ends unsuccessfully.
        assert np.isnan(jax_anderson.solve_mixing(jnp.asarray(a), jnp.asarray(rhs))[0]).all()
        return
    jax_gamma, jax_solved = jax_anderson.solve_mixing(jnp.asarray(a), jnp.asarray(rhs))
    for backend, (gamma, solved) in {
        "NUMBA": numba_solve_mixing(a, rhs),
        "JAX": (np.asarray(jax_gamma), bool(jax_solved)),
    }.items():
        assert bool(solved) == want_solved, backend
        if want_solved:
            np.testing.assert_allclose(gamma, want, rtol=1e-14, err_msg=backend)
