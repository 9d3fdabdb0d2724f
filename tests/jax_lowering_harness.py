"""Shared checks for the JAX lowering tests: reference comparison and the rewrite-free contract.

`compile_checked` compiles a graph under a JAX mode while the conformance
suite's `RewriteFreeProbe` observes PyTensor: during linking (after the
rewrites) and during two calls, every rewriter pass, every `FunctionGraph`
built and every nested ``pytensor.function`` / `FunctionMaker` must stay at
zero. It also takes the suite's `fingerprint` of every canonical inner-graph op
of the user's graph and checks, after the calls, that each is the same object
holding the same frozen graph, node for node.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import jax
import numpy as np
import pytensor

from gpubackend.conformance.fingerprint import describe_difference, fingerprint
from gpubackend.conformance.probe import CALL, LINK, RewriteFreeProbe

JAX_MODES = ("JAX", "JAX_GPU")
REFERENCE_MODE = "FAST_COMPILE"
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def compile_checked(inputs, outputs, values, mode: str, **function_kwargs):
    """Compile under ``mode``, call twice, check the contract, return the second call's outputs."""
    canonical = fingerprint(outputs)
    probe = RewriteFreeProbe()
    with probe.installed():
        fn = probe.compile(lambda: pytensor.function(inputs, outputs, mode=mode, **function_kwargs))
        with probe.phase(CALL):
            fn(*values)
            result = fn(*values)
    assert probe.counts[LINK].clean and probe.counts[CALL].clean, (
        f"rewriting or compiling during link/call: link: {probe.counts[LINK].describe()}; calls: "
        f"{probe.counts[CALL].describe()}"
    )
    difference = describe_difference(canonical, fingerprint(outputs))
    assert difference is None, f"the user's graph changed: {difference}"
    return result


def reference(inputs, outputs, values):
    return pytensor.function(inputs, outputs, mode=REFERENCE_MODE)(*values)


def assert_matches_reference(
    inputs, outputs, values, mode: str, rtol: float = 1e-6, atol: float = 0.0
):
    """The ``mode`` result of the graph equals the FAST_COMPILE (Python) one."""
    expected = reference(inputs, outputs, values)
    actual = compile_checked(inputs, outputs, values, mode)
    for position, (want, got) in enumerate(zip(expected, actual, strict=True)):
        np.testing.assert_allclose(
            np.asarray(got),
            np.asarray(want),
            rtol=rtol,
            atol=atol,
            err_msg=f"output {position} under {mode}",
        )
    return actual


def read_only(array) -> np.ndarray:
    """``array`` as a read-only ndarray: JAX_GPU keeps such a shared value resident (a writeable
    one is uploaded on every call, since other modes may write it in place)."""
    frozen = np.array(array)
    frozen.setflags(write=False)
    return frozen


def pmapped(fn):
    """``jax.pmap`` of ``fn`` over a batch's leading axis, as numpyro's parallel chains run it, with
    the lanes spread over the local devices (a GPU runner may have one), each vmapping its share."""

    def run(batch):
        lanes = batch.shape[0]
        devices = math.gcd(lanes, jax.local_device_count())
        shares = batch.reshape(devices, lanes // devices, *batch.shape[1:])
        out = jax.pmap(jax.vmap(fn))(shares)
        return jax.tree.map(lambda leaf: leaf.reshape(lanes, *leaf.shape[2:]), out)

    return run


@contextlib.contextmanager
def backend_compiles() -> Iterator[list[str]]:
    """The names of the functions JAX compiles inside the block."""
    names: list[str] = []

    def listener(event: str, duration_secs: float, **kwargs) -> None:
        if event == BACKEND_COMPILE_EVENT:
            names.append(kwargs.get("fun_name", "?"))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
