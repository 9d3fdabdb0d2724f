"""The differential run of generated while-Scan graphs: every JAX path and NUMBA against
``FAST_COMPILE``.

Each spec (`while_scan_graphs`) is built, compiled once per mode and called
once per entry of its ``stops`` (inputs that move the stopping step: one call
runs to the bound, others stop early). Every call of a mode must do what the
reference does:

- the reference returns values: the same values (exact for bool and integer
  outputs, ``allclose`` for floats), shapes and the graph's dtypes;
- the reference raises: an error of the same type (compared by the nearest
  built-in class: IndexError, ValueError, AssertionError...).

A mode may refuse instead, by name: `gpubackend.DataDependentLengthError`
(`refused`). A path that does not own the call (stock ``mode="JAX"``,
``get_jaxified_graph``) checks inside the computation, where only JAX's runtime
error can come out: it passes as `checked` when that error's message names the
reference's error type (README, "While-Scans under JAX"). What else it does is `silent-wrong`
(values where the reference raises, or other values), `wrong-error` (another error type),
`raw-error` (an error where the reference returns values, or any other error at compile time) or
`crash` (its worker process died). `n/a`: the mode does not take such a graph by design (PyMC's
``get_jaxified_graph`` refuses shared random generators).

The expected outcome is numpy's (`while_scan_graphs.truth`) where the graph
has a numpy twin, else FAST_COMPILE's. Two more oracles find PyTensor's own
bugs: numpy against FAST_COMPILE (the reference is wrong), and the graph after
PyTensor's FAST_RUN rewrites run by the Python linker against FAST_COMPILE
(the rewrites are wrong, in every compiled mode). A call where they disagree
is upstream, and a mode doing what one of PyTensor's runs does there is
`upstream`, not a failure; except where the rewrites drop a check that
gpubackend puts back (`CHECKS_RESTORED`: a for-Scan with more steps than its
sequence has entries), where FAST_COMPILE's error is expected. The Python
linker, not C, runs the rewritten graph: it checks indices as numpy does, so
an upstream IndexError stays one, and a mode turning it into a value is still
`silent-wrong`.

Specs run in worker processes (`worker`): one stream for the reference and one
per (mode, device), in chunks, side by side.
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, ClassVar, Protocol

import numpy as np
import pytensor
from pytensor.compile.mode import Mode

from gpubackend.conformance.backends import BACKENDS, HOST_DEVICE, name_device_pairs
from gpubackend.conformance.checks import error_summary
from gpubackend.conformance.environment import environment
from gpubackend.conformance.progress import progress_display
from gpubackend.conformance.while_scan_graphs import (
    CHECKS_RESTORED,
    STEP_COUNT_EDGES,
    UPSTREAM_BUGS,
    NoTruth,
    WhileGraphSpec,
    case_class,
    loop_family,
    truth,
    upstream_hint,
    while_graph,
)
from gpubackend.conformance.worker import describe_exit, interruptible, run_in_workers
from gpubackend.errors import DataDependentLengthError

PASS = "pass"
CHECKED = "checked"
REFUSED = "refused"
UPSTREAM = "upstream"
NOT_APPLICABLE = "n/a"
SILENT_WRONG = "silent-wrong"
WRONG_ERROR = "wrong-error"
RAW_ERROR = "raw-error"
CRASH = "crash"
STATUSES = (
    PASS,
    CHECKED,
    REFUSED,
    UPSTREAM,
    NOT_APPLICABLE,
    SILENT_WRONG,
    WRONG_ERROR,
    RAW_ERROR,
    CRASH,
)
FAILING = (SILENT_WRONG, WRONG_ERROR, RAW_ERROR, CRASH)
_SEVERITY = (
    CRASH,
    SILENT_WRONG,
    WRONG_ERROR,
    RAW_ERROR,
    REFUSED,
    NOT_APPLICABLE,
    UPSTREAM,
    CHECKED,
    PASS,
)
"""A graph's status on a mode is its worst call's, in this order."""

REFERENCE_MODE = "FAST_COMPILE"
REWRITTEN_MODE = Mode(linker="py", optimizer="fast_run")
"""The graph after PyTensor's FAST_RUN rewrites, run by Python: what a compiled mode should
compute."""
RTOL, ATOL = 1e-6, 1e-8
CHUNK = 40
"""Specs per worker process: a fresh process bounds what a long run's compiled functions hold."""


# --- What one run of one graph gave ---------------------------------------------------------------


_CHECKED_IN_COMPUTATION = re.compile(
    r"(?:EquinoxRuntimeError|CheckFailedInComputation): ([A-Za-z]+Error): "
)
"""How the reference's error type shows in JAX's runtime error from a check inside the
computation."""


def _error_family(error: BaseException) -> str:
    """The nearest built-in class of ``error``'s type, beyond Exception: what "the same error type"
    compares."""
    for cls in type(error).__mro__:
        if cls.__module__ == "builtins" and cls not in (Exception, BaseException):
            return cls.__name__
    return "Exception"


@dataclass(frozen=True)
class Outcome:
    """One call's outputs, or the error it raised (at ``stage`` compile or call)."""

    values: tuple[np.ndarray, ...] | None = None
    error: str = ""
    family: str = ""
    message: str = ""
    stage: str = "call"
    refused: bool = False
    """The error is gpubackend's named refusal, `DataDependentLengthError`."""
    checked_as: str = ""
    """The error type a check inside the computation names in JAX's runtime error (empty: none)."""

    @classmethod
    def raised(cls, error: BaseException, stage: str) -> Outcome:
        checked = _CHECKED_IN_COMPUTATION.search(str(error)) if stage == "call" else None
        return cls(
            None,
            type(error).__name__,
            _error_family(error),
            error_summary(error)[:300],
            stage,
            isinstance(error, DataDependentLengthError),
            checked.group(1) if checked else "",
        )

    @classmethod
    def returned(cls, values: Sequence) -> Outcome:
        return cls(tuple(np.array(value, copy=True) for value in values))

    def describe(self) -> str:
        if self.values is None:
            return f"{self.error} ({self.message[:160]})" + (
                " at compile time" if self.stage == "compile" else ""
            )
        shown = [
            np.array2string(value, precision=6, threshold=8, separator=",") for value in self.values
        ]
        return "values " + "; ".join(text.replace("\n", "") for text in shown)


def same_outcome(got: Outcome, expected: Outcome, dtypes: Sequence[str] | None = None) -> bool:
    """Both raise errors of one family, or both return values equal in shape and value (and ``got``
    has ``dtypes``)."""
    if got.values is None or expected.values is None:
        return got.values is None and expected.values is None and got.family == expected.family
    if len(got.values) != len(expected.values):
        return False
    for position, (value, want) in enumerate(zip(got.values, expected.values, strict=True)):
        if value.shape != want.shape or (
            dtypes is not None and value.dtype != np.dtype(dtypes[position])
        ):
            return False
        if want.dtype.kind in "biu" and value.dtype.kind in "biu":
            if not np.array_equal(value, want):
                return False
        elif not np.allclose(
            value.astype(float), want.astype(float), rtol=RTOL, atol=ATOL, equal_nan=True
        ):
            return False
    return True


@dataclass
class Observation:
    """What one mode on one device gave for one spec: an outcome per call, or why there are none."""

    outcomes: list[Outcome] = field(default_factory=list)
    not_applicable: str = ""
    crash: str = ""
    """The death of the worker running this spec, with the tail of its log."""
    invalid: str = ""
    """Building the spec's graph failed: a fault of the generator, not of the mode."""


@dataclass
class ReferenceObservation:
    """The oracles' outcomes for one spec: FAST_COMPILE, the rewritten graph, numpy (None: no numpy
    twin)."""

    reference: list[Outcome] = field(default_factory=list)
    rewritten: list[Outcome] = field(default_factory=list)
    truth: list[Outcome | None] = field(default_factory=list)
    dtypes: tuple[str, ...] = ()
    invalid: str = ""
    """No reference: building or compiling the graph under FAST_COMPILE failed, or its worker
    died."""


def _call_each(fn: Callable, graph: CalledGraph) -> list[Outcome]:
    outcomes = []
    for arguments in graph.arguments():
        try:
            outcomes.append(Outcome.returned(fn(*arguments)))
        except Exception as error:  # noqa: BLE001 - the outcome of the call
            outcomes.append(Outcome.raised(error, "call"))
    return outcomes


def _compile_and_call_each(compile_fn: Callable[[], Callable], graph: CalledGraph) -> list[Outcome]:
    try:
        fn = compile_fn()
    except Exception as error:  # noqa: BLE001 - the outcome of every call
        return [Outcome.raised(error, "compile")] * len(graph.arguments())
    return _call_each(fn, graph)


class CompilableGraph(Protocol):
    """What a mode compiles: a `WhileGraph`, or a generated optimize graph
    (`optimize_differential`)."""

    @property
    def inputs(self) -> list: ...
    @property
    def outputs(self) -> list: ...
    @property
    def updates(self) -> dict: ...


class CalledGraph(CompilableGraph, Protocol):
    """A graph with its calls' input values: a `WhileGraph`, or a generated index graph
    (`index_differential`)."""

    @property
    def calls(self) -> Sequence[Any]:
        """Per call, its input values as the graph's numpy twin (``truth``) takes them."""
        ...

    def arguments(self) -> list[list[np.ndarray]]: ...


def _pytensor_function(graph: CompilableGraph, mode: Mode | str) -> Callable:
    return pytensor.function(
        graph.inputs, graph.outputs, updates=graph.updates, mode=mode, on_unused_input="ignore"
    )


@contextmanager
def _quiet() -> Iterator[None]:
    # Stock JAX warns about shared random generators and dropped checks; outcomes carry what
    # matters.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def observe_oracles[Spec](
    spec: Spec,
    build: Callable[[Spec], CalledGraph],
    truth_outcome: Callable[[Spec, Any], Outcome | None],
) -> ReferenceObservation:
    """The oracles' outcomes for the graph ``build(spec)``: FAST_COMPILE's, the FAST_RUN-rewritten
    graph's and, per entry of its ``calls``, ``truth_outcome(spec, call)`` (numpy's)."""
    try:
        graph = build(spec)
        with _quiet():
            reference_fn = _pytensor_function(graph, REFERENCE_MODE)
    except Exception as error:  # noqa: BLE001 - reported as the spec's missing reference
        failure = f"building the graph or compiling its reference failed: {error_summary(error)}"
        return ReferenceObservation(invalid=failure)
    with _quiet():
        reference = _call_each(reference_fn, graph)
        rewritten = _compile_and_call_each(
            partial(_pytensor_function, graph, REWRITTEN_MODE), graph
        )
    return ReferenceObservation(
        reference,
        rewritten,
        [truth_outcome(spec, values) for values in graph.calls],
        tuple(output.type.dtype for output in graph.outputs),
    )


def observe_reference(spec: WhileGraphSpec) -> ReferenceObservation:
    return observe_oracles(spec, while_graph, _truth_outcome)


def _truth_outcome(spec: WhileGraphSpec, values: dict[str, np.ndarray]) -> Outcome | None:
    try:
        return Outcome.returned(truth(spec, values))
    except NoTruth:
        return None
    except Exception as error:  # noqa: BLE001 - what the call should raise
        return Outcome.raised(error, "call")


# --- The modes under test -------------------------------------------------------------------------


def _nothing_missing() -> str:
    return ""


@dataclass(frozen=True)
class DifferentialMode:
    name: str
    description: str
    host_only: bool
    compile: Callable[[CompilableGraph, str], Callable]
    """``(graph, device) -> fn``: ``fn(*arguments)`` returns the outputs."""
    device_scope: Callable[[str], AbstractContextManager]
    not_applicable: Callable[[WhileGraphSpec], str]
    """Why the mode does not take this spec by design, or ``""``."""
    missing: Callable[[], str] = _nothing_missing
    """Why the mode cannot run here at all (a package it needs is not installed), or ``""``."""


def _takes_every_spec(spec: WhileGraphSpec) -> str:
    return ""


def _backend_mode(name: str, description: str) -> DifferentialMode:
    backend = BACKENDS[name]
    return DifferentialMode(
        name,
        description,
        backend.host_only,
        lambda graph, device: _pytensor_function(graph, backend.make_mode(device)),
        backend.device_scope,
        _takes_every_spec,
    )


def _compile_jaxified(graph: CompilableGraph, device: str) -> Callable:
    import jax
    from pymc.sampling.jax import get_jaxified_graph

    jitted = jax.jit(get_jaxified_graph(graph.inputs, graph.outputs))
    return lambda *arguments: [np.asarray(output) for output in jitted(*arguments)]


def _jaxified_scope(device: str) -> AbstractContextManager:
    return BACKENDS["jax-registered"].device_scope(device)


def _pymc_missing() -> str:
    if importlib.util.find_spec("pymc") is None:
        return "PyMC is not installed (pip install pymc): get_jaxified_graph is PyMC's"
    return ""


def _jaxified_not_applicable(spec: WhileGraphSpec) -> str:
    if spec.loop.rng:
        return (
            "get_jaxified_graph refuses shared random generators "
            "(PyMC's ValueError); its samplers never pass one"
        )
    return ""


DIFFERENTIAL_MODES: dict[str, DifferentialMode] = {
    mode.name: mode
    for mode in (
        _backend_mode("jax", 'mode="JAX_GPU"'),
        _backend_mode("jax-registered", 'stock mode="JAX" with gpubackend\'s registrations'),
        DifferentialMode(
            "jaxified",
            "jax.jit(pymc.sampling.jax.get_jaxified_graph(...)), as numpyro and blackjax run it",
            False,
            _compile_jaxified,
            _jaxified_scope,
            _jaxified_not_applicable,
            _pymc_missing,
        ),
        _backend_mode("numba", 'mode="NUMBA"'),
        _backend_mode(
            "jax-stock", "PyTensor's own JAX mode, none of gpubackend's lowerings (a baseline)"
        ),
    )
}
DEFAULT_MODES = ("jax", "jax-registered", "jaxified", "numba")


def observe_mode(mode_name: str, device: str, spec: WhileGraphSpec) -> Observation:
    mode = DIFFERENTIAL_MODES[mode_name]
    return observe_graph(mode, device, partial(while_graph, spec), mode.not_applicable(spec))


def observe_graph(
    mode: DifferentialMode, device: str, build: Callable[[], CalledGraph], not_applicable: str = ""
) -> Observation:
    """``mode``'s outcomes on ``device`` for the graph ``build()`` makes, unless the mode cannot run
    here or does not take the spec (``not_applicable``: why)."""
    if reason := mode.missing() or not_applicable:
        return Observation(not_applicable=reason)
    try:
        graph = build()
    except Exception as error:  # noqa: BLE001 - the generator's fault, reported as such
        return Observation(invalid=f"building the graph failed: {error_summary(error)}")
    with _quiet(), mode.device_scope(device):
        return Observation(_compile_and_call_each(partial(mode.compile, graph, device), graph))


def mode_device_pairs(modes: Sequence[str], devices: Sequence[str]) -> list[tuple[str, str]]:
    """Every (mode, device) to run (`name_device_pairs`): a host-only mode once, on ``cpu``."""
    host_only = {name: mode.host_only for name, mode in DIFFERENTIAL_MODES.items()}
    return name_device_pairs(modes, host_only, devices, "differential mode(s)")


# --- Verdicts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    status: str
    detail: str = ""


def _call_label(spec: WhileGraphSpec, index: int) -> str:
    if index >= len(spec.stops):
        edge = STEP_COUNT_EDGES[index - len(spec.stops)]
        return f"call {index + 1} (n_steps = {edge} at run time)"
    stop = spec.stops[index]
    where = "runs to the bound" if stop == spec.loop.bound else f"stops at step {stop}"
    return f"call {index + 1} ({where} of {spec.loop.bound})"


def _raised_inside_as(got: Outcome, expected: Outcome) -> bool:
    """``got`` is a check inside the computation raising the error ``expected`` raises (paths that
    do not own the call)."""
    return bool(got.checked_as) and expected.values is None and got.checked_as == expected.family


def call_verdict(
    label: str,
    got: Outcome,
    oracles: ReferenceObservation,
    index: int,
    upstream_bug: str,
    check_restored: bool = False,
) -> Verdict:
    """Call ``index``'s verdict: ``got`` against numpy's outcome (None: no numpy twin), else
    FAST_COMPILE's (``oracles``). Where those two disagree, or the FAST_RUN-rewritten graph
    disagrees with FAST_COMPILE, doing what one of PyTensor's runs does is `upstream`
    (``upstream_bug`` says which bug). Where gpubackend restores the check the rewrites drop
    (``check_restored``), their outcome excuses nothing."""
    reference, rewritten = oracles.reference[index], oracles.rewritten[index]
    numpy_truth, dtypes = oracles.truth[index], oracles.dtypes
    expected = numpy_truth or reference
    if got.refused:
        return Verdict(REFUSED, f"{label}: {got.describe()}")
    if same_outcome(got, expected, dtypes):
        return Verdict(PASS)
    if _raised_inside_as(got, expected):
        return Verdict(CHECKED, f"{label}: {got.describe()}")
    reference_wrong = numpy_truth is not None and not same_outcome(reference, numpy_truth)
    rewrites_wrong = not check_restored and not same_outcome(rewritten, reference)
    if reference_wrong or rewrites_wrong:
        for name, oracle in (
            ("FAST_COMPILE", reference),
            ("the FAST_RUN-rewritten graph", rewritten),
        ):
            if same_outcome(got, oracle, dtypes) or _raised_inside_as(got, oracle):
                return Verdict(
                    UPSTREAM,
                    f"{label}: {got.describe()}, as {name} does; expected "
                    f"{expected.describe()}; upstream: {upstream_bug}",
                )
    detail = f"{label}: expected {expected.describe()}, got {got.describe()}"
    if got.values is not None:
        return Verdict(SILENT_WRONG, detail)
    # A NotImplementedError other than the named refusal is a refusal without its name.
    if got.stage == "call" and expected.values is None and got.family != "NotImplementedError":
        return Verdict(WRONG_ERROR, detail)
    return Verdict(RAW_ERROR, detail)


def _call_verdict(
    spec: WhileGraphSpec, index: int, got: Outcome, oracles: ReferenceObservation, mode: str
) -> Verdict:
    verdict = call_verdict(
        _call_label(spec, index),
        got,
        oracles,
        index,
        UPSTREAM_BUGS.get(upstream_hint(spec), "a PyTensor bug not listed in UPSTREAM_BUGS"),
        check_restored=upstream_hint(spec) in CHECKS_RESTORED,
    )
    if verdict.status in FAILING and mode == "numba" and index >= len(spec.stops):
        # gpubackend lowers no Scan and no reduction for Numba: these are PyTensor's own.
        return Verdict(
            UPSTREAM, f"{verdict.detail}; upstream: {UPSTREAM_BUGS['numba-step-count-edges']}"
        )
    return verdict


def classify(
    spec: WhileGraphSpec, oracles: ReferenceObservation, observation: Observation, mode: str = ""
) -> Verdict:
    """A mode's verdict on a spec (``mode`` as `--while-modes` names it): its worst call's."""
    return worst_call_verdict(
        observation, lambda index, got: _call_verdict(spec, index, got, oracles, mode)
    )


class Observed(Protocol):
    """An observation that may hold no outcome: `Observation`, or an optimize graph's."""

    crash: str
    not_applicable: str
    invalid: str


def no_outcome_verdict(observation: Observed) -> Verdict | None:
    """The verdict of an observation without outcomes (its worker died, the mode does not take the
    spec, or its graph was not built), else None."""
    if observation.crash:
        return Verdict(CRASH, observation.crash)
    if observation.not_applicable:
        return Verdict(NOT_APPLICABLE, observation.not_applicable)
    if observation.invalid:
        return Verdict(RAW_ERROR, observation.invalid)
    return None


def worst_call_verdict(
    observation: Observation, verdict_of: Callable[[int, Outcome], Verdict]
) -> Verdict:
    """A mode's verdict on a spec: its worst call's, ``verdict_of(index, outcome)``."""
    if verdict := no_outcome_verdict(observation):
        return verdict
    verdicts = [verdict_of(index, got) for index, got in enumerate(observation.outcomes)]
    return min(verdicts, key=lambda verdict: _SEVERITY.index(verdict.status))


# --- A run over many specs ------------------------------------------------------------------------


@dataclass
class SpecResult:
    name: str
    spec: str
    """The spec's repr: ``WhileGraphSpec(...)`` rebuilds it (with while_scan_graphs' names in
    scope)."""
    case_class: str
    family: str
    expected: str = ""
    """Per call, the expected outcome: ``value`` or the error type."""
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    invalid: str = ""


@dataclass
class VerdictReport:
    """What a differential run found: per spec, a result (``name``, ``invalid``: no reference) with
    a verdict per column (mode @ device)."""

    environment: dict[str, Any]
    columns: list[str]
    results: list = field(default_factory=list)
    seconds: float = 0.0
    statuses: ClassVar[tuple[str, ...]] = STATUSES
    failing: ClassVar[tuple[str, ...]] = FAILING

    @property
    def invalid(self) -> list:
        return [result for result in self.results if result.invalid]

    @property
    def failed(self) -> bool:
        """A failing verdict, or a spec without a reference (the generator's fault)."""
        return bool(self.invalid) or any(
            verdict.status in self.failing
            for result in self.results
            for verdict in result.verdicts.values()
        )

    def tallies(self, result: Any) -> Iterator[tuple[str, str]]:
        """What `counts_by` counts of ``result``: (column, its verdict's status) per column."""
        return ((column, verdict.status) for column, verdict in result.verdicts.items())

    def counts_by(self, group: Callable[[Any], str]) -> dict[str, dict[str, dict[str, int]]]:
        """Per ``group(result)``, per column, per status (`tallies`): how many specs with a
        reference."""
        counts: dict[str, dict[str, Counter]] = {}
        for result in self.results:
            if result.invalid:
                continue
            per_column = counts.setdefault(
                group(result), {column: Counter() for column in self.columns}
            )
            for column, tally in self.tallies(result):
                per_column[column][tally] += 1
        return {
            name: {column: dict(counter) for column, counter in per_column.items()}
            for name, per_column in counts.items()
        }

    def summary(self) -> dict[str, Any]:
        """The counts the JSON report holds before every result."""
        return {}

    def to_json(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "seconds": self.seconds,
            "columns": self.columns,
            "statuses": list(self.statuses),
            **self.summary(),
            "results": [asdict(result) for result in self.results],
        }


@dataclass
class DifferentialReport(VerdictReport):
    results: list[SpecResult] = field(default_factory=list)

    def counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """Per class, per column, per status: how many specs."""
        return self.counts_by(lambda result: result.case_class)

    def totals(self) -> dict[str, dict[str, int]]:
        totals: dict[str, Counter[str]] = {column: Counter() for column in self.columns}
        for result in self.results:
            for column, verdict in result.verdicts.items():
                totals[column][verdict.status] += 1
        return {column: dict(counter) for column, counter in totals.items()}

    def summary(self) -> dict[str, Any]:
        return {"counts": self.counts(), "totals": self.totals(), "upstream_bugs": UPSTREAM_BUGS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DifferentialReport:
        results = []
        for result in data["results"]:
            verdicts = {
                column: Verdict(**verdict) for column, verdict in result["verdicts"].items()
            }
            results.append(SpecResult(**{**result, "verdicts": verdicts}))
        return cls(data["environment"], data["columns"], results, data["seconds"])


def spec_name(spec: WhileGraphSpec, index: int) -> str:
    return f"while_{index}_class_{case_class(spec)}_{spec.consumer.kind}"


def _expected_summary(oracles: ReferenceObservation) -> str:
    expected = [
        truth or reference
        for truth, reference in zip(oracles.truth, oracles.reference, strict=True)
    ]
    return ", ".join(
        "value" if outcome.values is not None else outcome.error for outcome in expected
    )


def judged(
    result: SpecResult,
    oracles: ReferenceObservation,
    observations: dict[str, Observation],
    classify_column: Callable[[str, Observation], Verdict],
) -> SpecResult:
    """``result`` with its expected outcomes and, per column, ``classify_column(column,
    observation)``; a spec without a reference (``oracles.invalid``) gets no verdict."""
    result.invalid = oracles.invalid
    if not oracles.invalid:
        result.expected = _expected_summary(oracles)
        result.verdicts = {
            column: classify_column(column, seen) for column, seen in observations.items()
        }
    return result


def spec_result(
    name: str,
    spec: WhileGraphSpec,
    oracles: ReferenceObservation,
    observations: dict[str, Observation],
) -> SpecResult:
    return judged(
        SpecResult(name, repr(spec), case_class(spec), loop_family(spec)),
        oracles,
        observations,
        lambda column, seen: classify(spec, oracles, seen, mode=column.split(" @ ")[0]),
    )


def column_name(mode: str, device: str) -> str:
    return f"{mode} @ {device}"


def _chunks(items: Sequence, size: int) -> list[tuple[int, Sequence]]:
    return [(start, items[start : start + size]) for start in range(0, len(items), size)]


Stream = tuple[str, Callable[[Any], Any], Callable[[Any, int, str], Any]]
"""A stream of observations: its name, what a worker runs per spec, and what a worker's death
gives."""


def run_streams(specs: Sequence, streams: Sequence[Stream], progress: bool) -> dict[str, list]:
    """Every stream over every spec, in chunks of worker processes side by side: per stream, one
    observation per spec.

    Ctrl-C ends the workers within seconds (`interruptible`) and raises
    KeyboardInterrupt: a verdict needs every observation of its spec, and the
    differential reports write no partial run.
    """
    # NUMBA compiles for seconds where JAX traces in milliseconds: its chunks start first.
    tasks = [(stream, start, chunk) for stream in streams for start, chunk in _chunks(specs, CHUNK)]
    tasks.sort(key=lambda task: not task[0][0].startswith("numba"))
    seen: dict[str, list] = {name: [None] * len(specs) for name, _, _ in streams}
    with (
        interruptible() as workers,
        progress_display(progress, len(specs) * len(streams)) as advance,
    ):

        def run_task(stream: Stream, start: int, chunk: Sequence) -> None:
            name, observe, on_crash = stream
            observations = run_in_workers(
                chunk, observe, on_crash, lambda observation: advance(name), workers
            )
            seen[name][start : start + len(observations)] = observations

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            for future in [pool.submit(run_task, *task) for task in tasks]:
                future.result()
    if any(None in observations for observations in seen.values()):
        raise KeyboardInterrupt("the differential writes no report of a partial run")
    return seen


def run_against_reference[Report: VerdictReport](
    specs: Sequence,
    new_report: Callable[[dict[str, Any], list[str]], Report],
    modes: Sequence[str],
    devices: Sequence[str],
    label: str,
    reference: Stream,
    observe: Callable[[str, str, Any], Any],
    on_crash: Callable[[Any, int, str], Any],
    name: Callable[[Any, int], str],
    judge: Callable[[str, Any, Any, dict[str, Any]], Any],
    progress: bool,
) -> Report:
    """Every spec on the ``reference`` stream and, through ``observe(mode, device, spec)``, on
    every (mode, device) pair (`mode_device_pairs`), in worker processes; then per spec,
    ``judge(name(spec, index), spec, reference's observation, observations by column)`` into
    ``new_report(environment, columns)``."""
    started = time.perf_counter()
    pairs = mode_device_pairs(modes, devices)
    report = new_report(environment(devices, label), [column_name(*pair) for pair in pairs])
    streams = [reference]
    streams += [
        (column, partial(observe, *pair), on_crash)
        for column, pair in zip(report.columns, pairs, strict=True)
    ]
    seen = run_streams(specs, streams, progress)
    for index, spec in enumerate(specs):
        observations = {column: seen[column][index] for column in report.columns}
        report.results.append(
            judge(name(spec, index), spec, seen[reference[0]][index], observations)
        )
    report.seconds = round(time.perf_counter() - started, 1)
    return report


def run_differential(
    specs: Sequence[WhileGraphSpec],
    modes: Sequence[str] = DEFAULT_MODES,
    devices: Sequence[str] = (HOST_DEVICE,),
    label: str = "",
    progress: bool = True,
) -> DifferentialReport:
    """Every spec on the reference and on every (mode, device) pair, in worker processes; then the
    verdicts.

    A spec that kills a mode's worker is that mode's `crash`; one that kills
    the reference's has no reference (``invalid``).
    """
    return run_against_reference(
        specs,
        DifferentialReport,
        modes,
        devices,
        label,
        ("reference", observe_reference, _reference_crash),
        observe_mode,
        _mode_crash,
        spec_name,
        spec_result,
        progress,
    )


def _reference_crash(spec: WhileGraphSpec, returncode: int, log_tail: str) -> ReferenceObservation:
    return ReferenceObservation(
        invalid=f"the reference's worker died: {describe_exit(returncode)}\n{log_tail}"
    )


def _mode_crash(spec: WhileGraphSpec, returncode: int, log_tail: str) -> Observation:
    return Observation(
        crash=f"the worker process running this graph died: {describe_exit(returncode)}\n{log_tail}"
    )


def check_in_process(
    spec: WhileGraphSpec, modes: Sequence[tuple[str, str]]
) -> tuple[ReferenceObservation, dict[str, Verdict]]:
    """One spec's reference and verdicts, in this process (tests: no worker start, no crash
    isolation)."""
    oracles = observe_reference(spec)
    return oracles, verdicts_in_process(
        oracles,
        modes,
        lambda mode, device: classify(spec, oracles, observe_mode(mode, device, spec), mode=mode),
    )


def verdicts_in_process(
    oracles: ReferenceObservation,
    modes: Sequence[tuple[str, str]],
    verdict_on: Callable[[str, str], Verdict],
) -> dict[str, Verdict]:
    """Per (mode, device) of ``modes``, ``verdict_on(mode, device)`` by column; none for a spec
    without a reference."""
    if oracles.invalid:
        return {}
    return {column_name(mode, device): verdict_on(mode, device) for mode, device in modes}
