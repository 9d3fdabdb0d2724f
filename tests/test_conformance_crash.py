"""A case that kills its process is a `crash` result; the other cases and every report still
complete."""

from __future__ import annotations

import ctypes
import io
import json
import os
import sys
import xml.etree.ElementTree as ET

from rich.console import Console

from gpubackend.conformance.catalogue import CATALOGUE, Case, CaseGraph
from gpubackend.conformance.reports import print_summary, write_reports
from gpubackend.conformance.results import CRASH, PASS
from gpubackend.conformance.runner import run_cases
from gpubackend.devices import DEVICE_ENV_VAR

JAX_DEVICE = os.environ.get(DEVICE_ENV_VAR, "cpu:1")
ABORT_MARKER = "conformance-crash-test: aborting now"
SEGFAULT_MARKER = "conformance-crash-test: reading address 0"


def build_aborting_graph() -> CaseGraph:
    # What an XLA "Check failed" does to the process.
    print(ABORT_MARKER, file=sys.stderr, flush=True)
    os.abort()


def build_segfaulting_graph() -> CaseGraph:
    print(SEGFAULT_MARKER, file=sys.stderr, flush=True)
    ctypes.string_at(0)


CASES = [
    CATALOGUE["ofg_basic"],
    Case("aborts", "crash", build_aborting_graph),
    Case("segfaults", "crash", build_segfaulting_graph),
    CATALOGUE["composite_explicit"],
]


def test_crashing_cases_are_reported_as_crash_and_the_rest_still_run(tmp_path):
    report = run_cases(CASES, ["jax"], [JAX_DEVICE], label="crash test", progress=False)

    assert [(r.case, r.status) for r in report.results] == [
        ("ofg_basic", PASS),
        ("aborts", CRASH),
        ("segfaults", CRASH),
        ("composite_explicit", PASS),
    ]
    aborted, segfaulted = report.results[1], report.results[2]
    assert "SIGABRT" in aborted.detail and ABORT_MARKER in aborted.log_tail
    assert "SIGSEGV" in segfaulted.detail and SEGFAULT_MARKER in segfaulted.log_tail
    # faulthandler's traceback names the function that brought the worker down.
    assert "build_segfaulting_graph" in segfaulted.log_tail
    assert report.failed, "a crash is a failure: the run's exit status must be non-zero"

    paths = write_reports(report, tmp_path)
    saved = json.loads(paths["json"].read_text())
    assert [r["status"] for r in saved["results"]] == [PASS, CRASH, CRASH, PASS]
    assert saved["summary"]["total"][CRASH] == 2
    for kind in ("md", "html"):
        text = paths[kind].read_text()
        assert ABORT_MARKER in text and SEGFAULT_MARKER in text, kind
    suite = ET.parse(paths["xml"]).getroot().find("testsuite")
    assert suite.get("errors") == "2"
    assert (
        ABORT_MARKER
        in suite.find(f"testcase[@name='aborts[crash test jax @ {JAX_DEVICE}]']/error").text
    )

    console = Console(file=io.StringIO(), width=200)
    print_summary(report, paths, console)
    assert "crash" in console.file.getvalue() and SEGFAULT_MARKER in console.file.getvalue()
