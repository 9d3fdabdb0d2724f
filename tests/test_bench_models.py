"""benchmarks/bench_models.py stays runnable: `make test` runs it with --quick (tiny sizes, three
paths).

The run is a subprocess, as a user starts it, with the session's devices. Its
posterior-mean check (every path against PyMC's NUTS on NUMBA, within five
joint Monte Carlo standard errors) must have run on every model and passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.dom.minidom
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_models.py"
BASELINE = "pymc NUTS, NUMBA"


def test_quick_run_times_every_model_and_its_means_agree_with_numba(tmp_path):
    run = subprocess.run(
        [sys.executable, str(BENCHMARK), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONWARNINGS": "ignore"},
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    report = json.loads((tmp_path / "bench_models.json").read_text())
    rows = report["rows"]
    assert {row["model"] for row in rows} == {"hierarchical", "local_level", "laplace"}
    assert [row for row in rows if row["failure"]] == []
    for row in rows:
        assert row["sampling_seconds"] > 0 and row["ess_per_second"] > 0, row
        if row["path"] == BASELINE:
            continue
        assert row["means"] == "ok", row
        assert row["ess_per_second_vs_numba"] > 0 and row["sampling_vs_numba"] > 0, row
    compared = {row["path"] for row in rows if row["means"] == "ok"}
    assert {"pymc NUTS, JAX_GPU_NUMPY", "numpyro vectorized"} <= compared
    plot = xml.dom.minidom.parse(str(tmp_path / "bench_models.svg"))
    # One size per model in --quick: a line per row, so the plot draws what the table holds.
    assert len(plot.getElementsByTagName("polyline")) == len(rows)
