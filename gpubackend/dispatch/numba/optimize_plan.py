"""Which optimize-op configurations gpubackend lowers natively under Numba.

``solver_plan(op)`` reads an op's method, its derivative outputs and its
scipy-style ``optimizer_kwargs``, and returns the native solver to run with
every setting resolved to a number (scipy's defaults where the user gave
none). A configuration with no native version raises
`NoNativeSolver`, naming what is missing; the op then keeps PyTensor's
object-mode path. The plan is pure data, so it also keys the on-disk cache.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytensor.tensor.optimize import (
    MinimizeOp,
    MinimizeScalarOp,
    RootOp,
    RootScalarOp,
    ScipyWrapperOp,
)


class NoNativeSolver(Exception):
    """The op's configuration has no native Numba solver."""


@dataclass(frozen=True)
class SolverPlan:
    """A native solver and its resolved numeric settings, in solver order."""

    method: str
    settings: tuple[float | int, ...]


_EPS = float(np.finfo(np.float64).eps)
# scipy's own defaults, so an op without options behaves as it does under scipy.
_SQRT_EPS = 1.49012e-08


def _options(op: ScipyWrapperOp, top_level: frozenset[str]) -> dict[str, Any]:
    """Merge ``optimizer_kwargs`` (top-level keys plus an ``options`` dict)."""
    kwargs = dict(op.optimizer_kwargs)
    options = dict(kwargs.pop("options", None) or {})
    if unknown := sorted(set(kwargs) - top_level):
        raise NoNativeSolver(f"optimizer_kwargs {unknown} are not supported natively")
    for key in top_level:
        if key in kwargs:
            options.setdefault(key, kwargs[key])
    # Display flags change no result.
    options.pop("disp", None)
    options.pop("return_all", None)
    return options


def _resolve(
    method: str,
    options: Mapping[str, Any],
    defaults: Mapping[str, float | int],
    aliases: Mapping[str, tuple[str, ...]],
) -> SolverPlan:
    """Fill ``defaults`` from ``options`` (``aliases`` map e.g. ``tol`` onto ``gtol``)."""
    options = dict(options)
    for alias, targets in aliases.items():
        if alias in options:
            value = options.pop(alias)
            for target in targets:
                options.setdefault(target, value)
    if unknown := sorted(set(options) - set(defaults)):
        raise NoNativeSolver(f"options {unknown} of method {method!r} are not supported natively")
    settings = []
    for name, default in defaults.items():
        value = options.get(name, default)
        if value is None:
            value = default
        settings.append(type(default)(value))
    return SolverPlan(method, tuple(settings))


def _box_bounds(bounds: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """scipy ``bounds`` (``Bounds`` or ``(lower, upper)`` pairs, ``None`` = open) as two tuples."""
    if bounds is None:
        return (-np.inf,), (np.inf,)
    if hasattr(bounds, "lb") and hasattr(bounds, "ub"):
        lower, upper = np.broadcast_arrays(np.asarray(bounds.lb, float), np.asarray(bounds.ub, float))
        return tuple(map(float, np.atleast_1d(lower))), tuple(map(float, np.atleast_1d(upper)))
    try:
        pairs = [(-np.inf if lo is None else float(lo), np.inf if hi is None else float(hi)) for lo, hi in bounds]
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"minimize `bounds` must be a scipy Bounds or a sequence of (lower, upper) pairs, got {bounds!r}"
        ) from error
    if not pairs:
        raise ValueError("minimize `bounds` is empty; give one (lower, upper) pair per element of x")
    lower, upper = zip(*pairs, strict=True)
    return tuple(lower), tuple(upper)


def _minimize_plan(op: MinimizeOp) -> SolverPlan:
    method = op.method.lower()
    bounds = op.optimizer_kwargs.get("bounds")
    if bounds is not None and method != "l-bfgs-b":
        raise NoNativeSolver(f"minimize method {op.method!r} with bounds is not supported natively")
    options = _options(op, frozenset({"tol", "bounds"}))
    options.pop("bounds", None)
    if method == "l-bfgs-b":
        if not op.jac:
            raise NoNativeSolver("L-BFGS-B without jac=True needs finite differences")
        plan = _resolve(
            method,
            options,
            {"maxcor": 10, "ftol": 2.2204460492503131e-09, "gtol": 1e-5, "maxiter": 15000, "maxfun": 15000, "maxls": 20},
            {"tol": ("ftol", "gtol")},
        )
        return SolverPlan(method, (*plan.settings, *_box_bounds(bounds)))
    if method == "bfgs":
        if not op.jac:
            raise NoNativeSolver("BFGS without jac=True needs finite differences")
        if options.pop("norm", np.inf) != np.inf:
            raise NoNativeSolver("BFGS is native only with norm=inf")
        return _resolve(
            method,
            options,
            {"gtol": 1e-5, "maxiter": -1, "c1": 1e-4, "c2": 0.9, "xrtol": 0.0},
            {"tol": ("gtol",)},
        )
    if method in ("newton-cg", "trust-exact"):
        if not (op.jac and op.hess):
            raise NoNativeSolver(f"minimize method {op.method!r} is native only with jac=True and hess=True")
        if method == "newton-cg":
            return _resolve(
                method, options, {"xtol": 1e-5, "maxiter": -1, "c1": 1e-4, "c2": 0.9}, {"tol": ("xtol",)}
            )
        return _resolve(
            method, options, {"gtol": 1e-4, "maxiter": -1, "initial_trust_radius": 1.0}, {"tol": ("gtol",)}
        )
    raise NoNativeSolver(f"minimize method {op.method!r} has no native Numba solver")


def _root_plan(op: RootOp) -> SolverPlan:
    method = op.method.lower()
    options = _options(op, frozenset({"tol"}))
    if method in ("hybr", "lm", "newton") and not op.jac:
        raise NoNativeSolver(f"root method {op.method!r} is native only with jac=True")
    if method == "hybr":
        return _resolve(method, options, {"xtol": _SQRT_EPS, "maxfev": 0, "factor": 100.0}, {"tol": ("xtol",)})
    if method == "lm":
        return _resolve(
            method,
            options,
            {"xtol": _SQRT_EPS, "ftol": _SQRT_EPS, "gtol": 0.0, "maxiter": 0},
            {"tol": ("xtol",)},
        )
    if method == "newton":
        return _resolve(method, options, {"xtol": _SQRT_EPS, "maxiter": 50}, {"tol": ("xtol",)})
    raise NoNativeSolver(f"root method {op.method!r} has no native Numba solver")


def _require_bound(op: ScipyWrapperOp, name: str) -> None:
    if name not in op.bound_kwargs:
        raise ValueError(f"{type(op).__name__} method {op.method!r} needs `{name}`, but none was given")


def _minimize_scalar_plan(op: MinimizeScalarOp) -> SolverPlan:
    method = op.method.lower()
    options = _options(op, frozenset({"tol"}))
    if method in ("brent", "golden"):
        if "bounds" in op.bound_kwargs:
            raise ValueError(f"minimize_scalar method {op.method!r} does not take `bounds`; use method='bounded'")
        xtol = _SQRT_EPS if method == "golden" else 1.48e-8
        maxiter = 5000 if method == "golden" else 500
        return _resolve(method, options, {"xtol": xtol, "maxiter": maxiter}, {"tol": ("xtol",)})
    if method == "bounded":
        _require_bound(op, "bounds")
        return _resolve(method, options, {"xatol": 1e-5, "maxiter": 500}, {"tol": ("xatol",)})
    raise NoNativeSolver(f"minimize_scalar method {op.method!r} has no native Numba solver")


def _root_scalar_plan(op: RootScalarOp) -> SolverPlan:
    method = op.method.lower()
    options = _options(op, frozenset({"xtol", "rtol", "maxiter", "x1"}))
    if method in ("brentq", "bisect"):
        _require_bound(op, "bracket")
        return _resolve(method, options, {"xtol": 2e-12, "rtol": 4 * _EPS, "maxiter": 100}, {})
    if method == "newton":
        # Without a derivative output scipy runs Newton on a forward difference; so do we.
        solver = "newton" if op.jac else "newton-forward-difference"
        return _resolve(solver, options, {"xtol": 1.48e-8, "rtol": 0.0, "maxiter": 50}, {})
    if method == "secant":
        # NaN stands for scipy's default second point, derived from x0 at run time.
        return _resolve(method, options, {"xtol": 1.48e-8, "rtol": 0.0, "maxiter": 50, "x1": np.nan}, {})
    raise NoNativeSolver(f"root_scalar method {op.method!r} has no native Numba solver")


_PLANNERS: dict[type, Callable[[Any], SolverPlan]] = {
    MinimizeOp: _minimize_plan,
    RootOp: _root_plan,
    MinimizeScalarOp: _minimize_scalar_plan,
    RootScalarOp: _root_scalar_plan,
}


def solver_plan(op: ScipyWrapperOp) -> SolverPlan:
    """The native solver for ``op``; raises `NoNativeSolver` when there is none."""
    return _PLANNERS[type(op)](op)


def has_native_solver(op: ScipyWrapperOp) -> bool:
    """Whether ``op`` is lowered natively (otherwise it runs in object mode)."""
    if type(op) not in _PLANNERS:
        return False
    try:
        solver_plan(op)
    except (NoNativeSolver, ValueError):
        return False
    return True
