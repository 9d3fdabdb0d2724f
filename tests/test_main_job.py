"""The main job (``python -m gpubackend run``): the demo, then a quick conformance subset that says
how to run the rest."""

from __future__ import annotations

from gpubackend import main_job
from gpubackend.conformance.catalogue import CATALOGUE
from gpubackend.conformance.reports import load_report


def test_quick_subset_covers_every_family_of_the_catalogue():
    assert {CATALOGUE[name].family for name in main_job.QUICK_CASES} == {
        case.family for case in CATALOGUE.values()
    }


def test_main_job_runs_the_demo_and_the_subset_and_names_the_full_run(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(main_job, "QUICK_CASES", ("ofg_basic",))
    assert main_job.main(["--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "Demo graph" in printed
    assert (
        "quick subset: 1 of the catalogue's" in printed
        and "python -m gpubackend run --full" in printed
    )
    report = load_report(tmp_path / "conformance.json")
    assert {result.case for result in report.results} == {"ofg_basic"}
    assert {result.backend for result in report.results} == {"numba", "jax"}
