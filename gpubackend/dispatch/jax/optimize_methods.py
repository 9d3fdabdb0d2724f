"""Which optimistix solver stands in for a scipy method, with its tolerances and step budget.

The optimize ops of ``pytensor.tensor.optimize`` name scipy methods and carry
scipy keyword arguments. This module translates both, once, when a graph is
funcified; anything without a faithful JAX counterpart (constraints, bounds on a
gradient method, SLSQP, ...) is refused with a `NotImplementedError` that names
the method and the supported ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import optimistix as optx

# optimistix's NelderMead is left out on purpose: on a smooth 3-variable
# quadratic-plus-quartic it reports success at points that are not minima
# (its start simplex collapses), which would be a silently wrong answer.

# Keyword arguments that change nothing about the answer (printing, history).
_COSMETIC_OPTIONS = frozenset({"disp", "return_all", "iprint"})

_Factory = Callable[[float, float], Any]


@dataclass(frozen=True)
class SolverChoice:
    """An optimistix solver and the budget the scipy call asked for."""

    solver: Any
    max_steps: int


@dataclass(frozen=True)
class _Family:
    """The scipy methods one op kind accepts and how to read its keyword arguments."""

    kind: str
    solvers: Mapping[str, _Factory]
    top_level_keys: frozenset[str]

    def supported(self) -> str:
        return ", ".join(sorted(self.solvers))

    def solver_factory(self, method: str) -> _Factory:
        factory = self.solvers.get(method) or self.solvers.get(method.lower())
        if factory is None:
            raise NotImplementedError(
                f"{self.kind}: method {method!r} has no JAX (optimistix) equivalent; "
                f"supported methods are {self.supported()}"
            )
        return factory


class ScipyIterations(optx.AbstractMinimiser):
    """A minimiser whose budget counts scipy's iterations, not optimistix's steps.

    Every optimistix step evaluates one trial point, and a line search may
    reject several before one is accepted; scipy's ``maxiter`` counts
    iterations, each ending in an accepted move of the iterate. This wrapper
    counts the steps that move the iterate and stops, with optimistix's
    "max steps reached" result, once ``max_iterations`` of them are done
    without convergence. optimistix's own ``max_steps`` then only bounds the
    evaluations (see `EVALUATIONS_PER_ITERATION`).
    """

    solver: optx.AbstractMinimiser
    max_iterations: int = eqx.field(static=True)

    @property
    def rtol(self):
        return self.solver.rtol

    @property
    def atol(self):
        return self.solver.atol

    @property
    def norm(self):
        return self.solver.norm

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        return self.solver.init(fn, y, args, options, f_struct, aux_struct, tags), jnp.array(0)

    def step(self, fn, y, args, options, state, tags):
        inner, iterations = state
        new_y, inner, aux = self.solver.step(fn, y, args, options, inner, tags)
        moved = jnp.any(new_y != y)
        return new_y, (inner, iterations + moved.astype(iterations.dtype)), aux

    def terminate(self, fn, y, args, options, state, tags):
        inner, iterations = state
        done, result = self.solver.terminate(fn, y, args, options, inner, tags)
        out_of_iterations = (iterations >= self.max_iterations) & ~done
        result = optx.RESULTS.where(out_of_iterations, optx.RESULTS.nonlinear_max_steps_reached, result)
        return done | out_of_iterations, result

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return self.solver.postprocess(fn, y, aux, args, options, state[0], tags, result)


EVALUATIONS_PER_ITERATION = 64
"""optimistix steps allowed per scipy iteration: a backtracking search halving its
step 64 times has stalled (2**-64), so the iteration count is what stops a solve."""


def _minimiser(cls) -> _Factory:
    return lambda rtol, atol: cls(rtol=rtol, atol=atol)


MINIMIZE = _Family(
    kind="minimize",
    solvers={
        "BFGS": _minimiser(optx.BFGS),
        "L-BFGS-B": _minimiser(optx.LBFGS),
        "CG": _minimiser(optx.NonlinearCG),
    },
    top_level_keys=frozenset({"tol", "options"}),
)
ROOT = _Family(
    kind="root",
    solvers={
        "hybr": _minimiser(optx.Dogleg),
        "lm": _minimiser(optx.LevenbergMarquardt),
    },
    top_level_keys=frozenset({"tol", "options"}),
)
MINIMIZE_SCALAR = _Family(
    kind="minimize_scalar",
    solvers={name: _minimiser(optx.GoldenSearch) for name in ("brent", "golden", "bounded")},
    top_level_keys=frozenset({"tol", "options"}),
)
ROOT_SCALAR = _Family(
    kind="root_scalar",
    solvers={
        # The lowering orients the equation so that it rises across the bracket:
        # optimistix's own sign detection raises inside the compiled function.
        **{
            name: lambda rtol, atol: optx.Bisection(rtol=rtol, atol=atol, flip=False)
            for name in ("bisect", "brentq", "brenth", "ridder", "toms748")
        },
        **{name: _minimiser(optx.Newton) for name in ("newton", "secant", "halley")},
    },
    top_level_keys=frozenset({"xtol", "rtol", "maxiter"}),
)

BRACKETING_ROOT_METHODS = frozenset({"bisect", "brentq", "brenth", "ridder", "toms748"})

_EPS = float(np.finfo(np.float64).eps)


def _choice(factory: _Factory, rtol: float, atol: float, max_steps: int, dtype: str) -> SolverChoice:
    """Tolerances no finer than ``dtype`` can resolve, so float32 solves can still terminate."""
    eps = float(np.finfo(dtype).eps)
    return SolverChoice(factory(max(float(rtol), 4 * eps), max(float(atol), 16 * eps)), int(max_steps))


def _check_keys(family: _Family, method: str, given: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(given) - allowed - _COSMETIC_OPTIONS)
    if unknown:
        raise NotImplementedError(
            f"{family.kind}(method={method!r}): {where} {unknown} are not supported by the JAX "
            f"(optimistix) lowering; supported are {sorted(allowed)}"
        )


def _options(family: _Family, method: str, kwargs: Mapping[str, Any], allowed: frozenset[str]) -> dict[str, Any]:
    _check_keys(family, method, kwargs, family.top_level_keys, "keyword arguments")
    options = dict(kwargs.get("options") or {})
    _check_keys(family, method, options, allowed, "options")
    return options


def minimize_solver(method: str, kwargs: Mapping[str, Any], n_variables: int, dtype: str) -> SolverChoice:
    """The solver for ``scipy.optimize.minimize(method=method, **kwargs)``."""
    factory = MINIMIZE.solver_factory(method)
    options = _options(MINIMIZE, method, kwargs, frozenset({"maxiter", "gtol", "xtol", "ftol"}))
    tol = kwargs.get("tol")
    rtol = tol if tol is not None else options.get("xtol", 1e-8)
    atol = tol if tol is not None else options.get("gtol", options.get("ftol", 1e-8))
    default_iterations = 15000 if method == "L-BFGS-B" else 200 * max(n_variables, 1)
    iterations = int(options.get("maxiter", default_iterations))
    choice = _choice(factory, rtol, atol, iterations, dtype)
    return SolverChoice(ScipyIterations(choice.solver, iterations), EVALUATIONS_PER_ITERATION * (iterations + 1))


def root_solver(method: str, kwargs: Mapping[str, Any], n_variables: int, dtype: str) -> SolverChoice:
    """The solver for ``scipy.optimize.root(method=method, **kwargs)``."""
    factory = ROOT.solver_factory(method)
    options = _options(ROOT, method, kwargs, frozenset({"xtol", "ftol", "maxiter", "maxfev"}))
    tol = kwargs.get("tol")
    rtol = tol if tol is not None else options.get("xtol", 1.49012e-08)
    atol = tol if tol is not None else options.get("ftol", 1.49012e-08)
    max_steps = options.get("maxiter", options.get("maxfev", 200 * (max(n_variables, 1) + 1)))
    return _choice(factory, rtol, atol, max_steps, dtype)


def minimize_scalar_solver(method: str, kwargs: Mapping[str, Any], dtype: str) -> SolverChoice:
    """The solver for ``scipy.optimize.minimize_scalar(method=method, **kwargs)``."""
    factory = MINIMIZE_SCALAR.solver_factory(method)
    options = _options(MINIMIZE_SCALAR, method, kwargs, frozenset({"maxiter", "xtol", "xatol"}))
    tol = kwargs.get("tol")
    rtol = tol if tol is not None else options.get("xtol", options.get("xatol", np.sqrt(_EPS)))
    return _choice(factory, rtol, float(rtol) * 1e-3, options.get("maxiter", 500), dtype)


def root_scalar_solver(method: str, kwargs: Mapping[str, Any], dtype: str) -> SolverChoice:
    """The solver for ``scipy.optimize.root_scalar(method=method, **kwargs)``."""
    factory = ROOT_SCALAR.solver_factory(method)
    _check_keys(ROOT_SCALAR, method, kwargs, ROOT_SCALAR.top_level_keys, "keyword arguments")
    atol = kwargs.get("xtol", 2e-12)
    rtol = kwargs.get("rtol", 4 * _EPS)
    return _choice(factory, rtol, atol, kwargs.get("maxiter", 256), dtype)
