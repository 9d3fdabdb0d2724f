"""Run items (cases, generated graphs) in a worker process, so that an item that kills its process
is a result.

A lowering can abort the process: XLA's ``Check failed`` aborts, a segfault in
compiled code. Run in the suite's own process, such an item would take the
whole run and its reports with it. Instead, a worker process runs a list of
items and sends each result back over a pipe. When the worker dies, the
caller turns the item it was running into a crash result carrying the tail of
the worker's log (stderr, where the abort message and Python's faulthandler
traceback go), and a fresh worker takes the remaining items. One worker per
list (a (backend, device) pair's cases, say), not per item, pays the process
start, the imports and the compile-cache loads once per list.

Protocol: the parent pickles a `Job` to the worker's stdin; the worker
pickles one result per item to its original stdout, in order, and sends
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
from typing import IO, Any

WORKER_COMMAND = "from gpubackend.conformance.worker import main; main()"
"""Not ``-m``: the package imports this module already, and runpy warns about running it twice."""

LOG_TAIL_LINES = 40
"""How much of a crashed worker's log a `crash` result keeps."""


@dataclass(frozen=True)
class Job:
    run: Callable[[Any], Any]
    """Picklable by reference (a module-level function, or a partial of one): it runs in the
    worker."""
    items: list


def run_in_workers[Item, Result](
    items: Sequence[Item],
    run: Callable[[Item], Result],
    on_crash: Callable[[Item, int, str], Result],
    on_result: Callable[[Result], None],
) -> list[Result]:
    """``run(item)`` for every item, in worker processes; one result per item, in order.

    When a worker dies, ``on_crash(item, returncode, log_tail)`` gives the
    result of the item it was running, and a fresh worker takes the rest.
    """
    results: list[Result] = []
    remaining = list(items)
    while remaining:
        with tempfile.TemporaryFile(mode="w+b") as log:
            worker = subprocess.Popen(
                [sys.executable, "-c", WORKER_COMMAND],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=_worker_environment(),
            )
            # Popen's pipes are typed optional; they exist because PIPE was asked for.
            assert worker.stdin is not None and worker.stdout is not None
            pickle.dump(Job(run, remaining), worker.stdin)
            worker.stdin.close()
            finished = _receive(worker.stdout, len(remaining), on_result)
            results += finished
            worker.stdout.close()
            returncode = worker.wait()
            remaining = remaining[len(finished) :]
            if remaining:
                crash = on_crash(remaining[0], returncode, _tail(log))
                on_result(crash)
                results.append(crash)
                remaining = remaining[1:]
    return results


def _receive[Result](
    worker_output: IO[bytes], expected: int, on_result: Callable[[Result], None]
) -> list[Result]:
    received: list[Result] = []
    while len(received) < expected:
        try:
            result = pickle.load(worker_output)
        except (EOFError, pickle.UnpicklingError):
            break  # the worker died; the caller reports the case it was running
        on_result(result)
        received.append(result)
    return received


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
    import gpubackend  # noqa: F401  registers JAX_GPU and the lowerings before any job code runs

    job: Job = pickle.load(sys.stdin.buffer)
    for item in job.items:
        pickle.dump(job.run(item), results)
        results.flush()
