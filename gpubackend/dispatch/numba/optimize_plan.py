"""Which optimize-op configurations gpubackend lowers natively under Numba.

``solver_plan(op)`` reads the op's settings and its method's `NumbaSupport` from
`gpubackend.scipy_options` (one table with the JAX lowering), then checks
what only the native solvers need: the derivative outputs they use instead of
finite differences, and the options they honour. A configuration with no
native version raises `NoNativeSolver`, naming what is missing; the op then
keeps PyTensor's object-mode path. The plan is pure data, so it also keys the
on-disk cache.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from pytensor.tensor.optimize import (
    RootScalarOp,
    ScipyWrapperOp,
)

from gpubackend.errors import UnsupportedMethod, UnsupportedOption
from gpubackend.scipy_options import OP_OPTIONS, resolve
from gpubackend.scipy_options.settings import LineSearchSettings, TrustConstrSettings


class NoNativeSolver(Exception):
    """The op's configuration has no native Numba solver."""


@dataclass(frozen=True)
class SolverPlan:
    """The native solver (a key of the lowering's solver table) and its scipy settings."""

    solver: str
    settings: NamedTuple


_NATIVE_OP_TYPES = frozenset(
    op_type
    for op_type, options in OP_OPTIONS.items()
    if any(method.numba is not None for method in options.methods.values())
)


def solver_plan(op: ScipyWrapperOp) -> SolverPlan:
    """The native solver for ``op``; raises `NoNativeSolver` when there is none."""
    try:
        resolved = resolve(op)
    except (UnsupportedMethod, UnsupportedOption) as reason:
        raise NoNativeSolver(str(reason)) from None
    key = resolved.method.name.lower()
    native = resolved.method.numba
    if native is None:
        raise NoNativeSolver(f"{resolved.kind} method {op.method!r} has no native Numba solver")
    if missing := [flag for flag in native.derivatives if not getattr(op, flag)]:
        wanted = " and ".join(f"{flag}=True" for flag in native.derivatives)
        raise NoNativeSolver(
            f"{resolved.kind} method {op.method!r} is native only with {wanted} (missing {missing})"
        )
    try:
        resolved.refuse_unless_honoured(
            frozenset(resolved.settings._fields) - native.ignores, "native Numba lowering"
        )
        resolved.refuse_early_subproblem_stop("native Numba lowering")
    except UnsupportedOption as reason:
        raise NoNativeSolver(str(reason)) from None
    settings = resolved.settings
    if isinstance(settings, LineSearchSettings) and settings.norm != np.inf:
        raise NoNativeSolver(f"{resolved.method.name} is native only with norm=inf")
    if isinstance(op, RootScalarOp) and key == "newton" and not op.jac:
        # Without a derivative output scipy runs Newton on a forward difference; so do we.
        key = "newton-forward-difference"
    if key == "trust-constr":
        if isinstance(settings, TrustConstrSettings) and _has_finite_bound(settings.bounds):
            # scipy runs its interior-point method where a bound is finite, its plain SQP
            # otherwise.
            key = "trust-constr-interior-point"
        if op.hess:
            # scipy uses the Hessian it is given, and a BFGS approximation without one; so do we.
            key += "-hessian"
    return SolverPlan(key, resolved.settings)


def _has_finite_bound(bounds: tuple[tuple[float, ...], tuple[float, ...]]) -> bool:
    return bool(np.isfinite(bounds[0]).any() or np.isfinite(bounds[1]).any())


def has_native_solver(op: ScipyWrapperOp) -> bool:
    """Whether ``op`` is lowered natively (otherwise it runs in object mode)."""
    if type(op) not in _NATIVE_OP_TYPES:
        return False
    try:
        solver_plan(op)
    except (NoNativeSolver, ValueError):
        return False
    return True
