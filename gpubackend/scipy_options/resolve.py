"""Read an optimize op's ``method`` and ``optimizer_kwargs`` into typed settings, as scipy would.

`resolve` merges the top-level keyword arguments and the ``options`` dict,
applies ``tol`` where scipy applies it (explicit options win), drops display
flags, checks every name against the method's options and every value's type,
and fills the rest with scipy's defaults. It refuses what it cannot read
faithfully with `UnsupportedMethod` or `UnsupportedOption` (both
`NotImplementedError`), naming the offender and what was expected; a value of
the wrong kind, or an input scipy would refuse, is a `ValueError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from pytensor.tensor.optimize import ScipyWrapperOp

from gpubackend.errors import UnsupportedMethod, UnsupportedOption
from gpubackend.scipy_options.methods import OP_OPTIONS, OpOptions, ScipyMethod
from gpubackend.scipy_options.settings import UNHONOURED_CHOICES

# Keyword arguments that change nothing about the answer (printing, history).
_COSMETIC = frozenset({"disp", "return_all", "iprint"})


@dataclass(frozen=True)
class ResolvedOptions:
    """An op's scipy method, its settings, and which options the caller set (after ``tol``)."""

    kind: str
    method: ScipyMethod
    settings: NamedTuple
    given: frozenset[str]

    def refuse_unless_honoured(self, honoured: frozenset[str], backend: str) -> None:
        """Raise `UnsupportedOption` if the caller set an option ``backend`` does not honour."""
        if ignored := sorted(self.given - honoured):
            raise UnsupportedOption(
                f"{self.kind}(method={self.method.name!r}): options {ignored} are not supported by "
                f"the "
                f"{backend}; supported are {sorted(honoured)}"
            )

    def refuse_early_subproblem_stop(self, backend: str) -> None:
        """Raise `UnsupportedOption` for trust-krylov's ``inexact=True`` given by name.

        Both backends solve each trust-krylov subproblem exactly, as trlib does with
        ``inexact=False``; that stands in for scipy's default, but trlib's early stop asked for
        by name is scipy's alone.
        """
        if "inexact" in self.given and getattr(self.settings, "inexact", False):
            raise UnsupportedOption(
                f"{self.kind}(method={self.method.name!r}): inexact=True is not supported by the "
                f"{backend}, which solves each subproblem exactly; pass inexact=False (trlib's "
                f"exact solve) or leave inexact at its default"
            )


def op_options(op: ScipyWrapperOp) -> OpOptions:
    """How ``op``'s kind takes scipy's options."""
    try:
        return OP_OPTIONS[type(op)]
    except KeyError:
        raise TypeError(
            f"expected one of PyTensor's optimize ops {sorted(t.__name__ for t in OP_OPTIONS)}, "
            f"got {op}"
        ) from None


def refuse_before_scipy(op: ScipyWrapperOp) -> None:
    """Raise scipy's own ``ValueError("Unknown solver ...")`` for a method scipy does not know,
    and a ``ValueError`` for a call that crashes scipy itself.

    FAST_COMPILE (scipy itself) raises the first on the first call; a lowering
    raises it when it compiles, before any solver is chosen. scipy's df-sane
    (``root``) on a 0-d ``x`` ends the process with a segmentation fault
    (FAST_COMPILE and Numba's object mode alike), so it is refused before scipy
    is called.
    """
    options = op_options(op)
    if isinstance(op.method, str) and op.method.lower() not in options.scipy_names:
        raise ValueError(f"Unknown solver {op.method}")
    if options.kind == "root" and op.method.lower() == "df-sane" and op.fgraph.inputs[0].ndim == 0:
        raise ValueError(
            "root(method='df-sane') with a 0-d x: scipy's df-sane crashes the process "
            "(segmentation fault) on 0-d input; give x as a vector of one element"
        )


def scipy_method(op: ScipyWrapperOp) -> ScipyMethod:
    """The scipy method ``op`` names; ``ValueError`` (scipy's) for a name scipy does not know,
    `UnsupportedMethod` if gpubackend lowers it on no backend."""
    refuse_before_scipy(op)
    options = op_options(op)
    method = options.method(op.method)
    if method is None:
        known = ", ".join(m.name for m in options.methods.values())
        raise UnsupportedMethod(f"{options.kind}: method {op.method!r} is not one of {known}")
    return method


def resolve(op: ScipyWrapperOp) -> ResolvedOptions:
    """``op``'s settings with scipy's names and defaults (see the module docstring)."""
    options = op_options(op)
    method = scipy_method(op)
    _check_inputs(options.kind, method, op.bound_kwargs)
    _check_derivatives(options.kind, method, op)
    given = _given_options(options, method, dict(op.optimizer_kwargs))
    fields = method.options()
    if unknown := sorted(set(given) - set(fields)):
        raise UnsupportedOption(
            f"{options.kind}(method={method.name!r}): {unknown} are not options of this method; "
            f"its options are {list(fields)}"
        )
    values = {
        name: _coerce(options.kind, method, name, value, getattr(method.defaults, name))
        for name, value in given.items()
    }
    settings = method.defaults._replace(**values)
    if method.refusal is not None and (reason := method.refusal(settings)):
        raise ValueError(f"{options.kind}(method={method.name!r}): {reason}")
    return ResolvedOptions(options.kind, method, settings, frozenset(values))


def _check_inputs(kind: str, method: ScipyMethod, bound_inputs: tuple[str, ...]) -> None:
    if method.needs_input and method.needs_input not in bound_inputs:
        raise ValueError(
            f"{kind}(method={method.name!r}) needs `{method.needs_input}`, but none was given"
        )
    if method.refuses_input and method.refuses_input in bound_inputs:
        raise ValueError(
            f"{kind}(method={method.name!r}) does not take `{method.refuses_input}`"
            + ("; use method='bounded'" if method.refuses_input == "bounds" else "")
        )


def _check_derivatives(kind: str, method: ScipyMethod, op: ScipyWrapperOp) -> None:
    """scipy's refusal of a method without the derivatives it needs (raised on the first call
    under FAST_COMPILE), raised by both lowerings when they compile, so NUMBA does not hand the
    op to scipy in object mode only to raise there."""
    if method.needs_hessian and not (op.jac and op.hess):
        raise ValueError(
            f"{kind}(method={method.name!r}) needs the gradient and the Hessian, as scipy does: "
            "pass jac=True, hess=True"
        )
    if method.needs_gradient and not op.jac:
        raise ValueError(f"Jacobian is required for {method.name} method")


def _given_options(
    options: OpOptions, method: ScipyMethod, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The options the caller set: the ``options`` dict, then top-level keys, then ``tol``."""
    given = dict(kwargs.pop("options", None) or {})
    tol = kwargs.pop("tol", None) if options.takes_tol else None
    if unknown := sorted(set(kwargs) - options.top_level - _COSMETIC):
        expected = sorted(
            options.top_level | {"options"} | ({"tol"} if options.takes_tol else set())
        )
        raise UnsupportedOption(
            f"{options.kind}(method={method.name!r}): keyword arguments {unknown} are not "
            f"supported; "
            f"expected some of {expected}"
        )
    for key in options.top_level & set(kwargs):
        given.setdefault(key, kwargs[key])
    if tol is not None:
        for target in method.tol_sets:
            given.setdefault(target, tol)
        for target in method.tol_clears:
            given.setdefault(target, np.inf)
    return {name: value for name, value in given.items() if _is_given(method, name, value)}


def _is_given(method: ScipyMethod, name: str, value: Any) -> bool:
    """scipy reads an option's ``None`` as its default, except where ``None`` is one of the
    option's choices (``line_search=None``: no line search)."""
    if name in _COSMETIC:
        return False
    return value is not None or None in method.choices.get(name, {})


def _coerce(kind: str, method: ScipyMethod, name: str, value: Any, default: Any) -> Any:
    where = f"{kind}(method={method.name!r}) option {name!r}"
    if name == "bounds":
        _refuse_kept_feasible(where, method, value)
        return _ordered_bounds(_box_bounds(where, value))
    if default == ():
        return _float_vector(where, value)
    if default is None:
        # A callable option (df-sane's ``fnorm``) or one no backend reads (Nelder-Mead's
        # ``initial_simplex``): taken as given, the lowerings refuse it by name.
        return value
    if name in method.choices:
        return _choice(where, method.choices[name], value)
    if hasattr(default, "_fields"):  # a nested family of options, given as a dict (jac_options)
        return _nested(kind, method, name, value, default)
    if isinstance(default, bool):
        if not isinstance(value, bool | np.bool_):
            raise ValueError(f"{where} must be True or False, got {value!r}")
        return bool(value)
    if isinstance(default, int):
        # Negative budgets are the settings' own "scipy's default" sentinels, never a caller's.
        least = -np.inf if name in method.signed else 0
        if isinstance(value, bool) or not float(value).is_integer() or int(value) < least:
            raise ValueError(
                f"{where} must be a whole number{'' if name in method.signed else ' >= 0'}, "
                f"got {value!r}"
            )
        return int(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be a number, got {value!r}") from None


def _choice(where: str, choices: Mapping[object, str], value: Any) -> str:
    try:
        choice = choices[value]
    except (KeyError, TypeError):
        raise ValueError(
            f"{where} must be one of {sorted(choices, key=repr)}, got {value!r}"
        ) from None
    if choice in UNHONOURED_CHOICES:
        raise UnsupportedOption(f"{where}: {value!r} is not supported by gpubackend")
    return choice


def _nested(kind: str, method: ScipyMethod, name: str, value: Any, default: NamedTuple) -> Any:
    """A dict of options into ``default``'s family; an unknown key is scipy's ``TypeError``."""
    if not isinstance(value, dict):
        raise ValueError(
            f"{kind}(method={method.name!r}) option {name!r} must be a dict, got {value!r}"
        )
    if unknown := sorted(set(value) - set(default._fields)):
        raise TypeError(
            f"{kind}(method={method.name!r}) {name} {unknown} are not options of this method; "
            f"its {name} are {list(default._fields)}"
        )
    return default._replace(
        **{
            key: _coerce(kind, method, key, entry, getattr(default, key))
            for key, entry in value.items()
            if _is_given(method, key, entry)
        }
    )


def _refuse_kept_feasible(where: str, method: ScipyMethod, bounds: Any) -> None:
    """trust-constr keeps the iterates strictly inside bounds with ``keep_feasible`` (the other
    bounded methods ignore it); no backend does."""
    if method.name == "trust-constr" and np.any(getattr(bounds, "keep_feasible", False)):
        raise UnsupportedOption(
            f"{where}: keep_feasible=True is not supported by gpubackend; pass Bounds with "
            "keep_feasible=False (scipy's default)"
        )


def _ordered_bounds(
    bounds: tuple[tuple[float, ...], tuple[float, ...]],
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``bounds`` unchanged, or scipy's ``ValueError`` (raised by every bounded method of
    ``minimize``) where a lower bound is above its upper one."""
    lowers, uppers = bounds
    if any(lower > upper for lower, upper in zip(lowers, uppers, strict=True)):
        raise ValueError("An upper bound is less than the corresponding lower bound.")
    return bounds


def _float_vector(where: str, value: Any) -> tuple[float, ...]:
    """A per-variable option (TNC's ``scale``, ``offset``): scipy takes a float64 array only."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{where} must be a numpy.ndarray of float64, got {type(value).__name__}")
    if value.dtype != np.float64:
        raise ValueError(f"{where} must be a numpy.ndarray of float64, got dtype {value.dtype}")
    return tuple(map(float, value.ravel()))


def _box_bounds(where: str, bounds: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """scipy ``bounds`` (``Bounds`` or ``(lower, upper)`` pairs, ``None`` = open) as two tuples."""
    if hasattr(bounds, "lb") and hasattr(bounds, "ub"):
        lower, upper = np.broadcast_arrays(
            np.asarray(bounds.lb, float), np.asarray(bounds.ub, float)
        )
        return tuple(map(float, np.atleast_1d(lower))), tuple(map(float, np.atleast_1d(upper)))
    try:
        pairs = [
            (-np.inf if lo is None else float(lo), np.inf if hi is None else float(hi))
            for lo, hi in bounds
        ]
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"{where} must be a scipy Bounds or a sequence of (lower, upper) pairs, got {bounds!r}"
        ) from error
    if not pairs:
        raise ValueError(f"{where} is empty; give one (lower, upper) pair per element of x")
    lowers, uppers = zip(*pairs, strict=True)
    return tuple(lowers), tuple(uppers)
