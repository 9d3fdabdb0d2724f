"""The scipy methods gpubackend knows, per optimize op, and which backend runs each: one table.

Each entry gives scipy's spelling, default settings and what ``tol`` sets, and
what each backend supports: `JaxSupport` (optimistix, the options it honours)
and `NumbaSupport` (a native solver, the derivative outputs it needs). Both
lowerings read their support from here; each backend keeps only the code that
runs a method, keyed by the same (op type, method) pairs (tests/test_scipy_options.py
checks that the keys match this table). A method outside the table has no
lowering on either backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pytensor.tensor.optimize import MinimizeOp, MinimizeScalarOp, RootOp, RootScalarOp

from gpubackend.scipy_options import settings as s


@dataclass(frozen=True)
class JaxSupport:
    """The method runs on optimistix under JAX; setting any other option is refused."""

    honours: frozenset[str]


@dataclass(frozen=True)
class NumbaSupport:
    """The method has a native Numba solver.

    It needs the op's derivative outputs named in ``derivatives`` (without
    them the op runs scipy in object mode), and cannot honour ``ignores``.
    """

    derivatives: tuple[str, ...] = ()
    ignores: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ScipyMethod:
    """One scipy method: its documented spelling, scipy's defaults, and the options scipy's ``tol``
    sets."""

    name: str
    defaults: NamedTuple
    tol_sets: tuple[str, ...] = ()
    tol_clears: tuple[str, ...] = ()
    """Options scipy's ``tol`` switches off (sets to infinity) unless given."""
    needs_input: str | None = None
    """The op input (``bounds``, ``bracket``) without which scipy refuses the method."""
    refuses_input: str | None = None
    """The op input scipy refuses for this method."""
    needs_hessian: bool = False
    """scipy refuses the method without ``hess`` (PyTensor's ``minimize(..., hess=True)``)."""
    needs_gradient: bool = False
    """scipy refuses the method without ``jac`` (PyTensor's ``minimize(..., jac=True)``)."""
    lacks: frozenset[str] = frozenset()
    """Fields of the settings family that this method does not take (they keep their default)."""
    signed: frozenset[str] = frozenset()
    """Integer options scipy also takes negative (as its default, TNC's ``maxCGit``)."""
    refusal: Callable[[Any], str | None] | None = None
    """What scipy refuses in the resolved settings (a reason, or None), checked when an op is
    lowered on either backend."""
    choices: Mapping[str, Mapping[object, str]] = field(default_factory=dict)
    """The values scipy accepts for an option that takes one of a few (``None`` among them, for
    some), and how the settings spell each; any other is scipy's ``ValueError``."""
    jax: JaxSupport | None = None
    """How the JAX lowering runs it; None: it refuses the method."""
    numba: NumbaSupport | None = None
    """Its native Numba solver; None: the op runs scipy in object mode."""

    def options(self) -> tuple[str, ...]:
        """The scipy option names this method takes."""
        return tuple(name for name in self.defaults._fields if name not in self.lacks)


@dataclass(frozen=True)
class OpOptions:
    """How one op kind takes scipy's options: its methods and the top-level keyword arguments."""

    kind: str
    methods: Mapping[str, ScipyMethod]
    top_level: frozenset[str]
    """Keyword arguments read like options (``tol`` and ``options`` are handled apart)."""
    takes_tol: bool = True
    """Whether scipy's function has a ``tol`` argument (``root_scalar`` has none)."""
    scipy_names: frozenset[str] = frozenset()
    """Every method name (lower case) scipy's function knows, lowered by gpubackend or not."""

    def method(self, name: str) -> ScipyMethod | None:
        """scipy matches method names case-insensitively."""
        return self.methods.get(name.lower())


def _by_key(*methods: ScipyMethod) -> dict[str, ScipyMethod]:
    return {method.name.lower(): method for method in methods}


_ITERATIONS = frozenset({"gtol", "maxiter"})
_ROOT_SCALAR = frozenset({"xtol", "rtol", "maxiter"})
_JAX_ROOT_SCALAR = JaxSupport(_ROOT_SCALAR)
_NATIVE = NumbaSupport()
"""A scalar method's native solver: it needs no derivative output."""
_NATIVE_WITH_JAC = NumbaSupport(("jac",))
_NATIVE_WITH_HESS = NumbaSupport(("jac", "hess"))

_JAX_TRUST_REGION = JaxSupport(
    frozenset({"gtol", "maxiter", "initial_trust_radius", "max_trust_radius", "eta"})
)
_KRYLOV_ONLY = frozenset({"inexact"})
_JAX_TRUST_CONSTR = JaxSupport(frozenset(s.TrustConstrSettings._fields))
_FINITE_DIFFERENCES_ONLY = frozenset({"finite_diff_rel_step", "workers"})
"""TNC's options for its finite differences that the native solver, on the op's gradient, cannot
take as settings (an array, a pool)."""
_DF_SANE_CALLABLES = frozenset({"fnorm", "eta_strategy"})
_DF_SANE_NUMERIC = frozenset(s.DFSaneSettings._fields) - _DF_SANE_CALLABLES

_BRACKETING_ROOT = tuple(
    ScipyMethod(name, s.BRACKETING_ROOT, needs_input="bracket", jax=_JAX_ROOT_SCALAR, numba=_NATIVE)
    for name in ("bisect", "brentq", "brenth", "ridder", "toms748")
)

_NONLIN_JACOBIANS: dict[str, s.NONLIN_JACOBIAN_OPTIONS] = {
    "broyden1": s.BroydenJacobianOptions(),
    "broyden2": s.BroydenJacobianOptions(),
    "anderson": s.AndersonJacobianOptions(),
    "diagbroyden": s.MixingJacobianOptions(),
    "linearmixing": s.MixingJacobianOptions(),
    "excitingmixing": s.ExcitingMixingJacobianOptions(),
    "krylov": s.KrylovJacobianOptions(),
}
_NONLIN_SOLVE = tuple(
    ScipyMethod(
        name,
        s.NonlinSettings(jac_options=jacobian),
        ("xtol",),
        tol_clears=("xatol", "ftol", "fatol"),
        choices=s.NONLIN_CHOICES,
        jax=JaxSupport(frozenset(s.NonlinSettings._fields)),
        numba=_NATIVE,
    )
    for name, jacobian in _NONLIN_JACOBIANS.items()
)
"""scipy's ``nonlin_solve`` family: one driver, one Jacobian approximation per method (its
``jac_options``)."""

OP_OPTIONS: dict[type, OpOptions] = {
    MinimizeOp: OpOptions(
        "minimize",
        _by_key(
            ScipyMethod(
                "BFGS",
                s.BFGS,
                ("gtol",),
                refusal=s.wolfe_refusal,
                jax=JaxSupport(_ITERATIONS),
                numba=_NATIVE_WITH_JAC,
            ),
            ScipyMethod(
                "CG",
                s.CG,
                ("gtol",),
                lacks=frozenset({"xrtol"}),
                refusal=s.wolfe_refusal,
                jax=JaxSupport(_ITERATIONS),
                numba=_NATIVE_WITH_JAC,
            ),
            ScipyMethod(
                "L-BFGS-B",
                s.LBFGSBSettings(),
                ("ftol", "gtol"),
                jax=JaxSupport(
                    frozenset({"ftol", "gtol", "maxiter", "maxfun", "maxcor", "bounds"})
                ),
                numba=_NATIVE_WITH_JAC,
            ),
            ScipyMethod(
                "SLSQP",
                s.SLSQPSettings(),
                ("ftol",),
                jax=JaxSupport(frozenset({"ftol", "maxiter", "eps", "bounds"})),
                numba=_NATIVE_WITH_JAC,
            ),
            ScipyMethod(
                "trust-constr",
                s.TrustConstrSettings(),
                ("xtol", "gtol", "barrier_tol"),
                jax=_JAX_TRUST_CONSTR,
                numba=_NATIVE_WITH_JAC,
            ),
            ScipyMethod(
                "Newton-CG",
                s.NewtonCGSettings(),
                ("xtol",),
                needs_gradient=True,
                refusal=s.wolfe_refusal,
                jax=JaxSupport(frozenset({"xtol", "maxiter", "c1", "c2"})),
                numba=_NATIVE_WITH_HESS,
            ),
            ScipyMethod(
                "Nelder-Mead",
                s.NelderMeadSettings(),
                ("xatol", "fatol"),
                jax=JaxSupport(
                    frozenset({"xatol", "fatol", "adaptive", "maxiter", "maxfev", "bounds"})
                ),
                numba=NumbaSupport(ignores=frozenset({"initial_simplex"})),
            ),
            ScipyMethod(
                "Powell",
                s.PowellSettings(),
                ("xtol", "ftol"),
                jax=JaxSupport(frozenset({"xtol", "ftol", "maxiter", "maxfev", "bounds"})),
                numba=NumbaSupport(ignores=frozenset({"direc"})),
            ),
            ScipyMethod(
                "COBYLA",
                s.COBYLASettings(),
                ("tol",),
                jax=JaxSupport(
                    frozenset({"rhobeg", "tol", "maxiter", "catol", "f_target", "bounds"})
                ),
                numba=NumbaSupport(),
            ),
            ScipyMethod(
                "COBYQA",
                s.COBYQASettings(),
                ("final_tr_radius",),
                refusal=s.cobyqa_refusal,
                jax=JaxSupport(frozenset(s.COBYQASettings._fields)),
                numba=NumbaSupport(),
            ),
            ScipyMethod(
                "TNC",
                s.TNCSettings(),
                ("xtol", "ftol", "gtol"),
                signed=frozenset({"maxCGit"}),
                jax=JaxSupport(frozenset(s.TNCSettings._fields) - _FINITE_DIFFERENCES_ONLY),
                numba=NumbaSupport(("jac",), ignores=_FINITE_DIFFERENCES_ONLY),
            ),
            ScipyMethod(
                "trust-krylov",
                s.TrustRegionSettings(),
                ("gtol",),
                needs_hessian=True,
                refusal=s.trust_region_refusal,
                jax=JaxSupport(_JAX_TRUST_REGION.honours | _KRYLOV_ONLY),
                numba=_NATIVE_WITH_HESS,
            ),
            *(
                ScipyMethod(
                    name,
                    s.TrustRegionSettings(),
                    ("gtol",),
                    lacks=_KRYLOV_ONLY,
                    needs_hessian=True,
                    refusal=s.trust_region_refusal,
                    jax=_JAX_TRUST_REGION,
                    numba=_NATIVE_WITH_HESS,
                )
                for name in ("trust-exact", "trust-ncg", "dogleg")
            ),
        ),
        frozenset({"bounds"}),
        scipy_names=frozenset(
            "nelder-mead powell cg bfgs newton-cg l-bfgs-b tnc cobyla cobyqa slsqp trust-constr "
            "dogleg trust-ncg trust-exact trust-krylov".split()
        ),
    ),
    RootOp: OpOptions(
        "root",
        _by_key(
            ScipyMethod(
                "hybr",
                s.HybrSettings(),
                ("xtol",),
                jax=JaxSupport(frozenset({"xtol", "maxfev", "factor"})),
                numba=_NATIVE_WITH_JAC,
            ),
            ScipyMethod(
                "lm",
                s.LMSettings(),
                ("xtol",),
                jax=JaxSupport(frozenset({"xtol", "ftol", "gtol", "maxiter", "factor"})),
                numba=_NATIVE_WITH_JAC,
            ),
            *_NONLIN_SOLVE,
            ScipyMethod(
                "df-sane",
                s.DFSaneSettings(),
                ("ftol",),
                choices={"line_search": {"cruz": "cruz", "cheng": "cheng"}},
                jax=JaxSupport(_DF_SANE_NUMERIC),
                numba=NumbaSupport(ignores=_DF_SANE_CALLABLES),
            ),
        ),
        frozenset(),
        scipy_names=frozenset(
            "hybr lm broyden1 broyden2 anderson linearmixing diagbroyden excitingmixing krylov "
            "df-sane".split()
        ),
    ),
    MinimizeScalarOp: OpOptions(
        "minimize_scalar",
        _by_key(
            ScipyMethod(
                "brent",
                s.BRENT,
                ("xtol",),
                refuses_input="bounds",
                jax=JaxSupport(frozenset({"xtol", "maxiter"})),
                numba=_NATIVE,
            ),
            ScipyMethod(
                "golden",
                s.GOLDEN,
                ("xtol",),
                refuses_input="bounds",
                jax=JaxSupport(frozenset({"xtol", "maxiter"})),
                numba=_NATIVE,
            ),
            ScipyMethod(
                "bounded",
                s.BoundedMinimizeSettings(),
                ("xatol",),
                needs_input="bounds",
                jax=JaxSupport(frozenset({"xatol", "maxiter"})),
                numba=_NATIVE,
            ),
        ),
        frozenset(),
        scipy_names=frozenset({"brent", "bounded", "golden"}),
    ),
    RootScalarOp: OpOptions(
        "root_scalar",
        _by_key(
            *_BRACKETING_ROOT,
            ScipyMethod("newton", s.NEWTON_SCALAR, jax=_JAX_ROOT_SCALAR, numba=_NATIVE),
            ScipyMethod("halley", s.NEWTON_SCALAR, jax=_JAX_ROOT_SCALAR, numba=_NATIVE_WITH_HESS),
            ScipyMethod("secant", s.SecantSettings(), jax=_JAX_ROOT_SCALAR, numba=_NATIVE),
        ),
        frozenset({"xtol", "rtol", "maxiter", "x1"}),
        takes_tol=False,
        scipy_names=frozenset("bisect brentq brenth ridder toms748 newton secant halley".split()),
    ),
}
