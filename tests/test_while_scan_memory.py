"""A while-Scan's memory follows the steps it takes, not its bound (JAX_GPU).

A loop bounded by ``n_steps=10**9`` that stops after 5 steps, its trace and
its gradient, runs in a fresh process whose peak resident memory is compared
with the same graph bounded by 10 steps. The parent polls the child's resident
memory and kills it above `RSS_CAP_MB`, so a graph that allocates for its bound
fails the test without taking the machine's memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.scan.utils import until

RSS_CAP_MB = 2000
MOST_EXTRA_MB = 100

CHILD = """
import json, resource, sys
import numpy as np
import pytensor
import gpubackend
from tests.test_while_scan_memory import stopping_loop

inputs, outputs = stopping_loop(int(sys.argv[1]))
values = {}
for name, output in outputs.items():
    fn = pytensor.function(inputs, output, mode="JAX_GPU")
    for _ in range(2):
        values[name] = np.asarray(fn(0.5, float(sys.argv[2]))).tolist()
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"rss_mb": rss_mb, "values": values}))
"""


def stopping_loop(n_steps: int):
    """``x + 1`` from ``x0`` until it reaches ``stop``: the inputs, the trace and its gradient."""
    x0, stop = pt.dscalar("x0"), pt.dscalar("stop")
    xs = pytensor.scan(
        lambda x, stop: (x + 1, until(x >= stop)),
        outputs_info=[x0],
        non_sequences=[stop],
        n_steps=n_steps,
        return_updates=False,
    )
    return [x0, stop], {"trace": xs, "grad": pytensor.grad(xs.sum(), x0)}


def _run_capped(n_steps: int, stop: float) -> dict:
    """The child's peak resident memory and values; a failure if it exceeds `RSS_CAP_MB`."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryFile("w+") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(n_steps), str(stop)],
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        peak = 0
        status = Path(f"/proc/{child.pid}/status")
        while child.poll() is None:
            try:
                rss_kb = next(
                    int(line.split()[1])
                    for line in status.read_text().splitlines()
                    if line.startswith("VmRSS")
                )
            except (FileNotFoundError, ProcessLookupError, StopIteration):
                rss_kb = 0
            peak = max(peak, rss_kb // 1024)
            if peak > RSS_CAP_MB:
                child.kill()
                child.wait()
                raise AssertionError(
                    f"n_steps={n_steps}: killed at {peak} MB resident, above {RSS_CAP_MB} MB"
                )
            time.sleep(0.01)
        log.seek(0)
        output = log.read()
    assert child.returncode == 0, output[-3000:]
    return json.loads(output.strip().splitlines()[-1])


def test_a_generous_bound_costs_the_steps_taken():
    small, huge = _run_capped(10, 5.0), _run_capped(10**9, 5.0)
    assert huge["rss_mb"] - small["rss_mb"] < MOST_EXTRA_MB, (small["rss_mb"], huge["rss_mb"])
    inputs, outputs = stopping_loop(10)
    for name, output in outputs.items():
        # It stops after 5 steps: the reference's values at a bound of 10 are those at 10**9.
        want = pytensor.function(inputs, output, mode="FAST_COMPILE")(0.5, 5.0)
        np.testing.assert_array_equal(np.asarray(small["values"][name]), want)
        np.testing.assert_array_equal(np.asarray(huge["values"][name]), want)


def test_climbing_rungs_gives_the_reference_values():
    """Loops that stop on the first rung, on a higher one, or at their bound, called in an order
    that climbs and comes back down."""
    for n_steps in (300, 10**4):
        inputs, outputs = stopping_loop(n_steps)
        for name, output in outputs.items():
            reference = pytensor.function(inputs, output, mode="FAST_COMPILE")
            fn = pytensor.function(inputs, output, mode="JAX_GPU")
            for stop in (5.0, 5000.0, 300.0, 1e9, 5.0, 20.0):
                np.testing.assert_array_equal(
                    np.asarray(fn(0.5, stop)), reference(0.5, stop), err_msg=f"{name} {stop}"
                )
