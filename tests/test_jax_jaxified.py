"""The lowerings serve PyMC's JAX samplers, which call jax_funcify directly, not pytensor.function.

`jaxified` repeats the steps of ``pymc.sampling.jax.get_jaxified_graph`` (PyMC
is not a dependency): rewrite a FunctionGraph with the JAX mode's optimizer,
then ``jax_funcify`` it. The samplers differentiate the result with ``jax.grad``.
"""

import functools
import warnings

import jax
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from jax import shard_map
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P
from pytensor.compile.mode import JAX
from pytensor.graph.fg import FunctionGraph
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.tensor.optimize import minimize, minimize_scalar, root, root_scalar

from tests.jax_lowering_harness import pmapped


def jaxified(inputs, outputs):
    fgraph = FunctionGraph(inputs, outputs, clone=True)
    JAX.optimizer.rewrite(fgraph)
    return jax_funcify(fgraph)


def test_logp_with_a_minimize_and_an_ofg_is_jitted_and_differentiated_by_jax():
    x, a = pt.vector("x"), pt.vector("a")
    solution, _ = minimize(
        ((x - a) ** 2).sum() + 0.1 * (x**4).sum(), x, optimizer_kwargs={"tol": 1e-10}
    )
    square = pytensor.compile.builders.OpFromGraph([a], [a**2], inline=False)
    logp = -(square(solution) * a).sum()
    graph_fn = jaxified([x, a], [logp])
    logp_fn = jax.jit(lambda x_value, a_value: graph_fn(x_value, a_value)[0])
    x0, a_value = np.zeros(3), np.array([0.5, -1.0, 2.0])
    reference = pytensor.function([x, a], [logp, pytensor.grad(logp, a)], mode="FAST_COMPILE")
    want_logp, want_grad = reference(x0, a_value)
    np.testing.assert_allclose(logp_fn(x0, a_value), want_logp, rtol=1e-6)
    # optimistix differentiates its solve implicitly, as PyTensor does symbolically.
    np.testing.assert_allclose(jax.grad(logp_fn, argnums=1)(x0, a_value), want_grad, rtol=1e-5)


DERIVATIVE_FREE_MINIMIZE = {
    "Nelder-Mead": {"tol": 1e-12, "options": {"maxfev": 5000}},
    "Powell": {"tol": 1e-12},
    "COBYLA": {"tol": 1e-10},
    "COBYQA": {"tol": 1e-10},
}


@pytest.mark.parametrize("method", list(DERIVATIVE_FREE_MINIMIZE))
def test_a_derivative_free_minimize_is_differentiated_by_jax(method):
    # Before: NotImplementedError (neither method had a JAX equivalent). The implicit derivative
    # needs no derivative from the method: it comes from the objective's.
    x, a = pt.vector("x"), pt.vector("a")
    solution, _ = minimize(
        ((x - a) ** 2).sum() + 0.1 * (x**4).sum(),
        x,
        method=method,
        optimizer_kwargs=DERIVATIVE_FREE_MINIMIZE[method],
    )
    logp = -(solution**2 * a).sum()
    graph_fn = jaxified([x, a], [logp])
    logp_fn = jax.jit(lambda x_value, a_value: graph_fn(x_value, a_value)[0])
    x0, a_value = np.zeros(3), np.array([0.5, -1.0, 2.0])
    reference = pytensor.function([x, a], [logp, pytensor.grad(logp, a)], mode="FAST_COMPILE")
    with warnings.catch_warnings():
        # scipy warns that the method does not use the gradient PyTensor's jac=True hands it.
        warnings.simplefilter("ignore", RuntimeWarning)
        want_logp, want_grad = reference(x0, a_value)
    np.testing.assert_allclose(logp_fn(x0, a_value), want_logp, rtol=1e-8)
    np.testing.assert_allclose(jax.grad(logp_fn, argnums=1)(x0, a_value), want_grad, rtol=1e-6)


def test_logp_with_a_while_scan_is_differentiated_by_jax():
    from pytensor.scan.utils import until

    x0, a = pt.vector("x0"), pt.vector("a")

    def newton_step(x, a):
        new_x = x - (x**2 - a) / (2 * x)
        return new_x, until(pt.max(pt.abs(new_x - x)) < 1e-12)

    roots = pytensor.scan(
        newton_step, outputs_info=[x0], non_sequences=[a], n_steps=50, return_updates=False
    )
    logp = -(roots[-1] ** 3).sum()
    graph_fn = jaxified([x0, a], [logp])
    logp_fn = jax.jit(lambda x0_value, a_value: graph_fn(x0_value, a_value)[0])
    x0_value, a_value = np.ones(3), np.array([2.0, 3.0, 40.0])
    reference = pytensor.function([x0, a], [logp, pytensor.grad(logp, a)], mode="FAST_COMPILE")
    want_logp, want_grad = reference(x0_value, a_value)
    np.testing.assert_allclose(logp_fn(x0_value, a_value), want_logp, rtol=1e-10)
    np.testing.assert_allclose(
        jax.grad(logp_fn, argnums=1)(x0_value, a_value), want_grad, rtol=1e-8
    )


# A Laplace approximation, as pymc-extras' marginalize(laplace_approx=...) builds it: the
# conditional mode of a latent field by L-BFGS-B (or BFGS), the Hessian there by
# pytensor.gradient, and JAX differentiating the whole logp (optimize op included).
LAPLACE_SIZE = 5
LAPLACE_COUNTS = np.array([3.0, 0.0, 2.0, 5.0, 1.0])
LAPLACE_PRECISION = (
    2.1 * np.eye(LAPLACE_SIZE) - np.eye(LAPLACE_SIZE, k=1) - np.eye(LAPLACE_SIZE, k=-1)
)
LOG_TAUS = np.array([0.3, -0.2])


SECOND_ORDER_METHODS = ("trust-exact", "trust-krylov", "trust-ncg", "dogleg")
"""Methods that need the op's Hessian output."""


def _laplace_logp(method: str, tol: float):
    from pytensor.gradient import hessian
    from pytensor.graph.replace import graph_replace

    field, log_tau = pt.vector("field"), pt.scalar("log_tau")
    neg_joint = (
        0.5 * pt.exp(log_tau) * (field @ LAPLACE_PRECISION @ field)
        - (LAPLACE_COUNTS * field - pt.exp(field)).sum()
    )
    mode, success = minimize(
        neg_joint,
        field,
        method=method,
        hess=method in SECOND_ORDER_METHODS,
        optimizer_kwargs={"tol": tol},
    )
    at_mode = {field: mode}
    logdet = pt.log(pt.linalg.det(graph_replace(hessian(neg_joint, field), at_mode)))
    logp = -graph_replace(neg_joint, at_mode) - 0.5 * logdet + 0.5 * LAPLACE_SIZE * log_tau
    return field, log_tau, logp, success


@functools.cache
def _laplace_reference() -> np.ndarray:
    """``(logp, dlogp)`` per log-tau, from scipy's BFGS at tol=1e-13 (not the tested tol)."""
    field, log_tau, logp, _ = _laplace_logp("BFGS", 1e-13)
    reference = pytensor.function(
        [field, log_tau], [logp, pytensor.grad(logp, log_tau)], mode="FAST_COMPILE"
    )
    return np.array([reference(np.zeros(LAPLACE_SIZE), t) for t in LOG_TAUS]).T


LAPLACE_TOL = {"SLSQP": 1e-12, "L-BFGS-B": 1e-12, "CG": 1e-6, "TNC": 1e-12}
"""SLSQP's ``ftol`` bounds the change of f between iterates, not the gradient: at 1e-8 its logp
lands 1e-6 off (scipy's alike); L-BFGS-B's stops on a relative decrease of f below ``ftol``, at
1e-8 4e-7 off (scipy's and NUMBA's alike); TNC's ``tol`` sets its ``ftol`` and ``xtol`` too, and
at 1e-8 it stops on the change of f 2e-5 off. CG's line search gives up short of gtol=1e-8 here
("precision loss", scipy's alike)."""


def _jaxified_laplace(method: str):
    field, log_tau, logp, success = _laplace_logp(method, LAPLACE_TOL.get(method, 1e-8))
    graph_fn = jaxified([field, log_tau], [logp, success])
    start = np.zeros(LAPLACE_SIZE)

    def logp_fn(log_tau_value):
        return graph_fn(start, log_tau_value)[0]

    def success_fn(log_tau_value):
        return graph_fn(start, log_tau_value)[1]

    return logp_fn, success_fn


def _shard_mapped(fn):
    mesh = Mesh(np.array(jax.devices()[:2]), ("chains",))
    return jax.jit(shard_map(jax.vmap(fn), mesh=mesh, in_specs=P("chains"), out_specs=P("chains")))


TRANSFORMS = {
    "jit": lambda fn: jax.jit(jax.vmap(fn)),
    "vmap": jax.vmap,
    "pmap": pmapped,  # numpyro's default chain_method="parallel"
    "shard_map": _shard_mapped,
}


@pytest.mark.parametrize(
    "method",
    ["L-BFGS-B", "BFGS", "CG", "Newton-CG", *SECOND_ORDER_METHODS, "SLSQP", "trust-constr", "TNC"],
)
def test_laplace_logp_and_gradient_under_every_jax_transform(method):
    # Before: pmap and shard_map stopped while tracing, in lineax ("Symmetric/Hermitian
    # matrices must have matching input and output structures", lineax issue 185).
    logp_fn, success_fn = _jaxified_laplace(method)
    want_logp, want_grad = _laplace_reference()
    for name, transform in TRANSFORMS.items():
        got_logp, got_grad = transform(jax.value_and_grad(logp_fn))(LOG_TAUS)
        # tol=1e-8 lands within 1e-7 of the tightly solved logp (scipy's own tol=1e-8: ~1e-4).
        np.testing.assert_allclose(got_logp, want_logp, rtol=0, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(got_grad, want_grad, rtol=0, atol=1e-6, err_msg=name)
        assert np.all(transform(success_fn)(LOG_TAUS)), name


@pytest.mark.parametrize("method", ["L-BFGS-B", "SLSQP", "TNC", "trust-constr"])
def test_an_active_bound_under_every_jax_transform(method):
    # Inside pmap and shard_map, where optimistix's loop refuses these solvers, a plain loop of
    # their own steps runs them, bounds honoured. Before: L-BFGS-B with bounds was refused, and
    # the damped-Newton stand-in, which knows no bounds, ran SLSQP there (0.527 for 0.363).
    y, a = pt.vector("y"), pt.scalar("a")
    solution, success = minimize(
        ((y - a) ** 2).sum() + (y**4).sum(),
        y,
        method=method,
        optimizer_kwargs={"tol": 1e-12, "bounds": [(None, 0.1), (-1.0, 1.0)]},
    )
    start = np.array([0.5, 0.5])
    reference = pytensor.function(
        [y, a], [solution.sum(), pt.grad(solution.sum(), a), success], mode="FAST_COMPILE"
    )
    want = np.array([reference(start, t) for t in LOG_TAUS]).T
    graph_fn = jaxified([y, a], [solution.sum(), success])
    value_and_grad = jax.value_and_grad(lambda a_value: graph_fn(start, a_value)[0])
    for name, transform in TRANSFORMS.items():
        got_value, got_grad = transform(value_and_grad)(LOG_TAUS)
        np.testing.assert_allclose(got_value, want[0], rtol=0, atol=1e-9, err_msg=name)
        np.testing.assert_allclose(got_grad, want[1], rtol=0, atol=1e-7, err_msg=name)
        got_success = transform(lambda a_value: graph_fn(start, a_value)[1])(LOG_TAUS)
        np.testing.assert_array_equal(got_success, want[2].astype(bool), err_msg=name)


def test_a_nan_lane_gives_a_nan_logp_and_failure_without_a_host_callback():
    # Before: the gradient's lineax solve raised from a host callback ("A linear solver
    # received non-finite (NaN or inf) input") and aborted numpyro's vectorized chains.
    logp_fn, success_fn = _jaxified_laplace("L-BFGS-B")
    value_and_grad = jax.jit(jax.vmap(jax.value_and_grad(logp_fn)))
    lanes = np.array([0.3, np.nan])
    logp, grad = value_and_grad(lanes)
    assert np.isfinite(logp[0]) and np.isfinite(grad[0])
    assert not np.isfinite(logp[1]) and not np.isfinite(grad[1])
    assert list(jax.jit(jax.vmap(success_fn))(lanes)) == [True, False]
    compiled = value_and_grad.lower(lanes).as_text()
    assert "callback" not in compiled


def _two_equations(y, a):
    return pt.stack([y[0] + y[1] ** 3 - a, y[1] - y[0] ** 3 - 1])


OTHER_SOLVERS = {
    "hybr": lambda y, a: root(_two_equations(y, a), y)[0].sum(),
    "lm": lambda y, a: root(_two_equations(y, a), y, method="lm")[0].sum(),
    "root_scalar-newton": lambda y, a: root_scalar(y**3 + y - a, y, method="newton")[0],
    "brent": lambda y, a: minimize_scalar((y - a) ** 2 + y**4, y, method="brent")[0],
    "nelder-mead": lambda y, a: minimize(
        ((y - a) ** 2).sum() + (y**4).sum(),
        y,
        method="Nelder-Mead",
        optimizer_kwargs={"tol": 1e-10},
    )[0].sum(),
    "powell": lambda y, a: minimize(
        ((y - a) ** 2).sum() + (y**4).sum(), y, method="Powell", optimizer_kwargs={"tol": 1e-10}
    )[0].sum(),
    "cobyla": lambda y, a: minimize(
        ((y - a) ** 2).sum() + (y**4).sum(),
        y,
        method="COBYLA",
        optimizer_kwargs={"tol": 1e-10, "bounds": [(None, 0.3), (None, None)]},
    )[0].sum(),
    "cobyqa": lambda y, a: minimize(
        ((y - a) ** 2).sum() + (y**4).sum(),
        y,
        method="COBYQA",
        optimizer_kwargs={"tol": 1e-10, "bounds": [(None, 0.3), (None, None)]},
    )[0].sum(),
}


@pytest.mark.parametrize("name", list(OTHER_SOLVERS))
def test_other_solvers_under_pmap_match_jit(name):
    # Before: hybr, lm and newton stopped in equinox's closure conversion under pmap, and every
    # gradient in optimistix's lineax-based adjoint.
    scalar = name.startswith(("root_scalar", "brent"))
    y, a = (pt.scalar("y") if scalar else pt.vector("y")), pt.scalar("a")
    graph_fn = jaxified([y, a], [OTHER_SOLVERS[name](y, a)])
    start = np.array(0.5) if scalar else np.array([0.5, 0.5])
    fn = jax.value_and_grad(lambda a_value: graph_fn(start, a_value)[0])
    want = jax.jit(jax.vmap(fn))(LOG_TAUS)
    got = pmapped(fn)(LOG_TAUS)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_df_sane_solution_is_differentiated_by_jax_as_by_pytensor():
    # From (0.5, 0.5) df-sane finds no root of `_two_equations` (scipy's neither): its own problem.
    y, a = pt.vector("y"), pt.scalar("a")
    equations = pt.stack([y[0] + 0.5 * y[1] ** 3 - a, 0.5 * (y[1] - y[0]) ** 3 + y[1] - 0.3])
    solution, success = root(
        equations, y, method="df-sane", jac=False, optimizer_kwargs={"tol": 1e-12}
    )
    start = np.zeros(2)
    reference = pytensor.function(
        [y, a], [solution.sum(), pt.grad(solution.sum(), a), success], mode="FAST_COMPILE"
    )
    expected = np.array([reference(start, tau)[:2] for tau in LOG_TAUS])
    assert all(reference(start, tau)[2] for tau in LOG_TAUS)
    graph_fn = jaxified([y, a], [solution.sum()])
    fn = jax.value_and_grad(lambda a_value: graph_fn(start, a_value)[0])
    np.testing.assert_allclose(np.array(jax.jit(jax.vmap(fn))(LOG_TAUS)).T, expected, rtol=1e-6)
    # Inside pmap the damped Newton stand-in solves it (`optimize_lowering`).
    np.testing.assert_allclose(np.array(pmapped(fn)(LOG_TAUS)).T, expected, rtol=1e-6)


NONLIN_SOLVE = {
    "krylov": ("krylov", {}),
    "krylov-gmres": ("krylov", {"jac_options": {"method": "gmres"}}),
    "broyden1": ("broyden1", {}),
    "anderson": ("anderson", {}),
}
"""scipy's ``nonlin_solve`` methods: name -> (method, options)."""


@pytest.mark.parametrize("name", list(NONLIN_SOLVE))
def test_nonlin_solve_under_every_jax_transform(name):
    # Before: root(method="krylov") was refused under JAX, and inside pmap and shard_map every
    # nonlin_solve method stopped while tracing (equinox's closure conversion of the equations,
    # unvarying loop carries): there they run as a plain loop of their own steps.
    method, options = NONLIN_SOLVE[name]
    y, a = pt.vector("y"), pt.scalar("a")
    equations = pt.stack([y[0] + 0.5 * (y[0] - y[1]) ** 3 - a, 0.5 * (y[1] - y[0]) ** 3 + y[1]])
    solution, success = root(
        equations, y, method=method, optimizer_kwargs={"tol": 1e-10, "options": options}
    )
    output = (solution**2).sum()
    start = np.array([0.5, 0.2])
    reference = pytensor.function(
        [y, a], [output, pt.grad(output, a), success], mode="FAST_COMPILE"
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Method .* does not use the jacobian")
        want = np.array([reference(start, t) for t in LOG_TAUS]).T
    graph_fn = jaxified([y, a], [output, success])
    value_and_grad = jax.value_and_grad(lambda a_value: graph_fn(start, a_value)[0])
    for transform_name, transform in TRANSFORMS.items():
        got_value, got_grad = transform(value_and_grad)(LOG_TAUS)
        np.testing.assert_allclose(got_value, want[0], rtol=1e-9, err_msg=transform_name)
        np.testing.assert_allclose(got_grad, want[1], rtol=1e-7, err_msg=transform_name)
        got_success = transform(lambda a_value: graph_fn(start, a_value)[1])(LOG_TAUS)
        np.testing.assert_array_equal(got_success, want[2].astype(bool), err_msg=transform_name)


def test_minimize_over_several_variables_is_jitted_and_differentiated_by_jax():
    # Before: ConcretizationTypeError in jnp.split (the variables' sizes were tracers inside
    # optimistix's jit). The implicit derivative's rule is traced only when jax.grad reaches the
    # jitted function, after the solve's trace: the sizes stay known there too.
    b0, b1, a = pt.dscalar("b0"), pt.dvector("b1"), pt.dvector("a")
    objective = (b0 - a[0]) ** 2 + ((b1 - a[1:]) ** 2).sum() + 0.1 * (b1**4).sum() + b0**4
    (b0_star, b1_star), _ = minimize(objective, [b0, b1], optimizer_kwargs={"tol": 1e-10})
    logp = -(b0_star * b1_star * a[1:]).sum()
    graph_fn = jaxified([b0, b1, a], [logp])
    logp_fn = jax.jit(lambda a_value: graph_fn(np.array(0.0), np.zeros(3), a_value)[0])
    a_value = np.array([0.5, -1.0, 2.0, 0.3])
    reference = pytensor.function([b0, b1, a], [logp, pytensor.grad(logp, a)], mode="FAST_COMPILE")
    want_logp, want_grad = reference(np.array(0.0), np.zeros(3), a_value)
    np.testing.assert_allclose(logp_fn(a_value), want_logp, rtol=1e-8)
    np.testing.assert_allclose(jax.grad(logp_fn)(a_value), want_grad, rtol=1e-6)
