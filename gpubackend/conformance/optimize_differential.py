"""The differential run of generated optimize graphs: every JAX path and NUMBA against
``FAST_COMPILE`` (scipy itself), per scipy method.

Each spec (`optimize_graphs`) is built, compiled once per mode and called once.
A mode must do what the reference does:

- the reference raises: an error of the same type (the nearest built-in class,
  at compile or call time);
- the reference returns: the graph's dtypes and shapes, the same ``success``
  and, where the reference converged, a solution (and gradient) within the
  method's tolerance (`accuracy`) of the reference's.

"Know your reference": a value that differs is checked against the problem
solved tightly (`solve_tightly`) before it is called wrong. Within the
tolerance of the tight solution, or no further from it than scipy's, it is
`reference-off` (scipy is the one off), not a failure. Nor is a value or
``success`` that scipy itself gives from a start moved by rounding
(`PERTURBATION_ULPS`): `reference-unstable`, the method's outcome hangs on
rounding there, as a backend's other evaluation order moves it. A value after the
budget ran out (``success`` False) is where the method stopped, not a
solution: only ``success`` is compared.

A mode may refuse instead: a ``NotImplementedError`` (gpubackend's
`UnsupportedMethod`, `UnsupportedOption`) is `refused`. NUMBA's fallback to
scipy in object mode (`ObjectModeFallbackWarning`) is counted apart: such a
graph still gets a verdict on its values. Issue 29's criterion is zero of both,
per method (`OptimizeReport.refusals`, `OptimizeReport.fallbacks`).
"""

from __future__ import annotations

import functools
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from gpubackend.conformance.backends import HOST_DEVICE
from gpubackend.conformance.checks import error_summary
from gpubackend.conformance.differential import (
    CRASH,
    DEFAULT_MODES,
    DIFFERENTIAL_MODES,
    NOT_APPLICABLE,
    PASS,
    RAW_ERROR,
    REFERENCE_MODE,
    REFUSED,
    SILENT_WRONG,
    WRONG_ERROR,
    Outcome,
    Verdict,
    VerdictReport,
    column_name,
    no_outcome_verdict,
    run_against_reference,
)
from gpubackend.conformance.optimize_graphs import (
    OptimizeSpec,
    build_optimize,
    solve_tightly,
    spec_name,
    table_method,
)
from gpubackend.conformance.worker import describe_exit
from gpubackend.errors import ObjectModeFallbackWarning

REFERENCE_OFF = "reference-off"
REFERENCE_UNSTABLE = "reference-unstable"
SUCCESS_DIFFERS = "success-differs"
STATUSES = (
    PASS,
    REFERENCE_OFF,
    REFERENCE_UNSTABLE,
    REFUSED,
    NOT_APPLICABLE,
    SUCCESS_DIFFERS,
    SILENT_WRONG,
    WRONG_ERROR,
    RAW_ERROR,
    CRASH,
)
FAILING = (SUCCESS_DIFFERS, SILENT_WRONG, WRONG_ERROR, RAW_ERROR, CRASH)
FALLBACK = "fallback"
"""Counted beside the statuses: the graph ran scipy in Numba object mode."""
UNKNOWN_DEFAULT_TOL = 1e-4
"""The tolerance assumed for a method the table does not list: scipy's loosest defaults (Nelder-
Mead's ``xatol``, the trust regions' ``gtol``)."""
MINIMIZE_TOL_ON_VALUE = frozenset({"powell", "tnc", "l-bfgs-b", "slsqp"})
"""These stop once the objective's value settles to within ``tol`` (their ``ftol``), whatever
``x`` does. (Nelder-Mead stops only when both its ``xatol`` and its ``fatol`` hold.)"""
VALUE_TOLERANCES = frozenset({"ftol", "fatol"})
TOLERANCE_FACTOR = 10.0
"""Two runs each within ``tol`` of the solution are within a few ``tol`` of each other; a gradient
(``J^-T weights`` at the solution) moves with the solution."""
FLOOR = 1e-7
PERTURBATION_ULPS = 512
"""How far the reference's start is moved, relative, in units of its dtype's epsilon (1e-13 in
float64), to see whether scipy's outcome hangs on rounding: a backend that evaluates the
equations in another order moves the iterates by as much. From 512 such starts scipy's
Newton-Krylov ends with success up to 7e-2 off the root of a 3-variable problem (optimize_22 of
the differential, ``tol=1e-5``) and 0.13 off one of 4 (``tol=1e-3``; 9 of the 512 at least
3.8e-2 off), where it converges from the start itself."""
PERTURBED_STARTS = 512
"""How many moved starts scipy is run from before a differing outcome is called the mode's."""


def _tolerances(spec: OptimizeSpec) -> dict[str, float]:
    """The options ``tol`` sets (the drawn ``tol``, else their defaults); root_scalar's ``xtol``."""
    method = table_method(spec.kind, spec.method)
    if method is None:
        on_value = spec.kind == "minimize" and spec.method in MINIMIZE_TOL_ON_VALUE
        return {"ftol" if on_value else "xtol": spec.tol or UNKNOWN_DEFAULT_TOL}
    names = [name for name in method.tol_sets or ("xtol",) if name in method.options()]
    tolerances = {
        name: spec.tol if spec.tol is not None else getattr(method.defaults, name) for name in names
    }
    # A negative default (TNC's) is scipy's sentinel for the solver's own choice, unknown here.
    return {name: value for name, value in tolerances.items() if value >= 0}


def accuracy(spec: OptimizeSpec) -> float:
    """How close a solution must be to the reference's: `TOLERANCE_FACTOR` times the loosest
    tolerance ``tol`` sets, on ``x``'s scale (a tolerance on a minimum's value, its square root)."""
    stops_on_value = spec.kind == "minimize" and spec.method in MINIMIZE_TOL_ON_VALUE
    on_x_scale = [
        np.sqrt(value) if name in VALUE_TOLERANCES else value
        for name, value in _tolerances(spec).items()
        if stops_on_value or name not in VALUE_TOLERANCES
    ]
    return max(TOLERANCE_FACTOR * max(on_x_scale, default=UNKNOWN_DEFAULT_TOL), FLOOR)


# --- What one mode gave for one spec --------------------------------------------------------------


@dataclass
class OptimizeObservation:
    """A mode's outcome on a spec, and the object-mode fallback it warned of; or why it has
    none."""

    outcome: Outcome | None = None
    fallback: str = ""
    """The `ObjectModeFallbackWarning`'s message (NUMBA), or ``""``."""
    dtypes: tuple[str, ...] = ()
    not_applicable: str = ""
    crash: str = ""
    invalid: str = ""
    """Building the spec's graph failed: a fault of the generator, not of the mode."""


@dataclass(frozen=True)
class _Graph:
    """`differential.CompilableGraph` of a generated optimize graph (it updates nothing)."""

    inputs: list
    outputs: list
    updates: dict = field(default_factory=dict)


def _observe(
    spec: OptimizeSpec, compile_graph: Callable[[_Graph], Callable]
) -> OptimizeObservation:
    try:
        case = build_optimize(spec)
    except Exception as error:  # noqa: BLE001 - the generator's fault, reported as such
        return OptimizeObservation(invalid=f"building the graph failed: {error_summary(error)}")
    dtypes = tuple(output.type.dtype for output in case.outputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn = compile_graph(_Graph(case.inputs, case.outputs))
        except Exception as error:  # noqa: BLE001 - the outcome
            outcome = Outcome.raised(error, "compile")
        else:
            try:
                outcome = Outcome.returned(fn(*case.values))
            except Exception as error:  # noqa: BLE001 - the outcome
                outcome = Outcome.raised(error, "call")
    fallbacks = [
        str(w.message) for w in caught if issubclass(w.category, ObjectModeFallbackWarning)
    ]
    return OptimizeObservation(outcome, fallbacks[0] if fallbacks else "", dtypes)


def _compile_reference(graph: _Graph) -> Callable:
    import pytensor

    return pytensor.function(graph.inputs, graph.outputs, mode=REFERENCE_MODE)


def observe_optimize_reference(spec: OptimizeSpec) -> OptimizeObservation:
    return _observe(spec, _compile_reference)


def observe_optimize_mode(mode_name: str, device: str, spec: OptimizeSpec) -> OptimizeObservation:
    mode = DIFFERENTIAL_MODES[mode_name]
    if reason := mode.missing():
        return OptimizeObservation(not_applicable=reason)
    with mode.device_scope(device):
        return _observe(spec, lambda graph: mode.compile(graph, device))


def _crash(spec: OptimizeSpec, returncode: int, log_tail: str) -> OptimizeObservation:
    return OptimizeObservation(
        crash=f"the worker process running this graph died: {describe_exit(returncode)}\n{log_tail}"
    )


@functools.lru_cache(maxsize=1)
def _reference_function(spec: OptimizeSpec) -> tuple[Callable, list]:
    """The spec's reference, compiled, and its input values: once per spec, however many of its
    columns are checked against moved starts (they are classified one after another)."""
    case = build_optimize(spec)
    return _compile_reference(_Graph(case.inputs, case.outputs)), case.values


def perturbed_reference_outputs(spec: OptimizeSpec) -> Iterator[tuple[np.ndarray, ...]]:
    """The reference's outputs from `PERTURBED_STARTS` starts moved by `PERTURBATION_ULPS`
    (drawn from the spec's seed); a start where it raises yields nothing."""
    fn, (start, *others) = _reference_function(spec)
    rng = np.random.default_rng(spec.seed)
    scale = PERTURBATION_ULPS * np.finfo(start.dtype).eps
    for _ in range(PERTURBED_STARTS):
        moved = start * (1 + scale * rng.uniform(-1.0, 1.0, size=start.shape))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy's warnings, as the reference's own call
            try:
                outputs = fn(moved.astype(start.dtype), *others)
            except Exception:  # noqa: BLE001 - a start scipy refuses shows no outcome
                continue
        yield tuple(np.asarray(output) for output in outputs)


def _reference_gives_it_too(
    spec: OptimizeSpec, gives_it: Callable[[tuple[np.ndarray, ...]], bool]
) -> str:
    """Where scipy itself, from a start moved by rounding, gives what ``gives_it`` accepts: how
    it did; else ``""``."""
    for tried, outputs in enumerate(perturbed_reference_outputs(spec), start=1):
        if gives_it(outputs):
            return (
                f"scipy itself gives it from a start moved by {PERTURBATION_ULPS} ulps "
                f"({tried} of up to {PERTURBED_STARTS} moved starts tried)"
            )
    return ""


# --- Verdicts -------------------------------------------------------------------------------------


def _distance(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference, relative to ``1 + |want|`` (what `_close` bounds)."""
    return float(np.max(np.abs(got - want) / (1.0 + np.abs(want)), initial=0.0))


def _close(got: np.ndarray, want: np.ndarray, tolerance: float) -> bool:
    return bool(np.allclose(got, want, rtol=tolerance, atol=tolerance, equal_nan=True))


def _values_verdict(
    spec: OptimizeSpec, got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...]
) -> Verdict:
    """Both converged: the solution (and gradient) against the reference's, then the tight
    solution's."""
    tolerance = accuracy(spec)
    # The solution, then the gradient, with their tolerances
    pairs = [(got[0], want[0], tolerance)]
    if len(got) > 2:
        pairs.append((got[2], want[2], TOLERANCE_FACTOR * tolerance))
    if all(_close(value, reference, tol) for value, reference, tol in pairs):
        return Verdict(PASS)
    tight = solve_tightly(spec)
    truths = [tight.x] if tight.gradient is None else [tight.x, tight.gradient]
    names = ("x", "gradient")
    differences = "; ".join(
        f"{name}: {np.array2string(value, precision=8)} vs scipy's "
        f"{np.array2string(reference, precision=8)}, tight {np.array2string(truth, precision=8)} "
        f"(off {_distance(value, truth):.1e}, scipy off {_distance(reference, truth):.1e}, "
        f"tolerance {tol:.1e})"
        for name, (value, reference, tol), truth in zip(names, pairs, truths, strict=False)
    )
    # Within the tolerance of the tight solution, or no further from it than scipy is
    if all(
        _close(value, truth, tol) or _distance(value, truth) <= _distance(reference, truth)
        for (value, reference, tol), truth in zip(pairs, truths, strict=False)
    ):
        return Verdict(REFERENCE_OFF, differences)

    def as_far_off(outputs: tuple[np.ndarray, ...]) -> bool:
        """scipy converged no nearer the tight solution, in every output compared."""
        compared = (outputs[0], *outputs[2:])[: len(pairs)]
        return bool(outputs[1]) and all(
            _distance(value, truth) <= _distance(scipys, truth)
            for (value, _, _), scipys, truth in zip(pairs, compared, truths, strict=True)
        )

    if unstable := _reference_gives_it_too(spec, as_far_off):
        return Verdict(REFERENCE_UNSTABLE, f"{differences}; {unstable}")
    return Verdict(SILENT_WRONG, differences)


def classify(
    spec: OptimizeSpec, reference: OptimizeObservation, observation: OptimizeObservation
) -> Verdict:
    """A mode's verdict on a spec whose reference has an outcome (see the module docstring)."""
    if verdict := no_outcome_verdict(observation):
        return verdict
    if observation.outcome is None:
        return Verdict(RAW_ERROR)
    got, expected = observation.outcome, reference.outcome
    assert expected is not None  # a reference without an outcome makes the spec invalid
    detail = f"expected {expected.describe()}, got {got.describe()}"
    if got.values is None:
        if got.family == "NotImplementedError":
            return Verdict(REFUSED, got.describe())
        if expected.values is None:
            return Verdict(PASS if got.family == expected.family else WRONG_ERROR, detail)
        return Verdict(RAW_ERROR, detail)
    if expected.values is None:
        return Verdict(SILENT_WRONG, detail)
    shapes = [value.shape for value in got.values]
    dtypes = tuple(str(value.dtype) for value in got.values)
    if shapes != [value.shape for value in expected.values] or dtypes != reference.dtypes:
        return Verdict(
            SILENT_WRONG, f"shapes {shapes}, dtypes {dtypes}; expected {reference.dtypes}"
        )
    success, expected_success = bool(got.values[1]), bool(expected.values[1])
    if success != expected_success:
        if unstable := _reference_gives_it_too(spec, lambda outputs: bool(outputs[1]) == success):
            return Verdict(REFERENCE_UNSTABLE, f"{detail}; {unstable}")
        return Verdict(SUCCESS_DIFFERS, detail)
    if not expected_success:
        return Verdict(PASS)  # where the budget ran out is the method's, not a solution
    return _values_verdict(spec, got.values, expected.values)


# --- A run over many specs ------------------------------------------------------------------------


@dataclass
class OptimizeResult:
    name: str
    spec: str
    """The spec's repr: ``OptimizeSpec(...)`` rebuilds it."""
    method: str
    """``kind:method``, e.g. ``minimize:bfgs``."""
    expected: str = ""
    """``value`` or the reference's error type."""
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    fallbacks: dict[str, str] = field(default_factory=dict)
    """Per column whose mode ran scipy in object mode: the warning's message."""
    invalid: str = ""


def method_label(spec: OptimizeSpec) -> str:
    return f"{spec.kind}:{spec.method}"


@dataclass
class OptimizeReport(VerdictReport):
    results: list[OptimizeResult] = field(default_factory=list)
    statuses: ClassVar[tuple[str, ...]] = STATUSES
    failing: ClassVar[tuple[str, ...]] = FAILING

    def tallies(self, result: OptimizeResult) -> Iterator[tuple[str, str]]:
        yield from super().tallies(result)
        yield from ((column, FALLBACK) for column in result.fallbacks)

    def counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """Per method, per column, per status (and `FALLBACK`): how many graphs."""
        return self.counts_by(lambda result: result.method)

    def _per_method(self, column_filter: Callable[[str], bool], status: str) -> dict[str, int]:
        per_method: Counter[str] = Counter()
        for method, per_column in self.counts().items():
            for column, counter in per_column.items():
                if column_filter(column) and counter.get(status):
                    per_method[method] += counter[status]
        return dict(per_method)

    def refusals(self) -> dict[str, int]:
        """Per method, the graphs a JAX mode refused (issue 29 wants none)."""
        return self._per_method(lambda column: column.startswith("jax"), REFUSED)

    def fallbacks(self) -> dict[str, int]:
        """Per method, the graphs NUMBA ran in object mode (issue 29 wants none)."""
        return self._per_method(lambda column: column.startswith("numba"), FALLBACK)

    def summary(self) -> dict[str, Any]:
        return {
            "counts": self.counts(),
            "refusals": self.refusals(),
            "fallbacks": self.fallbacks(),
        }


def optimize_result(
    name: str,
    spec: OptimizeSpec,
    reference: OptimizeObservation,
    observations: dict[str, OptimizeObservation],
) -> OptimizeResult:
    result = OptimizeResult(name, repr(spec), method_label(spec))
    if reference.outcome is None or reference.outcome.stage == "compile":
        result.invalid = (
            reference.invalid
            or reference.crash
            or (
                f"FAST_COMPILE failed to compile: {reference.outcome.describe()}"
                if reference.outcome is not None
                else "no reference"
            )
        )
        return result
    result.expected = "value" if reference.outcome.values is not None else reference.outcome.error
    result.verdicts = {
        column: classify(spec, reference, seen) for column, seen in observations.items()
    }
    result.fallbacks = {
        column: seen.fallback for column, seen in observations.items() if seen.fallback
    }
    return result


def run_optimize_differential(
    specs: Sequence[OptimizeSpec],
    modes: Sequence[str] = DEFAULT_MODES,
    devices: Sequence[str] = (HOST_DEVICE,),
    label: str = "",
    progress: bool = True,
) -> OptimizeReport:
    """Every spec on FAST_COMPILE and on every (mode, device) pair, in worker processes; then the
    verdicts."""
    return run_against_reference(
        specs,
        OptimizeReport,
        modes,
        devices,
        label,
        ("reference", observe_optimize_reference, _crash),
        observe_optimize_mode,
        _crash,
        spec_name,
        optimize_result,
        progress,
    )


def check_in_process(
    spec: OptimizeSpec, modes: Sequence[tuple[str, str]]
) -> tuple[OptimizeResult, dict[str, OptimizeObservation]]:
    """One spec's result, in this process (tests: no worker start, no crash isolation), and the
    observations it judged."""
    observations = {
        column_name(mode, device): observe_optimize_mode(mode, device, spec)
        for mode, device in modes
    }
    result = optimize_result(
        spec_name(spec, 0), spec, observe_optimize_reference(spec), observations
    )
    return result, observations
