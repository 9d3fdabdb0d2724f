"""``import gpubackend`` has no device side effects and loads its heavy dependencies on first use.

Each check runs in a fresh interpreter, because the test session itself has
long since imported JAX. The import's cost is measured by
``benchmarks/bench_import.py``, not here.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

HEAVY = (
    "jax",
    "jaxlib",
    "numba",
    "numpyro",
    "optimistix",
    "equinox",
    "lineax",
    "gpubackend.solvers",
)


def run_fresh(script: str, env: dict[str, str] | None = None) -> dict:
    """Run ``script`` in a new interpreter in the repository root; it prints one JSON line last."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env or os.environ,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


LOADED = f"[m for m in {HEAVY!r} if m in sys.modules]"


def test_import_loads_no_jax_numba_or_solver_stack():
    seen = run_fresh(f"import json, sys\nimport gpubackend\nprint(json.dumps({LOADED}))")
    assert seen == []


def test_import_then_jax_has_no_backend_initialised():
    script = (
        "import json\nimport gpubackend\nimport jax\nfrom jax._src import xla_bridge\n"
        "print(json.dumps(sorted(xla_bridge._backends)))"
    )
    assert run_fresh(script) == []


def test_jax_lowerings_register_when_pytensor_loads_its_jax_dispatch():
    script = f"""
import json, sys
import gpubackend
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.scan.op import Scan
from pytensor.tensor.optimize import MinimizeOp
from jax._src import xla_bridge
scan, minimize = (jax_funcify.dispatch(op).__module__ for op in (Scan, MinimizeOp))
print(json.dumps({{"scan": scan, "minimize": minimize,
                  "loaded": {LOADED}, "backends": sorted(xla_bridge._backends)}}))
"""
    seen = run_fresh(script)
    assert seen["backends"] == [], "registering the lowerings must not start JAX either"
    assert seen["scan"] == "gpubackend.dispatch.jax.scan"
    assert seen["minimize"] == "gpubackend.dispatch.jax.optimize"
    assert "optimistix" not in seen["loaded"] and "equinox" not in seen["loaded"]


def test_lowerings_register_at_once_when_pytensor_dispatch_is_already_loaded():
    script = """
import json
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.link.numba.dispatch import numba_funcify
from pytensor.scan.op import Scan
from pytensor.tensor.optimize import MinimizeOp
import gpubackend
print(json.dumps([jax_funcify.dispatch(Scan).__module__,
numba_funcify.dispatch(MinimizeOp).__module__]))
"""
    assert run_fresh(script) == [
        "gpubackend.dispatch.jax.scan",
        "gpubackend.dispatch.numba.optimize",
    ]


JAX_LOWERING_MODULES = sorted(
    f"gpubackend.dispatch.jax.{path.stem}"
    for path in (REPO / "gpubackend" / "dispatch" / "jax").glob("*.py")
    if path.stem != "__init__"
)
IMPORTED_BY_LOWERINGS = ["gpubackend.host_reads"]
"""Modules outside `gpubackend.dispatch.jax` that its lowerings import (the JAX_GPU linker's
per-call reads)."""


@pytest.mark.parametrize("module", JAX_LOWERING_MODULES + IMPORTED_BY_LOWERINGS)
def test_importing_a_lowering_module_first_loses_no_replacement(module):
    """Some lowering modules load PyTensor's JAX dispatch themselves: the hook runs mid-import, and
    imports every lowering module while the first one, and what it imports, are half-imported."""
    script = f"""
import json
import gpubackend
import {module}
from pytensor.link.jax.dispatch import jax_funcify
from gpubackend.dispatch.jax.replacements import REPLACED
registered = [(op.__name__, jax_funcify.dispatch(op) is ours.ours) for op, ours in REPLACED.items()]
print(json.dumps(sorted(registered)))
"""
    expected = run_fresh(script.replace(f"import {module}\n", ""))
    assert expected and all(installed for _, installed in expected)
    assert run_fresh(script) == expected


def test_numba_lowerings_register_when_pytensor_loads_its_numba_dispatch():
    script = f"""
import json, sys
import gpubackend
from pytensor.link.numba.dispatch import numba_funcify
from pytensor.tensor.optimize import MinimizeOp
print(json.dumps({{"minimize": numba_funcify.dispatch(MinimizeOp).__module__, "loaded": {LOADED}}}))
"""
    seen = run_fresh(script)
    assert seen["minimize"] == "gpubackend.dispatch.numba.optimize"
    assert "jax" not in seen["loaded"]


NUMBA_SIDE_MODULES = [
    *sorted(
        f"gpubackend.solvers.{path.stem}"
        for path in (REPO / "gpubackend" / "solvers").glob("*.py")
        if path.stem != "__init__"
    ),
    "gpubackend.dispatch.numba.optimize",
]


@pytest.mark.parametrize("module", NUMBA_SIDE_MODULES)
def test_importing_a_solver_module_first_registers_the_numba_lowerings(module):
    """A solver module loads PyTensor's Numba dispatch, whose hook imports the lowerings, which
    import every solver module. Before: ImportError, "cannot import name 'minimize_maxiter' from
    partially initialized module 'gpubackend.solvers'"."""
    script = f"""
import json
import gpubackend
import {module}
from pytensor.link.numba.dispatch import numba_funcify
from pytensor.tensor.optimize import MinimizeOp
print(json.dumps(numba_funcify.dispatch(MinimizeOp).__module__))
"""
    assert run_fresh(script) == "gpubackend.dispatch.numba.optimize"


def test_optimistix_loads_with_the_first_optimize_op_lowered():
    script = f"""
import json, sys
import numpy as np, pytensor, pytensor.tensor as pt
import gpubackend
from pytensor.tensor.optimize import minimize
x = pt.vector("x")
plain = pytensor.function([x], (x ** 2).sum(), mode="JAX_GPU")
before = {LOADED}
solution, success = minimize((x ** 2).sum(), x, method="BFGS")
solved = pytensor.function([x], solution, mode="JAX_GPU")
solution = np.asarray(solved(np.ones(2))).tolist()
print(json.dumps({{"before": before, "after": {LOADED}, "solution": solution}}))
"""
    seen = run_fresh(script)
    assert "optimistix" not in seen["before"] and "jax" in seen["before"]
    assert "optimistix" in seen["after"]
    assert seen["solution"] == pytest.approx([0.0, 0.0], abs=1e-6)


@pytest.mark.parametrize(
    "jax_first", [False, True], ids=["gpubackend-then-jax", "jax-then-gpubackend"]
)
@pytest.mark.parametrize(
    "float_x, enabled, dtype", [("float64", True, "float64"), ("float32", False, "float32")]
)
def test_jax_enable_x64_follows_floatx_as_soon_as_both_are_loaded(
    float_x, enabled, dtype, jax_first
):
    imports = "import jax\nimport gpubackend" if jax_first else "import gpubackend\nimport jax"
    script = f"""
import json
import numpy as np, pytensor, pytensor.tensor as pt
{imports}
before_compile = jax.config.jax_enable_x64
early = jax.device_put(np.ones(3))  # made before any compile: must already have floatX precision
x = pt.vector("x")
fn = pytensor.function([x], x * 2, mode="JAX_GPU")
out = fn(np.ones(3, dtype=pytensor.config.floatX))
print(json.dumps({{"before_compile": before_compile, "after_compile": jax.config.jax_enable_x64,
                  "early": str(early.dtype), "out": str(out.dtype)}}))
"""
    # JAX's own switch says float64, so a float32 floatX shows that gpubackend sets it, not leaves
    # it.
    env = {**os.environ, "JAX_ENABLE_X64": "1" if float_x == "float32" else "0"}
    env["PYTENSOR_FLAGS"] = ",".join(filter(None, [env.get("PYTENSOR_FLAGS"), f"floatX={float_x}"]))
    seen = run_fresh(script, env)
    assert seen == {
        "before_compile": enabled,
        "after_compile": enabled,
        "early": dtype,
        "out": dtype,
    }


def test_a_first_compile_under_another_floatx_keeps_the_precision_decided_when_jax_loaded():
    # PyTensor's JAX dispatch, which loads with the first compile, re-sets jax_enable_x64 from the
    # floatX of that
    # moment; a float32 context there must not turn float64 off for the rest of the process.
    script = """
import json
import numpy as np, pytensor, pytensor.tensor as pt
import gpubackend, jax
with pytensor.config.change_flags(floatX="float32"):
    x = pt.vector("x")
    pytensor.function([x], x * 2, mode="JAX_GPU")(np.ones(3, dtype="float32"))
y = pt.dvector("y")
out = pytensor.function([y], y * 2, mode="JAX_GPU")(np.ones(3))
print(json.dumps({"x64": jax.config.jax_enable_x64, "out": str(out.dtype)}))
"""
    env = {
        **os.environ,
        "PYTENSOR_FLAGS": ",".join(
            filter(None, [os.environ.get("PYTENSOR_FLAGS"), "floatX=float64"])
        ),
    }
    assert run_fresh(script, env) == {"x64": True, "out": "float64"}


def test_public_api_is_documented_and_importable_without_jax():
    """Every public name but the JAX error class `BooleanMaskLengthError` imports without jax; that
    one loads jax only when asked for."""
    script = f"""
import json, sys
import gpubackend
def first_line(name):
    return (getattr(gpubackend, name).__doc__ or "").strip().splitlines()[:1]
lazy = "BooleanMaskLengthError"
names = {{name: first_line(name) for name in gpubackend.__all__ if name != lazy}}
loaded = {LOADED}
names[lazy] = first_line(lazy)
print(json.dumps({{"names": names, "loaded": loaded}}))
"""
    seen = run_fresh(script)
    assert seen["loaded"] == []
    assert {
        "jax_gpu_mode",
        "JAXGPULinker",
        "resolve_device",
        "BooleanMaskLengthError",
        "DataDependentLengthError",
        "ObjectModeFallbackWarning",
        "UnsupportedMethod",
        "UnsupportedOption",
    } <= set(seen["names"])
    undocumented = [
        name for name, first_line in seen["names"].items() if not first_line or not first_line[0]
    ]
    assert undocumented == []
