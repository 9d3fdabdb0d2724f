"""A while-Scan's memory follows the steps it takes, not its bound (JAX_GPU).

A loop bounded by ``n_steps=10**9`` that stops after 5 steps, its trace and
its gradient, runs in a fresh process whose peak resident memory is compared
with the same graph bounded by 10 steps. The parent polls the child's resident
memory and kills it above `RSS_CAP_MB`, so a graph that allocates for its bound
fails the test without taking the machine's memory.

On the host platform JAX_GPU always splits a loop's ladder; off it (a GPU) it
splits only a graph whose one computation's temporaries exceed the memory
budget (`host_reads.SplitLadder`). The CPU tests here take that policy by
making the linker see the placement as off the host platform (`off_host`):
the tests marked ``gpu`` check it on a real GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.scan.utils import until

from gpubackend.conformance.checks import count_host_reads
from gpubackend.host_reads import MEMORY_BUDGET_ENV, memory_budget
from gpubackend.placement import Placement
from tests.jax_lowering_harness import backend_compiles

RSS_CAP_MB = 2000
MOST_EXTRA_MB = 100
MOST_EXTRA_VIRTUAL_MB = 1000
"""XLA maps a computation's temporaries on the CPU and touches only the pages the loop writes: one
computation sized for the bound shows in the peak of virtual memory (about 21 GB more), not in
resident memory."""

CHILD = """
import json, resource, sys
import numpy as np
import pytensor
import gpubackend
from tests.test_while_scan_memory import stopping_loop, take_as_off_host

if sys.argv[3] == "off-host":
    take_as_off_host()
inputs, outputs = stopping_loop(int(sys.argv[1]))
values = {}
for name, output in outputs.items():
    fn = pytensor.function(inputs, output, mode="JAX_GPU")
    for _ in range(2):
        values[name] = np.asarray(fn(0.5, float(sys.argv[2]))).tolist()
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
with open("/proc/self/status") as status:
    vm_peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmPeak"))
print(json.dumps({"rss_mb": rss_mb, "vm_peak_mb": vm_peak_kb / 1024, "values": values}))
"""


def take_as_off_host() -> None:
    """Make JAX_GPU's linker treat the test's CPU device as a device off the host platform."""
    Placement.on_host_platform = property(lambda self: False)


@pytest.fixture
def off_host(monkeypatch):
    """JAX_GPU's policy off the host platform (a GPU's), on the test's CPU device."""
    monkeypatch.setattr(Placement, "on_host_platform", property(lambda self: False))


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


def _run_capped(n_steps: int, stop: float, platform: str) -> dict:
    """The child's peak resident memory and values; a failure if it exceeds `RSS_CAP_MB`.
    ``platform``: "host", or "off-host" for the policy of a GPU (`take_as_off_host`)."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryFile("w+") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(n_steps), str(stop), platform],
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


@pytest.mark.parametrize("platform", ["host", "off-host"])
def test_a_generous_bound_costs_the_steps_taken(platform):
    """Off the host platform, with the default budget (1 GiB where the device gives no memory
    limit), the gradient's one computation at the bound would take gigabytes: it runs split."""
    small, huge = _run_capped(10, 5.0, platform), _run_capped(10**9, 5.0, platform)
    assert huge["rss_mb"] - small["rss_mb"] < MOST_EXTRA_MB, (small["rss_mb"], huge["rss_mb"])
    assert huge["vm_peak_mb"] - small["vm_peak_mb"] < MOST_EXTRA_VIRTUAL_MB, (
        small["vm_peak_mb"],
        huge["vm_peak_mb"],
    )
    inputs, outputs = stopping_loop(10)
    for name, output in outputs.items():
        # It stops after 5 steps: the reference's values at a bound of 10 are those at 10**9.
        want = pytensor.function(inputs, output, mode="FAST_COMPILE")(0.5, 5.0)
        np.testing.assert_array_equal(np.asarray(small["values"][name]), want)
        np.testing.assert_array_equal(np.asarray(huge["values"][name]), want)


@pytest.mark.parametrize("platform", ["host", "off-host"])
def test_climbing_rungs_gives_the_reference_values(platform, monkeypatch):
    """Loops that stop on the first rung, on a higher one, or at their bound, called in an order
    that climbs and comes back down; off the host platform with no budget, so that they split."""
    if platform == "off-host":
        monkeypatch.setattr(Placement, "on_host_platform", property(lambda self: False))
        monkeypatch.setenv(MEMORY_BUDGET_ENV, "0")
    for n_steps in (300, 10**4):
        inputs, outputs = stopping_loop(n_steps)
        for name, output in outputs.items():
            reference = pytensor.function(inputs, output, mode="FAST_COMPILE")
            fn = pytensor.function(inputs, output, mode="JAX_GPU")
            for stop in (5.0, 5000.0, 300.0, 1e9, 5.0, 20.0):
                np.testing.assert_array_equal(
                    np.asarray(fn(0.5, stop)), reference(0.5, stop), err_msg=f"{name} {stop}"
                )


def _gradient_reads(n_steps: int, stop: float, target_device) -> tuple[int, list[str]]:
    """Explicit reads of a warm call of the gradient of `stopping_loop`, and the computations its
    first calls compiled, checked against the reference."""
    inputs, outputs = stopping_loop(n_steps)
    fn = pytensor.function(inputs, outputs["grad"], mode="JAX_GPU")
    reference = pytensor.function(inputs, outputs["grad"], mode="FAST_COMPILE")
    with backend_compiles() as compiled:
        for _ in range(2):
            np.testing.assert_array_equal(np.asarray(fn(0.5, stop)), reference(0.5, stop))
    resident = [jax.device_put(np.float64(value), target_device) for value in (0.5, stop)]
    fn(*resident)
    reads = count_host_reads(fn, resident, target_device)
    assert not reads.implicit, reads
    return reads.explicit, compiled


@pytest.mark.usefixtures("off_host")
def test_off_the_host_one_computation_within_the_budget_reads_nothing(monkeypatch, target_device):
    """A GPU keeps a graph that fits the budget as one computation, compiled once, and reads
    nothing: the check of its temporaries reuses the compile."""
    monkeypatch.setenv(MEMORY_BUDGET_ENV, str(1 << 40))
    reads, compiled = _gradient_reads(10**4, 5.0, target_device)
    assert reads == 0
    assert len(compiled) == 1, compiled


@pytest.mark.usefixtures("off_host")
def test_off_the_host_a_graph_over_the_budget_reads_its_overflow_flag(monkeypatch, target_device):
    """Over the budget the ladder is split as on the CPU: one read per call, of the lower rungs'
    overflow flag."""
    monkeypatch.setenv(MEMORY_BUDGET_ENV, "0")
    reads, _ = _gradient_reads(10**4, 5.0, target_device)
    assert reads == 1
    reads, _ = _gradient_reads(10**4, 3000.0, target_device)
    assert reads >= 1


@pytest.mark.parametrize("value", ["a lot", "-1", "1.5e9"])
def test_a_budget_that_is_not_bytes_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv(MEMORY_BUDGET_ENV, value)
    with pytest.raises(ValueError, match=MEMORY_BUDGET_ENV):
        memory_budget([])


class _Device:
    def __init__(self, stats):
        self._stats = stats

    def memory_stats(self):
        return self._stats


def test_the_default_budget_is_a_16th_of_the_smallest_device_memory(monkeypatch):
    monkeypatch.delenv(MEMORY_BUDGET_ENV, raising=False)
    devices = [_Device({"bytes_limit": 32 << 30}), _Device({"bytes_limit": 16 << 30})]
    assert memory_budget(devices) == (16 << 30) // 16
    # The CPU gives no memory stats: 1 GiB.
    assert memory_budget([_Device(None)]) == 1 << 30


@pytest.mark.gpu
def test_on_a_gpu_a_generous_bound_costs_the_steps_taken(monkeypatch):
    """On a real GPU: the gradient of a loop bounded by 10**9 that stops after 5 steps runs within
    the default budget's memory, where its one computation would take gigabytes."""
    import gpubackend

    monkeypatch.delenv(MEMORY_BUDGET_ENV, raising=False)
    device = gpubackend.resolve_device("gpu")
    inputs, outputs = stopping_loop(10**9)
    # The reference allocates for its bound: its values at 10 steps are those at 10**9.
    small_inputs, small_outputs = stopping_loop(10)
    reference = pytensor.function(small_inputs, small_outputs["grad"], mode="FAST_COMPILE")
    fn = pytensor.function(inputs, outputs["grad"], mode=gpubackend.jax_gpu_mode(device))
    before = device.memory_stats()["peak_bytes_in_use"]
    for _ in range(2):
        value = np.asarray(fn(0.5, 5.0))
    peak = device.memory_stats()["peak_bytes_in_use"]
    np.testing.assert_array_equal(value, reference(0.5, 5.0))
    assert peak - before < 256 << 20, (before, peak)
