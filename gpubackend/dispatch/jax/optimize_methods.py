"""Which optimistix solver stands in for a scipy method, with its tolerances and step budget.

The op's method and options are read once, with scipy's names and defaults,
by `gpubackend.scipy_options` (the source the Numba lowering reads too); this
module maps those settings onto optimistix. Budgets keep scipy's meaning:
``maxiter`` of ``minimize`` counts accepted moves of the iterate
(`ScipyIterations`), MINPACK's ``maxfev`` and the scalar methods' ``maxiter``
count evaluations, which are optimistix steps there. Anything without a
faithful JAX counterpart (constraints, bounds on a gradient method, SLSQP, an
option optimistix has no knob for, ...) is refused with a `NotImplementedError`
that names it and what is supported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from pytensor.tensor.optimize import (
    MinimizeOp,
    MinimizeScalarOp,
    RootOp,
    RootScalarOp,
    ScipyWrapperOp,
)

from gpubackend.dispatch.jax import trust_subproblems
from gpubackend.dispatch.jax.anderson import Anderson
from gpubackend.dispatch.jax.bisect import Bisect
from gpubackend.dispatch.jax.brent_roots import BrentRoot, hyperbolic_step, inverse_quadratic_step
from gpubackend.dispatch.jax.broyden import BroydenFirst, BroydenSecond
from gpubackend.dispatch.jax.cobyla import ScipyCOBYLA
from gpubackend.dispatch.jax.cobyqa import ScipyCOBYQA
from gpubackend.dispatch.jax.cobyqa import budgets as cobyqa_budgets
from gpubackend.dispatch.jax.df_sane import SpectralResidual
from gpubackend.dispatch.jax.diagonal_jacobians import (
    DiagonalBroyden,
    ExcitingMixing,
    LinearMixing,
)
from gpubackend.dispatch.jax.hybrid_powell import HybridPowell
from gpubackend.dispatch.jax.krylov import krylov_jacobian
from gpubackend.dispatch.jax.levenberg_marquardt import MinpackLevenbergMarquardt
from gpubackend.dispatch.jax.nelder_mead import ScipyNelderMead
from gpubackend.dispatch.jax.newton_cg import ScipyNewtonCG
from gpubackend.dispatch.jax.noise_aware_search import (
    ROUNDING_ULPS,
    NoiseAwareBFGS,
)
from gpubackend.dispatch.jax.nonlin_solve import (
    InverseJacobian,
    MatrixFreeInverseJacobian,
    NonlinSolve,
)
from gpubackend.dispatch.jax.nonlinear_cg import ScipyCG
from gpubackend.dispatch.jax.powell import ScipyPowell
from gpubackend.dispatch.jax.projected_lbfgs import ProjectedLBFGS
from gpubackend.dispatch.jax.ridder import Ridder
from gpubackend.dispatch.jax.scalar_minimize import ScipyBounded, ScipyBrent, ScipyGolden
from gpubackend.dispatch.jax.slsqp import SLSQP
from gpubackend.dispatch.jax.tnc import TNC, tnc_options
from gpubackend.dispatch.jax.toms748 import Toms748
from gpubackend.dispatch.jax.tr_interior_point import TrustRegionInteriorPoint, bound_rows
from gpubackend.dispatch.jax.trust_constr import TrustConstr
from gpubackend.dispatch.jax.trust_region import ScipyTrustRegion
from gpubackend.dispatch.jax.trust_subproblems import Subproblem
from gpubackend.errors import UnsupportedMethod
from gpubackend.scipy_options import (
    OP_OPTIONS,
    minimize_maxiter,
    minpack_maxfev,
    nonlin_maxiter,
    op_options,
    refuse_before_scipy,
    resolve,
)
from gpubackend.scipy_options import settings as s
from gpubackend.scipy_options.budgets import (
    NELDER_MEAD_PER_VARIABLE,
    POWELL_PER_VARIABLE,
    direct_search_budgets,
)
from gpubackend.scipy_options.methods import JaxSupport

# optimistix's NelderMead is left out on purpose: on a smooth 3-variable
# quadratic-plus-quartic it reports success at points that are not minima
# (its start simplex collapses), which would be a silently wrong answer;
# `ScipyNelderMead` is scipy's instead.

_BACKEND = "JAX (optimistix) lowering"


@dataclass(frozen=True)
class SolverChoice:
    """An optimistix solver and the budget the scipy call asked for."""

    solver: Any
    max_steps: int


SolverBuilder = Callable[[Any, int, str], SolverChoice]
"""The optimistix solver and budget for a method's settings, the number of variables and the dtype.
"""


class _IterationState(eqx.Module):
    """`ScipyIterations`' state around the wrapped solver's: scipy iterations done, trial points
    in a row that made no progress, and the smallest gradient norm an iterate has had."""

    inner: Any
    iterations: jax.Array
    standing: jax.Array
    best_gradient: jax.Array


class ScipyIterations(optx.AbstractMinimiser):
    """A minimiser whose budget counts scipy's iterations, not optimistix's steps.

    Every optimistix step evaluates one trial point, and a line search may
    reject several before one is accepted; scipy's ``maxiter`` counts
    iterations, each ending in an accepted move of the iterate. This wrapper
    counts the steps that move the iterate and stops, with optimistix's
    "max steps reached" result, once ``max_iterations`` of them are done
    without convergence. optimistix's own ``max_steps`` then only bounds the
    evaluations (see `EVALUATIONS_PER_ITERATION`).

    With ``gradient_tolerance`` (BFGS), scipy's test replaces the
    solver's Cauchy test (small changes of the iterate and the value), which
    passes at tight tolerances where the gradient is still far above them:
    converged once ``norm(grad) <= gtol`` at the iterate, and failed, as
    scipy's line search fails ("precision loss"), once `EVALUATIONS_PER_ITERATION`
    trial points in a row make no progress: none lowers ``f`` by more than its
    rounding or the gradient below its smallest yet (the search accepts steps
    inside the rounding, `noise_aware_search`).
    """

    solver: optx.AbstractMinimiser
    max_iterations: int = eqx.field(static=True)
    # The wrapped solver's own tolerances and norm, which optimistix reads off any minimiser.
    rtol: float
    atol: float
    norm: Callable
    gradient_tolerance: GradientTolerance | None = eqx.field(static=True, default=None)

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        inner = self.solver.init(fn, y, args, options, f_struct, aux_struct, tags)
        no_gradient_yet = jnp.array(jnp.inf, f_struct.dtype)
        return _IterationState(inner, jnp.array(0), jnp.array(0), no_gradient_yet)

    def step(self, fn, y, args, options, state, tags):
        new_y, inner, aux = self.solver.step(fn, y, args, options, state.inner, tags)
        moved = jnp.any(new_y != y)
        progressed, best_gradient = moved, state.best_gradient
        if self.gradient_tolerance is not None:
            # The states' gradients and values are at the iterates (placeholders before the first
            # step, which always counts).
            gradient = self.gradient_tolerance.size(inner.f_info.grad)
            before, after = state.inner.f_info.f, inner.f_info.f
            rounding = ROUNDING_ULPS * jnp.finfo(after.dtype).eps * jnp.abs(before)
            lowered = (after < before - rounding) | (gradient < best_gradient)
            progressed = moved & (state.inner.first_step | lowered)
            best_gradient = jnp.where(moved, jnp.minimum(best_gradient, gradient), best_gradient)
        return (
            new_y,
            _IterationState(
                inner,
                state.iterations + moved.astype(state.iterations.dtype),
                jnp.where(progressed, 0, state.standing + 1),
                best_gradient,
            ),
            aux,
        )

    def terminate(self, fn, y, args, options, state, tags):
        inner = state.inner
        done, result = self.solver.terminate(fn, y, args, options, inner, tags)
        if self.gradient_tolerance is not None:
            # The inner state's gradient is at the iterate ``y`` (a placeholder before the first
            # step, when it is skipped).
            converged = ~inner.first_step & self.gradient_tolerance.met(inner.f_info.grad)
            stalled = state.standing >= EVALUATIONS_PER_ITERATION
            failed = result != optx.RESULTS.successful
            result = optx.RESULTS.where(
                converged,
                optx.RESULTS.successful,
                optx.RESULTS.where(stalled, optx.RESULTS.nonlinear_max_steps_reached, result),
            )
            done = converged | stalled | failed
        out_of_iterations = (state.iterations >= self.max_iterations) & ~done
        result = optx.RESULTS.where(
            out_of_iterations, optx.RESULTS.nonlinear_max_steps_reached, result
        )
        return done | out_of_iterations, result

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return self.solver.postprocess(fn, y, aux, args, options, state.inner, tags, result)


@dataclass(frozen=True)
class GradientTolerance:
    """scipy's convergence test of BFGS: ``vecnorm(grad, ord=norm) <= gtol``."""

    gtol: float
    norm: float

    def size(self, grad) -> jax.Array:
        # scipy's vecnorm: max |g| for inf, min |g| for -inf, else the p-norm, as jnp's for vectors.
        return jnp.linalg.norm(jnp.ravel(grad), ord=self.norm)

    def met(self, grad) -> jax.Array:
        return self.size(grad) <= self.gtol


EVALUATIONS_PER_ITERATION = 64
"""optimistix steps allowed per scipy iteration: a backtracking search halving its
step 64 times has stalled (2**-64), so the iteration count is what stops a solve."""


def _floored(dtype: str, rtol: float, atol: float) -> tuple[float, float]:
    """Tolerances no finer than ``dtype`` can resolve, so float32 solves can still terminate."""
    eps = float(np.finfo(dtype).eps)
    return max(float(rtol), 4 * eps), max(float(atol), 16 * eps)


def _iterations(
    solver: optx.AbstractMinimiser,
    maxiter: int,
    max_evaluations: int | None = None,
    gradient_tolerance: GradientTolerance | None = None,
) -> SolverChoice:
    """A minimiser stopped after ``maxiter`` scipy iterations (and ``max_evaluations`` trial points,
    if given)."""
    max_steps = EVALUATIONS_PER_ITERATION * (maxiter + 1)
    if max_evaluations is not None:
        max_steps = min(max_steps, max_evaluations)
    wrapped = ScipyIterations(
        solver=solver,
        max_iterations=maxiter,
        rtol=solver.rtol,
        atol=solver.atol,
        norm=solver.norm,
        gradient_tolerance=gradient_tolerance,
    )
    return SolverChoice(wrapped, max_steps)


def _gradient_tolerance(settings: s.LineSearchSettings) -> GradientTolerance:
    # Not floored to the dtype: a gradient is not scale-free, and success must mean what scipy's
    # test means (floored at 4 eps, BFGS reported success at 4e-16 when asked for 1e-20).
    return GradientTolerance(float(settings.gtol), float(settings.norm))


# optimistix has no gradient-norm test: `ScipyIterations` applies scipy's. The Cauchy test's
# tolerances stay the solver's (the in-mesh stand-in, `damped_newton`, reads them).
def _bfgs(settings: s.LineSearchSettings, n: int, dtype: str) -> SolverChoice:
    rtol, atol = _floored(dtype, settings.gtol, settings.gtol)
    return _iterations(
        NoiseAwareBFGS(rtol=rtol, atol=atol),
        minimize_maxiter(settings.maxiter, n),
        gradient_tolerance=_gradient_tolerance(settings),
    )


def _cg(settings: s.LineSearchSettings, n: int, dtype: str) -> SolverChoice:
    maxiter = minimize_maxiter(settings.maxiter, n)
    rtol, atol = _floored(dtype, settings.gtol, settings.gtol)
    solver = ScipyCG(
        gtol=settings.gtol,
        gradient_norm=float(settings.norm),
        c1=settings.c1,
        c2=settings.c2,
        max_iterations=maxiter,
        rtol=rtol,
        atol=atol,
        norm=optx.max_norm,
    )
    # One step per scipy iteration; its maxiter=0 ends before the first.
    return SolverChoice(solver, max(maxiter, 1))


def _box_bounds(
    bounds: tuple[tuple[float, ...], tuple[float, ...]], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """scipy's box ``bounds`` (as resolved: in order) as two NumPy arrays of ``n`` entries;
    scipy's error for a number of pairs that is not ``n``."""
    lower, upper = (np.asarray(bound, dtype=np.float64) for bound in bounds)
    if lower.size not in (1, n):
        raise ValueError("minimize `bounds` must hold one (lower, upper) pair per element of x")
    return np.broadcast_to(lower, (n,)), np.broadcast_to(upper, (n,))


def _box(bounds: tuple[tuple[float, ...], tuple[float, ...]], n: int) -> tuple[Any, Any]:
    """`_box_bounds` as JAX arrays."""
    lower, upper = _box_bounds(bounds, n)
    return jnp.asarray(lower), jnp.asarray(upper)


def _lbfgsb(settings: s.LBFGSBSettings, n: int, dtype: str) -> SolverChoice:
    # The Numba solver's projected L-BFGS, bounded or not (infinite bounds project nothing): its
    # stopping tests are scipy's, on a small relative decrease of f (ftol) or a small projected
    # gradient (gtol), so both backends stop where scipy does.
    rtol, atol = _floored(dtype, settings.ftol, settings.gtol)
    lower, upper = _box(settings.bounds, n)
    solver = ProjectedLBFGS(
        ftol=settings.ftol,
        gtol=settings.gtol,
        lower=lower,
        upper=upper,
        rtol=rtol,
        atol=atol,
        norm=optx.max_norm,
        maxcor=settings.maxcor,
        max_iterations=settings.maxiter,
        max_evaluations=settings.maxfun,
        max_line_search=settings.maxls,
    )
    # One step per iteration; the verdict before the first needs none.
    return SolverChoice(solver, max(settings.maxiter, 1))


def _newton_cg(settings: s.NewtonCGSettings, n: int, dtype: str) -> SolverChoice:
    maxiter = minimize_maxiter(settings.maxiter, n)
    rtol, atol = _floored(dtype, settings.xtol, settings.xtol)
    solver = ScipyNewtonCG(
        xtol=settings.xtol,
        c1=settings.c1,
        c2=settings.c2,
        max_iterations=maxiter,
        rtol=rtol,
        atol=atol,
        norm=optx.max_norm,
    )
    # One step per scipy iteration; its maxiter=0 ends before the first.
    return SolverChoice(solver, max(maxiter, 1))


def _trust_region(subproblem: Subproblem) -> SolverBuilder:
    def build(settings: s.TrustRegionSettings, n: int, dtype: str) -> SolverChoice:
        maxiter = minimize_maxiter(settings.maxiter, n)
        rtol, atol = _floored(dtype, settings.gtol, settings.gtol)
        solver = ScipyTrustRegion(
            subproblem=subproblem,
            gtol=settings.gtol,
            max_iterations=maxiter,
            initial_trust_radius=settings.initial_trust_radius,
            max_trust_radius=settings.max_trust_radius,
            eta=settings.eta,
            rtol=rtol,
            atol=atol,
            norm=optx.max_norm,
        )
        # One step per scipy iteration; scipy's maxiter=0 still runs one.
        return SolverChoice(solver, max(maxiter, 1))

    return build


def _slsqp(settings: s.SLSQPSettings, n: int, dtype: str) -> SolverChoice:
    lower, upper = _box(settings.bounds, n)
    rtol, atol = _floored(dtype, settings.ftol, settings.ftol)
    solver = SLSQP(
        ftol=settings.ftol,
        lower=lower,
        upper=upper,
        rtol=rtol,
        atol=atol,
        max_iterations=settings.maxiter,
        norm=optx.max_norm,
    )
    # One step per scipy iteration; the last one's verdict needs no step of its own.
    return SolverChoice(solver, settings.maxiter + 1)


def _tnc(settings: s.TNCSettings, n: int, dtype: str) -> SolverChoice:
    options = tnc_options(settings, *_box_bounds(settings.bounds, n))
    solver = TNC(options=options, rtol=0.0, atol=0.0, norm=optx.max_norm)
    # One step per iteration of tnc.c; an iteration that calls the objective not at all adds a
    # bound, so there are at most n + 1 of them per call of its budget.
    return SolverChoice(solver, max(options.max_evaluations, 1) * (n + 1))


def _trust_constr(settings: s.TrustConstrSettings, n: int, dtype: str) -> SolverChoice:
    rtol, atol = _floored(dtype, settings.xtol, settings.gtol)
    lower, upper = _box_bounds(settings.bounds, n)
    if np.isfinite(np.concatenate([lower, upper])).any():
        index, sign, bound, lower, upper = bound_rows(lower, upper)
        interior_point = TrustRegionInteriorPoint(
            gtol=settings.gtol,
            xtol=settings.xtol,
            barrier_tol=settings.barrier_tol,
            initial_tr_radius=settings.initial_tr_radius,
            initial_constr_penalty=settings.initial_constr_penalty,
            initial_barrier_parameter=settings.initial_barrier_parameter,
            initial_barrier_tolerance=settings.initial_barrier_tolerance,
            index=jnp.asarray(index),
            sign=jnp.asarray(sign),
            bound=jnp.asarray(bound),
            lower=jnp.asarray(lower),
            upper=jnp.asarray(upper),
            rtol=rtol,
            atol=atol,
            max_iterations=settings.maxiter,
            norm=optx.max_norm,
        )
        # One step per SQP iteration, each ending in at least one of scipy's stopping tests.
        return SolverChoice(interior_point, max(settings.maxiter, 1))
    # Every bound infinite: scipy's SQP without constraints.
    solver = TrustConstr(
        gtol=settings.gtol,
        xtol=settings.xtol,
        initial_tr_radius=settings.initial_tr_radius,
        initial_constr_penalty=settings.initial_constr_penalty,
        rtol=rtol,
        atol=atol,
        max_iterations=settings.maxiter,
        norm=optx.max_norm,
    )
    # One step per iteration; scipy's first stopping test comes before any.
    return SolverChoice(solver, max(settings.maxiter, 1))


def _direct_search(
    solver_type: Callable[..., optx.AbstractMinimiser],
    per_variable: int,
    tolerances: Callable[[Any], dict[str, Any]],
) -> SolverBuilder:
    """A direct search (Nelder-Mead, Powell) on scipy's budgets and bounds; ``tolerances`` gives
    the solver's own tolerance fields from the method's settings."""

    def build(settings: Any, n: int, dtype: str) -> SolverChoice:
        maxiter, maxfev = direct_search_budgets(settings.maxiter, settings.maxfev, n, per_variable)
        lower, upper = settings.bounds
        solver = solver_type(
            **tolerances(settings),
            max_iterations=maxiter,
            max_evaluations=maxfev,
            lower=lower,
            upper=upper,
            norm=optx.max_norm,
        )
        # Each step is one iteration and spends at least one evaluation.
        return SolverChoice(solver, max(1, min(maxiter, maxfev)))

    return build


_nelder_mead = _direct_search(
    ScipyNelderMead,
    NELDER_MEAD_PER_VARIABLE,
    lambda settings: {
        "xatol": settings.xatol,
        "fatol": settings.fatol,
        "adaptive": settings.adaptive,
        "rtol": settings.xatol,
        "atol": settings.fatol,
    },
)
_powell = _direct_search(
    ScipyPowell,
    POWELL_PER_VARIABLE,
    lambda settings: {
        "xtol": settings.xtol,
        "ftol": settings.ftol,
        "rtol": settings.xtol,
        "atol": settings.ftol,
    },
)


def _cobyla(settings: s.COBYLASettings, n: int, dtype: str) -> SolverChoice:
    lower, upper = settings.bounds
    solver = ScipyCOBYLA(
        rhobeg=settings.rhobeg,
        tol=settings.tol,
        maxiter=settings.maxiter,
        catol=settings.catol,
        f_target=settings.f_target,
        lower=lower,
        upper=upper,
        rtol=settings.tol,
        atol=settings.tol,
        norm=optx.max_norm,
    )
    # One step per iteration; PRIMA stops after 10 * maxfun of them (maxfun >= n + 2).
    return SolverChoice(solver, 10 * max(settings.maxiter, n + 2))


def _cobyqa(settings: s.COBYQASettings, n: int, dtype: str) -> SolverChoice:
    solver = ScipyCOBYQA(
        settings=settings,
        rtol=settings.final_tr_radius,
        atol=settings.final_tr_radius,
        norm=optx.max_norm,
    )
    # One step per iteration; the last may end the solve for maxiter.
    return SolverChoice(solver, cobyqa_budgets(settings, n)[1] + 1)


def _hybr(settings: s.HybrSettings, n: int, dtype: str) -> SolverChoice:
    maxfev = minpack_maxfev(settings.maxfev, n)
    rtol, atol = _floored(dtype, settings.xtol, settings.xtol)
    hybrid = HybridPowell(xtol=rtol, factor=settings.factor, maxfev=maxfev, rtol=rtol, atol=atol)
    return SolverChoice(hybrid, maxfev)


def _lm(settings: s.LMSettings, n: int, dtype: str) -> SolverChoice:
    maxfev = minpack_maxfev(settings.maxiter, n)
    xtol, ftol = _floored(dtype, settings.xtol, settings.ftol)
    solver = MinpackLevenbergMarquardt(
        xtol=xtol,
        ftol=ftol,
        gtol=settings.gtol,
        factor=settings.factor,
        maxfev=maxfev,
        rtol=xtol,
        atol=ftol,
    )
    return SolverChoice(solver, maxfev)


def _nonlin_solve(
    jacobian: Callable[..., InverseJacobian | MatrixFreeInverseJacobian],
) -> SolverBuilder:
    """scipy's ``nonlin_solve`` with the Jacobian approximation ``jacobian(**jac_options)``."""

    def build(settings: s.NonlinSettings, n: int, dtype: str) -> SolverChoice:
        maxiter = nonlin_maxiter(settings.maxiter, settings.nit, n)
        rtol, atol = _floored(dtype, settings.xtol, settings.fatol)
        solver = NonlinSolve(
            jacobian=jacobian(**settings.jac_options._asdict()),
            maxiter=maxiter,
            nit=settings.nit,
            ftol=settings.ftol,
            fatol=settings.fatol,
            xtol=settings.xtol,
            xatol=settings.xatol,
            line_search=settings.line_search == "armijo",
            rtol=rtol,
            atol=atol,
        )
        # One step per scipy iteration; the solver's own verdict ends it at maxiter.
        return SolverChoice(solver, max(maxiter, 1))

    return build


def _df_sane(settings: s.DFSaneSettings, n: int, dtype: str) -> SolverChoice:
    if settings.M < 1:
        raise ValueError(f"root(method='df-sane') option 'M' must be at least 1, got {settings.M}")
    # scipy works in float64; in a coarser dtype, ask no finer a relative residual than it resolves.
    ftol = settings.ftol if np.dtype(dtype) == np.float64 else _floored(dtype, settings.ftol, 0)[0]
    solver = SpectralResidual(
        ftol=ftol,
        fatol=settings.fatol,
        sigma_eps=settings.sigma_eps,
        sigma_0=settings.sigma_0,
        maxfev=settings.maxfev,
        memory=settings.M,
        cheng=settings.line_search == "cheng",
        rtol=ftol,
        atol=settings.fatol,
    )
    # One step per iteration, each evaluating at least once; one more finds the budget spent.
    return SolverChoice(solver, settings.maxfev + 1)


def _bracketed(minimiser: type[ScipyBrent | ScipyGolden]) -> SolverBuilder:
    def build(settings: s.BracketMinimizeSettings, n: int, dtype: str) -> SolverChoice:
        # One step per scipy iteration; the minimiser ends the solve at maxiter with scipy's
        # verdict.
        solver = minimiser(
            xtol=settings.xtol, maxiter=settings.maxiter, rtol=0.0, atol=0.0, norm=optx.max_norm
        )
        return SolverChoice(solver, settings.maxiter)

    return build


def _bounded_minimize(settings: s.BoundedMinimizeSettings, n: int, dtype: str) -> SolverChoice:
    # One step per evaluation after the first; scipy takes one step even where maxiter is 1.
    solver = ScipyBounded(
        xatol=settings.xatol, maxiter=settings.maxiter, rtol=0.0, atol=0.0, norm=optx.max_norm
    )
    return SolverChoice(solver, max(settings.maxiter, 1))


def _bracketing(finder: Callable[[float, float], optx.AbstractRootFinder]) -> SolverBuilder:
    """The builder of a port of scipy's C bracketing methods, made by ``finder(rtol, atol)``: one
    optimistix step per scipy iteration, so the budget is ``maxiter``."""

    def build(settings: s.RootScalarSettings, n: int, dtype: str) -> SolverChoice:
        rtol, atol = _floored(dtype, settings.rtol, settings.xtol)
        return SolverChoice(finder(rtol, atol), settings.maxiter)

    return build


def _toms748(settings: s.RootScalarSettings, n: int, dtype: str) -> SolverChoice:
    # scipy counts its first (secant) step, taken in ``init``, as an iteration, and takes at least
    # one more whatever ``maxiter``.
    rtol, atol = _floored(dtype, settings.rtol, settings.xtol)
    return SolverChoice(Toms748(rtol=rtol, atol=atol), max(settings.maxiter - 1, 1))


def _newton(settings: s.RootScalarSettings | s.SecantSettings, n: int, dtype: str) -> SolverChoice:
    rtol, atol = _floored(dtype, settings.rtol, settings.xtol)
    return SolverChoice(optx.Newton(rtol=rtol, atol=atol), settings.maxiter)


JAX_SOLVERS: dict[tuple[type, str], SolverBuilder] = {
    (MinimizeOp, "bfgs"): _bfgs,
    (MinimizeOp, "cg"): _cg,
    (MinimizeOp, "l-bfgs-b"): _lbfgsb,
    (MinimizeOp, "newton-cg"): _newton_cg,
    (MinimizeOp, "trust-exact"): _trust_region(trust_subproblems.exact),
    (MinimizeOp, "trust-krylov"): _trust_region(trust_subproblems.exact),
    (MinimizeOp, "trust-ncg"): _trust_region(trust_subproblems.steihaug_cg),
    (MinimizeOp, "dogleg"): _trust_region(trust_subproblems.dogleg),
    (MinimizeOp, "slsqp"): _slsqp,
    (MinimizeOp, "trust-constr"): _trust_constr,
    (MinimizeOp, "tnc"): _tnc,
    (MinimizeOp, "nelder-mead"): _nelder_mead,
    (MinimizeOp, "powell"): _powell,
    (MinimizeOp, "cobyla"): _cobyla,
    (MinimizeOp, "cobyqa"): _cobyqa,
    (RootOp, "hybr"): _hybr,
    (RootOp, "lm"): _lm,
    (RootOp, "broyden1"): _nonlin_solve(BroydenFirst),
    (RootOp, "broyden2"): _nonlin_solve(BroydenSecond),
    (RootOp, "anderson"): _nonlin_solve(Anderson),
    (RootOp, "diagbroyden"): _nonlin_solve(DiagonalBroyden),
    (RootOp, "linearmixing"): _nonlin_solve(LinearMixing),
    (RootOp, "excitingmixing"): _nonlin_solve(ExcitingMixing),
    (RootOp, "krylov"): _nonlin_solve(krylov_jacobian),
    (RootOp, "df-sane"): _df_sane,
    (MinimizeScalarOp, "brent"): _bracketed(ScipyBrent),
    (MinimizeScalarOp, "golden"): _bracketed(ScipyGolden),
    (MinimizeScalarOp, "bounded"): _bounded_minimize,
    **{
        (RootScalarOp, key): _newton
        for key, method in OP_OPTIONS[RootScalarOp].methods.items()
        if method.jax is not None and method.needs_input != "bracket"
    },
    (RootScalarOp, "bisect"): _bracketing(Bisect),
    (RootScalarOp, "brentq"): _bracketing(
        partial(BrentRoot, extrapolated_step=inverse_quadratic_step)
    ),
    (RootScalarOp, "brenth"): _bracketing(partial(BrentRoot, extrapolated_step=hyperbolic_step)),
    (RootScalarOp, "ridder"): _bracketing(Ridder),
    (RootScalarOp, "toms748"): _toms748,
}
"""How each method that the table (`gpubackend.scipy_options.methods`) marks for JAX runs on
optimistix."""


def _jax_support(op: ScipyWrapperOp) -> tuple[JaxSupport, SolverBuilder]:
    refuse_before_scipy(op)
    options = op_options(op)
    method = options.method(op.method)
    if method is not None and method.jax is None:
        # What scipy refuses (crossed bounds, a missing derivative) is its ValueError first, as
        # under NUMBA, and only then a method JAX does not run.
        resolve(op)
    if method is None or method.jax is None:
        supported = sorted(m.name for m in options.methods.values() if m.jax is not None)
        raise UnsupportedMethod(
            f"{options.kind}: method {op.method!r} has no JAX (optimistix) equivalent; "
            f"supported methods are {', '.join(supported)}"
        )
    return method.jax, JAX_SOLVERS[(type(op), method.name.lower())]


def solver_for_size(op: ScipyWrapperOp, dtype: str) -> Callable[[int], SolverChoice]:
    """``op``'s options, resolved and checked once; the result gives the solver and budget for an
    ``x`` of a given size.

    scipy's budgets depend on the number of variables, known only when the
    lowering is traced. Raises `NotImplementedError` for a method or a set
    option that has no faithful optimistix counterpart, and `ValueError` for
    input scipy refuses.
    """
    support, build = _jax_support(op)
    resolved = resolve(op)
    resolved.refuse_unless_honoured(support.honours, _BACKEND)
    resolved.refuse_early_subproblem_stop(_BACKEND)
    return lambda n_variables: build(resolved.settings, max(n_variables, 1), dtype)


def solver_choice(op: ScipyWrapperOp, n_variables: int, dtype: str) -> SolverChoice:
    """The optimistix solver and budget for ``op``, whose ``x`` has ``n_variables`` elements of
    ``dtype``."""
    return solver_for_size(op, dtype)(n_variables)
