"""Native Numba lowering of PyTensor's optimize ops.

`MinimizeOp`, `RootOp`, `MinimizeScalarOp` and `RootScalarOp` run scipy in
Numba object mode under stock PyTensor. Here each op's frozen inner graph
(already optimized and inplace-baked by `gpubackend.rewrites.numba`)
is funcified as is (a scalar problem's single scalar op on floats, `scalar_core`) and handed to a
solver from `gpubackend.solvers` inside one
jitted function, so the objective is compiled into the solver. Each lowering
carries a cache key (the inner graph's key, the solver and its settings), so
PyTensor's on-disk Numba cache serves later processes.

A configuration with no native solver (see `optimize_plan`) keeps the
object-mode path and emits one `ObjectModeFallbackWarning` naming the method.
"""

import re
import warnings
from collections.abc import Callable
from hashlib import sha256
from typing import NamedTuple

import numpy as np
from pytensor.graph.basic import Apply
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
from gpubackend.solvers.bfgs import make_bfgs
from gpubackend.solvers.bisect import make_bisect
from gpubackend.solvers.bounded_minimize import make_bounded_minimize
from gpubackend.solvers.brent_minimize import make_brent_minimize
from gpubackend.solvers.brentq import make_brentq
from gpubackend.solvers.conjugate_gradient import make_conjugate_gradient
from gpubackend.solvers.golden import make_golden
from gpubackend.solvers.hybrid_powell import make_hybrid_powell
from gpubackend.solvers.levenberg_marquardt import make_levenberg_marquardt
from gpubackend.solvers.newton_cg import make_newton_cg
from gpubackend.solvers.newton_scalar import make_newton_scalar
from gpubackend.solvers.projected_lbfgs import make_projected_lbfgs
from gpubackend.solvers.secant import make_secant
from gpubackend.solvers.trust_region_minimize import (
    make_dogleg,
    make_trust_exact,
    make_trust_ncg,
)

# Bump when a solver's numerics change, so stale on-disk cache entries are not reused.
# The key also names the modules the compiled code lives in: a cached entry
# re-imports them by name, so one from before a move would fail to load.
SOLVER_CACHE_VERSION = 20


# (op type, native solver) -> (problem adapter, solver factory). A vector
# solver is ``make(fun)(x0, args, settings) -> (x, converged)``; a scalar one
# (the ops deriving from `ScipyScalarWrapperOp`) is
# ``make(fun)(args, x0, interval, settings) -> (x, converged)``; ``settings``
# is the method's typed scipy settings (`gpubackend.scipy_options.settings`).
NATIVE_SOLVERS: dict[tuple[type, str], tuple[Callable, Callable]] = {
    (MinimizeOp, "bfgs"): (problem.value_and_gradient, make_bfgs),
    (MinimizeOp, "cg"): (problem.value_and_gradient, make_conjugate_gradient),
    (MinimizeOp, "l-bfgs-b"): (problem.value_and_gradient, make_projected_lbfgs),
    (MinimizeOp, "newton-cg"): (problem.value_gradient_and_hessian, make_newton_cg),
    (MinimizeOp, "trust-exact"): (problem.value_gradient_and_hessian, make_trust_exact),
    (MinimizeOp, "trust-ncg"): (problem.value_gradient_and_hessian, make_trust_ncg),
    (MinimizeOp, "dogleg"): (problem.value_gradient_and_hessian, make_dogleg),
    (RootOp, "hybr"): (problem.residual_and_jacobian, make_hybrid_powell),
    (RootOp, "lm"): (problem.residual_and_jacobian, make_levenberg_marquardt),
    (MinimizeScalarOp, "brent"): (problem.scalar_value, make_brent_minimize),
    (MinimizeScalarOp, "golden"): (problem.scalar_value, make_golden),
    (MinimizeScalarOp, "bounded"): (problem.scalar_value, make_bounded_minimize),
    (RootScalarOp, "brentq"): (problem.scalar_value, make_brentq),
    (RootScalarOp, "bisect"): (problem.scalar_value, make_bisect),
    (RootScalarOp, "newton"): (problem.scalar_value_and_derivative, make_newton_scalar),
    (RootScalarOp, "newton-forward-difference"): (
        problem.scalar_value_and_forward_difference,
        make_newton_scalar,
    ),
    (RootScalarOp, "secant"): (problem.scalar_value, make_secant),
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
    op: ScipyWrapperOp, run: Callable, interval_name: str | None, scalar_args: bool
) -> Callable:
    """``f(x0, *args, *bounds)`` calling ``run(x0, args_tuple, interval)``.

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
    src = f"def {name}({signature}):\n    return run(x0, {args_tuple}, {interval})\n"
    return numba_njit(
        compile_numba_function_src(
            src, name, {"run": run, "NO_INTERVAL": np.empty(0, dtype=np.float64)}
        )
    )


def _vector_runner(solve: Callable, settings: NamedTuple, dtype: str) -> Callable:
    scalar_type = np.dtype(dtype).type

    @numba_njit
    def run(x0, args, interval):
        x, converged = solve(problem.as_float64_vector(x0), args, settings)
        return x.reshape(x0.shape).astype(scalar_type), converged

    return run


def _scalar_runner(solve: Callable, settings: NamedTuple, dtype: str) -> Callable:
    scalar_type = np.dtype(dtype).type

    @numba_njit
    def run(x0, args, interval):
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


def _lower(op: ScipyWrapperOp, node: Apply, **kwargs) -> tuple[Callable, str | None]:
    refuse_before_scipy(op)  # before object mode can hand scipy what crashes it
    try:
        plan: SolverPlan = solver_plan(op)
    except NoNativeSolver as reason:
        return _object_mode(op, node, str(reason), **kwargs)

    inner, inner_key = numba_funcify_and_cache_key(
        op.fgraph,
        fgraph_name=f"numba_{type(op).__name__.lower()}_inner",
        ofg_memo=kwargs.get("ofg_memo"),
    )
    on_floats = scalar_core(op.fgraph) if isinstance(op, ScipyScalarWrapperOp) else None
    x_type = op.inner_inputs[0].type
    adapter, make_solver = NATIVE_SOLVERS[(type(op), plan.solver)]
    if on_floats is not None:
        fun = adapter(on_floats, problem.scalar_to_float(x_type.dtype))
        run = _scalar_runner(make_solver(fun), plan.settings, x_type.dtype)
    elif isinstance(op, ScipyScalarWrapperOp):
        fun = adapter(inner, problem.scalar_to_inner(x_type.dtype))
        run = _scalar_runner(make_solver(fun), plan.settings, x_type.dtype)
    else:
        fun = adapter(inner, problem.vector_to_inner(x_type.ndim, x_type.dtype))
        run = _vector_runner(make_solver(fun), plan.settings, x_type.dtype)
    lowered = _bind_inputs(op, run, _interval_name(op), scalar_args=on_floats is not None)

    if inner_key is None:
        return lowered, None
    key = sha256(
        str(
            (
                type(op).__name__,
                plan,
                op.bound_kwargs,
                x_type.ndim,
                x_type.dtype,
                inner_key,
                on_floats is not None,
                SOLVER_CACHE_VERSION,
                __name__,
                make_solver.__module__,
                adapter.__module__,
            )
        ).encode()
    ).hexdigest()
    return lowered, key


for _op_type in (MinimizeOp, RootOp, MinimizeScalarOp, RootScalarOp):
    register_funcify_and_cache_key(_op_type)(_lower)
