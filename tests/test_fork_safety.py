"""A fork after JAX started warns with advice a PyMC user can follow (`gpubackend.fork_safety`).

pymc-extras' pathfinder under ``PYTENSOR_FLAGS=mode=JAX`` compiles, then forks
its workers, which hang or abort. gpubackend cannot change how PyMC picks its
start method, but it can say so at the fork. Each check forks in a fresh
interpreter (the child exits at once), as the test session has long since
started JAX.
"""

import os

from tests.test_import import run_fresh

FORK_AND_REPORT = """
import json, os, warnings
import gpubackend
{before_fork}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
ours = [str(w.message) for w in caught if issubclass(w.category, gpubackend.ForkAfterJAXWarning)]
print(json.dumps({{"ours": ours}}))
"""

COMPILE_AND_CALL = """
import numpy as np, pytensor, pytensor.tensor as pt
x = pt.vector("x")
pytensor.function([x], x * 2, mode="{mode}")(np.ones(3))
"""


def test_a_fork_after_a_jax_function_ran_warns_with_the_spawn_advice():
    for mode in ("JAX", "JAX_GPU"):
        before_fork = COMPILE_AND_CALL.format(mode=mode)
        seen = run_fresh(
            FORK_AND_REPORT.format(before_fork=before_fork),
            env={**os.environ, "GPUBACKEND_DEVICE": "cpu"},
        )
        assert len(seen["ours"]) == 1, (mode, seen)
        assert "mp_ctx='spawn'" in seen["ours"][0]
        assert "compile_kwargs" in seen["ours"][0]


def test_a_fork_before_jax_started_is_silent():
    """PyTensor's JAX dispatch loaded (so the hook is installed), but no XLA backend started."""
    before_fork = """
from pytensor.link.jax.dispatch import jax_funcify
from jax._src import xla_bridge
from gpubackend import fork_safety
assert fork_safety._installed and not xla_bridge.backends_are_initialized()
"""
    seen = run_fresh(FORK_AND_REPORT.format(before_fork=before_fork))
    assert seen["ours"] == []
