"""JAX lowering of PyTensor's optimize ops (minimize, root, minimize_scalar, root_scalar) onto
optimistix.

Each op's frozen inner graph is funcified once; its first output is the
objective (or equations) handed to optimistix, which differentiates it with
JAX where the solver needs derivatives. Solves run with ``throw=False`` and the
op's ``success`` output is True exactly when optimistix reports a successful
result. PyTensor derives the gradients of a solution symbolically (implicit
function theorem), so under mode="JAX" the backward graph is ordinary ops; a
function that JAX differentiates itself (PyMC's ``get_jaxified_graph`` for
numpyro and blackjax) gets the same theorem from `implicit`, with plain JAX
linear algebra instead of optimistix's lineax-based adjoint, which fails under
``pmap``/``shard_map`` and raises from a host callback on a NaN.
Under `Blockwise` the stock lowering vectorises the core function with vmap.
`LOWERINGS` maps each op class to its lowering; `optimize` registers the op
classes and imports this module (and optimistix) only when one is first lowered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import optimistix as optx
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.tensor.optimize import (
    MinimizeOp,
    MinimizeScalarOp,
    RootOp,
    RootScalarOp,
    ScipyWrapperOp,
)

from gpubackend.dispatch.jax import damped_newton
from gpubackend.dispatch.jax.cobyla import ScipyCOBYLA
from gpubackend.dispatch.jax.cobyqa import ScipyCOBYQA
from gpubackend.dispatch.jax.df_sane import SpectralResidual
from gpubackend.dispatch.jax.hybrid_powell import HybridPowell
from gpubackend.dispatch.jax.implicit import (
    implicitly_differentiated,
    varying_leaves_like,
    varying_like,
)
from gpubackend.dispatch.jax.index_checks import (
    check_objective_at,
    index_checked_nodes,
    objective_index_conditions,
)
from gpubackend.dispatch.jax.known_inputs import known_values, static_where_known
from gpubackend.dispatch.jax.levenberg_marquardt import MinpackLevenbergMarquardt
from gpubackend.dispatch.jax.lowering_context import lowering_context
from gpubackend.dispatch.jax.nelder_mead import ScipyNelderMead
from gpubackend.dispatch.jax.newton_cg import GRADIENT_OPTION, ScipyNewtonCG
from gpubackend.dispatch.jax.nonlin_solve import NonlinSolve
from gpubackend.dispatch.jax.nonlinear_cg import ScipyCG
from gpubackend.dispatch.jax.optimize_methods import (
    ScipyIterations,
    SolverChoice,
    solver_choice,
    solver_for_size,
)
from gpubackend.dispatch.jax.powell import ScipyPowell
from gpubackend.dispatch.jax.projected_lbfgs import ProjectedLBFGS
from gpubackend.dispatch.jax.slsqp import SLSQP
from gpubackend.dispatch.jax.tnc import TNC
from gpubackend.dispatch.jax.tr_interior_point import TrustRegionInteriorPoint
from gpubackend.dispatch.jax.trust_constr import TrustConstr
from gpubackend.dispatch.jax.trust_region import DERIVATIVES_OPTION, ScipyTrustRegion
from gpubackend.scipy_options import scipy_method

Objective = Callable[[jax.Array, tuple], jax.Array]
IndexCheck = Callable[[jax.Array, tuple], None]
Outputs = Callable[[jax.Array, tuple], Sequence[jax.Array]]


def _objective(op: ScipyWrapperOp, kwargs: dict) -> tuple[Objective, IndexCheck, Outputs]:
    """The op's first inner output as ``f(y, args)``, the calling convention of optimistix, the
    check of its run-time indices at a solution, and all the inner outputs (the objective's
    derivatives where the op carries them) as ``outputs(y, args)``.

    Optimistix's loops are left as they are: the objective's indices are checked once, at the
    solution (`index_checks.check_objective_at`), where the linker reads run-time checks.
    ``args`` may hold `KnownValue`s (`static_where_known`): the graph is given their values.
    """
    kwargs.pop("storage_map", None)
    inner_fn = jax_funcify(op.fgraph, **kwargs)

    def evaluated(y, args):
        return inner_fn(y, *known_values(args))[0]

    def outputs(y, args):
        with objective_index_conditions(op.fgraph, None):
            return inner_fn(y, *known_values(args))

    def objective(y, args):
        return outputs(y, args)[0]

    # Evaluated again at the solution only where the objective itself indexes at run time.
    if not (
        lowering_context(kwargs).inner_index_checks and index_checked_nodes(op.fgraph.toposort())
    ):
        return objective, lambda value, args: None, outputs

    def check_indices_at(value, args) -> None:
        check_objective_at(evaluated, op.fgraph, value, args)

    return objective, check_indices_at, outputs


def _dtype(op: ScipyWrapperOp) -> str:
    return op.fgraph.inputs[0].type.dtype


def _start(x0, dtype: str) -> jax.Array:
    """The start value as an array of the op's dtype.

    jax_typify hands a 0-d constant over as a Python scalar (``ndarray.item()``),
    so a constant start arrives without ``size`` or ``dtype``.
    """
    return jnp.asarray(x0, dtype=dtype)


# optimistix solvers that lineax or equinox refuse to trace inside a manual mesh (`damped_newton`).
_UNTRACEABLE_IN_MESH = (
    optx.AbstractBFGS,
    HybridPowell,
    MinpackLevenbergMarquardt,
    SpectralResidual,
    optx.Newton,
    # equinox's loop starts its carry's "previous step ran" flag unvarying; a verdict that varies
    # over the mesh (scipy's, in the state) makes it varying.
    ScipyTrustRegion,
    # Their objective, closure-converted by optimistix, refuses the tracers of its own gradient.
    TrustConstr,
    ScipyNewtonCG,
    # The line search's loops (`wolfe_search`) start their carries unvarying over the mesh.
    ScipyCG,
    # The objective, closure-converted by optimistix, refuses the mesh types of their trial
    # points (the simplex's vertices, the line searches' points).
    ScipyNelderMead,
    ScipyPowell,
)


def _in_mesh_stand_in(solve: Callable, fn: Objective, choice: SolverChoice, x0, args: tuple):
    """``(solution, success)`` by `damped_newton`, with the tolerances and budget of ``choice``."""
    solver, max_iterations = choice.solver, choice.max_steps
    if isinstance(choice.solver, ScipyIterations):
        solver, max_iterations = choice.solver.solver, choice.solver.max_iterations
    tolerances = damped_newton.Tolerances(rtol=solver.rtol, atol=solver.atol)
    budget = damped_newton.Budget(max_iterations, choice.max_steps)
    plain = damped_newton.minimise if solve is optx.minimise else damped_newton.root_find
    value, success = plain(fn, x0, args, tolerances, budget)
    return value.astype(x0.dtype), success


# Minimisers with box bounds whose own steps trace inside a manual mesh but not optimistix's
# loop around them (equinox's loop starts its "previous step ran" flag unvarying where their
# verdict varies; optimistix's closure-converted objective refuses the tracers of SLSQP's
# gradient and the mesh types of COBYLA's and COBYQA's trial points): there a plain loop of their
# steps runs them (`_stepped_in_mesh`), not `damped_newton`, which knows no bounds. scipy's
# ``nonlin_solve`` family (broyden1, krylov, ...) runs there the same way, on its own iteration.
_STEPPED_IN_MESH = (
    ProjectedLBFGS,
    SLSQP,
    TNC,
    ScipyCOBYLA,
    ScipyCOBYQA,
    TrustRegionInteriorPoint,
    NonlinSolve,
)


def _stepped_in_mesh(choice: SolverChoice, fn: Objective, x0, args: tuple, options: dict | None):
    """``(solution, success)``: ``choice``'s solver stepped by a `jax.lax.while_loop` whose
    carry starts as varying over the mesh as its steps make it, for at most its ``max_steps``."""
    solver, tags = choice.solver, frozenset[object]()

    def fn_with_aux(y, args):
        # optimistix's calling convention inside a solver: the value and its (no) aux.
        return fn(y, args), None

    state = solver.init(fn_with_aux, x0, args, options, None, None, tags)

    def running(carry):
        steps, y, state = carry
        done, _ = solver.terminate(fn_with_aux, y, args, options, state, tags)
        return ~done & (steps < choice.max_steps)

    def stepped(carry):
        steps, y, state = carry
        y, state, _ = solver.step(fn_with_aux, y, args, options, state, tags)
        return steps + 1, y, state

    start = varying_leaves_like((jnp.array(0), x0, state), (x0, args))
    _, y, state = jax.lax.while_loop(running, stepped, start)
    done, result = solver.terminate(fn_with_aux, y, args, options, state, tags)
    y, _, _ = solver.postprocess(fn_with_aux, y, None, args, options, state, tags, result)
    return y, done & (result == optx.RESULTS.successful)


def _untraceable_in_mesh(choice: SolverChoice) -> bool:
    solver = choice.solver
    if isinstance(solver, ScipyIterations):
        solver = solver.solver
    return isinstance(solver, _UNTRACEABLE_IN_MESH) and damped_newton.in_manual_mesh()


def _solved(
    solve: Callable,
    fn: Objective,
    choice: SolverChoice,
    x0,
    args: tuple,
    options: dict | None = None,
):
    """``(solution, success)``: run without throwing; success is optimistix's own verdict.

    Inside ``pmap``/``shard_map``, where lineax and equinox refuse optimistix's
    quasi-Newton, dogleg, Levenberg-Marquardt and Newton solvers, `damped_newton`
    stands in for them.
    """
    if _untraceable_in_mesh(choice):
        value, success = _in_mesh_stand_in(solve, fn, choice, x0, args)
    elif isinstance(choice.solver, _STEPPED_IN_MESH) and damped_newton.in_manual_mesh():
        value, success = _stepped_in_mesh(choice, fn, x0, args, options)
        value = value.astype(x0.dtype)
    else:
        solution = solve(
            fn,
            choice.solver,
            x0,
            args=args,
            options=options,
            max_steps=choice.max_steps,
            throw=False,
        )
        value = solution.value.astype(x0.dtype)
        success = solution.result == optx.RESULTS.successful
    # A solution where the objective is not finite (a NaN parameter, an overflow) is undefined:
    # NaN, so that a logp built on it is NaN too (a sampler's divergence), never a finite guess.
    defined = jnp.all(jnp.isfinite(fn(value, args)))
    return jnp.where(defined, value, jnp.nan).astype(x0.dtype), success & defined


def _stationary(objective: Objective) -> Objective:
    """The condition a minimum satisfies: the objective's gradient is zero."""
    return jax.grad(objective)


def _as_vector(equations: Objective) -> Objective:
    """Equations of a 0-d ``x`` as equations of a vector of one element."""
    return lambda y, args: jnp.reshape(equations(jnp.reshape(y, ()), args), (1,))


def _own_derivatives(op: ScipyWrapperOp, outputs: Outputs) -> dict | None:
    """The options that hand the minimisers that read them (`newton_cg`, `trust_region`) a
    minimize op's own gradient (``jac=True``) and Hessian (``hess=True``): PyTensor's graphs, as
    scipy is given them."""
    if not (isinstance(op, MinimizeOp) and op.jac):
        return None

    def value_gradient(y, args):
        f, gradient = outputs(y, args)[:2]
        return f, gradient

    options = {GRADIENT_OPTION: value_gradient}
    if op.hess:

        def value_gradient_hessian(y, args):
            f, gradient, hessian = outputs(y, args)[:3]
            return f, gradient, hessian

        options[DERIVATIVES_OPTION] = value_gradient_hessian
    return options


def _in_dtype_of_x(fn: Callable) -> Callable:
    """``fn(y, args)``'s values (one, or a list) in ``y``'s dtype.

    A root finder steps ``y`` by the equations' values (and their Jacobian's), so equations
    wider than ``x`` (a float32 ``x`` whose equations upcast to float64) widened the iterate
    past the signature the objective was traced with, and optimistix failed on it. scipy
    solves such a system at its own precision and returns ``x``'s dtype; here the whole
    solve stays in ``x``'s dtype.
    """

    def in_dtype_of_x(y, args):
        values = fn(y, args)
        if isinstance(values, list | tuple):
            return [jnp.asarray(value, y.dtype) for value in values]
        return jnp.asarray(values, y.dtype)

    return in_dtype_of_x


def _vector_solve(op: ScipyWrapperOp, kwargs: dict, solve: Callable, minimises: bool) -> Callable:
    """Lower a vector minimize/root op: ``solve`` is ``optx.minimise`` or ``optx.root_find``."""
    dtype = _dtype(op)
    choice_for_size = solver_for_size(
        op, dtype
    )  # refuses unsupported methods and options at compile time
    objective, check_indices_at, outputs = _objective(op, kwargs)
    if not minimises:
        objective, outputs = _in_dtype_of_x(objective), _in_dtype_of_x(outputs)
    condition = _stationary(objective) if minimises else objective
    options = _own_derivatives(op, outputs)

    def vector_solve(x0, *args):
        x0 = _start(x0, dtype)
        # Shape arithmetic (the sizes at which several variables packed into x are split back)
        # stays known through optimistix's jit and the implicit derivative's custom_jvp.
        args = static_where_known(args)
        # scipy's size-dependent budgets need the size of x, known when tracing.
        choice = choice_for_size(x0.size)

        def solved(start, args):
            if minimises or start.ndim:
                return _solved(solve, objective, choice, varying_like(start, args), args, options)
            # MINPACK's root finders take vectors: a 0-d x is solved as one of one element, as
            # scipy's root solves it.
            value, success = _solved(
                solve, _as_vector(objective), choice, varying_like(start.reshape(1), args), args
            )
            return value.reshape(()), success

        value, success = implicitly_differentiated(solved, condition)(x0, args)
        check_indices_at(value, args)
        return value, success

    return vector_solve


def jax_funcify_MinimizeOp(op: MinimizeOp, node=None, **kwargs) -> Callable:
    return _vector_solve(op, kwargs, optx.minimise, minimises=True)


def jax_funcify_RootOp(op: RootOp, node=None, **kwargs) -> Callable:
    return _vector_solve(op, kwargs, optx.root_find, minimises=False)


def _bounds_by_name(
    op: ScipyWrapperOp, outer_inputs: Sequence
) -> tuple[tuple, dict[str, jax.Array]]:
    (_, *args), bound_inputs = op.split_inputs(outer_inputs)
    return tuple(args), dict(zip(op.bound_kwargs, bound_inputs, strict=True))


def jax_funcify_MinimizeScalarOp(op: MinimizeScalarOp, node=None, **kwargs) -> Callable:
    dtype = _dtype(op)
    choice = solver_choice(op, n_variables=1, dtype=dtype)
    objective, check_indices_at, _ = _objective(op, kwargs)

    def stationary(y, inputs):
        args, _ = _bounds_by_name(op, (y, *inputs))
        return jax.grad(objective)(y, args)

    def solved(x0, inputs):
        args, bounds = _bounds_by_name(op, (x0, *inputs))
        # The minimisers (`scalar_minimize`) start from the bounds or the bracket, as scipy's do
        # (no bracket: scipy's default start); no bracket is an empty one.
        options = bounds if "bounds" in bounds else {"bracket": jnp.zeros((0,), x0.dtype)}
        # scipy's minimize_scalar takes no start point, and optimistix stops at once on a NaN
        # one: optimistix starts from zero, whatever x0 holds.
        start = varying_like(jnp.zeros_like(x0), inputs)
        return _solved(optx.minimise, objective, choice, start, args, {**options, **bounds})

    def minimize_scalar(x0, *inputs):
        inputs = static_where_known(inputs)
        value, success = implicitly_differentiated(solved, stationary)(_start(x0, dtype), inputs)
        check_indices_at(value, _bounds_by_name(op, (x0, *inputs))[0])
        return value, success

    return minimize_scalar


def jax_funcify_RootScalarOp(op: RootScalarOp, node=None, **kwargs) -> Callable:
    dtype = _dtype(op)
    choice = solver_choice(op, n_variables=1, dtype=dtype)
    brackets = scipy_method(op).needs_input == "bracket"
    equation, check_indices_at, _ = _objective(op, kwargs)

    def residual(y, inputs):
        args, _ = _bounds_by_name(op, (y, *inputs))
        return equation(y, args)

    def solved(x0, inputs):
        args, bounds = _bounds_by_name(op, (x0, *inputs))
        x0 = varying_like(x0, inputs)
        if not brackets:
            return _solved(optx.root_find, equation, choice, x0, args)
        lower, upper = bounds["bracket"][0], bounds["bracket"][1]
        # The solvers see the equation as scipy does, its signs as given.
        at_lower, at_upper = equation(lower, args), equation(upper, args)
        sign_changes = ~(_same_sign(at_lower, at_upper) | jnp.isnan(at_lower * at_upper))
        # scipy's bracketing methods ignore x0 (a NaN x0 included): start mid-bracket.
        middle = varying_like(((lower + upper) / 2).astype(x0.dtype), inputs)
        value, success = _solved(
            optx.root_find, equation, choice, middle, args, {"lower": lower, "upper": upper}
        )
        # scipy raises ValueError("f(a) and f(b) must have different signs") where NUMBA does,
        # and so does JAX_GPU's read (`bracket_accepted`); a traced function cannot raise, so the
        # solution is NaN and success False.
        return jnp.where(sign_changes, value, jnp.nan).astype(value.dtype), success & sign_changes

    def root_scalar(x0, *inputs):
        inputs = static_where_known(inputs)
        value, success = implicitly_differentiated(solved, residual)(_start(x0, dtype), inputs)
        check_indices_at(value, _bounds_by_name(op, (x0, *inputs))[0])
        return value, success

    return root_scalar


def _same_sign(at_lower: jax.Array, at_upper: jax.Array) -> jax.Array:
    """Both ends nonzero on the same side of zero (by sign bit, as scipy's C code, so that no
    product underflows to zero)."""
    return (at_lower != 0) & (at_upper != 0) & (jnp.signbit(at_lower) == jnp.signbit(at_upper))


def bracket_accepted(op: RootScalarOp, **kwargs) -> Callable[..., jax.Array]:
    """``accepted(x0, *inputs)``: False exactly where scipy's bracketing methods raise
    ``ValueError("f(a) and f(b) must have different signs")`` on the op's bracket (``f`` of
    one sign at both ends; a zero or a NaN at an end stops them instead)."""
    equation, _, _ = _objective(op, dict(kwargs))

    def accepted(x0, *inputs):
        args, bounds = _bounds_by_name(op, (x0, *inputs))
        at_lower = equation(bounds["bracket"][0], args)
        at_upper = equation(bounds["bracket"][1], args)
        return ~_same_sign(at_lower, at_upper) | jnp.isnan(at_lower) | jnp.isnan(at_upper)

    return accepted


LOWERINGS: dict[type, Callable[..., Callable]] = {
    MinimizeOp: jax_funcify_MinimizeOp,
    RootOp: jax_funcify_RootOp,
    MinimizeScalarOp: jax_funcify_MinimizeScalarOp,
    RootScalarOp: jax_funcify_RootScalarOp,
}
