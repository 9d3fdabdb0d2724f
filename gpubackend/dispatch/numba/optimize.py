"""Native Numba lowering of PyTensor's optimize ops.

`MinimizeOp`, `RootOp`, `MinimizeScalarOp` and `RootScalarOp` run scipy in
Numba object mode under stock PyTensor. Here each op's frozen inner graph
(already optimized and inplace-baked by `gpubackend.rewrites.numba`) is
funcified once per function the solver calls, restricted to the outputs that
function reads (a root finder's equations alone and its Jacobian alone; a
scalar problem's single scalar op on floats, `scalar_core`), and handed to a
solver from `gpubackend.solvers` inside one jitted function, so the objective
is compiled into the solver. Each lowering carries a cache key (the inner
graphs' keys, the solver and its settings), so PyTensor's on-disk Numba cache
serves later processes.

Within a process each native solver is compiled once per op type, solver,
evaluated inner graphs (hash-consed: structurally equal graphs compare equal)
and ``x``'s type: the runner takes the scipy settings as an argument, so ops
that differ only in their options share it (Numba compiles it once per
settings type), and only the small function binding an op's inputs freezes
them.

A configuration with no native solver (see `optimize_plan`) keeps the
object-mode path and emits one `ObjectModeFallbackWarning` naming the method.
"""

import re
import warnings
from collections.abc import Callable
from functools import lru_cache
from hashlib import sha256
from typing import NamedTuple

import numpy as np
from pytensor.graph.basic import Apply
from pytensor.graph.fg import FrozenFunctionGraph
from pytensor.graph.traversal import applys_between
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.link.numba.dispatch.basic import (
    generate_fallback_impl,
    numba_funcify_and_cache_key,
    numba_njit,
    register_funcify_and_cache_key,
)
from pytensor.tensor.optimize import (
    MinimizeOp,
    MinimizeScalarOp,
    RootOp,
    RootScalarOp,
    ScipyScalarWrapperOp,
    ScipyWrapperOp,
)

from gpubackend.dispatch.numba import optimize_problem as problem
from gpubackend.dispatch.numba.optimize_plan import NoNativeSolver, SolverPlan, solver_plan
from gpubackend.dispatch.numba.scalar_core import scalar_core
from gpubackend.errors import ObjectModeFallbackWarning
from gpubackend.scipy_options import refuse_before_scipy, scipy_method
from gpubackend.solvers.anderson import make_anderson
from gpubackend.solvers.bfgs import make_bfgs
from gpubackend.solvers.bisect import make_bisect
from gpubackend.solvers.bounded_minimize import make_bounded_minimize
from gpubackend.solvers.brent_minimize import make_brent_minimize
from gpubackend.solvers.brentq import make_brenth, make_brentq
from gpubackend.solvers.broyden import make_broyden1, make_broyden2
from gpubackend.solvers.cobyla import make_cobyla
from gpubackend.solvers.cobyqa import make_cobyqa
from gpubackend.solvers.conjugate_gradient import make_conjugate_gradient
from gpubackend.solvers.df_sane import make_df_sane
from gpubackend.solvers.diagonal_jacobians import (
    make_diagonal_broyden,
    make_exciting_mixing,
    make_linear_mixing,
)
from gpubackend.solvers.golden import make_golden
from gpubackend.solvers.hybrid_powell import make_hybrid_powell
from gpubackend.solvers.krylov import make_krylov
from gpubackend.solvers.levenberg_marquardt import make_levenberg_marquardt
from gpubackend.solvers.nelder_mead import make_nelder_mead
from gpubackend.solvers.newton_cg import make_newton_cg
from gpubackend.solvers.newton_scalar import make_halley, make_newton_scalar
from gpubackend.solvers.powell import make_powell
from gpubackend.solvers.projected_lbfgs import make_projected_lbfgs
from gpubackend.solvers.ridder import make_ridder
from gpubackend.solvers.secant import make_secant
from gpubackend.solvers.slsqp import make_slsqp
from gpubackend.solvers.tnc import make_tnc
from gpubackend.solvers.toms748 import make_toms748
from gpubackend.solvers.tr_interior_point import (
    make_tr_interior_point,
    make_tr_interior_point_hessian,
)
from gpubackend.solvers.trust_constr import make_trust_constr, make_trust_constr_hessian
from gpubackend.solvers.trust_region_minimize import (
    make_dogleg,
    make_trust_exact,
    make_trust_krylov,
    make_trust_ncg,
)

# Bump when a solver's numerics change, so stale on-disk cache entries are not reused.
# The key also names the modules the compiled code lives in: a cached entry
# re-imports them by name, so one from before a move would fail to load.
SOLVER_CACHE_VERSION = 69


# (op type, native solver) -> (the solver's evaluations, solver factory). The
# factory takes one jitted ``fun(x, args)`` per evaluation (`optimize_problem`):
# a vector solver is ``make(*funs)(x0, args, settings) -> (x, converged)``; a
# scalar one (the ops deriving from `ScipyScalarWrapperOp`) is
# ``make(*funs)(args, x0, interval, settings) -> (x, converged)``; ``settings``
# is the method's typed scipy settings (`gpubackend.scipy_options.settings`).
NATIVE_SOLVERS: dict[tuple[type, str], tuple[tuple[problem.Evaluation, ...], Callable]] = {
    (MinimizeOp, "bfgs"): ((problem.VALUE_AND_GRADIENT,), make_bfgs),
    (MinimizeOp, "cg"): ((problem.VALUE_AND_GRADIENT,), make_conjugate_gradient),
    (MinimizeOp, "l-bfgs-b"): ((problem.VALUE_AND_GRADIENT,), make_projected_lbfgs),
    (MinimizeOp, "newton-cg"): ((problem.VALUE_GRADIENT_AND_HESSIAN,), make_newton_cg),
    (MinimizeOp, "nelder-mead"): ((problem.VALUE,), make_nelder_mead),
    (MinimizeOp, "powell"): ((problem.VALUE,), make_powell),
    (MinimizeOp, "cobyqa"): ((problem.VALUE,), make_cobyqa),
    (MinimizeOp, "cobyla"): ((problem.VALUE,), make_cobyla),
    (MinimizeOp, "tnc"): ((problem.VALUE_AND_GRADIENT,), make_tnc),
    (MinimizeOp, "trust-exact"): ((problem.VALUE_GRADIENT_AND_HESSIAN,), make_trust_exact),
    (MinimizeOp, "trust-krylov"): ((problem.VALUE_GRADIENT_AND_HESSIAN,), make_trust_krylov),
    (MinimizeOp, "trust-ncg"): ((problem.VALUE_GRADIENT_AND_HESSIAN,), make_trust_ncg),
    (MinimizeOp, "dogleg"): ((problem.VALUE_GRADIENT_AND_HESSIAN,), make_dogleg),
    (MinimizeOp, "slsqp"): ((problem.VALUE_AND_GRADIENT,), make_slsqp),
    (MinimizeOp, "trust-constr"): ((problem.VALUE_AND_GRADIENT,), make_trust_constr),
    (MinimizeOp, "trust-constr-hessian"): (
        (problem.VALUE_GRADIENT_AND_HESSIAN,),
        make_trust_constr_hessian,
    ),
    (MinimizeOp, "trust-constr-interior-point"): (
        (problem.VALUE_AND_GRADIENT,),
        make_tr_interior_point,
    ),
    (MinimizeOp, "trust-constr-interior-point-hessian"): (
        (problem.VALUE_GRADIENT_AND_HESSIAN,),
        make_tr_interior_point_hessian,
    ),
    # MINPACK asks for the equations at every trial point, the Jacobian only where it refactors.
    (RootOp, "hybr"): ((problem.RESIDUAL, problem.JACOBIAN), make_hybrid_powell),
    (RootOp, "lm"): ((problem.RESIDUAL, problem.JACOBIAN), make_levenberg_marquardt),
    (RootOp, "broyden1"): ((problem.RESIDUAL,), make_broyden1),
    (RootOp, "anderson"): ((problem.RESIDUAL,), make_anderson),
    (RootOp, "broyden2"): ((problem.RESIDUAL,), make_broyden2),
    (RootOp, "diagbroyden"): ((problem.RESIDUAL,), make_diagonal_broyden),
    (RootOp, "linearmixing"): ((problem.RESIDUAL,), make_linear_mixing),
    (RootOp, "excitingmixing"): ((problem.RESIDUAL,), make_exciting_mixing),
    (RootOp, "krylov"): ((problem.RESIDUAL,), make_krylov),
    (RootOp, "df-sane"): ((problem.RESIDUAL,), make_df_sane),
    (MinimizeScalarOp, "brent"): ((problem.SCALAR_VALUE,), make_brent_minimize),
    (MinimizeScalarOp, "golden"): ((problem.SCALAR_VALUE,), make_golden),
    (MinimizeScalarOp, "bounded"): ((problem.SCALAR_VALUE,), make_bounded_minimize),
    (RootScalarOp, "brentq"): ((problem.SCALAR_VALUE,), make_brentq),
    (RootScalarOp, "bisect"): ((problem.SCALAR_VALUE,), make_bisect),
    (RootScalarOp, "brenth"): ((problem.SCALAR_VALUE,), make_brenth),
    (RootScalarOp, "ridder"): ((problem.SCALAR_VALUE,), make_ridder),
    (RootScalarOp, "toms748"): ((problem.SCALAR_VALUE,), make_toms748),
    (RootScalarOp, "newton"): ((problem.SCALAR_VALUE_AND_DERIVATIVE,), make_newton_scalar),
    (RootScalarOp, "newton-forward-difference"): (
        (problem.SCALAR_VALUE_AND_FORWARD_DIFFERENCE,),
        make_newton_scalar,
    ),
    (RootScalarOp, "secant"): ((problem.SCALAR_VALUE,), make_secant),
    (RootScalarOp, "halley"): ((problem.SCALAR_VALUE_AND_TWO_DERIVATIVES,), make_halley),
}


def _object_mode(op: ScipyWrapperOp, node: Apply, reason: str, **kwargs) -> tuple[Callable, None]:
    warnings.warn(
        f"{type(op).__name__} method {op.method!r} runs scipy in Numba object mode: {reason}",
        ObjectModeFallbackWarning,
        stacklevel=2,
    )
    # PyTensor's generic object-mode warning would repeat ours without the method.
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="Numba will use object mode", category=UserWarning
        )
        return generate_fallback_impl(op, node, **kwargs), None


def _bind_inputs(
    op: ScipyWrapperOp,
    run: Callable,
    settings: NamedTuple,
    interval_name: str | None,
    scalar_args: bool,
) -> Callable:
    """``f(x0, *args, *bounds)`` calling ``run(x0, args_tuple, interval, settings)``, the op's
    settings a constant of ``f`` (``run`` is shared by ops that differ only in them).

    With ``scalar_args`` the (0-d) arguments are handed on as scalars, for an
    inner graph lowered on floats (`scalar_core`). Generated source, because
    Numba cannot split ``*inputs`` at a position known only at lowering time.
    """
    n_args = len(op.inner_inputs) - 1
    arg_names = [f"arg{i}" for i in range(n_args)]
    bound_names = [f"bound_{name}" for name in op.bound_kwargs]
    interval = f"bound_{interval_name}" if interval_name in op.bound_kwargs else "NO_INTERVAL"
    passed = [f"{name}.item()" for name in arg_names] if scalar_args else arg_names
    args_tuple = f"({', '.join(passed)}{',' if n_args else ''})"
    name = f"{type(op).__name__.lower()}_{re.sub(r'[^0-9a-z]', '_', op.method.lower())}"
    signature = ", ".join(["x0", *arg_names, *bound_names])
    src = f"def {name}({signature}):\n    return run(x0, {args_tuple}, {interval}, SETTINGS)\n"
    return numba_njit(
        compile_numba_function_src(
            src,
            name,
            {"run": run, "SETTINGS": settings, "NO_INTERVAL": np.empty(0, dtype=np.float64)},
        )
    )


def _vector_runner(solve: Callable, dtype: str) -> Callable:
    scalar_type = np.dtype(dtype).type

    @numba_njit
    def run(x0, args, interval, settings):
        x, converged = solve(problem.as_float64_vector(x0), args, settings)
        return x.reshape(x0.shape).astype(scalar_type), converged

    return run


def _scalar_runner(solve: Callable, dtype: str) -> Callable:
    scalar_type = np.dtype(dtype).type

    @numba_njit
    def run(x0, args, interval, settings):
        x, converged = solve(
            args, problem.as_float(x0), np.asarray(interval, dtype=np.float64), settings
        )
        return np.asarray(scalar_type(x)), converged

    return run


def _interval_name(op: ScipyWrapperOp) -> str | None:
    """The bound input a scalar solver gets as its interval (scipy's ``bounds`` or ``bracket``);
    None for vector ops."""
    if isinstance(op, ScipyScalarWrapperOp):
        return scipy_method(op).needs_input or "bracket"
    return None


def _outputs_subgraph(fgraph: FrozenFunctionGraph, outputs: tuple[int, ...]) -> FrozenFunctionGraph:
    """The inner graph computing only ``outputs`` (its inputs all kept), its nodes in the order
    baked with inplace: leaving out nodes keeps every buffer read before it is overwritten."""
    if outputs == tuple(range(len(fgraph.outputs))):
        return fgraph
    wanted = [fgraph.outputs[position] for position in outputs]
    needed = set(applys_between(fgraph.inputs, wanted))
    return FrozenFunctionGraph.from_toposort(
        fgraph.inputs, wanted, [node for node in fgraph.toposort() if node in needed]
    )


# Bounds on what a process keeps compiled: entries are small next to a test
# session's distinct problems, each holds its compiled machine code.
_LOWERED_CACHE_SIZE = 256


@lru_cache(maxsize=_LOWERED_CACHE_SIZE)
def _lower_evaluation(
    op_type: type, fgraph: FrozenFunctionGraph, evaluation: problem.Evaluation, on_floats: bool
) -> tuple[Callable, str | None]:
    """The jitted ``fun(x, args)`` of one evaluation of the inner graph ``fgraph`` (computing only
    the outputs it reads) and the graph's cache key."""
    inner, inner_key = numba_funcify_and_cache_key(
        fgraph, fgraph_name=f"numba_{op_type.__name__.lower()}_inner"
    )
    x_type = fgraph.inputs[0].type
    # The whole graph's scalar op computes any subset of its outputs too.
    core = scalar_core(fgraph) if on_floats else None
    if core is not None:
        return evaluation.adapter(core, problem.scalar_to_float(x_type.dtype)), inner_key
    if issubclass(op_type, ScipyScalarWrapperOp):
        return evaluation.adapter(inner, problem.scalar_to_inner(x_type.dtype)), inner_key
    return evaluation.adapter(inner, problem.vector_to_inner(x_type.ndim, x_type.dtype)), inner_key


@lru_cache(maxsize=_LOWERED_CACHE_SIZE)
def _solver_runner(
    op_type: type, solver: str, fgraphs: tuple[FrozenFunctionGraph, ...], on_floats: bool
) -> tuple[Callable, tuple[str | None, ...]]:
    """``run(x0, args, interval, settings)`` of the native ``solver`` on the evaluations' inner
    graphs ``fgraphs`` (their first input is ``x``), and their cache keys."""
    evaluations, make_solver = NATIVE_SOLVERS[(op_type, solver)]
    funs, inner_keys = zip(
        *(
            _lower_evaluation(op_type, fgraph, evaluation, on_floats)
            for fgraph, evaluation in zip(fgraphs, evaluations, strict=True)
        ),
        strict=True,
    )
    runner = _scalar_runner if issubclass(op_type, ScipyScalarWrapperOp) else _vector_runner
    return runner(make_solver(*funs), fgraphs[0].inputs[0].type.dtype), inner_keys


def _lower(op: ScipyWrapperOp, node: Apply, **kwargs) -> tuple[Callable, str | None]:
    refuse_before_scipy(op)  # before object mode can hand scipy what crashes it
    try:
        plan: SolverPlan = solver_plan(op)
    except NoNativeSolver as reason:
        return _object_mode(op, node, str(reason), **kwargs)

    on_floats = isinstance(op, ScipyScalarWrapperOp) and scalar_core(op.fgraph) is not None
    op_type: type = type(op)
    evaluations, make_solver = NATIVE_SOLVERS[(op_type, plan.solver)]
    run, inner_keys = _solver_runner(
        op_type,
        plan.solver,
        tuple(_outputs_subgraph(op.fgraph, evaluation.outputs) for evaluation in evaluations),
        on_floats,
    )
    x_type = op.inner_inputs[0].type
    lowered = _bind_inputs(op, run, plan.settings, _interval_name(op), scalar_args=on_floats)

    if None in inner_keys:
        return lowered, None
    key = sha256(
        str(
            (
                type(op).__name__,
                plan,
                op.bound_kwargs,
                x_type.ndim,
                x_type.dtype,
                inner_keys,
                on_floats,
                SOLVER_CACHE_VERSION,
                __name__,
                make_solver.__module__,
                problem.__name__,
            )
        ).encode()
    ).hexdigest()
    return lowered, key


for _op_type in (MinimizeOp, RootOp, MinimizeScalarOp, RootScalarOp):
    register_funcify_and_cache_key(_op_type)(_lower)
