"""Hypothesis strategies for random optimize graphs: every (op kind, scipy method) scipy knows.

A spec (`OptimizeSpec`, plain data) names an op kind and a scipy method from
`OP_OPTIONS[...].scipy_names` (gpubackend lowers it or not: a method without a
lowering shows as a refusal or a fallback), a problem size, a seed, and the
options drawn from what scipy's method takes: ``tol``, a budget small enough
to run out sometimes, bounds or a bracket where the method takes them, and now
and then an input scipy refuses (`REFUSED_VARIANTS`), to compare error types.

Every problem is well posed, with one solution: the objective is a
convex-plus-quartic ``0.5 x'Ax + q/4 sum(x**4) - shift'x`` (``A`` positive
definite), a root problem is its gradient ``Ax + q x**3 - shift`` (a monotone
system), and a scalar problem is the same in one variable. ``shift`` is an input,
so `build_optimize` also outputs the gradient of ``weights . x`` with respect
to it where the solution is smooth in it (no bound may be active, no input
refused). `solve_tightly` solves the same problem far past the method's
tolerance: what a value is checked against when it differs from scipy's.
"""

from __future__ import annotations

import functools
import re
import zlib
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np
import pytensor
import pytensor.tensor as pt
import scipy.optimize
from hypothesis import given
from hypothesis import strategies as st
from pytensor.graph.basic import Variable
from pytensor.tensor.optimize import minimize, minimize_scalar, root, root_scalar

from gpubackend.conformance.catalogue import Case, CaseGraph
from gpubackend.conformance.strategies import drawing
from gpubackend.scipy_options.methods import OP_OPTIONS, ScipyMethod

KINDS = ("minimize", "root", "minimize_scalar", "root_scalar")
SCALAR_KINDS = frozenset({"minimize_scalar", "root_scalar"})

# scipy's facts, as scipy/optimize/_minimize.py, _root.py and _root_scalar.py state them.
MINIMIZE_WITHOUT_GRADIENT = frozenset({"nelder-mead", "powell", "cobyla", "cobyqa"})
"""scipy warns that these do not use ``jac``."""
MINIMIZE_USES_HESSIAN = frozenset(
    {"newton-cg", "dogleg", "trust-ncg", "trust-constr", "trust-krylov", "trust-exact"}
)
MINIMIZE_NEEDS_HESSIAN = frozenset({"dogleg", "trust-ncg", "trust-krylov", "trust-exact"})
"""scipy raises ``ValueError`` without ``hess`` (PyTensor passes no ``hessp``)."""
MINIMIZE_TAKES_BOUNDS = frozenset(
    {"nelder-mead", "powell", "l-bfgs-b", "cobyla", "cobyqa", "slsqp", "tnc", "trust-constr"}
)
ROOT_USES_JACOBIAN = frozenset({"hybr", "lm"})
"""The other root methods call ``fun`` for the equations alone: PyTensor's ``jac=True`` would hand
them the Jacobian too."""
ROOT_NONLIN = frozenset(
    "broyden1 broyden2 anderson linearmixing diagbroyden excitingmixing krylov".split()
)
"""Given ``tol``, scipy stops these once a step is within ``tol`` of ``|x|`` and drops their tests
on the equations: a slow iteration stops short of the root (``tol=1e-3``: 0.3 off, seen)."""
BRACKETING_ROOT_SCALAR = frozenset({"bisect", "brentq", "brenth", "ridder", "toms748"})
BUDGETS = ("maxiter", "maxfev", "maxfun")
"""The options that bound a method's work, the ones a small value makes run out."""
SMALL_BUDGETS = (1, 2, 3, 5, 20)
TOLS = (1e-3, 1e-5, 1e-8)

FREE = "free"
LOOSE_BOUNDS = "loose-bounds"
"""Bounds that hold the solution well inside: none is active."""
TIGHT_BOUNDS = "tight-bounds"
"""Bounds close around the start: some may be active, so no gradient is taken."""
BRACKET = "bracket"
REFUSED_VARIANTS = {
    "inverted-bounds": "bounds with lower > upper",
    "no-hessian": "a method scipy runs only with the Hessian, without it (hess=False)",
    "no-bounds": "minimize_scalar(method='bounded') without bounds",
    "bounds-not-taken": "bounds for a bracketing minimize_scalar method, which refuses them",
    "no-bracket": "a bracketing root_scalar method without a bracket",
    "bracket-without-sign-change": "a bracket on which the equation does not change sign",
}
"""Inputs scipy refuses with a ``ValueError``: the same error type is expected of every mode."""


def scipy_methods() -> list[tuple[str, str]]:
    """Every (op kind, method) scipy knows, lowered by gpubackend or not, in `KINDS` order."""
    by_kind = {options.kind: options for options in OP_OPTIONS.values()}
    return [(kind, method) for kind in KINDS for method in sorted(by_kind[kind].scipy_names)]


def table_method(kind: str, method: str) -> ScipyMethod | None:
    """gpubackend's table entry for ``method`` of the op ``kind``; None: the table lacks it."""
    return next(options for options in OP_OPTIONS.values() if options.kind == kind).method(method)


@functools.cache
def scipy_option_names(kind: str, method: str) -> frozenset[str]:
    """The option names scipy documents for ``method`` (``show_options``), and the ones
    gpubackend's table lists for it."""
    documented = scipy.optimize.show_options(kind, method, disp=False)
    section = documented.split("Options\n-------\n", 1)[-1]
    names = {
        name
        for group in re.findall(r"^([A-Za-z_]\w*(?:, [A-Za-z_]\w*)*) :", section, re.MULTILINE)
        for name in group.split(", ")
    }
    if (known := table_method(kind, method)) is not None:
        names |= set(known.options())
    return frozenset(names)


def budget_options(kind: str, method: str) -> tuple[str, ...]:
    return tuple(name for name in BUDGETS if name in scipy_option_names(kind, method))


def input_variants(kind: str, method: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the inputs scipy takes for this method, the ones it refuses) as variant names."""
    if kind == "minimize":
        refused = ("no-hessian",) if method in MINIMIZE_NEEDS_HESSIAN else ()
        if method in MINIMIZE_TAKES_BOUNDS:
            return (FREE, LOOSE_BOUNDS, TIGHT_BOUNDS), (*refused, "inverted-bounds")
        return (FREE,), refused
    if kind == "minimize_scalar":
        if method == "bounded":
            return (LOOSE_BOUNDS, TIGHT_BOUNDS), ("no-bounds", "inverted-bounds")
        return (FREE, BRACKET), ("bounds-not-taken",)
    if kind == "root_scalar" and method in BRACKETING_ROOT_SCALAR:
        return (BRACKET,), ("no-bracket", "bracket-without-sign-change")
    return (FREE,), ()


@dataclass(frozen=True)
class OptimizeSpec:
    kind: str
    method: str
    size: int
    """The number of unknowns; a scalar kind's ``x`` is 0-d."""
    seed: int
    variant: str
    """`FREE`, `LOOSE_BOUNDS`, `TIGHT_BOUNDS`, `BRACKET`, or one of `REFUSED_VARIANTS`."""
    tol: float | None
    """scipy's ``tol`` (``xtol`` for root_scalar, which has no ``tol``); None: scipy's default."""
    budget: tuple[str, int] | None
    """One of `BUDGETS` the method takes, and its value; None: scipy's default."""

    @property
    def refused(self) -> bool:
        return self.variant in REFUSED_VARIANTS

    @property
    def tol_bounds_error(self) -> bool:
        """Whether a converged solution is within (a multiple of) the tolerance of the solution."""
        return not (self.kind == "root" and self.method in ROOT_NONLIN and self.tol is not None)

    @property
    def smooth(self) -> bool:
        """The solution is a smooth function of ``shift``: no bound can be active, no input is
        refused."""
        return not self.refused and self.variant != TIGHT_BOUNDS


REFUSED_SHARE = 1 / 6
"""How many specs of a method with an input scipy refuses pass one: most are well posed."""


def spec_from_seed(kind: str, method: str, seed: int) -> OptimizeSpec:
    """The spec of ``method`` whose options ``seed`` draws (and, in `problem`, its numbers).

    Hypothesis draws the seed rather than each option: its first draws of every field are
    that field's simplest value, alike for every method, so a few specs per method would all
    be the defaults. A generator seeded with the seed and the method spreads them.
    """
    rng = np.random.default_rng([seed, zlib.crc32(f"{kind}:{method}".encode())])
    taken, refused = input_variants(kind, method)
    variants = refused if refused and rng.random() < REFUSED_SHARE else taken
    budgets = budget_options(kind, method)
    budget = None
    if budgets and rng.random() < 0.5:
        budget = (
            budgets[rng.integers(len(budgets))],
            SMALL_BUDGETS[rng.integers(len(SMALL_BUDGETS))],
        )
    tols = (None, *TOLS)
    return OptimizeSpec(
        kind=kind,
        method=method,
        size=1 if kind in SCALAR_KINDS else int(rng.integers(1, 5)),
        seed=seed,
        variant=variants[rng.integers(len(variants))],
        tol=tols[rng.integers(len(tols))],
        budget=budget,
    )


@st.composite
def optimize_specs(
    draw: st.DrawFn, methods: tuple[tuple[str, str], ...] | None = None
) -> OptimizeSpec:
    """A spec for one of ``methods`` (default: every method scipy knows), `spec_from_seed`."""
    kind, method = draw(st.sampled_from(methods or scipy_methods()))
    return spec_from_seed(kind, method, draw(st.integers(0, 2**16)))


# --- The problem: numbers from the seed, the graph, and the tight solution ------------------------


class Problem(NamedTuple):
    """``0.5 x'Ax + q/4 sum(x**4) - shift'x``'s numbers (a scalar problem's are 1 x 1); ``weights``
    makes the gradient's scalar ``weights . x``."""

    curvature: np.ndarray
    quartic: float
    shift: np.ndarray
    x0: np.ndarray
    weights: np.ndarray
    radius: float
    """Every solution lies within this of 0 (``lambda_min |x|^2 <= |shift| |x|``), with room."""


TIGHT_RADIUS = 0.25


def problem(spec: OptimizeSpec) -> Problem:
    rng = np.random.default_rng(spec.seed)
    n = spec.size
    mixing = rng.normal(size=(n, n))
    curvature = mixing @ mixing.T / n + np.diag(rng.uniform(0.5, 2.0, size=n))
    shift = rng.normal(size=n) * 2.0
    lowest = float(np.linalg.eigvalsh(curvature)[0])
    start_scale = TIGHT_RADIUS if spec.variant == TIGHT_BOUNDS else 0.5
    return Problem(
        curvature,
        float(rng.uniform(0.1, 1.0)),
        shift,
        rng.uniform(-start_scale, start_scale, size=n),
        rng.normal(size=n),
        2.0 * float(np.linalg.norm(shift)) / lowest + 1.0,
    )


def _shaped(spec: OptimizeSpec, values: np.ndarray) -> np.ndarray:
    dtype = pytensor.config.floatX
    return np.asarray(values[0] if spec.kind in SCALAR_KINDS else values, dtype=dtype)


def _interval(spec: OptimizeSpec, numbers: Problem) -> tuple[float, float] | None:
    """The bounds or bracket the variant passes."""
    radius = numbers.radius
    return {
        LOOSE_BOUNDS: (-radius, radius),
        TIGHT_BOUNDS: (-TIGHT_RADIUS, TIGHT_RADIUS),
        BRACKET: (-radius, radius),
        "inverted-bounds": (radius, -radius),
        "bounds-not-taken": (-radius, radius),
        "bracket-without-sign-change": (radius, 2 * radius),
    }.get(spec.variant)


def _options(spec: OptimizeSpec, numbers: Problem) -> dict:
    """``optimizer_kwargs``: ``tol``, the budget, and a vector problem's bounds."""
    kwargs: dict = {}
    if spec.tol is not None:
        kwargs["xtol" if spec.kind == "root_scalar" else "tol"] = spec.tol
    if spec.budget is not None:
        name, value = spec.budget
        if spec.kind == "root_scalar":  # its options are keyword arguments
            kwargs[name] = value
        else:
            kwargs["options"] = {name: value}
    interval = _interval(spec, numbers)
    if spec.kind == "minimize" and interval is not None:
        kwargs["bounds"] = [interval] * spec.size
    return kwargs


def _symbolic(spec: OptimizeSpec, numbers: Problem, x: Variable, shift: Variable) -> Variable:
    """The objective (minimize kinds) or the equations (root kinds) of ``x``."""
    curvature = pt.constant(numbers.curvature)
    if spec.kind in SCALAR_KINDS:
        a = float(numbers.curvature[0, 0])
        if spec.kind == "root_scalar":
            return a * x + numbers.quartic * x**3 - shift
        return 0.5 * a * x**2 + numbers.quartic / 4 * x**4 - shift * x
    if spec.kind == "root":
        return curvature @ x + numbers.quartic * x**3 - shift
    return 0.5 * x @ curvature @ x + numbers.quartic / 4 * (x**4).sum() - shift @ x


def _solve(spec: OptimizeSpec, numbers: Problem, x: Variable, shift: Variable) -> tuple:
    function = _symbolic(spec, numbers, x, shift)
    kwargs = _options(spec, numbers)
    interval = _interval(spec, numbers)
    method = spec.method
    if spec.kind == "minimize":
        return minimize(
            function,
            x,
            method=method,
            jac=method not in MINIMIZE_WITHOUT_GRADIENT,
            hess=method in MINIMIZE_USES_HESSIAN and spec.variant != "no-hessian",
            optimizer_kwargs=kwargs,
        )
    if spec.kind == "root":
        return root(
            function, x, method=method, jac=method in ROOT_USES_JACOBIAN, optimizer_kwargs=kwargs
        )
    if spec.kind == "minimize_scalar":
        takes = "bracket" if spec.variant == BRACKET else "bounds"
        bounds = {takes: interval} if interval is not None else {}
        return minimize_scalar(function, x, method=method, optimizer_kwargs=kwargs, **bounds)
    return root_scalar(
        function,
        x,
        method=method,
        jac=method in ("newton", "halley"),
        hess=method == "halley",
        bracket=interval,
        optimizer_kwargs=kwargs,
    )


def build_optimize(spec: OptimizeSpec) -> CaseGraph:
    """Inputs ``x`` (the start) and ``shift``; outputs the solution, ``success`` and, where the
    solution is smooth in ``shift``, the gradient of ``weights . solution`` with respect to it."""
    numbers = problem(spec)
    make = pt.scalar if spec.kind in SCALAR_KINDS else pt.vector
    x, shift = make("x"), make("shift")
    solution, success = _solve(spec, numbers, x, shift)
    outputs = [solution, success]
    if spec.smooth:
        weights = pt.constant(_shaped(spec, numbers.weights))
        outputs.append(pt.grad((weights * solution).sum(), shift))
    return CaseGraph([x, shift], outputs, [_shaped(spec, numbers.x0), _shaped(spec, numbers.shift)])


class TightSolution(NamedTuple):
    x: np.ndarray
    gradient: np.ndarray | None
    """Of ``weights . x`` with respect to ``shift``; None where the spec outputs none."""


def solve_tightly(spec: OptimizeSpec) -> TightSolution:
    """The problem solved far past any drawn tolerance, by scipy methods other than the one under
    test: the unique minimiser (in the box, if bounded) or root.

    The gradient follows from the implicit function theorem: both problems'
    Jacobian in ``x`` is ``J = A + 3q diag(x**2)`` and ``d(J x*)/d shift = I``,
    so the gradient of ``weights . x*`` is ``J^-T weights``.
    """
    numbers = problem(spec)
    a, q, b = numbers.curvature, numbers.quartic, numbers.shift

    def gradient(x: np.ndarray) -> np.ndarray:
        return a @ x + q * x**3 - b

    def jacobian(x: np.ndarray) -> np.ndarray:
        return a + np.diag(3 * q * x**2)

    if spec.variant == TIGHT_BOUNDS:
        solved = scipy.optimize.minimize(
            lambda x: 0.5 * x @ a @ x + q / 4 * np.sum(x**4) - b @ x,
            numbers.x0,
            jac=gradient,
            method="L-BFGS-B",
            bounds=[(-TIGHT_RADIUS, TIGHT_RADIUS)] * spec.size,
            options={"ftol": 0.0, "gtol": 1e-14, "maxiter": 10_000},
        )
        x = solved.x
    else:
        x = scipy.optimize.root(gradient, numbers.x0, jac=jacobian, method="hybr", tol=1e-14).x
    weights = numbers.weights
    slope = np.linalg.solve(jacobian(x).T, weights) if spec.smooth else None
    return TightSolution(_shaped(spec, x), None if slope is None else _shaped(spec, slope))


# --- Drawing --------------------------------------------------------------------------------------


def spec_name(spec: OptimizeSpec, index: int) -> str:
    return f"optimize_{index}_{spec.kind}_{re.sub(r'[^0-9a-z]', '_', spec.method)}"


def optimize_case(spec: OptimizeSpec, index: int) -> Case:
    """The spec as a conformance `Case` (family ``generated-optimize``)."""
    return Case(spec_name(spec, index), "generated-optimize", partial(build_optimize, spec))


def select_methods(patterns: list[str] | None) -> list[tuple[str, str]]:
    """The (kind, method) pairs whose ``kind:method`` contains one of ``patterns`` (all: None).

    ``ValueError`` naming the pattern when one matches nothing.
    """
    every = scipy_methods()
    if not patterns:
        return every
    chosen = []
    for pattern in patterns:
        matched = [pair for pair in every if pattern.lower() in ":".join(pair)]
        if not matched:
            known = ", ".join(":".join(pair) for pair in every)
            raise ValueError(f"method pattern {pattern!r} matches none of {known}")
        chosen += [pair for pair in matched if pair not in chosen]
    return chosen


def _draw_for(method: tuple[str, str], count: int) -> list[OptimizeSpec]:
    specs: list[OptimizeSpec] = []

    @drawing(count)
    @given(optimize_specs((method,)))
    def collect(spec: OptimizeSpec) -> None:
        if len(specs) < count and spec not in specs:
            specs.append(spec)

    collect()
    return specs


def draw_optimize_specs(
    count: int, methods: list[tuple[str, str]] | None = None
) -> list[OptimizeSpec]:
    """``count`` distinct specs, reproducibly (derandomised), spread evenly over ``methods``
    (default: every method scipy knows): method by method in turn."""
    if count < 0:  # else Hypothesis refuses max_examples=count * 3
        raise ValueError(f"count={count}: expected a number of graphs to draw, 0 or more.")
    methods = methods or scipy_methods()
    per_method = -(-count // len(methods))
    drawn = [_draw_for(method, per_method) for method in methods[:count]]
    rounds = max((len(specs) for specs in drawn), default=0)
    interleaved = [specs[turn] for turn in range(rounds) for specs in drawn if turn < len(specs)]
    return interleaved[:count]
