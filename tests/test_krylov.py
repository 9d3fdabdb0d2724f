"""``root(method="krylov")``: scipy's Newton-Krylov (``nonlin_solve`` with ``KrylovJacobian``),
native under NUMBA.

The reference is scipy run by PyTensor's Python backend (``FAST_COMPILE``) at
the same options. The native solver follows scipy's iteration step for step
(the same finite-difference products, the same inner lgmres or gmres cycle),
so it stops at scipy's iterate and evaluates the equations as often. Its
products are differences over steps of ``sqrt(eps)``, which magnify rounding
by ``1 / sqrt(eps)``: iterates agree to about ``1e-9``, not to rounding, and
problems are chosen where scipy's outcome does not hinge on rounding. (It does
where an inner solve is asked for more than the differences resolve: from
``x = 0`` the cubic pair stalls on a line, and the triple's second iterate
moves by 1e-2 under relative perturbations of 1e-16 of its equations, in
scipy alone.)
"""

import warnings

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.optimize
import scipy.sparse.linalg
from pytensor.tensor.optimize import RootOp, root

from gpubackend import ObjectModeFallbackWarning, UnsupportedOption
from gpubackend.dispatch.numba.optimize import NATIVE_SOLVERS
from gpubackend.dispatch.numba.optimize_plan import solver_plan
from gpubackend.scipy_options import resolve

A_VALUE = 1.0
X0 = np.array([0.5, 0.2])
Y0 = np.zeros(3)
RTOL, ATOL = 1e-7, 1e-8


def _pair_terms(x, a):
    """scipy's broyden1 example pair, shifted by ``a``, for any array library."""
    return x[0] + 0.5 * (x[0] - x[1]) ** 3 - a, 0.5 * (x[1] - x[0]) ** 3 + x[1]


def _triple_terms(y, a):
    """A tridiagonal triple with a cubic term."""
    return (
        2 * y[0] - y[1] + 0.1 * y[0] ** 3 - a,
        -y[0] + 2 * y[1] - y[2] + 0.1 * y[1] ** 3,
        -y[1] + 2 * y[2] + 0.1 * y[2] ** 3 - 1.0,
    )


CASES = {
    "default": ("pair", {}, True),
    "tol": ("triple", {"tol": 1e-9}, True),
    "fatol_xtol": ("triple", {"options": {"fatol": 1e-10, "xtol": 1e-8}}, True),
    "no_line_search": ("triple", {"options": {"line_search": None}}, True),
    "gmres": ("triple", {"options": {"jac_options": {"method": "gmres"}}}, True),
    "gmres_restart": (
        "triple",
        {"options": {"jac_options": {"method": "gmres", "inner_maxiter": 2}}},
        True,
    ),
    "gmres_inner_restart": (
        "triple",
        {"options": {"jac_options": {"method": "gmres", "inner_restart": 1}}},
        True,
    ),
    "rdiff": ("triple", {"options": {"jac_options": {"rdiff": 1e-4}}}, True),
    "no_outer_vectors": ("pair", {"options": {"jac_options": {"outer_k": 0}}}, True),
    "short_inner_cycle": (
        "triple",
        {"options": {"jac_options": {"inner_inner_m": 1, "outer_k": 2}}},
        True,
    ),
    "inner_tolerances": (
        "triple",
        {"options": {"jac_options": {"inner_rtol": 0.5, "inner_atol": 1e-8}}},
        True,
    ),
    "maxiter": ("pair", {"options": {"maxiter": 2}}, False),
    "nit": ("pair", {"options": {"nit": 2}}, False),
}
"""name -> (equations, scipy's keyword arguments, whether scipy converges)."""


def _equations(name, x, y, a):
    return pt.stack(_pair_terms(x, a)) if name == "pair" else pt.stack(_triple_terms(y, a))


def _solve_both(mode):
    """Per case: (ours, scipy's), each ``[solution, success, gradient wrt a]`` (no gradient where
    scipy fails)."""
    x, y, a = pt.vector("x"), pt.vector("y"), pt.scalar("a")
    outputs = []
    for equations, kwargs, converges in CASES.values():
        variables = x if equations == "pair" else y
        solution, success = root(
            _equations(equations, x, y, a), variables, method="krylov", optimizer_kwargs=kwargs
        )
        gradient = pytensor.grad(solution.sum(), a) if converges else solution
        outputs += [solution, success, gradient]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObjectModeFallbackWarning)
        ours = pytensor.function([x, y, a], outputs, mode=mode)(X0, Y0, A_VALUE)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Method .* does not use the jacobian")
        want = pytensor.function([x, y, a], outputs, mode="FAST_COMPILE")(X0, Y0, A_VALUE)
    return {
        name: (ours[3 * i : 3 * i + 3], want[3 * i : 3 * i + 3]) for i, name in enumerate(CASES)
    }


ROUNDING_PARTS_PATHS = {"inner_tolerances": 1e-5}
"""Cases whose path a rounding difference can part from scipy's, with the relative tolerance they
are compared at: ``inner_rtol=0.5`` stops each inner solve early on a residual built from
finite-difference products, so an ulp there (OpenBLAS's Haswell kernels on an AMD EPYC gave
3.5e-6 apart) changes the step, and the root is then settled only to scipy's default ``f_tol``
(6e-6), which both meet."""


def test_numba_matches_scipy_values_verdicts_and_gradients():
    for name, (ours, want) in _solve_both("NUMBA").items():
        assert bool(want[1]) == CASES[name][2], f"{name}: the reference's verdict changed"
        assert bool(ours[1]) == bool(want[1]), name
        compared = zip(ours[::2], want[::2], strict=True) if want[1] else [(ours[0], want[0])]
        rtol = ROUNDING_PARTS_PATHS.get(name, RTOL)
        for got, expected in compared:
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=ATOL, err_msg=name)


_jitted_pair_terms = numba.njit(_pair_terms)
_jitted_triple_terms = numba.njit(_triple_terms)


@numba.njit
def _counted_triple(y, args):
    a, counts = args
    counts[0] += 1
    return np.array(_jitted_triple_terms(y, a))


COUNTED = {
    "default": {},
    "no_line_search": {"line_search": None},
    "gmres": {"jac_options": {"method": "gmres"}},
    "short_inner_cycle": {"jac_options": {"inner_inner_m": 1, "outer_k": 2}},
    "maxiter": {"maxiter": 1},
}
"""Options under which the native krylov evaluates the equations as often as scipy: the same
inner cycles (each product one evaluation), the same line searches, the same iterations."""


@pytest.fixture(scope="module")
def numba_krylov():
    """One compile of the native krylov on the counting equations, for every options case."""
    inner = NATIVE_SOLVERS[(RootOp, "krylov")][1](_counted_triple)

    @numba.njit
    def solve(y0, args, settings):
        return inner(y0, args, settings)

    return solve


def _krylov_op(options):
    y = pt.vector("y")
    solution, _ = root(
        pt.stack(_triple_terms(y, A_VALUE)),
        y,
        method="krylov",
        optimizer_kwargs={"options": options},
    )
    return solution.owner.op


@pytest.mark.parametrize("name", list(COUNTED))
def test_evaluates_the_equations_as_often_as_scipy(numba_krylov, name):
    options = COUNTED[name]
    scipy_calls = np.zeros(1, dtype=np.int64)
    want = scipy.optimize.root(
        lambda y: _counted_triple(y, (A_VALUE, scipy_calls)), Y0, method="krylov", options=options
    )
    assert want.success == (name != "maxiter")
    calls = np.zeros(1, dtype=np.int64)
    x, success = numba_krylov(Y0, (A_VALUE, calls), solver_plan(_krylov_op(options)).settings)
    assert (bool(success), int(calls[0])) == (want.success, int(scipy_calls[0]))
    np.testing.assert_allclose(x, want.x, rtol=RTOL, atol=ATOL)


REFUSED = {
    "bicgstab": ({"method": "bicgstab"}, "bicgstab"),
    "a callable": ({"method": scipy.sparse.linalg.lgmres}, "callable"),
    "a preconditioner": ({"inner_M": scipy.sparse.linalg.aslinearoperator(np.eye(2))}, "inner_M"),
    "outer products": ({"inner_store_outer_Av": True}, "inner_store_outer_Av"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_unhonoured_jac_options_are_refused_by_name(name):
    jac_options, named = REFUSED[name]
    x = pt.vector("x")
    solution, _ = root(
        x**3 - 1.0, x, method="krylov", optimizer_kwargs={"options": {"jac_options": jac_options}}
    )
    with pytest.raises(UnsupportedOption, match=named):
        resolve(solution.owner.op)
    with pytest.warns(ObjectModeFallbackWarning, match=named):
        pytensor.function([x], solution, mode="NUMBA")
