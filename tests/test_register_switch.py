"""Stock dispatch kept: ``GPUBACKEND_REGISTER=jax_gpu``, and the conformance suite's stock baseline.

With the switch, stock mode="JAX" stays PyTensor's own and JAX_GPU keeps
gpubackend's lowerings. The switch is read when gpubackend is imported, so
those checks run in a fresh interpreter. The baseline (``jax-stock``) uses
PyTensor's own lowerings even here, where gpubackend's are registered globally.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from gpubackend.conformance.backends import BACKENDS
from gpubackend.conformance.catalogue import CATALOGUE
from gpubackend.conformance.results import UNSUPPORTED
from gpubackend.conformance.runner import prepare, run_on

SCOPED_SCRIPT = textwrap.dedent(
    """
    import json
    import numpy as np
    import pytensor
    import pytensor.tensor as pt
    from pytensor.link.jax.dispatch import jax_funcify
    from pytensor.scan import until
    from pytensor.tensor.optimize import minimize

    stock_registry = dict(jax_funcify.registry)
    import gpubackend
    from gpubackend.dispatch.jax.replacements import REPLACED

    report = {
        "registry_unchanged": dict(jax_funcify.registry) == stock_registry
        and all(jax_funcify.registry[key] is value for key, value in stock_registry.items()),
        "stock_is_kept": all(jax_funcify.dispatch(op_type) is r.stock for op_type, r in REPLACED.items()),
    }

    def doubling_until(x0, limit):
        steps = pytensor.scan(
            lambda x, limit: (x * 2, until(x * 2 > limit)),
            outputs_info=[x0], non_sequences=[limit], n_steps=20, return_updates=False,
        )
        return steps[-1]

    x0, limit = pt.scalar("x0"), pt.scalar("limit")
    last = doubling_until(x0, limit)
    # A while-Scan inside a for-Scan body: the stock for-Scan lowering must recurse into ours.
    limits = pt.vector("limits")
    nested = pytensor.scan(lambda lim, x0: doubling_until(x0, lim), sequences=[limits], non_sequences=[x0], return_updates=False)
    a = pt.vector("a")
    x = pt.vector("x")
    solution, success = minimize(((x - a) ** 2).sum(), x)

    def outcome(inputs, outputs, values, mode):
        try:
            fn = pytensor.function(inputs, outputs, mode=mode)
            return {"values": [np.asarray(v).tolist() for v in fn(*values)]}
        except Exception as error:
            return {"error": type(error).__name__, "message": str(error)[:200]}

    for mode in ("JAX", "JAX_GPU"):
        report[mode] = {
            "while_scan": outcome([x0, limit], [last], [1.0, 10.0], mode),
            "nested_while_scan": outcome([limits, x0], [nested], [np.array([3.0, 10.0]), 1.0], mode),
            "minimize": outcome([x, a], [solution], [np.zeros(2), np.array([1.0, -2.0])], mode),
        }
    print("REPORT" + json.dumps(report))
    """
)


def _run(script: str, register: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUBACKEND_REGISTER": register}
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def scoped_report() -> dict:
    completed = _run(SCOPED_SCRIPT, "jax_gpu")
    assert completed.returncode == 0, completed.stderr[-3000:]
    [line] = [line for line in completed.stdout.splitlines() if line.startswith("REPORT")]
    return json.loads(line.removeprefix("REPORT"))


def test_stock_registrations_are_the_stock_functions(scoped_report) -> None:
    assert scoped_report["registry_unchanged"]
    assert scoped_report["stock_is_kept"]


def test_stock_jax_refuses_what_stock_refuses(scoped_report) -> None:
    stock = scoped_report["JAX"]
    assert stock["while_scan"]["message"] == "While Scan cannot yet be converted to JAX"
    assert stock["nested_while_scan"]["message"] == "While Scan cannot yet be converted to JAX"
    assert stock["minimize"]["error"] == "NotImplementedError"


def test_jax_gpu_lowers_while_scans_and_optimize_ops(scoped_report) -> None:
    ours = scoped_report["JAX_GPU"]
    assert ours["while_scan"] == {"values": [16.0]}
    assert ours["nested_while_scan"] == {"values": [[4.0, 16.0]]}
    [solution] = ours["minimize"]["values"]
    assert solution == pytest.approx([1.0, -2.0], abs=1e-6)


def test_an_unknown_setting_is_refused_with_the_expected_values() -> None:
    completed = _run("import gpubackend", "everything")
    assert completed.returncode != 0
    assert "$GPUBACKEND_REGISTER='everything': expected 'global'" in completed.stderr
    assert "'jax_gpu'" in completed.stderr


def test_conformance_baseline_is_stock_and_registered_column_is_ours() -> None:
    prepared = prepare(CATALOGUE["scan_while_until"])
    stock = run_on(prepared, BACKENDS["jax-stock"], "cpu")
    registered = run_on(prepared, BACKENDS["jax-registered"], "cpu")
    assert stock.status == registered.status == UNSUPPORTED
    assert stock.detail == "compile: NotImplementedError: While Scan cannot yet be converted to JAX"
    assert registered.detail.startswith("compile: DataDependentLengthError:")
