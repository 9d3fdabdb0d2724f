"""scipy's ``nonlin_solve`` family (``root(method="broyden1" | ...)``), native under NUMBA and
lowered to optimistix under JAX_GPU.

The reference is scipy run by PyTensor's Python backend (``FAST_COMPILE``) at
the same options. The native solvers follow scipy's iteration step for step,
so they stop at scipy's iterate (not merely within ``tol`` of the root), and
report scipy's ``success``, including failure when ``maxiter`` or ``nit``
runs out. Gradients are PyTensor's implicit-function gradients of the op.
"""

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.optimize import root

from gpubackend import ObjectModeFallbackWarning, UnsupportedOption

BROYDEN = ["broyden1", "broyden2"]
METHODS = [*BROYDEN, "diagbroyden", "linearmixing", "excitingmixing"]
A_VALUE = 1.0
X0 = np.zeros(2)
Y0 = np.zeros(3)
Z0 = np.array(0.5)
Z0_VECTOR = Z0.reshape(1)
# Same iteration as scipy: agreement down to rounding, far below any tolerance.
RTOL, ATOL = 1e-7, 1e-10


def _equations(x, y, z, a):
    """A coupled cubic pair (scipy's broyden1 example, shifted by ``a``), a tridiagonal triple and
    a cubic in ``z`` (0-d, or one element)."""
    pair = pt.stack([x[0] + 0.5 * (x[0] - x[1]) ** 3 - a, 0.5 * (x[1] - x[0]) ** 3 + x[1]])
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
    return {"alpha": {"alpha": 0.3}}


def _problems(method, x, y, z, a):
    """name -> ((solution, success), whether scipy converges: None where it depends on the method);
    each problem compiled once per backend.

    A 0-d ``z`` crashes the reference (scipy's flattened ``x`` handed to PyTensor's compiled inner
    function: a segmentation fault), so it is given as a vector of one element: scipy solves a 0-d
    ``x`` flattened, the same iteration."""
    pair, triple, cubic = _equations(x, y, z, a)
    if method not in BROYDEN:
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
