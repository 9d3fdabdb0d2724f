"""The conformance commands check their input before anything runs, and never lose a run's results.

A usage error is one line on stderr and exit status 2, with no traceback. The
commands' runners are replaced by ones that fail the test when called
(`nothing_runs`): a usage error must come before any case, worker or
Hypothesis draw.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from gpubackend import main_job
from gpubackend.conformance import cli, differential_reports, runner
from gpubackend.conformance.cli import main
from gpubackend.conformance.differential import PASS as DIFFERENTIAL_PASS
from gpubackend.conformance.differential import DifferentialReport, SpecResult, Verdict
from gpubackend.conformance.reports import load_report
from gpubackend.conformance.results import FAIL, PASS, CaseResult, Report
from tests.test_import import REPO, run_fresh


def _refuse(*args, **kwargs):
    raise AssertionError("something ran before the arguments were checked")


@pytest.fixture
def nothing_runs(monkeypatch):
    for module, name in [
        (cli, "run_and_report"),
        (cli, "run_differential_and_report"),
        (cli, "run_optimize_and_report"),
        (runner, "run_in_workers"),
        (differential_reports, "draw_while_specs"),
        (main_job, "run_demo"),
    ]:
        monkeypatch.setattr(module, name, _refuse)


def usage_error(argv: list[str], capsys, command=main) -> str:
    """The one line a usage error prints; it exits with status 2 and shows no traceback."""
    with pytest.raises(SystemExit) as exit_info:
        command(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    return err


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "a_file"
    path.write_text("")
    return path


@pytest.fixture
def saved_dir(tmp_path, monkeypatch) -> Path:
    """Where results are saved when their reports cannot be written (the temporary directory)."""
    saved = tmp_path / "saved"
    saved.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(saved))
    return saved


# --- --out ----------------------------------------------------------------------------------------


def test_out_that_is_a_file_is_refused_before_anything_runs(nothing_runs, a_file, capsys):
    err = usage_error(["--out", str(a_file), "--cases", "ofg_basic"], capsys)
    assert f"argument --out: '{a_file}' is a file; expected a directory" in err


def test_out_below_a_file_is_refused_before_anything_runs(nothing_runs, a_file, capsys):
    err = usage_error(["--out", str(a_file / "reports"), "--cases", "ofg_basic"], capsys)
    assert f"'{a_file / 'reports'}' cannot be made: '{a_file}' is a file" in err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_out_where_nothing_can_be_made_is_refused_before_anything_runs(nothing_runs, capsys):
    # Root may write anywhere else; nobody can make a directory in /proc.
    err = usage_error(["--out", "/proc/gpubackend-test/reports", "--cases", "ofg_basic"], capsys)
    assert "argument --out: '/proc/gpubackend-test/reports' is not writable" in err


def test_checking_out_leaves_nothing_behind(nothing_runs, tmp_path, capsys):
    # --out is checked (and passes) first; the run is refused for --generated.
    usage_error(["--out", str(tmp_path / "new" / "reports"), "--generated", "-1"], capsys)
    assert not list(tmp_path.iterdir())


# --- counts, --cases, what runs -------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--generated", "--generated-while"])
@pytest.mark.parametrize("value", ["-1", "two"])
def test_a_count_that_is_not_a_whole_number_is_refused(nothing_runs, tmp_path, capsys, flag, value):
    err = usage_error(["--out", str(tmp_path), flag, value], capsys)
    assert f"argument {flag}: expected a whole number, 0 or more, got '{value}'" in err
    assert "max_examples" not in err


def test_cases_that_match_nothing_are_refused(nothing_runs, tmp_path, capsys):
    err = usage_error(["--out", str(tmp_path), "--cases", "zzz_no_such_case"], capsys)
    assert "argument --cases: 'zzz_no_such_case' matches no case name or family" in err
    assert "families: composite, mixture, ofg" in err
    assert not list(tmp_path.iterdir())


def test_each_fragment_of_cases_must_match_and_a_typo_gets_a_suggestion(
    nothing_runs, tmp_path, capsys
):
    err = usage_error(["--out", str(tmp_path), "--cases", "scan,ofg_basik"], capsys)
    assert "'ofg_basik' matches no case" in err and "'scan'" not in err
    assert "did you mean 'ofg_basic'?" in err


def test_cases_that_name_nothing_are_refused(nothing_runs, tmp_path, capsys):
    err = usage_error(["--out", str(tmp_path), "--cases", ","], capsys)
    assert "argument --cases: ',' names no case" in err


def test_no_catalogue_and_nothing_generated_is_refused(nothing_runs, tmp_path, capsys):
    err = usage_error(["--out", str(tmp_path), "--no-catalogue"], capsys)
    assert (
        "--no-catalogue with none of --generated N, --generated-while N, "
        "--generated-index N, --generated-optimize N or --stock-superset N runs nothing" in err
    )


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["--backend", "numba"], "--backend"),
        (["--no-catalogue", "--generated-while", "1", "--while-modes", "numba"], "--while-modes"),
    ],
)
def test_host_only_backends_or_modes_with_only_gpus_are_refused(
    nothing_runs, tmp_path, capsys, monkeypatch, argv, refused
):
    # Whether or not this machine has a GPU, --device accepts one here.
    monkeypatch.setattr(
        "gpubackend.conformance.arguments.resolve_device", lambda spec, source: None
    )
    err = usage_error(["--out", str(tmp_path), "--device", "gpu", *argv], capsys)
    assert f"{refused} numba has nothing to run on --device gpu" in err
    assert "add --device cpu" in err


# --- --device -------------------------------------------------------------------------------------


def test_a_missing_device_gets_the_cli_advice(nothing_runs, tmp_path, capsys):
    err = usage_error(["--out", str(tmp_path), "--backend", "jax", "--device", "cpu:7"], capsys)
    assert "argument --device: the requested device 'cpu:7' does not exist" in err
    assert "--xla_force_host_platform_device_count=8" in err
    assert "pass --device cpu" in err
    assert "jax_gpu_mode" not in err and "GPUBACKEND_DEVICE" not in err
    assert not list(tmp_path.iterdir())


def test_a_malformed_device_gets_the_cli_forms(nothing_runs, tmp_path, capsys):
    err = usage_error(["--out", str(tmp_path), "--device", "tpu"], capsys)
    assert "argument --device: Device 'tpu' is not understood: expected 'gpu', 'gpu:N', " in err
    assert "jax.Device" not in err and "GPUBACKEND_DEVICE" not in err


# --- merge ----------------------------------------------------------------------------------------


def _write_report(path: Path, *statuses: str) -> Path:
    results = [
        CaseResult(f"case_{index}", "scan", "jax", "cpu:1", status, runner="leg")
        for index, status in enumerate(statuses)
    ]
    path.write_text(json.dumps(Report({"label": "leg"}, results).to_json()))
    return path


def test_merge_of_a_missing_file_is_refused(tmp_path, capsys):
    missing = tmp_path / "missing.json"
    err = usage_error(["merge", str(missing), "--out", str(tmp_path / "merged")], capsys)
    assert f"argument reports: cannot read '{missing}': No such file or directory" in err
    assert not (tmp_path / "merged").exists()


def _while_scan_report() -> dict:
    verdicts = {"jax @ cpu:1": Verdict(DIFFERENTIAL_PASS)}
    result = SpecResult("a", "spec a", "1", "sit-sot", "value", verdicts)
    return DifferentialReport({"label": "leg"}, ["jax @ cpu:1"], [result]).to_json()


@pytest.mark.parametrize(
    "content",
    [
        "not json at all",
        json.dumps({"a": 1}),
        json.dumps([1, 2]),
        json.dumps({"environment": {}, "results": [{"case": "x", "status": "green"}]}),
        json.dumps(_while_scan_report()),
    ],
    ids=["not-json", "other-json", "a-list", "unknown-status", "while-scan-report"],
)
def test_merge_of_a_file_that_is_not_a_conformance_report_is_refused(tmp_path, capsys, content):
    other = tmp_path / "other.json"
    other.write_text(content)
    good = _write_report(tmp_path / "good.json", PASS)
    err = usage_error(["merge", str(good), str(other), "--out", str(tmp_path / "merged")], capsys)
    assert f"argument reports: '{other}' is not a conformance report" in err
    assert "expected the conformance.json that 'python -m gpubackend conformance' writes" in err
    assert not (tmp_path / "merged").exists()


def test_merge_into_a_file_is_refused(tmp_path, a_file, capsys):
    good = _write_report(tmp_path / "good.json", PASS)
    err = usage_error(["merge", str(good), "--out", str(a_file)], capsys)
    assert f"argument --out: '{a_file}' is a file" in err


# --- results are never lost -----------------------------------------------------------------------


def _blocked_out(tmp_path: Path, basename: str) -> Path:
    """A writable directory in which the report ``basename`` cannot be written (it is a
    directory)."""
    out = tmp_path / "out"
    (out / basename).mkdir(parents=True)
    return out


def _saved_file(err: str, saved_dir: Path) -> Path:
    [saved] = list(saved_dir.iterdir())
    assert f"the results are saved in {saved}" in err
    return saved


def test_a_run_whose_reports_cannot_be_written_saves_its_results(
    tmp_path, saved_dir, capsys, monkeypatch
):
    report = Report({"label": "leg"}, [CaseResult("ofg_basic", "ofg", "numba", "cpu", PASS)])
    monkeypatch.setattr(runner, "run_cases", lambda *args, **kwargs: report)
    out = _blocked_out(tmp_path, "conformance.json")
    argv = ["--out", str(out), "--backend", "numba", "--cases", "ofg_basic", "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"could not write the reports to '{out}'" in err and "Is a directory" in err
    assert "numba @ cpu: 1 pass" in err, "the summary is printed all the same"
    assert load_report(_saved_file(err, saved_dir)).to_json() == report.to_json()


def test_a_while_scan_run_whose_reports_cannot_be_written_saves_its_results(
    tmp_path, saved_dir, capsys, monkeypatch
):
    verdicts = {"jax @ cpu:1": Verdict(DIFFERENTIAL_PASS)}
    report = DifferentialReport(
        {}, ["jax @ cpu:1"], [SpecResult("a", "spec", "1", "sit-sot", "value", verdicts)]
    )
    monkeypatch.setattr(differential_reports, "draw_while_specs", lambda count: [])
    monkeypatch.setattr(differential_reports, "run_differential", lambda *a, **k: report)
    out = _blocked_out(tmp_path, "while_scan_differential.json")
    argv = ["--out", str(out), "--no-catalogue", "--generated-while", "1", "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"could not write the reports to '{out}'" in err
    saved = _saved_file(err, saved_dir)
    assert saved.name.startswith("while_scan_differential-")
    assert DifferentialReport.from_json(json.loads(saved.read_text())) == report


def test_a_merge_whose_reports_cannot_be_written_saves_its_results(tmp_path, saved_dir, capsys):
    first = _write_report(tmp_path / "first.json", PASS)
    second = _write_report(tmp_path / "second.json", FAIL)
    out = _blocked_out(tmp_path, "conformance.json")
    assert main(["merge", str(first), str(second), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"could not write the reports to '{out}'" in err
    merged = load_report(_saved_file(err, saved_dir))
    assert [result.status for result in merged.results] == [PASS, FAIL]


# --- the main job ---------------------------------------------------------------------------------


def test_main_job_refuses_an_out_it_cannot_write_before_the_demo(nothing_runs, a_file, capsys):
    err = usage_error(["--out", str(a_file)], capsys, command=main_job.main)
    assert f"gpubackend run: error: argument --out: '{a_file}' is a file" in err


# --- one host device ------------------------------------------------------------------------------

ONE_DEVICE_SCRIPT = """
import contextlib, io, json, sys
import pytensor, pytensor.tensor as pt
import gpubackend
from gpubackend.__main__ import main

x = pt.vector("x")
messages = {}
for name, mode in [("env", "JAX_GPU"), ("api", gpubackend.jax_gpu_mode("cpu:1"))]:
    try:
        pytensor.function([x], x + 1, mode=mode)
    except gpubackend.DeviceNotFoundError as error:
        messages[name] = str(error)
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        main(["conformance", "--device", "cpu:1", "--out", sys.argv[1]])
    except SystemExit as exit:
        messages["cli_status"] = exit.code
messages["cli"] = err.getvalue()
print(json.dumps(messages))
"""


def test_one_host_device_cpu_1_advises_the_flag_that_makes_it_in_each_place(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    env["GPUBACKEND_DEVICE"] = "cpu:1"
    # Keep what the environment has on the path (a provisioned Python's packages, the GPU leg).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    script = f"import sys; sys.argv[1:] = [{str(tmp_path)!r}]\n{ONE_DEVICE_SCRIPT}"
    messages = run_fresh(script, env=env)
    flag = "set XLA_FLAGS=--xla_force_host_platform_device_count=2 in the environment"
    assert "'cpu:1' (from $GPUBACKEND_DEVICE) does not exist" in messages["env"]
    assert flag in messages["env"] and messages["env"].endswith("set GPUBACKEND_DEVICE=cpu.")
    assert "'cpu:1' (given as device=) does not exist" in messages["api"]
    assert flag in messages["api"] and "pass device='cpu' to jax_gpu_mode" in messages["api"]
    assert messages["cli_status"] == 2
    assert messages["cli"].count("\n") == 1
    assert "argument --device: the requested device 'cpu:1' does not exist" in messages["cli"]
    assert flag in messages["cli"] and "pass --device cpu" in messages["cli"]
    assert "GPUBACKEND_DEVICE" not in messages["cli"] and "jax_gpu_mode" not in messages["cli"]


def test_optimize_methods_that_match_nothing_are_refused(nothing_runs, tmp_path, capsys):
    argv = ["--out", str(tmp_path), "--generated-optimize", "1", "--optimize-methods", "zzz"]
    err = usage_error(argv, capsys)
    assert "method pattern 'zzz' matches none of minimize:bfgs" in err
