"""Ctrl-C during a conformance run or the main job stops within seconds, ends every worker it
started, and writes the finished cases' reports, marked interrupted (exit status 130).

Each command runs in its own session, as a terminal's foreground job does; the
test sends SIGINT to that whole process group, which is what a Ctrl-C at the
terminal does. Every process the command starts inherits an environment marker,
so the test finds them all, including any that outlive the command.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpubackend.conformance.reports import load_report
from tests.test_import import REPO

STOP_WITHIN_S = 5.0
"""The issue's bound on the time from Ctrl-C to exit."""
FIRST_RESULT_WITHIN_S = 300.0
"""Worker starts and cold compiles on a loaded machine, before the first result."""
INTERRUPTED_STATUS = 128 + signal.SIGINT

MARKER_VARIABLE = "GPUBACKEND_INTERRUPT_TEST"
# The progress bar's "N/M" column, once the ANSI codes are stripped: "conformance ━━━  3/16 ...".
_PROGRESS = re.compile(r"conformance [^\d\n]*?(\d+)/(\d+)")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# Cheap cases, the first finishing long before the last.
CASES = "ofg_basic,composite_explicit,scan_last_value,scan_sit_sot,ofg_nested,scalar_loop_for"


class Command:
    """``python -m gpubackend ARGV`` in its own session, its output read as it comes, with a
    terminal-compatible console so that the progress bar shows each finished case."""

    def __init__(self, argv: list[str]):
        self.marker = uuid.uuid4().hex
        env = dict(os.environ)
        env.update(
            {
                "PYTHONPATH": str(REPO),
                "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
                "TTY_COMPATIBLE": "1",
                "TERM": "xterm",
                "COLUMNS": "200",
                MARKER_VARIABLE: self.marker,
            }
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpubackend", *argv],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := self.process.stdout.read1(65536):
            self._chunks.append(chunk)

    @property
    def output(self) -> str:
        return _ANSI.sub("", b"".join(self._chunks).decode("utf-8", errors="replace"))

    def finished_results(self) -> tuple[int, int]:
        """The progress bar's latest (finished, total); (0, 0) before it shows."""
        counts = _PROGRESS.findall(self.output)
        return tuple(map(int, counts[-1])) if counts else (0, 0)

    def wait_for_a_finished_result(self) -> tuple[int, int]:
        deadline = time.monotonic() + FIRST_RESULT_WITHIN_S
        while (counts := self.finished_results())[0] < 1:
            assert self.process.poll() is None, f"exited before a result:\n{self.output[-3000:]}"
            assert time.monotonic() < deadline, f"no result yet:\n{self.output[-3000:]}"
            time.sleep(0.1)
        return counts

    def processes(self) -> list[int]:
        """Every live (not zombie) process carrying this command's marker: the command and
        whatever it started."""
        found = []
        wanted = f"{MARKER_VARIABLE}={self.marker}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if wanted in environ.split(b"\0") and state != "Z":
                found.append(int(entry.name))
        return found

    def interrupt(self) -> float:
        """Ctrl-C: SIGINT to the command's process group; the seconds until it exits (the test
        fails after `STOP_WITHIN_S`)."""
        started = time.monotonic()
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"still running {STOP_WITHIN_S} s after SIGINT:\n{self.output[-3000:]}",
                pytrace=False,
            )
        self._reader.join(timeout=5)
        return time.monotonic() - started

    def end(self) -> None:
        """Whatever is left after the test: killed."""
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()


@pytest.fixture
def command():
    started: list[Command] = []

    def start(argv: list[str]) -> Command:
        started.append(Command(argv))
        return started[-1]

    yield start
    for each in started:
        each.end()


def interrupt_after_a_result(run: Command) -> tuple[int, int]:
    """Wait for a finished result, check that workers run, Ctrl-C; check that the command stopped
    in time with status 130 and left no process behind. The (finished, total) seen before."""
    finished, total = run.wait_for_a_finished_result()
    workers = set(run.processes()) - {run.process.pid}
    assert workers, "no worker process was running: nothing to check"
    run.interrupt()
    assert run.process.returncode == INTERRUPTED_STATUS, run.output[-3000:]
    time.sleep(0.5)  # a worker that outlives the command has had time to be seen
    assert run.processes() == [], "worker processes outlived the command"
    return finished, total


def check_interrupted_reports(out: Path, finished: int, total: int, output: str) -> None:
    """The reports hold at least the results finished before the Ctrl-C, fewer than all, and
    every format says the run was interrupted."""
    report = load_report(out / "conformance.json")
    assert report.interrupted
    assert finished <= len(report.results) < total == report.planned
    assert len({(r.case, r.column) for r in report.results}) == len(report.results)
    data = json.loads((out / "conformance.json").read_text())
    assert data["interrupted"] is True and data["summary"]["interrupted"] is True
    assert "Interrupted" in (out / "conformance.md").read_text()
    assert "class='interrupted'" in (out / "conformance.html").read_text()
    junit = ET.parse(out / "conformance.xml").getroot()
    assert junit.find(".//error[@type='interrupted']") is not None
    line = f"Interrupted: {len(report.results)} of {total} case results finished"
    assert line in output and "(marked interrupted)" in output


def test_ctrl_c_during_conformance_stops_ends_workers_and_writes_the_finished_cases(
    tmp_path, command
):
    out = tmp_path / "reports"
    devices = ["cpu", "cpu:1"]
    run = command(
        [
            "conformance",
            "--backend",
            "jax",
            "--device",
            *devices,
            "--cases",
            CASES,
            "--out",
            str(out),
        ]
    )
    finished, total = interrupt_after_a_result(run)
    check_interrupted_reports(out, finished, total, run.output)


def test_ctrl_c_during_the_main_job_keeps_its_finished_results(tmp_path, command):
    out = tmp_path / "reports"
    run = command(["run", "--out", str(out)])
    finished, total = interrupt_after_a_result(run)
    check_interrupted_reports(out, finished, total, run.output)
    assert "quick subset" not in run.output, "an interrupted run is not a finished quick subset"
