"""Run a backend's cases in a worker process, so that a case that kills its process is a result.

A lowering can abort the process: XLA's ``Check failed`` aborts, a segfault in
compiled code. Run in the suite's own process, such a case would take the whole
run and its reports with it. Instead, each (backend, device) pair gets one
worker process that builds its cases, runs them and sends each `CaseResult`
back over a pipe. When the worker dies, the case it was running becomes a
`crash` result carrying the tail of the worker's log (stderr, where the abort
message and Python's faulthandler traceback go), and a fresh worker takes the
remaining cases. One worker per pair, not per case, pays the process start,
the imports and the compile-cache loads once per pair.

Protocol: the parent pickles a `Job` to the worker's stdin; the worker
pickles one `CaseResult` per case to its original stdout, in order, and sends
everything else it or a library prints to its log.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpubackend.conformance.catalogue import Case
from gpubackend.conformance.results import CRASH, CaseResult

WORKER_COMMAND = "from gpubackend.conformance.worker import main; main()"
"""Not ``-m``: the package imports this module already, and runpy warns about running it twice."""

LOG_TAIL_LINES = 40
"""How much of a crashed worker's log a `crash` result keeps."""


@dataclass(frozen=True)
class Job:
    backend: str
    device: str
    label: str
    cases: list[Case]


def run_in_workers(
    cases: Sequence[Case],
    backend: str,
    device: str,
    label: str,
    on_result: Callable[[CaseResult], None],
) -> list[CaseResult]:
    """Run ``cases`` on ``backend``/``device`` in worker processes; a worker's death is the running case's `crash`."""
    results: list[CaseResult] = []
    remaining = list(cases)
    while remaining:
        with tempfile.TemporaryFile(mode="w+b") as log:
            worker = subprocess.Popen(
                [sys.executable, "-c", WORKER_COMMAND],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=_worker_environment(),
            )
            pickle.dump(Job(backend, device, label, remaining), worker.stdin)
            worker.stdin.close()
            finished = _receive(worker, len(remaining), on_result)
            results += finished
            worker.stdout.close()
            returncode = worker.wait()
            remaining = remaining[len(finished) :]
            if remaining:
                crash = crash_result(remaining[0], backend, device, label, returncode, _tail(log))
                on_result(crash)
                results.append(crash)
                remaining = remaining[1:]
    return results


def _receive(worker: subprocess.Popen, expected: int, on_result: Callable[[CaseResult], None]) -> list[CaseResult]:
    received = []
    while len(received) < expected:
        try:
            result = pickle.load(worker.stdout)
        except (EOFError, pickle.UnpicklingError):
            break  # the worker died; the caller reports the case it was running
        on_result(result)
        received.append(result)
    return received


def crash_result(case: Case, backend: str, device: str, label: str, returncode: int, log_tail: str) -> CaseResult:
    return CaseResult(
        case.name, case.family, backend, device, CRASH,
        detail=f"the worker process running this case died: {describe_exit(returncode)}",
        runner=label, batch_axes=case.batch_axes, log_tail=log_tail,
    )


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _tail(log) -> str:
    log.seek(0)
    lines = log.read().decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _worker_environment() -> dict[str, str]:
    env = dict(os.environ)
    # The worker imports what this process imports (this checkout's gpubackend,
    # a test module's cases), whatever its working directory.
    env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
    # Workers of several pairs may share one GPU: none may reserve 75% of it up front.
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return env


def main() -> None:
    results = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    # Everything printed from here on, by Python or by native code, goes to the log.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    faulthandler.enable()
    job: Job = pickle.load(sys.stdin.buffer)

    import gpubackend  # noqa: F401  registers JAX_GPU and the lowerings
    from gpubackend.conformance.backends import BACKENDS
    from gpubackend.conformance.runner import prepare, run_on

    backend = BACKENDS[job.backend]
    for case in job.cases:
        result = run_on(prepare(case), backend, job.device)
        result.runner = job.label
        pickle.dump(result, results)
        results.flush()

