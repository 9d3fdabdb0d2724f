"""What keeping stock dispatch (``GPUBACKEND_REGISTER=jax_gpu``) costs JAX_GPU per compile (medians,
one run).

The switch is read when gpubackend is imported, so each sample is a fresh
interpreter that compiles a few conformance catalogue graphs, built afresh each
time, under mode="JAX_GPU" (the ``pytensor.function`` call: rewrites and
lowering; the XLA compile of the first call is the same in both modes and left
out), keeping its best of a few compiles per graph. Interpreters with the default (global
registration) and with the switch alternate, and the table gives, per graph, the median over
interpreters of each, scoped / global. Goal: <= 1.05x.

Run: ``python benchmarks/bench_register_switch.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

from _timing import print_ratio_table

CASES = (
    "ofg_chained_50",
    "scan_nested",
    "scan_grad_mit_mot",
    "scan_while_until",
    "minimize_blockwise",
    "lazy_ifelse",
)
"""Catalogue graphs with inner graphs of every kind, so the registry's selectors run a lot."""

CHILD = textwrap.dedent(
    """
    import json, sys, time
    import pytensor
    import gpubackend
    from gpubackend.conformance.catalogue import CATALOGUE

    compiles, *names = sys.argv[1:]
    times = {}
    for name in names:
        samples = []
        for _ in range(int(compiles)):
            graph = CATALOGUE[name].build()
            start = time.perf_counter()
            pytensor.function(graph.inputs, graph.outputs, mode="JAX_GPU", on_unused_input="ignore")
            samples.append(time.perf_counter() - start)
        times[name] = min(samples)
    print("TIMES" + json.dumps(times))
    """
)


def sample(register: str, compiles: int) -> dict[str, float]:
    env = {**os.environ, "GPUBACKEND_REGISTER": register}
    env.setdefault("GPUBACKEND_DEVICE", "cpu")
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, str(compiles), *CASES],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    [line] = [line for line in completed.stdout.splitlines() if line.startswith("TIMES")]
    return json.loads(line.removeprefix("TIMES"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer interpreters and compiles")
    args = parser.parse_args(argv)
    rounds, compiles = (3, 4) if args.quick else (7, 6)
    samples: dict[str, list[dict[str, float]]] = {"global": [], "jax_gpu": []}
    for _ in range(rounds):
        for register in samples:
            samples[register].append(sample(register, compiles))
    rows = []
    for name in samples["global"][0]:
        scoped = statistics.median(times[name] for times in samples["jax_gpu"])
        global_ = statistics.median(times[name] for times in samples["global"])
        rows.append((f"{name}: JAX_GPU compile, scoped vs global", scoped, global_, "<= 1.05x"))
    print_ratio_table(
        f"GPUBACKEND_REGISTER=jax_gpu vs global (medians of {rounds} interpreters)", rows
    )


if __name__ == "__main__":
    main()
