"""Stock dispatch kept: ``GPUBACKEND_REGISTER=jax_gpu``, and the conformance suite's stock baseline.

With the switch, stock mode="JAX" (and a bare ``jax_funcify``, as PyMC's
``get_jaxified_graph`` calls it) behaves as PyTensor's own, graph by graph, and
JAX_GPU keeps gpubackend's lowerings. The switch is read when gpubackend is
imported, so those checks run in a fresh interpreter. The baseline
(``jax-stock``) uses PyTensor's own lowerings even here, where gpubackend's
serve by default.
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
    import re
    import numpy as np
    import pytensor
    import pytensor.scalar as ps
    import pytensor.tensor as pt
    from pytensor.compile.builders import OpFromGraph
    from pytensor.compile.mode import JAX, Mode
    from pytensor.conditional.op import ifelse
    from pytensor.graph.fg import FunctionGraph
    from pytensor.link.jax.linker import JAXLinker
    from pytensor.raise_op import CheckAndRaise
    from pytensor.scalar.loop import ScalarLoop
    from pytensor.scan import until
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.tensor.optimize import minimize, minimize_scalar, root, root_scalar

    import gpubackend
    from gpubackend.registration import REWRITE_TAG, using_lowerings

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
    nested = pytensor.scan(lambda lim, x0: doubling_until(x0, lim), sequences=[limits],
    non_sequences=[x0], return_updates=False)
    a = pt.vector("a")
    x = pt.vector("x")
    solution, success = minimize(((x - a) ** 2).sum(), x)

    # Graphs that reach every op type gpubackend replaces (each graph is a FunctionGraph,
    # and the inner graphs of Scan, OpFromGraph and the optimize ops are frozen ones).
    n, s = pt.lscalar("n"), pt.scalar("s")
    flag = pt.scalar("flag")
    state, rate = ps.float64("state"), ps.float64("rate")
    affine = Elemwise(ScalarLoop(init=[state], update=[state * rate + 1.0], constant=[rate]))
    spd = pt.tensor("spd", shape=(2, 3, 3))
    b, c = pt.vector("b"), pt.vector("c")
    twice = OpFromGraph([b, c], [b * 2 + c], inline=False)
    rng = np.random.default_rng(0)
    spd_value = rng.normal(size=(2, 3, 3))
    spd_value = spd_value @ np.swapaxes(spd_value, -1, -2) + 3 * np.eye(3)
    vector = np.linspace(0.0, 1.0, 6)
    root_solution, _ = root(x**3 + x - a, x)
    running_sum = pytensor.scan(
        lambda v, acc: acc + v, sequences=[x], outputs_info=[pt.zeros(())], return_updates=False
    )
    checked = CheckAndRaise(AssertionError, "x has 3 entries")(x, pt.eq(x.shape[0], 3)) * 2
    lengths = [pt.arange(x.shape[0] // 2 + 1) * 2, pt.arange(n)]
    writes = [pt.set_subtensor(x[[0, 2]], -1.0), pt.inc_subtensor(x[x > 0.4], 1.0)]
    scalar_minimum, _ = minimize_scalar((s - 2.0) ** 2, s)
    scalar_root, _ = root_scalar(s**2 - 2.0, s, method="brentq", bracket=(0.0, 3.0))
    GRAPHS = {
        "while_scan": ([x0, limit], [last], [1.0, 10.0]),
        "nested_while_scan": ([limits, x0], [nested], [np.array([3.0, 10.0]), 1.0]),
        "for_scan": ([x], [running_sum], [vector]),
        "opfromgraph": ([b, c], [twice(b, c), twice(c, b)], [vector, vector[::-1].copy()]),
        "ifelse": ([flag, x], [ifelse(flag > 0, pt.exp(x).cumsum(), pt.sin(x) * 2)], [1.0, vector]),
        "check_and_raise": ([x], [checked], [vector]),
        "blockwise": ([spd], [pt.linalg.cholesky(spd), pt.linalg.det(spd)], [spd_value]),
        "reshape": ([x, n], [x.reshape((n, -1))], [vector, np.asarray(2)]),
        "arange": ([x, n], lengths, [vector, np.asarray(3)]),
        "inc_subtensor": ([x], [pt.inc_subtensor(x[1:4], 1.0)], [vector]),
        "advanced_subtensor": ([x], [x[x > 0.4], x[[0, 2, 3]]], [vector]),
        "advanced_inc_subtensor": ([x], writes, [vector]),
        "scalar_loop": ([n, x, b], [affine(n, x, b)], [np.asarray(4), vector, vector]),
        "minimize": ([x, a], [solution], [np.zeros(2), np.array([1.0, -2.0])]),
        "root": ([x, a], [root_solution], [np.zeros(2), np.array([2.0, 10.0])]),
        "minimize_scalar": ([s], [scalar_minimum], [0.5]),
        "root_scalar": ([s], [scalar_root], [1.0]),
    }

    def full_outcome(call):
        try:
            return {"values": [np.asarray(v).tolist() for v in call()]}
        except Exception as error:
            # PyTensor writes each generated graph function to a file of a fresh name.
            message = re.sub(r"\\S*tmp\\w+:\\d+", "<file>", str(error))
            return {"error": type(error).__name__, "message": message}

    def compiled(inputs, outputs, values, mode):
        def call():
            return pytensor.function(inputs, outputs, mode=mode, on_unused_input="ignore")(*values)

        return full_outcome(call)

    def jaxified(inputs, outputs, values):
        # What PyMC's get_jaxified_graph does: jax_funcify on the rewritten graph, no linker.
        import jax
        from pytensor.link.jax.dispatch import jax_funcify

        def call():
            fgraph = FunctionGraph(inputs, outputs, clone=True)
            JAX.optimizer.rewrite(fgraph)
            return jax.jit(jax_funcify(fgraph))(*values)

        return full_outcome(call)

    stock_mode = Mode(JAXLinker(), JAX.provided_optimizer.excluding(REWRITE_TAG))
    report = {"graphs": {}}
    for name, graph in GRAPHS.items():
        unselected = {"mode": compiled(*graph, "JAX"), "jaxified": jaxified(*graph)}
        # The reference: PyTensor's own lowerings, selected explicitly, in PyTensor's own linker.
        with using_lowerings("stock"):
            stock = {"mode": compiled(*graph, stock_mode), "jaxified": jaxified(*graph)}
        ours = compiled(*graph, "JAX_GPU")
        report["graphs"][name] = {"unselected": unselected, "stock": stock, "ours": ours}
    for name in ("while_scan", "nested_while_scan", "minimize"):
        report.setdefault("JAX", {})[name] = report["graphs"][name]["unselected"]["mode"]
        report.setdefault("JAX_GPU", {})[name] = report["graphs"][name]["ours"]
    print("REPORT" + json.dumps(report))
    """
)


def _run(script: str, register: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUBACKEND_REGISTER": register}
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def scoped_report() -> dict:
    completed = _run(SCOPED_SCRIPT, "jax_gpu")
    assert completed.returncode == 0, completed.stderr[-3000:]
    [line] = [line for line in completed.stdout.splitlines() if line.startswith("REPORT")]
    return json.loads(line.removeprefix("REPORT"))


def test_stock_jax_behaves_as_stock_graph_by_graph(scoped_report) -> None:
    """mode="JAX" and a bare ``jax_funcify`` give stock's values, or stock's error and message."""
    graphs = scoped_report["graphs"]
    for name, outcomes in graphs.items():
        assert outcomes["unselected"] == outcomes["stock"], name
    # The graphs tell the two apart: on some, gpubackend's lowerings answer where stock's refuse.
    differing = [name for name, graph in graphs.items() if graph["ours"] != graph["stock"]["mode"]]
    assert {"while_scan", "nested_while_scan", "minimize", "check_and_raise"} <= set(differing)


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
    # Refused when the call traces (only then do the bounds say whether the length is known).
    assert registered.detail.startswith("call: DataDependentLengthError:")
