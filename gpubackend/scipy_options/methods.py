"""The scipy methods gpubackend knows, per optimize op: spelling, default settings, what ``tol`` sets.

Either backend lowers a subset of these; each says which (and which options it
honours) itself. A method outside this table has no lowering on either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from pytensor.tensor.optimize import MinimizeOp, MinimizeScalarOp, RootOp, RootScalarOp

from gpubackend.scipy_options import settings as s


@dataclass(frozen=True)
class ScipyMethod:
    """One scipy method: its documented spelling, scipy's defaults, and the options scipy's ``tol`` sets."""

    name: str
    defaults: NamedTuple
    tol_sets: tuple[str, ...] = ()
    needs_input: str | None = None
    """The op input (``bounds``, ``bracket``) without which scipy refuses the method."""
    refuses_input: str | None = None
    """The op input scipy refuses for this method."""
    lacks: frozenset[str] = frozenset()
    """Fields of the settings family that this method does not take (they keep their default)."""

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

    def method(self, name: str) -> ScipyMethod | None:
        """scipy matches method names case-insensitively."""
        return self.methods.get(name.lower())


def _by_key(*methods: ScipyMethod) -> dict[str, ScipyMethod]:
    return {method.name.lower(): method for method in methods}


_BRACKETING_ROOT = tuple(
    ScipyMethod(name, s.BRACKETING_ROOT, needs_input="bracket") for name in ("bisect", "brentq", "brenth", "ridder", "toms748")
)

OP_OPTIONS: dict[type, OpOptions] = {
    MinimizeOp: OpOptions(
        "minimize",
        _by_key(
            ScipyMethod("BFGS", s.BFGS, ("gtol",)),
            ScipyMethod("CG", s.CG, ("gtol",), lacks=frozenset({"xrtol"})),
            ScipyMethod("L-BFGS-B", s.LBFGSBSettings(), ("ftol", "gtol")),
            ScipyMethod("Newton-CG", s.NewtonCGSettings(), ("xtol",)),
            ScipyMethod("trust-exact", s.TrustExactSettings(), ("gtol",)),
        ),
        frozenset({"bounds"}),
    ),
    RootOp: OpOptions(
        "root",
        _by_key(
            ScipyMethod("hybr", s.HybrSettings(), ("xtol",)),
            ScipyMethod("lm", s.LMSettings(), ("xtol",)),
            ScipyMethod("newton", s.NewtonRootSettings(), ("xtol",)),
        ),
        frozenset(),
    ),
    MinimizeScalarOp: OpOptions(
        "minimize_scalar",
        _by_key(
            ScipyMethod("brent", s.BRENT, ("xtol",), refuses_input="bounds"),
            ScipyMethod("golden", s.GOLDEN, ("xtol",), refuses_input="bounds"),
            ScipyMethod("bounded", s.BoundedMinimizeSettings(), ("xatol",), needs_input="bounds"),
        ),
        frozenset(),
    ),
    RootScalarOp: OpOptions(
        "root_scalar",
        _by_key(
            *_BRACKETING_ROOT,
            ScipyMethod("newton", s.NEWTON_SCALAR),
            ScipyMethod("halley", s.NEWTON_SCALAR),
            ScipyMethod("secant", s.SecantSettings()),
        ),
        frozenset({"xtol", "rtol", "maxiter", "x1"}),
        takes_tol=False,
    ),
}
