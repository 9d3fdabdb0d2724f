"""Native Numba lowering of the optimize ops (gpubackend.dispatch.numba.optimize).

References are independent of the code under test: scipy run by PyTensor's
Python backend (``FAST_COMPILE``), or closed forms. Each module fixture builds
one compiled function holding several problems, because every Numba compile
costs seconds.
"""

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.optimize
from pytensor.graph.replace import vectorize_graph
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
from pytensor.tensor.blockwise import Blockwise, BlockwiseWithCoreShape
from pytensor.tensor.optimize import (
    MinimizeOp,
    ScipyWrapperOp,
    minimize,
    minimize_scalar,
    root,
    root_scalar,
)

from gpubackend import ObjectModeFallbackWarning
from gpubackend.conformance.probe import CALL, LINK, RewriteFreeProbe
from gpubackend.dispatch.numba.optimize_plan import NoNativeSolver, has_native_solver, solver_plan
from gpubackend.dispatch.numba.scalar_core import scalar_core

RTOL = 1e-6
REFERENCE_MODE = "FAST_COMPILE"


def numba_function(inputs, outputs):
    """Compile under NUMBA, failing if any optimize op fell back to object mode."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObjectModeFallbackWarning)
        return pytensor.function(inputs, outputs, mode="NUMBA")


def rosenbrock(x, a):
    return (a - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


def optimize_ops(fgraph):
    return [node.op for node in fgraph.apply_nodes if isinstance(node.op, ScipyWrapperOp)]


def frozen_snapshot(op):
    nodes = op.fgraph.toposort()
    return op.fgraph, [
        (node, node.op, tuple(node.inputs), dict(node.op.destroy_map)) for node in nodes
    ]


def solve_with_both_backends(problems, inputs, wrt, values, reference_problems=None):
    """Per problem: ((solution, success, gradient) under NUMBA, the same under the reference).

    All problems share one compiled function per backend; ``gradient`` is
    d sum(solution) / d ``wrt`` (implicit-function theorem), or the solution
    again when ``wrt`` is None (the gradient graph is the op's, not the
    method's, so methods sharing a problem need it checked only once).
    """

    def outputs_of(chosen):
        outputs = []
        for solution, success in chosen.values():
            gradient = solution if wrt is None else pytensor.grad(solution.sum(), wrt)
            outputs += [solution, success, gradient]
        return outputs

    got = numba_function(inputs, outputs_of(problems))(*values)
    reference = outputs_of(reference_problems or problems)
    expected = pytensor.function(inputs, reference, mode=REFERENCE_MODE)(*values)
    return {
        name: (got[3 * i : 3 * i + 3], expected[3 * i : 3 * i + 3])
        for i, name in enumerate(problems)
    }


def assert_matches_reference(result, rtol=RTOL):
    (solution, success, gradient), (want_solution, want_success, want_gradient) = result
    assert bool(success) and bool(want_success)
    np.testing.assert_allclose(solution, want_solution, rtol=rtol)
    np.testing.assert_allclose(gradient, want_gradient, rtol=rtol)


@pytest.fixture(scope="module")
def bfgs_problem():
    x = pt.vector("x")
    a = pt.scalar("a")
    solution, success = minimize(
        rosenbrock(x, a), x, method="BFGS", optimizer_kwargs={"tol": 1e-10}
    )
    gradient = pytensor.grad(solution.sum(), a)
    inputs, outputs = [x, a], [solution, success, gradient]
    canonical_op = solution.owner.op
    snapshot = frozen_snapshot(canonical_op)
    fn = numba_function(inputs, outputs)
    values = (np.array([-1.2, 1.0]), 1.3)
    got = [fn(*values) for _ in range(2)]
    expected = pytensor.function(inputs, outputs, mode=REFERENCE_MODE)(*values)
    return {
        "x": x,
        "a": a,
        "solution": solution,
        "fn": fn,
        "inputs": inputs,
        "outputs": outputs,
        "values": values,
        "got": got,
        "expected": expected,
        "canonical_op": canonical_op,
        "snapshot": snapshot,
    }


def test_bfgs_matches_scipy_including_ift_gradient(bfgs_problem):
    for got in bfgs_problem["got"]:
        assert_matches_reference((got, bfgs_problem["expected"]))
    # Closed form for Rosenbrock: x* = (a, a^2), so d(sum x*)/da = 1 + 2a.
    a = bfgs_problem["values"][1]
    np.testing.assert_allclose(bfgs_problem["got"][0][0], [a, a**2], rtol=RTOL)
    np.testing.assert_allclose(bfgs_problem["got"][0][2], 1 + 2 * a, rtol=RTOL)


@pytest.fixture(scope="module")
def minimize_methods_problem():
    x = pt.vector("x")
    a = pt.scalar("a")
    objective = rosenbrock(x, a)
    tight = {"tol": 1e-12}
    problems = {
        "L-BFGS-B": minimize(objective, x, method="L-BFGS-B", optimizer_kwargs=tight),
        "L-BFGS-B_bounded": minimize(
            objective,
            x,
            method="L-BFGS-B",
            optimizer_kwargs={**tight, "bounds": [(None, 0.9), (0.0, 2.0)]},
        ),
        "Newton-CG": minimize(
            objective,
            x,
            method="Newton-CG",
            hess=True,
            use_vectorized_jac=True,
            optimizer_kwargs=tight,
        ),
        "trust-exact": minimize(
            objective,
            x,
            method="trust-exact",
            hess=True,
            use_vectorized_jac=True,
            optimizer_kwargs=tight,
        ),
    }
    # BFGS's fixture checks the implicit gradient of this same objective.
    return solve_with_both_backends(problems, [x, a], None, (np.array([-1.2, 1.0]), 1.3))


@pytest.mark.parametrize("name", ["L-BFGS-B", "L-BFGS-B_bounded", "Newton-CG", "trust-exact"])
def test_minimize_method_matches_scipy(minimize_methods_problem, name):
    assert_matches_reference(minimize_methods_problem[name])


NELDER_MEAD_OPTIONS = {
    "tight": {"tol": 1e-10, "options": {"maxfev": 5000}},
    "adaptive": {"options": {"adaptive": True, "xatol": 1e-9, "fatol": 1e-12, "maxiter": 3000}},
    "bounded": {"tol": 1e-10, "bounds": [(None, 0.9), (0.0, 2.0)]},
    "out_of_iterations": {"options": {"maxiter": 20}},
    "out_of_evaluations": {"options": {"maxfev": 31}},
    "shrinking_at_the_budget": {"options": {"maxfev": 2}},
}
NELDER_MEAD_CONVERGED = ["tight", "adaptive", "bounded"]


def derivative_free_problems(method, options_by_name):
    """`solve_with_both_backends` of `rosenbrock` per named options, and once without the op's
    gradient output (derivative-free: it is not read, and an op without one runs too)."""
    x = pt.vector("x")
    a = pt.scalar("a")
    objective = rosenbrock(x, a)
    problems = {
        name: minimize(objective, x, method=method, optimizer_kwargs=options)
        for name, options in options_by_name.items()
    }
    problems["without_gradient"] = minimize(
        objective, x, method=method, jac=False, optimizer_kwargs={"tol": 1e-10}
    )
    with warnings.catch_warnings():
        # scipy warns that the method does not use the gradient PyTensor's jac=True hands it.
        warnings.simplefilter("ignore", RuntimeWarning)
        return solve_with_both_backends(problems, [x, a], a, (np.array([-1.2, 1.0]), 1.3))


@pytest.fixture(scope="module")
def nelder_mead_problem():
    return derivative_free_problems("Nelder-Mead", NELDER_MEAD_OPTIONS)


@pytest.mark.parametrize("name", [*NELDER_MEAD_CONVERGED, "without_gradient"])
def test_nelder_mead_matches_scipy_including_ift_gradient(nelder_mead_problem, name):
    assert_matches_reference(nelder_mead_problem[name])


@pytest.mark.parametrize(
    "name", ["out_of_iterations", "out_of_evaluations", "shrinking_at_the_budget"]
)
def test_nelder_mead_out_of_budget_fails_at_scipys_point(nelder_mead_problem, name):
    (solution, success, _), (want_solution, want_success, _) = nelder_mead_problem[name]
    assert not bool(want_success)
    assert not bool(success)
    np.testing.assert_allclose(solution, want_solution, rtol=RTOL)


@pytest.mark.parametrize("mode", ["NUMBA", REFERENCE_MODE])
def test_nelder_mead_with_crossed_bounds_raises_scipys_error(mode):
    x = pt.vector("x")
    solution, _ = minimize(
        ((x - 1.0) ** 2).sum(),
        x,
        method="Nelder-Mead",
        optimizer_kwargs={"bounds": [(0.0, 1.0), (2.0, -2.0)]},
    )
    with pytest.raises(ValueError, match="upper bound is less than the corresponding lower"):
        pytensor.function([x], solution, mode=mode)(np.zeros(2))


POWELL_OPTIONS = {
    "tight": {"tol": 1e-10},
    "xtol_and_ftol": {"options": {"xtol": 1e-6, "ftol": 1e-12}},
    "bounded": {"tol": 1e-10, "bounds": [(None, 0.9), (0.0, 2.0)]},
    "bounded_on_both_sides": {"tol": 1e-10, "bounds": [(-2.0, 0.9), (0.0, 2.0)]},
    "out_of_iterations": {"options": {"maxiter": 2}},
    "out_of_evaluations": {"options": {"maxfev": 40}},
}
POWELL_CONVERGED = ["tight", "xtol_and_ftol", "bounded", "bounded_on_both_sides"]


@pytest.fixture(scope="module")
def powell_problem():
    return derivative_free_problems("Powell", POWELL_OPTIONS)


@pytest.mark.parametrize("name", [*POWELL_CONVERGED, "without_gradient"])
def test_powell_matches_scipy_including_ift_gradient(powell_problem, name):
    assert_matches_reference(powell_problem[name])


@pytest.mark.parametrize("name", ["out_of_iterations", "out_of_evaluations"])
def test_powell_out_of_budget_fails_at_scipys_point(powell_problem, name):
    (solution, success, _), (want_solution, want_success, _) = powell_problem[name]
    assert not bool(want_success)
    assert not bool(success)
    np.testing.assert_allclose(solution, want_solution, rtol=RTOL)


def _powell_with_direc():
    """A graph of its own per call: scipy overwrites ``direc`` in place, so a second solve through
    the same op would start from the first one's final directions."""
    x, a = pt.vector("x"), pt.scalar("a")
    solution, success = minimize(
        rosenbrock(x, a),
        x,
        method="Powell",
        jac=False,
        optimizer_kwargs={"options": {"direc": np.array([[1.0, 1.0], [0.0, 1.0]])}},
    )
    return [x, a], [solution, success]


def test_powell_with_direc_runs_scipy_in_object_mode_naming_it():
    """``direc`` (the initial directions) has no native reading: scipy runs it, with a warning."""
    with pytest.warns(ObjectModeFallbackWarning, match=r"Powell.*direc"):
        fn = pytensor.function(*_powell_with_direc(), mode="NUMBA")
    expected = pytensor.function(*_powell_with_direc(), mode=REFERENCE_MODE)
    values = (np.array([-1.2, 1.0]), 1.3)
    for got, want in zip(fn(*values), expected(*values), strict=True):
        np.testing.assert_allclose(got, want)


TRUST_REGION_METHODS = ["trust-exact", "trust-ncg", "dogleg"]
# Methods checked together: values, implicit gradient, batching and budgets against scipy.
CHECKED_METHODS = [*TRUST_REGION_METHODS, "CG"]


def _rosenbrock_scipy_iterations(method: str, **options) -> int:
    """scipy's own iteration count on `rosenbrock` (a = 1.3) from (-1.2, 1), default options
    unless given."""

    def gradient(x):
        return np.array(
            [-2 * (1.3 - x[0]) - 400 * x[0] * (x[1] - x[0] ** 2), 200 * (x[1] - x[0] ** 2)]
        )

    def hessian(x):
        return np.array([[2 - 400 * x[1] + 1200 * x[0] ** 2, -400 * x[0]], [-400 * x[0], 200.0]])

    result = scipy.optimize.minimize(
        lambda x: rosenbrock(x, 1.3),
        [-1.2, 1.0],
        jac=gradient,
        hess=hessian if method in [*TRUST_REGION_METHODS, "trust-krylov"] else None,
        method=method,
        options=options,
    )
    assert result.success, result.message
    return result.nit


@pytest.fixture(scope="module")
def checked_methods_problem():
    """Per method: the tight solve with its implicit gradient in ``a``, a batch over ``a``
    (Blockwise), and the verdicts of scipy's default options with a budget around scipy's own
    count."""
    x = pt.vector("x")
    a = pt.scalar("a")
    batch_a = pt.vector("batch_a")
    objective = rosenbrock(x, a)

    def solve(method, **optimizer_kwargs):
        hessian = method in TRUST_REGION_METHODS
        return minimize(
            objective,
            x,
            method=method,
            hess=hessian,
            use_vectorized_jac=hessian,
            optimizer_kwargs=optimizer_kwargs,
        )

    outputs = []
    for method in CHECKED_METHODS:
        solution, success = solve(method, tol=1e-12)
        batched = vectorize_graph([solution, success], {a: batch_a})
        count = _rosenbrock_scipy_iterations(method)
        budget_successes = [
            solve(method, options={"maxiter": limit})[1] for limit in (count - 1, count, count + 1)
        ]
        outputs += [solution, success, pytensor.grad(solution.sum(), a), *batched]
        outputs += budget_successes
    inputs = [x, a, batch_a]
    fn = numba_function(inputs, outputs)
    values = (np.array([-1.2, 1.0]), 1.3, np.array([0.7, 1.3, 2.0]))
    got = fn(*values)
    expected = pytensor.function(inputs, outputs, mode=REFERENCE_MODE)(*values)
    size = len(outputs) // len(CHECKED_METHODS)
    return {
        "fn": fn,
        **{
            method: (got[i * size : (i + 1) * size], expected[i * size : (i + 1) * size])
            for i, method in enumerate(CHECKED_METHODS)
        },
    }


@pytest.mark.parametrize("method", CHECKED_METHODS)
def test_method_matches_scipy_including_ift_gradient(checked_methods_problem, method):
    got, want = checked_methods_problem[method]
    assert_matches_reference((got[:3], want[:3]))
    # Closed form for Rosenbrock: x* = (a, a^2), so d(sum x*)/da = 1 + 2a.
    np.testing.assert_allclose(got[2], 1 + 2 * 1.3, rtol=RTOL)


@pytest.mark.parametrize("method", CHECKED_METHODS)
def test_method_batched_over_blockwise_matches_scipy(checked_methods_problem, method):
    # One native batched node per method (a bare Blockwise would run in object mode).
    [_] = [
        node
        for node in checked_methods_problem["fn"].maker.fgraph.apply_nodes
        if isinstance(node.op, BlockwiseWithCoreShape) and node.op.core_op.method == method
    ]
    got, want = checked_methods_problem[method]
    np.testing.assert_allclose(got[3], want[3], rtol=RTOL)
    assert got[4].all()
    # scipy's own verdict is not asserted: at the solution its CG may stop on "precision loss"
    # (success False) for one entry, depending on the BLAS kernel's rounding (OpenBLAS's Haswell
    # kernels on an AMD EPYC), where the values above agree.
    if method != "CG":
        assert want[4].all()


@pytest.mark.parametrize("method", CHECKED_METHODS)
def test_budget_verdict_matches_scipy_around_its_own_count(checked_methods_problem, method):
    """The trust-region methods succeed with exactly scipy's count (the gradient test comes before
    the budget's); CG fails with it (out of iterations, whatever the last one did)."""
    got, want = checked_methods_problem[method]
    verdicts = [bool(s) for s in want[5:]]
    assert verdicts[0] is False and verdicts[-1] is True
    assert [bool(s) for s in got[5:]] == verdicts


def test_dogleg_on_an_indefinite_hessian_fails_where_scipy_does():
    # scipy's Cholesky factorisation fails (LinAlgError): success False at the start.
    x = pt.vector("x")
    solution, success = minimize(
        x[0] ** 2 - x[1] ** 2 + x[1] ** 4, x, method="dogleg", jac=True, hess=True
    )
    start = np.array([1.0, 0.1])
    want = pytensor.function([x], [solution, success], mode=REFERENCE_MODE)(start)
    got = numba_function([x], [solution, success])(start)
    np.testing.assert_array_equal(got[0], want[0])
    assert bool(got[1]) == bool(want[1]) is False


def _well_conditioned(x, a):
    """Curvature between 2 and 2 + 1.2 x^2: |x - x*| <= |grad| / 2."""
    return ((x - a) ** 2).sum() + 0.1 * (x**4).sum()


# trust-krylov's settings per problem: trlib solving to high accuracy, and scipy's default.
KRYLOV_SUBPROBLEMS = {"exact": {"inexact": False}, "default": {}}


@pytest.fixture(scope="module")
def trust_krylov_problem():
    """One function: per subproblem setting, Rosenbrock solved tightly with its implicit gradient
    in ``a``, a well-conditioned problem at scipy's default gtol, and Rosenbrock's verdicts with a
    budget around scipy's own count for that setting."""
    x = pt.vector("x")
    a = pt.scalar("a")

    def solve(objective, options, **optimizer_kwargs):
        return minimize(
            objective,
            x,
            method="trust-krylov",
            hess=True,
            optimizer_kwargs={**optimizer_kwargs, "options": options},
        )

    outputs = []
    for options in KRYLOV_SUBPROBLEMS.values():
        # Not tighter: trlib stalls below gtol=1e-9 here (scipy then runs out of iterations).
        solution, success = solve(rosenbrock(x, a), options, tol=1e-8)
        outputs += [solution, success, pytensor.grad(solution.sum(), a)]
        outputs += solve(_well_conditioned(x, a), options)
        count = _rosenbrock_scipy_iterations("trust-krylov", **options)
        outputs += [
            solve(rosenbrock(x, a), {**options, "maxiter": limit})[1]
            for limit in (count - 1, count, count + 1)
        ]
    inputs = [x, a]
    fn = numba_function(inputs, outputs)
    values = (np.array([-1.2, 1.0]), 1.3)
    reference = pytensor.function(inputs, outputs, mode=REFERENCE_MODE)
    got, expected = fn(*values), reference(*values)
    size = len(outputs) // len(KRYLOV_SUBPROBLEMS)
    return {
        "fns": (fn, reference),
        **{
            name: (got[i * size : (i + 1) * size], expected[i * size : (i + 1) * size])
            for i, name in enumerate(KRYLOV_SUBPROBLEMS)
        },
    }


@pytest.mark.parametrize("subproblem", KRYLOV_SUBPROBLEMS)
def test_trust_krylov_matches_scipy_including_ift_gradient(trust_krylov_problem, subproblem):
    """The exact subproblem stands in for trlib's with either setting: the same minimiser, the
    same verdict, and PyTensor's implicit gradient."""
    got, want = trust_krylov_problem[subproblem]
    assert_matches_reference((got[:3], want[:3]))
    # The default gtol=1e-4 on curvature at least 2.
    np.testing.assert_allclose(got[3], want[3], rtol=0, atol=0.5e-4)
    assert bool(got[4]) == bool(want[4]) is True


@pytest.mark.parametrize(
    "subproblem",
    [
        "exact",
        pytest.param(
            "default",
            marks=pytest.mark.xfail(
                strict=True,
                reason="the exact subproblem stands in for trlib's inexact one: 26 iterations "
                "where scipy's default takes 36 (scipy's inexact=False takes 26)",
            ),
        ),
    ],
)
def test_trust_krylov_budget_verdict_matches_scipy_around_its_own_count(
    trust_krylov_problem, subproblem
):
    got, want = trust_krylov_problem[subproblem]
    verdicts = [bool(s) for s in want[5:]]
    assert verdicts == [False, True, True]
    assert [bool(s) for s in got[5:]] == verdicts


def test_trust_krylov_from_a_nan_start_raises_scipys_error(trust_krylov_problem):
    for fn in trust_krylov_problem["fns"]:
        with pytest.raises(ValueError, match="array must not contain infs or NaNs"):
            fn(np.array([np.nan, 0.0]), 1.3)


@pytest.mark.parametrize(
    ("options", "native"), [({}, True), ({"inexact": False}, True), ({"inexact": True}, False)]
)
def test_trust_krylov_asked_for_trlibs_early_stop_keeps_scipy(options, native):
    """The exact subproblem stands in for scipy's default, not for ``inexact=True`` by name."""
    x = pt.vector("x")
    solution, _ = minimize(
        ((x - 1.0) ** 2).sum(),
        x,
        method="trust-krylov",
        hess=True,
        optimizer_kwargs={"options": options},
    )
    assert has_native_solver(solution.owner.op) is native
    if not native:
        with pytest.raises(NoNativeSolver, match="inexact=False"):
            solver_plan(solution.owner.op)


@pytest.mark.parametrize("mode", ["NUMBA", "JAX_GPU"])
@pytest.mark.parametrize(
    ("option", "value", "refusal"),
    [
        ("initial_trust_radius", 2000.0, "initial trust radius must be less than the max"),
        ("initial_trust_radius", 0.0, "initial trust radius must be positive"),
        ("max_trust_radius", -1.0, "max trust radius must be positive"),
        ("eta", 0.3, "invalid acceptance stringency"),
    ],
)
@pytest.mark.parametrize("method", [*TRUST_REGION_METHODS, "trust-krylov"])
def test_trust_region_options_scipy_refuses_raise(method, option, value, refusal, mode):
    """scipy refuses these before it evaluates anything; so do both lowerings, when they compile."""
    x = pt.vector("x")
    solution, _ = minimize(
        ((x - 1.0) ** 2).sum(),
        x,
        method=method,
        jac=True,
        hess=True,
        optimizer_kwargs={"options": {option: value}},
    )
    with pytest.raises(ValueError, match=refusal):
        pytensor.function([x], [solution], mode=mode)(np.zeros(2))


def test_lowering_is_native_and_inner_graph_is_baked_inplace(bfgs_problem):
    [compiled_op] = optimize_ops(bfgs_problem["fn"].maker.fgraph)
    canonical_op = bfgs_problem["canonical_op"]
    assert compiled_op is not canonical_op
    baked = [node for node in compiled_op.fgraph.apply_nodes if node.op.destroy_map]
    assert baked, "no inplace was baked into the compiled inner graph"
    protected = set(compiled_op.fgraph.inputs)
    for node in baked:
        for positions in node.op.destroy_map.values():
            assert not protected & {node.inputs[i] for i in positions}, (
                f"{node} destroys an inner input"
            )
    assert not any(node.op.destroy_map for node in canonical_op.fgraph.apply_nodes)


def test_canonical_graph_unchanged_and_gradient_rederivable(bfgs_problem):
    canonical_op = bfgs_problem["canonical_op"]
    assert bfgs_problem["solution"].owner.op is canonical_op
    fgraph, nodes = bfgs_problem["snapshot"]
    assert canonical_op.fgraph is fgraph
    assert [(n, n.op, tuple(n.inputs), dict(n.op.destroy_map)) for n in fgraph.toposort()] == nodes
    gradient = pytensor.grad(bfgs_problem["solution"].sum(), bfgs_problem["a"])
    rederived = pytensor.function(bfgs_problem["inputs"], gradient, mode=REFERENCE_MODE)(
        *bfgs_problem["values"]
    )
    np.testing.assert_allclose(rederived, bfgs_problem["expected"][2], rtol=RTOL)


def link_and_call_twice(inputs, outputs, values):
    """Link under NUMBA and call twice while the conformance probe counts rewrites, graphs and
    compiles."""
    probe = RewriteFreeProbe()
    with probe.installed():
        fn = probe.compile(lambda: pytensor.function(inputs, outputs, mode="NUMBA"))
        with probe.phase(CALL):
            results = [fn(*values) for _ in range(2)]
    return probe.counts, results


def test_link_and_calls_are_rewrite_free(bfgs_problem):
    counts, results = link_and_call_twice(
        bfgs_problem["inputs"], bfgs_problem["outputs"], bfgs_problem["values"]
    )
    assert counts[LINK].clean, counts[LINK].describe()
    assert counts[CALL].clean, counts[CALL].describe()
    np.testing.assert_allclose(results[1][0], bfgs_problem["expected"][0], rtol=RTOL)


OBJECT_MODE_BFGS = {"method": "BFGS", "optimizer_kwargs": {"options": {"norm": 2}}}
"""A configuration without a native solver (BFGS's norm other than inf)."""


def test_contract_check_detects_object_mode_fallback():
    """The probe must see the nested compile scipy's object-mode path makes."""
    x = pt.vector("x")
    a = pt.scalar("a")
    solution, _ = minimize(rosenbrock(x, a), x, **OBJECT_MODE_BFGS)
    with pytest.warns(ObjectModeFallbackWarning):
        counts, _ = link_and_call_twice([x, a], [solution], (np.array([-1.2, 1.0]), 1.3))
    assert counts[LINK].compilations + counts[CALL].compilations > 0


def test_fallback_warns_once_naming_the_method_and_matches_scipy():
    x = pt.vector("x")
    a = pt.scalar("a")
    solution, success = minimize(rosenbrock(x, a), x, **OBJECT_MODE_BFGS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = pytensor.function([x, a], [solution, success], mode="NUMBA")
    fallback = [w for w in caught if issubclass(w.category, ObjectModeFallbackWarning)]
    assert len(fallback) == 1
    assert "BFGS" in str(fallback[0].message)
    assert not [w for w in caught if "Numba will use object mode" in str(w.message)]
    values = (np.array([-1.2, 1.0]), 1.3)
    expected = pytensor.function([x, a], [solution, success], mode=REFERENCE_MODE)(*values)
    got = fn(*values)
    np.testing.assert_allclose(got[0], expected[0], rtol=RTOL)
    assert bool(got[1]) == bool(expected[1])


@pytest.fixture(scope="module")
def root_problem():
    x = pt.vector("x")
    z = pt.scalar("z")
    a = pt.scalar("a")
    equations = pt.stack([x[0] ** 2 + x[1] ** 2 - a, x[0] - x[1] ** 3])
    scalar_equation = z**3 + z - a
    problems = {
        "hybr": root(equations, x, method="hybr", use_vectorized_jac=True),
        "hybr_0d": root(scalar_equation, z, method="hybr", use_vectorized_jac=True),
        "lm": root(equations, x, method="lm", use_vectorized_jac=True),
    }
    return solve_with_both_backends(
        problems, [x, z, a], a, (np.array([1.0, 1.0]), np.array(0.5), 2.0), problems
    )


@pytest.mark.parametrize("name", ["hybr", "hybr_0d", "lm"])
def test_root_matches_scipy_including_ift_gradient(root_problem, name):
    assert_matches_reference(root_problem[name])


SCALAR_A = 2.0


def _scalar_problems(z, a):
    objective = (z - a) ** 2 + pt.cos(z)
    equation = z**3 - a
    return {
        "brent": minimize_scalar(objective, z, method="brent"),
        "brent_bracket3": minimize_scalar(objective, z, method="brent", bracket=(0.0, 2.0, 5.0)),
        "golden": minimize_scalar(objective, z, method="golden"),
        "bounded": minimize_scalar(objective, z, method="bounded", bounds=(0.0, 5.0)),
        "brentq": root_scalar(equation, z, method="brentq", bracket=(0.0, 3.0)),
        "bisect": root_scalar(equation, z, method="bisect", bracket=(0.0, 3.0)),
        "newton": root_scalar(equation, z, method="newton", jac=True),
        "newton_no_jac": root_scalar(equation, z, method="newton"),
        "secant": root_scalar(equation, z, method="secant"),
    }


@pytest.fixture(scope="module")
def scalar_problem():
    z = pt.scalar("z")
    a = pt.scalar("a")
    return solve_with_both_backends(_scalar_problems(z, a), [z, a], a, (np.array(1.0), SCALAR_A))


@pytest.mark.parametrize("name", list(_scalar_problems(pt.scalar(), pt.scalar())))
def test_scalar_method_matches_scipy_including_ift_gradient(scalar_problem, name):
    # bounded stops at xatol=1e-5 by default, so compare at that resolution.
    assert_matches_reference(scalar_problem[name], rtol=1e-4 if name == "bounded" else RTOL)


SCALAR_ROOT_METHODS = ["brenth", "ridder", "toms748", "halley"]
SCALAR_ROOT_BRACKET = (0.0, 3.0)
# Where no method lands on an exact zero of the equation: one that does stops there whatever its
# budget, and a last-digit difference in cos between the backends would move that stop.
SCALAR_ROOT_A = 3.0


def _scalar_root_equation(z, a, cos=np.cos):
    return z**3 + cos(z) - a


def _scalar_root_scipy_iterations(method: str) -> int:
    """scipy's own iteration count on `_scalar_root_equation` from 1, default options."""
    result = scipy.optimize.root_scalar(
        _scalar_root_equation,
        args=(SCALAR_ROOT_A,),
        method=method,
        bracket=SCALAR_ROOT_BRACKET,
        x0=1.0,
        fprime=lambda z, a: 3 * z**2 - np.sin(z),
        fprime2=lambda z, a: 6 * z - np.cos(z),
    )
    assert result.converged, result.flag
    return result.iterations


@pytest.fixture(scope="module")
def scalar_root_methods_problem():
    """Per method: the solve at scipy's defaults with its implicit gradient in ``a``, a solve at a
    loose ``xtol`` (where the iterates, not only the root, must be scipy's), and solves with a
    ``maxiter`` of scipy's own count and one less."""
    z = pt.scalar("z")
    a = pt.scalar("a")
    equation = _scalar_root_equation(z, a, cos=pt.cos)

    def solve(method, **optimizer_kwargs):
        derivatives = method == "halley"
        return root_scalar(
            equation,
            z,
            method=method,
            jac=derivatives,
            hess=derivatives,
            bracket=None if derivatives else SCALAR_ROOT_BRACKET,
            optimizer_kwargs=optimizer_kwargs,
        )

    outputs = []
    for method in SCALAR_ROOT_METHODS:
        solution, success = solve(method)
        count = _scalar_root_scipy_iterations(method)
        outputs += [solution, success, pytensor.grad(solution, a)]
        outputs += solve(method, xtol=1e-3)
        for limit in (count - 1, count):
            outputs += solve(method, maxiter=limit)
    fn = numba_function([z, a], outputs)
    values = (np.array(1.0), SCALAR_ROOT_A)
    got = fn(*values)
    expected = pytensor.function([z, a], outputs, mode=REFERENCE_MODE)(*values)
    size = len(outputs) // len(SCALAR_ROOT_METHODS)
    return {
        method: (got[i * size : (i + 1) * size], expected[i * size : (i + 1) * size])
        for i, method in enumerate(SCALAR_ROOT_METHODS)
    }


@pytest.mark.parametrize("method", SCALAR_ROOT_METHODS)
def test_scalar_root_method_matches_scipy_including_ift_gradient(
    scalar_root_methods_problem, method
):
    got, want = scalar_root_methods_problem[method]
    assert_matches_reference((got[:3], want[:3]))


@pytest.mark.parametrize("method", SCALAR_ROOT_METHODS)
def test_scalar_root_method_at_a_loose_xtol_stops_at_scipys_iterate(
    scalar_root_methods_problem, method
):
    got, want = scalar_root_methods_problem[method]
    # Far from the root at 1e-3, so an iterate taken differently than scipy's would show.
    np.testing.assert_allclose(got[3], want[3], rtol=1e-12)
    assert bool(got[4]) == bool(want[4]) is True


@pytest.mark.parametrize("method", SCALAR_ROOT_METHODS)
def test_scalar_root_method_budget_verdict_matches_scipy_around_its_own_count(
    scalar_root_methods_problem, method
):
    got, want = scalar_root_methods_problem[method]
    assert [bool(s) for s in want[6::2]] == [False, True]
    assert [bool(s) for s in got[6::2]] == [False, True]
    # The iterate scipy returns out of budget too.
    np.testing.assert_allclose(got[5::2], want[5::2], rtol=1e-12)


def test_scalar_problem_runs_on_floats_only_when_its_inner_graph_is_one_scalar_op():
    z, a, v = pt.scalar("z"), pt.scalar("a"), pt.vector("v")
    problems = [
        root_scalar(z**3 - a, z, method="brentq", bracket=(0.0, 3.0)),
        # A vector inside the equation keeps its inner graph on arrays.
        root_scalar((z**3 * v).sum() - a, z, method="brentq", bracket=(0.0, 3.0)),
        minimize_scalar((z - a) ** 2 + pt.cos(z * v).sum(), z, method="brent"),
    ]
    outputs = [
        output
        for solution, success in problems
        for output in (solution, success, pytensor.grad(solution, a))
    ]
    fn = numba_function([z, a, v], outputs)
    on_floats = sorted(scalar_core(op.fgraph) is not None for op in optimize_ops(fn.maker.fgraph))
    assert on_floats == [False, False, True]
    values = (np.array(1.0), 2.0, np.array([0.5, 0.25]))
    expected = pytensor.function([z, a, v], outputs, mode=REFERENCE_MODE)(*values)
    for got, want in zip(fn(*values), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL)


def test_nonconvergence_reports_failure_without_exception():
    x = pt.vector("x")
    z = pt.scalar("z")
    a = pt.scalar("a")
    problems = [
        minimize(rosenbrock(x, a), x, method="BFGS", optimizer_kwargs={"options": {"maxiter": 1}}),
        root(
            pt.stack([x[0] ** 2 + x[1] ** 2 - a, x[0] - x[1] ** 3]),
            x,
            method="hybr",
            use_vectorized_jac=True,
            optimizer_kwargs={"options": {"maxfev": 2}},
        ),
        root_scalar(
            z**3 - a, z, method="brentq", bracket=(0.0, 3.0), optimizer_kwargs={"maxiter": 1}
        ),
    ]
    successes = [success for _, success in problems]
    values = (np.array([-1.2, 1.0]), np.array(1.0), 3.0)
    got = numba_function([x, z, a], successes)(*values)
    expected = pytensor.function([x, z, a], successes, mode=REFERENCE_MODE)(*values)
    assert [bool(s) for s in expected] == [False] * len(problems)
    assert [bool(s) for s in got] == [False] * len(problems)


def test_blockwise_vectorised_matches_scipy():
    x = pt.vector("x")
    z = pt.scalar("z")
    a = pt.scalar("a")
    batch_a = pt.vector("batch_a")
    solution, success = minimize(
        rosenbrock(x, a), x, method="BFGS", optimizer_kwargs={"tol": 1e-10}
    )
    root_solution, root_success = root_scalar(z**3 - a, z, method="brentq", bracket=(0.0, 3.0))
    outputs = vectorize_graph([solution, success, root_solution, root_success], {a: batch_a})
    fn = numba_function([x, z, batch_a], outputs)
    nodes = fn.maker.fgraph.apply_nodes
    # A bare Blockwise of an optimize op would run in object mode.
    assert not [
        n for n in nodes if isinstance(n.op, Blockwise) and isinstance(n.op.core_op, ScipyWrapperOp)
    ]
    assert sum(isinstance(n.op, BlockwiseWithCoreShape) for n in nodes) == 2
    values = (np.array([-1.2, 1.0]), np.array(1.0), np.array([0.5, 1.3, 2.0]))
    got = fn(*values)
    expected = pytensor.function([x, z, batch_a], outputs, mode=REFERENCE_MODE)(*values)
    np.testing.assert_allclose(got[0], expected[0], rtol=RTOL)
    np.testing.assert_allclose(got[2], expected[2], rtol=RTOL)
    assert got[1].all() and got[3].all()


def test_bounded_without_bounds_is_a_clear_error():
    z = pt.scalar("z")
    solution, _ = minimize_scalar((z - 1.0) ** 2, z, method="bounded")
    with pytest.raises(ValueError, match="needs `bounds`"):
        pytensor.function([z], solution, mode="NUMBA")


def test_cache_key_depends_on_solver_settings():
    x = pt.vector("x")
    a = pt.scalar("a")
    keys = []
    for gtol in (1e-5, 1e-8):
        solution, _ = minimize(rosenbrock(x, a), x, method="BFGS", optimizer_kwargs={"tol": gtol})
        op: MinimizeOp = solution.owner.op
        _, key = numba_funcify_and_cache_key(op, node=solution.owner)
        keys.append(key)
    assert None not in keys
    assert keys[0] != keys[1]


@pytest.mark.parametrize("method", ["trust-exact", "trust-ncg", "dogleg"])
def test_trust_region_at_a_non_finite_gradient_raises_scipys_error(method):
    # scipy takes the gradient's norm with scipy.linalg.norm, which refuses NaN. Before: trust-exact
    # gave NaN with success=True; trust-ncg and dogleg returned the start with success=True.
    x, a = pt.vector("x"), pt.scalar("a")
    objective = ((x - a) ** 2).sum() + 0.1 * (x**4).sum()
    solution, _ = minimize(objective, x, method=method, jac=True, hess=True)
    fn = numba_function([x, a], [solution])
    reference = pytensor.function([x, a], [solution], mode=REFERENCE_MODE)
    for call in (fn, reference):
        for start, shift in [(np.array([np.nan, 0.0]), 1.0), (np.array([0.5, 0.0]), np.nan)]:
            with pytest.raises(ValueError, match="array must not contain infs or NaNs"):
                call(start, shift)


def test_bfgs_out_of_iterations_at_the_optimum_fails_as_in_scipy():
    # Before: success=True with maxiter=0 at the optimum (scipy: False, "maximum iterations").
    x = pt.vector("x")
    solution, success = minimize(
        ((x - 1.0) ** 2).sum(), x, method="BFGS", optimizer_kwargs={"options": {"maxiter": 0}}
    )
    start = np.ones(2)
    want = pytensor.function([x], [solution, success], mode=REFERENCE_MODE)(start)
    got = numba_function([x], [solution, success])(start)
    np.testing.assert_array_equal(got[0], want[0])
    assert bool(got[1]) == bool(want[1]) is False


@pytest.mark.parametrize("xtol", [1e-2, 1e-3])
def test_newton_cg_stops_at_scipys_update_size(xtol):
    # scipy's xtol is an average over the variables: it stops once the update's 1-norm is at most
    # n * xtol. Before: NUMBA required xtol itself, so with scipy's own iteration count as the
    # budget it ran out (success False) where scipy converged.
    x = pt.vector("x", shape=(4,))
    objective = pt.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
    start = np.array([-1.2, 1.0, -1.2, 1.0])
    scipy_iterations = scipy.optimize.minimize(
        scipy.optimize.rosen,
        start,
        method="Newton-CG",
        jac=scipy.optimize.rosen_der,
        hess=scipy.optimize.rosen_hess,
        options={"xtol": xtol},
    ).nit
    solution, success = minimize(
        objective,
        x,
        method="Newton-CG",
        hess=True,
        optimizer_kwargs={"options": {"xtol": xtol, "maxiter": scipy_iterations}},
    )
    want = pytensor.function([x], [solution, success], mode=REFERENCE_MODE)(start)
    got = numba_function([x], [solution, success])(start)
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL)
    assert bool(got[1]) == bool(want[1]) is True


@pytest.mark.parametrize("method", ["brentq", "bisect", "brenth", "ridder", "toms748"])
def test_a_bracket_without_a_sign_change_raises_scipys_error(method):
    # Before: a value with success=False.
    z = pt.scalar("z")
    solution, _ = root_scalar(z**2 + 1.0, z, method=method, bracket=(0.0, 2.0))
    fn = numba_function([z], [solution])
    with pytest.raises(ValueError, match=r"f\(a\) and f\(b\) must have different signs"):
        fn(0.5)


BRACKETING_ROOT_METHODS = ["brentq", "bisect", "brenth", "ridder", "toms748"]


@pytest.mark.parametrize("lower", [0.5, 0.0])
def test_a_nan_value_stops_the_bracketing_methods_there_as_in_scipy(lower):
    # scipy's root_scalar returns the point where f is NaN, not converged: at the bracket's end
    # (lower 0.5), or inside it (lower 0.0: f is NaN on (0.2, 1), where each method's first
    # trial point falls). Before: toms748 raised ValueError.
    z = pt.scalar("z")
    bracket_end = pt.scalar("bracket_end")
    equation = pt.switch(z < 0.2, z - 1.0, pt.switch(z < 1.0, pt.log(z - 1.0), z**3 - 4.0))
    outputs = []
    for method in BRACKETING_ROOT_METHODS:
        outputs += root_scalar(equation, z, method=method, bracket=pt.stack([bracket_end, 1.8]))
    values = (np.array(1.0), np.array(lower))
    want = pytensor.function([z, bracket_end], outputs, mode=REFERENCE_MODE)(*values)
    got = numba_function([z, bracket_end], outputs)(*values)
    assert not any(bool(s) for s in want[1::2])
    assert [bool(s) for s in got[1::2]] == [False] * len(BRACKETING_ROOT_METHODS)
    np.testing.assert_allclose(got[0::2], want[0::2], rtol=1e-12)


def test_a_method_scipy_does_not_know_raises_scipys_error():
    # Before: gpubackend's own plain-Newton root ran; FAST_COMPILE raises this on the first call.
    x = pt.vector("x")
    solution, _ = root(x**3 + x - 1.0, x, method="newton")
    with pytest.raises(ValueError, match=r"^Unknown solver newton$"):
        pytensor.function([x], solution, mode="NUMBA")


@pytest.mark.parametrize("mode", ["NUMBA", "JAX_GPU"])
def test_df_sane_on_a_0d_x_is_refused_before_scipy_crashes(mode):
    # Before (NUMBA): object mode handed the 0-d x to scipy's df-sane, a segmentation fault.
    z = pt.scalar("z")
    solution, _ = root(z**3 + z - 1.0, z, method="df-sane")
    with pytest.raises(ValueError, match=r"df-sane.*0-d"):
        pytensor.function([z], solution, mode=mode)


def _df_sane_equations(x, a):
    return pt.stack([x[0] ** 2 + x[1] ** 2 - a, x[0] - x[1] ** 3])


DF_SANE_START, DF_SANE_A = np.array([1.0, 1.0]), 3.0


def _df_sane_scipy_evaluations() -> int:
    def equations(x):
        return np.array([x[0] ** 2 + x[1] ** 2 - DF_SANE_A, x[0] - x[1] ** 3])

    return scipy.optimize.root(equations, DF_SANE_START, method="df-sane").nfev


DF_SANE_OPTIONS = {
    "default": {},
    "tol": {"tol": 1e-12},
    "cheng": {"options": {"line_search": "cheng"}},
    "window_1": {"options": {"M": 1, "sigma_0": 0.5}},
    "few_evaluations": {"options": {"maxfev": 5}},
    "exact_budget": "scipy's evaluations",
    "one_short": "scipy's evaluations - 1",
}


@pytest.fixture(scope="module")
def df_sane_problem():
    # root's jac=True would hand scipy's df-sane the Jacobian too, which it cannot take.
    x, a = pt.vector("x"), pt.scalar("a")
    evaluations = _df_sane_scipy_evaluations()
    budgets = {"exact_budget": evaluations, "one_short": evaluations - 1}
    problems = {
        name: root(
            _df_sane_equations(x, a),
            x,
            method="df-sane",
            jac=False,
            optimizer_kwargs={"options": {"maxfev": budgets[name]}} if name in budgets else kw,
        )
        for name, kw in DF_SANE_OPTIONS.items()
    }
    return solve_with_both_backends(problems, [x, a], a, (DF_SANE_START, DF_SANE_A))


@pytest.mark.parametrize("name", list(DF_SANE_OPTIONS))
def test_df_sane_matches_scipy_including_budget_and_ift_gradient(df_sane_problem, name):
    (solution, success, gradient), (want_solution, want_success, want_gradient) = df_sane_problem[
        name
    ]
    assert bool(success) == bool(want_success) == (name not in ("few_evaluations", "one_short"))
    # The same iterates up to rounding, which the spectral steps amplify towards ftol.
    np.testing.assert_allclose(solution, want_solution, rtol=1e-8)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-6)


@pytest.mark.parametrize("mode", ["NUMBA", "JAX_GPU"])
@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"line_search": "armijo"}, r"line_search.*cheng.*cruz"),
        ({"M": 0}, r"'M' must be at least 1"),
    ],
)
def test_df_sane_options_scipy_refuses_raise(mode, options, error):
    x, a = pt.vector("x"), pt.scalar("a")
    solution, _ = root(
        _df_sane_equations(x, a),
        x,
        method="df-sane",
        jac=False,
        optimizer_kwargs={"options": options},
    )
    with pytest.raises(ValueError, match=error):
        pytensor.function([x, a], solution, mode=mode)(DF_SANE_START, DF_SANE_A)


def test_df_sane_with_a_callable_option_runs_scipy_in_object_mode():
    x, a = pt.vector("x"), pt.scalar("a")
    solution, success = root(
        _df_sane_equations(x, a),
        x,
        method="df-sane",
        jac=False,
        optimizer_kwargs={"options": {"fnorm": np.linalg.norm}},
    )
    with pytest.warns(ObjectModeFallbackWarning, match=r"df-sane.*fnorm"):
        fn = pytensor.function([x, a], [solution, success], mode="NUMBA")
    expected = pytensor.function([x, a], [solution, success], mode=REFERENCE_MODE)
    for got, want in zip(
        fn(DF_SANE_START, DF_SANE_A), expected(DF_SANE_START, DF_SANE_A), strict=True
    ):
        np.testing.assert_allclose(got, want)


def test_ops_differing_only_in_options_share_one_compiled_solver():
    """A native solver is compiled once per inner graph, not per option set: ops that differ only
    in their scipy options share the runner (the settings are its run-time argument), while their
    on-disk cache keys still tell the settings apart."""
    x = pt.vector("x")
    a = pt.scalar("a")
    lowerings = []
    for maxiter in (5, 50):
        solution, _ = minimize(
            rosenbrock(x, a), x, method="BFGS", optimizer_kwargs={"options": {"maxiter": maxiter}}
        )
        lowerings.append(numba_funcify_and_cache_key(solution.owner.op, solution.owner))
    (first, first_key), (second, second_key) = lowerings
    assert first.py_func.__globals__["run"] is second.py_func.__globals__["run"]
    assert first_key != second_key
