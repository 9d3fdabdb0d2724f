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

Ctrl-C: each worker runs in a process group of its own, so a Ctrl-C at the
terminal reaches only the parent, never a worker in the middle of an item
(which would read as a crash, and a fresh worker would run the rest). Within
`interruptible`, the parent's first SIGINT stops the run's `Workers`: no new
worker starts, the running ones are terminated, and each `run_in_workers`
returns the results finished so far. A second SIGINT kills the workers at
once and raises KeyboardInterrupt.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import IO, Any

WORKER_COMMAND = "from gpubackend.conformance.worker import main; main()"
"""Not ``-m``: the package imports this module already, and runpy warns about running it twice."""

LOG_TAIL_LINES = 40
"""How much of a crashed worker's log a `crash` result keeps."""

STOP_GRACE_SECONDS = 2.0
"""After an interrupt, how long a worker has to end on SIGTERM before it gets SIGKILL."""

INTERRUPTED_STATUS = 128 + signal.SIGINT
"""The exit status of a run stopped by Ctrl-C, as a shell reports a process SIGINT ended."""


@dataclass(frozen=True)
class Job:
    run: Callable[[Any], Any]
    """Picklable by reference (a module-level function, or a partial of one): it runs in the
    worker."""
    items: list


class Workers:
    """The worker processes of one run, so that an interrupt can end every one of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self.stopped = False
        """Set by `stop`: no worker starts any more, and a worker's death is not a crash."""

    def start(self, log: IO[bytes]) -> subprocess.Popen | None:
        """A worker process in a process group of its own, its stderr to ``log``; None once the
        run is stopped."""
        # Under the lock: `stop` signals every worker that started before it, and none starts after.
        with self._lock:
            if self.stopped:
                return None
            worker = subprocess.Popen(
                [sys.executable, "-c", WORKER_COMMAND],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=_worker_environment(),
                process_group=0,
            )
            self._running.add(worker)
        return worker

    def wait(self, worker: subprocess.Popen) -> int:
        returncode = worker.wait()
        with self._lock:
            self._running.discard(worker)
        return returncode

    def stop(self, grace: float) -> None:
        """Start no more workers; SIGTERM every running worker's process group, and SIGKILL those
        still running ``grace`` seconds later."""
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self._running and time.monotonic() < deadline:
            time.sleep(0.05)
        self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        with self._lock:
            self.stopped = True
            for worker in self._running:
                # The worker's group bears its pid; it may have just ended.
                with suppress(ProcessLookupError):
                    os.killpg(worker.pid, signum)


@contextmanager
def interruptible() -> Iterator[Workers]:
    """`Workers` for a run that Ctrl-C stops: while the block runs, the first SIGINT stops them
    (`Workers.stop`, in a thread: the handler returns at once, and the block goes on to use
    the results that finished); a second kills them and raises KeyboardInterrupt.

    The handler is installed in the main thread only (Python runs signal handlers
    there), and not where SIGINT is ignored (a background job): it stays ignored.
    """
    workers = Workers()
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    ):
        yield workers
        return
    interrupts = 0

    def on_interrupt(signum: int, frame: object) -> None:
        nonlocal interrupts
        interrupts += 1
        # Not here: the interrupted code may hold the lock `stop` takes.
        grace = STOP_GRACE_SECONDS if interrupts == 1 else 0.0
        threading.Thread(target=workers.stop, args=(grace,), name="stop workers").start()
        if interrupts > 1:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield workers
    finally:
        signal.signal(signal.SIGINT, previous)


def run_in_workers[Item, Result](
    items: Sequence[Item],
    run: Callable[[Item], Result],
    on_crash: Callable[[Item, int, str], Result],
    on_result: Callable[[Result], None],
    workers: Workers,
) -> list[Result]:
    """``run(item)`` for every item, in ``workers``; one result per item, in order.

    When a worker dies, ``on_crash(item, returncode, log_tail)`` gives the
    result of the item it was running, and a fresh worker takes the rest.
    Once ``workers`` are stopped (an interrupt), the results finished so far:
    fewer than the items.
    """
    results: list[Result] = []
    remaining = list(items)
    while remaining:
        with tempfile.TemporaryFile(mode="w+b") as log:
            worker = workers.start(log)
            if worker is None:
                break
            # Popen's pipes are typed optional; they exist because PIPE was asked for.
            assert worker.stdin is not None and worker.stdout is not None
            # A worker stopped before it read its job finished nothing, as `_receive` finds; closing
            # the pipe flushes what the dump left buffered, and fails the same way.
            with suppress(BrokenPipeError):
                pickle.dump(Job(run, remaining), worker.stdin)
            with suppress(BrokenPipeError):
                worker.stdin.close()
            finished = _receive(worker.stdout, len(remaining), on_result)
            results += finished
            worker.stdout.close()
            returncode = workers.wait(worker)
            remaining = remaining[len(finished) :]
            if remaining and not workers.stopped:
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
