"""Reports (JSON, JUnit, Markdown, HTML), the merge of several runners, and the CLI."""

from __future__ import annotations

import io
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from gpubackend.conformance.cli import main
from gpubackend.conformance.reports import load_report, merge_reports, write_reports
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
from gpubackend.conformance.runner import run_and_report
from gpubackend.devices import DEVICE_ENV_VAR

JAX_DEVICE = os.environ.get(DEVICE_ENV_VAR, "cpu:1")


def _result(case: str, status: str, runner: str = "leg", detail: str = "") -> CaseResult:
    checks = [
        CheckResult("numerics", True, "ok"),
        CheckResult("rewrite_free", status != FAIL, "link: 1 rewriter runs"),
    ]
    return CaseResult(
        case,
        "scan",
        "jax",
        "cpu:1",
        status,
        checks,
        detail=detail,
        runner=runner,
        batch_axes=(1, None),
    )


@pytest.fixture
def report() -> Report:
    return Report(
        {
            "label": "leg",
            "devices": {"cpu:1": {"device": "cpu:1 (cpu, simulated)", "kind": "simulated"}},
        },
        [
            _result("a_case", PASS),
            _result("b_case", FAIL),
            _result(
                "c_case", UNSUPPORTED, detail="compile: NotImplementedError: No JAX conversion <Op>"
            ),
            _result("d_case", OBJECT_MODE, detail="Numba will use object mode"),
        ],
    )


def test_json_round_trips_with_environment_summary_and_results(report, tmp_path):
    paths = write_reports(report, tmp_path)
    data = json.loads(paths["json"].read_text())
    assert data["environment"]["label"] == "leg"
    assert data["summary"]["total"] == {PASS: 1, FAIL: 1, UNSUPPORTED: 1, OBJECT_MODE: 1, CRASH: 0}
    assert [r["case"] for r in data["results"]] == ["a_case", "b_case", "c_case", "d_case"]
    assert {"name", "ok", "detail", "host_reads"} == set(data["results"][1]["checks"][1])
    assert load_report(paths["json"]).to_json() == report.to_json()


def test_junit_has_one_testcase_per_result_with_failures_and_skips(report, tmp_path):
    root = ET.parse(write_reports(report, tmp_path)["xml"]).getroot()
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == len(report.results)
    outcome = {case.get("name").split("[")[0]: [child.tag for child in case] for case in cases}
    assert outcome == {
        "a_case": [],
        "b_case": ["failure"],
        "c_case": ["skipped"],
        "d_case": ["skipped"],
    }
    failure = root.find("./testsuite/testcase/failure")
    assert "rewrite_free" in failure.get("message")


def test_html_and_markdown_show_the_matrix_and_failing_details(report, tmp_path):
    paths = write_reports(report, tmp_path)
    page = paths["html"].read_text()
    assert "<script" not in page
    assert page.count("<td class='fail'>") == 1 and page.count("<td class='pass'>") == 1
    assert "No JAX conversion &lt;Op&gt;" in page  # escaped detail
    markdown = paths["md"].read_text()
    assert "| b_case |" in markdown and "rewrite_free: link: 1 rewriter runs" in markdown


def test_markdown_gives_host_reads_per_call_of_measured_cases(report, tmp_path):
    measured = [CheckResult("resident", True, "1 explicit host reads per call", host_reads=1)]
    report.results.append(
        CaseResult("e_case", "scan", "jax", "cpu:1", PASS, measured, runner="leg")
    )
    report.results[0].checks.append(
        CheckResult("resident", True, "0 explicit host reads per call", host_reads=0)
    )
    markdown = write_reports(report, tmp_path)["md"].read_text()
    assert "## Host reads per call" in markdown
    assert "- leg jax @ cpu:1: 0 in 1 cases; 1 in e_case" in markdown
    assert load_report(tmp_path / "conformance.json").results[-1].host_reads_per_call == 1


def test_merge_labels_columns_by_runner(report, tmp_path):
    gpu = Report({"label": "gpu-leg"}, [_result("a_case", PASS, runner="gpu-leg")])
    merged = merge_reports([report, gpu])
    assert merged.columns() == ["leg jax @ cpu:1", "gpu-leg jax @ cpu:1"]
    assert [env["label"] for env in merged.environment["merged_from"]] == ["leg", "gpu-leg"]


def test_merge_keeps_unlabelled_runners_apart():
    first = Report({}, [_result("a_case", PASS, runner="")])
    second = Report({}, [_result("a_case", FAIL, runner="")])
    assert merge_reports([first, second]).columns() == [
        "runner1 jax @ cpu:1",
        "runner2 jax @ cpu:1",
    ]


def test_cli_runs_writes_every_report_and_merges(tmp_path, capsys):
    leg = tmp_path / "leg"
    argv = ["--backend", "jax", "--device", JAX_DEVICE, "--cases", "ofg_basic", "--out", str(leg)]
    assert main([*argv, "--label", "cpu-leg", "--no-progress"]) == 0
    assert {p.name for p in leg.iterdir()} == {
        f"conformance.{ext}" for ext in ("json", "xml", "md", "html")
    }
    data = json.loads((leg / "conformance.json").read_text())
    assert data["environment"]["label"] == "cpu-leg"
    assert data["environment"]["devices"][JAX_DEVICE]["kind"] in {"real", "simulated"}
    assert [(r["case"], r["status"]) for r in data["results"]] == [("ofg_basic", PASS)]

    failing = tmp_path / "failing.json"
    failing.write_text(
        json.dumps(Report({"label": "bad"}, [_result("x", FAIL, runner="bad")]).to_json())
    )
    merged = tmp_path / "merged"
    assert main(["merge", str(leg / "conformance.json"), str(failing), "--out", str(merged)]) == 1
    columns = load_report(merged / "conformance.json").columns()
    assert columns == [f"cpu-leg jax @ {JAX_DEVICE}", "bad jax @ cpu:1"]
    assert Path(merged / "conformance.html").exists()


def test_run_and_report_is_the_main_jobs_entry(tmp_path):
    console = Console(file=io.StringIO(), width=200)
    status = run_and_report(
        backends=["jax"],
        devices=[JAX_DEVICE],
        out_dir=tmp_path,
        label="main job",
        console=console,
        cases="ofg_basic",
        progress=False,
    )
    assert status == 0
    assert f"main job jax @ {JAX_DEVICE}: 1 pass" in console.file.getvalue()
    assert load_report(tmp_path / "conformance.json").environment["label"] == "main job"


def test_cli_names_a_missing_device_instead_of_failing_every_case(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--backend", "jax", "--device", "cpu:7", "--out", str(tmp_path), "--no-progress"])
    assert exit_info.value.code == 2
    assert "cpu:7" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


# --- Interrupted runs (Ctrl-C; the run itself: tests/test_interrupt.py) ---------------------------


def test_an_interrupted_report_says_so_in_every_format_and_round_trips(report, tmp_path):
    report.interrupted, report.planned = True, 10
    paths = write_reports(report, tmp_path)
    loaded = load_report(paths["json"])
    assert loaded.interrupted and loaded.planned == 10
    assert loaded.to_json() == report.to_json()
    assert loaded.to_json()["summary"]["interrupted"] is True
    banner = "Interrupted: 4 of 10 case results finished"
    assert f"**{banner}**" in paths["md"].read_text()
    assert f"<p class='interrupted'>{banner}" in paths["html"].read_text()
    error = ET.parse(paths["xml"]).getroot().find(".//error[@type='interrupted']")
    assert error is not None and error.get("message") == banner


def test_a_report_that_records_no_interruption_is_a_complete_run(report, tmp_path):
    data = report.to_json()
    del data["interrupted"], data["planned"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    loaded = load_report(tmp_path / "old.json")
    assert not loaded.interrupted and loaded.expected == len(report.results)


def test_a_merge_with_an_interrupted_report_is_interrupted_and_no_pass(tmp_path, capsys):
    complete = Report({"label": "cpu"}, [_result("a_case", PASS, runner="cpu")])
    stopped = Report(
        {"label": "gpu"}, [_result("a_case", PASS, runner="gpu")], interrupted=True, planned=3
    )
    paths = []
    for name, each in [("complete", complete), ("stopped", stopped)]:
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(each.to_json()))
    merged = tmp_path / "merged"
    assert main(["merge", *map(str, paths), "--out", str(merged)]) == 1
    loaded = load_report(merged / "conformance.json")
    assert loaded.interrupted and loaded.planned == 4 and len(loaded.results) == 2
    assert "Interrupted: 2 of 4 case results finished" in capsys.readouterr().err
