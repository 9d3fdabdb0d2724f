"""Run catalogue cases on backends and devices, producing a `Report`."""

from __future__ import annotations

import os
import re
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pytensor
from pytensor.compile.executor import Function
from pytensor.compile.mode import Mode
from rich.console import Console

from gpubackend.conformance.backends import BACKENDS, Backend, backend_device_pairs
from gpubackend.conformance.catalogue import Case, CaseGraph, select_cases
from gpubackend.conformance.checks import (
    check_baked,
    check_canonical_intact,
    check_numerics,
    check_resident,
    check_rewrite_free,
    error_summary,
    guarded,
    host_copy,
)
from gpubackend.conformance.environment import environment
from gpubackend.conformance.fingerprint import fingerprint
from gpubackend.conformance.probe import CALL, RewriteFreeProbe
from gpubackend.conformance.progress import progress_display
from gpubackend.conformance.reports import (
    BASENAME,
    write_and_summarise,
    write_or_save,
    write_reports,
)
from gpubackend.conformance.results import (
    CRASH,
    FAIL,
    OBJECT_MODE,
    PASS,
    UNSUPPORTED,
    CaseResult,
    CheckResult,
    Report,
)
from gpubackend.conformance.worker import (
    INTERRUPTED_STATUS,
    Workers,
    describe_exit,
    interruptible,
    run_in_workers,
)

REFERENCE_MODE = "FAST_COMPILE"
"""PyTensor's Python backend: the independent reference where a case has no closed form."""

_UNSUPPORTED_MESSAGE = re.compile(
    r"No JAX conversion|Dispatch not implemented|cannot yet be converted|not (yet )?implemented",
    re.IGNORECASE,
)
_OBJECT_MODE_MESSAGE = re.compile(r"object mode", re.IGNORECASE)


def is_unsupported(error: BaseException) -> bool:
    """A lowering that does not exist, as opposed to one that breaks."""
    return isinstance(error, NotImplementedError) or bool(_UNSUPPORTED_MESSAGE.search(str(error)))


@dataclass
class PreparedCase:
    """A case's graph, built once and shared by every backend, with its reference values."""

    case: Case
    graph: CaseGraph | None
    reference: list[np.ndarray] | None
    error: str = ""


def prepare(case: Case) -> PreparedCase:
    try:
        graph = case.build()
        reference = graph.reference
        if reference is None:
            reference_fn = _compile(graph, REFERENCE_MODE)
            reference = host_copy(reference_fn(*graph.values))
    except Exception as error:  # noqa: BLE001 - reported as the case's failure
        return PreparedCase(
            case, None, None, f"building the case or its reference failed: {error_summary(error)}"
        )
    return PreparedCase(case, graph, [np.asarray(r) for r in reference])


def _compile(graph: CaseGraph, mode: Mode | str) -> Function:
    # Generated graphs may leave an input unused; that is not what the suite checks.
    return pytensor.function(graph.inputs, graph.outputs, mode=mode, on_unused_input="ignore")


def run_on(prepared: PreparedCase, backend: Backend, device: str) -> CaseResult:
    """Compile once on ``backend``/``device``, call twice, and run every check on that function."""
    case = prepared.case
    result = CaseResult(
        case.name, case.family, backend.name, device, FAIL, batch_axes=case.batch_axes
    )
    started = time.perf_counter()
    try:
        if prepared.graph is None or prepared.reference is None:
            result.detail = prepared.error
            return result
        _compile_call_and_check(case, prepared.graph, prepared.reference, backend, device, result)
        return result
    finally:
        result.seconds = round(time.perf_counter() - started, 3)


def _compile_call_and_check(
    case: Case,
    graph: CaseGraph,
    reference: list[np.ndarray],
    backend: Backend,
    device: str,
    result: CaseResult,
) -> None:
    before = fingerprint(graph.outputs)
    probe = RewriteFreeProbe()
    with warnings.catch_warnings(record=True) as caught, backend.device_scope(device):
        warnings.simplefilter("always")
        with probe.installed():
            stage = "compile"
            try:
                mode = backend.make_mode(device)
                fn = probe.compile(lambda: _compile(graph, mode))
                stage = "call"
                with probe.phase(CALL):
                    first = host_copy(fn(*graph.values))
                    second_raw = fn(*graph.values)
                    second = host_copy(second_raw)
                    resident = (
                        guarded(
                            "resident",
                            lambda: check_resident(fn, graph, device, second_raw, case.host_reads),
                        )
                        if backend.device_resident
                        else None
                    )
            except Exception as error:  # noqa: BLE001 - classified and reported
                result.status = UNSUPPORTED if is_unsupported(error) else FAIL
                result.detail = f"{stage}: {error_summary(error)}"
                result.checks = [CheckResult(stage, False, error_summary(error))]
                return
    numerics = guarded("numerics", lambda: check_numerics(graph, reference, [first, second]))
    result.checks = [
        numerics,
        guarded("canonical_intact", lambda: check_canonical_intact(graph, before)),
        check_rewrite_free(probe),
        guarded("baked", lambda: check_baked(case, graph, fn, bakes_inplace=backend.bakes_inplace)),
    ]
    if resident is not None:
        result.checks.append(resident)
    object_mode = sorted(
        {
            str(w.message).split(". ")[0]
            for w in caught
            if _OBJECT_MODE_MESSAGE.search(str(w.message))
        }
    )
    if object_mode and numerics.ok:
        result.status = OBJECT_MODE
        result.detail = "; ".join(object_mode)
    else:
        result.status = PASS if all(check.ok for check in result.checks) else FAIL


def run_case(backend: str, device: str, label: str, case: Case) -> CaseResult:
    """One case on one backend and device, as a worker runs it."""
    result = run_on(prepare(case), BACKENDS[backend], device)
    result.runner = label
    return result


def crash_result(
    case: Case, backend: str, device: str, label: str, returncode: int, log_tail: str
) -> CaseResult:
    return CaseResult(
        case.name,
        case.family,
        backend,
        device,
        CRASH,
        detail=f"the worker process running this case died: {describe_exit(returncode)}",
        runner=label,
        batch_axes=case.batch_axes,
        log_tail=log_tail,
    )


def _run_pair(
    workers: Workers, cases: Sequence[Case], backend: str, device: str, label: str, on_result
) -> list[CaseResult]:
    return run_in_workers(
        cases,
        partial(run_case, backend, device, label),
        lambda case, returncode, log_tail: crash_result(
            case, backend, device, label, returncode, log_tail
        ),
        on_result,
        workers,
    )


def run_cases(
    cases: Sequence[Case],
    backends: Sequence[str],
    devices: Sequence[str],
    label: str = "",
    progress: bool = True,
) -> Report:
    """Every case on every (backend, device) pair: one worker process per pair (`worker`), pairs
    side by side.

    A case that kills its worker is reported as `crash`; the pair's other
    cases go on in a fresh worker. Ctrl-C (`interruptible`) ends the workers
    within seconds: the report holds the results that finished, marked
    `interrupted`.
    """
    pairs = backend_device_pairs(backends, devices)
    report = Report(environment(devices, label), planned=len(cases) * len(pairs))
    with interruptible() as workers, progress_display(progress, report.expected) as advance:

        def on_result(result: CaseResult) -> None:
            advance(f"{result.case} · {result.backend} @ {result.device}: {result.status}")

        with ThreadPoolExecutor(max_workers=min(len(pairs), os.cpu_count() or 1) or 1) as pool:
            runs = [
                pool.submit(_run_pair, workers, cases, backend.name, device, label, on_result)
                for backend, device in pairs
            ]
            per_pair = [run.result() for run in runs]
    # Case by case, as the matrix reads; an interrupted pair's list stops short.
    report.results = [
        results[position]
        for position in range(len(cases))
        for results in per_pair
        if position < len(results)
    ]
    report.interrupted = len(report.results) < report.expected
    return report


def run_suite(
    backends: Sequence[str],
    devices: Sequence[str],
    out_dir: str | Path | None = None,
    label: str = "",
    cases: str | Sequence[Case] | None = None,
    generated: int = 0,
    progress: bool = True,
) -> Report:
    """Run the catalogue plus ``generated`` Hypothesis graphs; write reports to ``out_dir``.

    ``cases`` is a name pattern filtering the catalogue (`select_cases`), or the cases themselves.
    """
    selected = select_cases(cases) if cases is None or isinstance(cases, str) else list(cases)
    if generated:
        # Hypothesis is imported only when graphs are generated.
        from gpubackend.conformance.strategies import generated_cases

        selected += generated_cases(generated)
    report = run_cases(selected, backends, devices, label=label, progress=progress)
    if out_dir is not None:
        write_or_save(lambda: write_reports(report, out_dir), report.to_json, out_dir, BASENAME)
    return report


def run_and_report(
    backends: Sequence[str],
    devices: Sequence[str],
    out_dir: str | Path,
    label: str = "",
    console: Console | None = None,
    cases: str | Sequence[Case] | None = None,
    generated: int = 0,
    progress: bool = True,
) -> int:
    """Run the suite, write every report to ``out_dir``, print the summary; `INTERRUPTED_STATUS`
    (130) when Ctrl-C stopped it, else 1 when any case fails or crashes, else 0.

    When the reports cannot be written, the summary is printed all the same
    and `ReportsNotWrittenError` names the temporary file the results were
    saved to.
    """
    report = run_suite(
        backends, devices, label=label, cases=cases, generated=generated, progress=progress
    )
    write_and_summarise(report, out_dir, console or Console(stderr=True, soft_wrap=True))
    if report.interrupted:
        return INTERRUPTED_STATUS
    return 1 if report.failed else 0
