"""The checks run on one compiled case. Each returns a `CheckResult` with a one-line detail."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, partial

import jax
import jax.numpy as jnp
import numpy as np
import pytensor
from pytensor.compile.executor import Function

from gpubackend.conformance.catalogue import Case, CaseGraph
from gpubackend.conformance.fingerprint import (
    Fingerprint,
    count_inplace_nodes,
    describe_difference,
    fingerprint,
    inner_graph_ops,
)
from gpubackend.conformance.probe import CALL, LINK, RewriteFreeProbe
from gpubackend.conformance.results import CheckResult
from gpubackend.devices import resolve_device
from gpubackend.introspection import compiled_graph, device_resident_inputs


def check_numerics(
    graph: CaseGraph, reference: Sequence[np.ndarray], calls: Sequence[Sequence]
) -> CheckResult:
    """Every call's outputs have the graph's dtypes and match the reference in shape and value."""
    declared = [np.dtype(out.type.dtype) for out in graph.outputs]
    for call_index, outputs in enumerate(calls, start=1):
        for position, (got, expected) in enumerate(zip(outputs, reference, strict=True)):
            got, expected = np.asarray(got), np.asarray(expected)
            where = f"call {call_index}, output {position}"
            if got.dtype != declared[position]:
                detail = f"{where}: dtype {got.dtype}, the graph says {declared[position]}"
                return CheckResult("numerics", False, detail)
            if got.shape != expected.shape:
                return CheckResult(
                    "numerics", False, f"{where}: shape {got.shape}, expected {expected.shape}"
                )
            if expected.dtype.kind in "biu":
                if not np.array_equal(got, expected):
                    return CheckResult(
                        "numerics", False, f"{where}: {got.tolist()}, expected {expected.tolist()}"
                    )
            elif not np.allclose(got, expected, rtol=graph.rtol, atol=graph.atol, equal_nan=True):
                error = np.max(np.abs(got.astype(float) - expected.astype(float)))
                return CheckResult(
                    "numerics", False, f"{where}: max abs error {error:.3g} (rtol {graph.rtol})"
                )
    return CheckResult(
        "numerics", True, f"{len(reference)} outputs match the reference over {len(calls)} calls"
    )


def rederive_gradient(graph: CaseGraph) -> str:
    """Build (not compile) the gradient of the case's float outputs; say how it went."""
    cost_terms = [out.sum() for out in graph.outputs if out.type.dtype.startswith("float")]
    wrt = [inp for inp in graph.inputs if inp.type.dtype.startswith("float")]
    if not cost_terms or not wrt:
        return "no float outputs/inputs to differentiate"
    try:
        pytensor.grad(
            pytensor.tensor.add(*cost_terms),
            wrt,
            disconnected_inputs="ignore",
            null_gradients="return",
        )
    except Exception as error:  # noqa: BLE001 - an op without a gradient is a fact about the op, not a breakage
        return f"gradient not derivable ({error_summary(error)[:120]})"
    return "gradient re-derived"


def check_canonical_intact(graph: CaseGraph, before: Fingerprint) -> CheckResult:
    """The canonical inner graphs are the same objects after compiling, two calls and a gradient."""
    after_calls = fingerprint(graph.outputs)
    if (difference := describe_difference(before, after_calls)) is not None:
        return CheckResult("canonical_intact", False, f"after compiling and calling: {difference}")
    gradient = rederive_gradient(graph)
    if (difference := describe_difference(before, fingerprint(graph.outputs))) is not None:
        return CheckResult(
            "canonical_intact", False, f"after re-deriving the gradient: {difference}"
        )
    return CheckResult(
        "canonical_intact", True, f"{len(before)} inner-graph ops unchanged; {gradient}"
    )


def check_rewrite_free(probe: RewriteFreeProbe) -> CheckResult:
    link, call = probe.counts[LINK], probe.counts[CALL]
    detail = f"link: {link.describe()}; calls: {call.describe()}"
    return CheckResult("rewrite_free", link.clean and call.clean, detail)


def check_baked(case: Case, graph: CaseGraph, fn: Function, bakes_inplace: bool) -> CheckResult:
    """The compiled graph holds baked ops; canonical ops it still holds carry no baked inplace."""
    canonical = inner_graph_ops(graph.outputs)
    canonical_ids = {id(op) for op in canonical}
    compiled = inner_graph_ops(compiled_graph(fn).outputs)
    reused = [op for op in compiled if id(op) in canonical_ids]
    baked = [op for op in compiled if id(op) not in canonical_ids]
    detail = (
        f"{len(baked)} baked inner-graph ops, {len(reused)} canonical ops left unchanged by baking"
    )
    if count_inplace_nodes(reused):
        return CheckResult(
            "baked", False, f"a canonical op carries inplace nodes in the compiled graph; {detail}"
        )
    if bakes_inplace and case.inplace_opportunity:
        canonical_inplace, baked_inplace = (
            count_inplace_nodes(canonical),
            count_inplace_nodes(baked),
        )
        detail += f"; inplace nodes: {baked_inplace} baked, {canonical_inplace} canonical"
        if canonical_inplace or not baked_inplace:
            return CheckResult(
                "baked", False, f"expected inplace only in the baked graph; {detail}"
            )
    return CheckResult("baked", True, detail)


def resident_inputs(fn: Function, values: Sequence, device: jax.Device) -> list:
    """The test values, already on ``device`` wherever the function keeps that input on the
    device."""
    # values covers the explicit inputs; the shared variables' flags after theirs go unused
    return [
        jax.device_put(value, device) if resident else value
        for resident, value in zip(device_resident_inputs(fn), values, strict=False)
    ]


def check_resident(
    fn: Function, graph: CaseGraph, device_spec: str, outputs: Sequence, declared_reads: int = 0
) -> CheckResult:
    """Outputs are on the target device, and a warm call with resident inputs uploads nothing and
    reads from the device exactly the ``declared_reads`` explicit times (``jax.device_get``, or the
    backend's `read_back`), never implicitly."""
    device = resolve_device(device_spec)
    misplaced = [
        position
        for position, out in enumerate(outputs)
        if not isinstance(out, jax.Array) or out.devices() != {device}
    ]
    if misplaced:
        return CheckResult("resident", False, f"outputs {misplaced} are not jax.Arrays on {device}")
    inputs = resident_inputs(fn, graph.values, device)
    try:
        reads = count_host_reads(fn, inputs, device)
    except Exception as error:  # noqa: BLE001 - any failure under the guard is the finding
        return CheckResult(
            "resident", False, f"warm call under transfer guard: {error_summary(error)}"
        )
    figure = (
        f"{reads.explicit} explicit host reads per call (declared {declared_reads}; {reads.method})"
    )
    if reads.implicit:
        return CheckResult(
            "resident",
            False,
            f"an implicit device-to-host read: {reads.implicit}; {figure}",
            reads.explicit,
        )
    ok = reads.explicit == declared_reads
    return CheckResult("resident", ok, f"outputs on {device}; no upload; {figure}", reads.explicit)


@dataclass(frozen=True)
class HostReads:
    """Device-to-host reads seen in one call: explicit ones counted, implicit ones described (empty:
    none)."""

    explicit: int
    implicit: str
    method: str


def count_host_reads(fn: Function, inputs: Sequence, device: jax.Device) -> HostReads:
    """Call ``fn`` once under transfer guards, counting its reads from the device.

    Explicit reads are the calls to ``jax.device_get`` and to the backend's
    read, `host_reads.read_back` (a numpy view on the host platform). Implicit ones
    (``np.asarray``, ``int()``, ``bool()`` of a device array) are refused by
    JAX's device-to-host guard on accelerators, which stops the call: that
    refusal is reported as the implicit read. The guard does not see them on
    CPU devices. There the call's device inputs are first made to wait on a
    device computation of about `_GATE_TARGET_SECONDS`: JAX dispatches
    asynchronously, so a call that makes no read returns while its inputs are
    still pending, and one that returns with them ready, having made no
    explicit read, read implicitly.
    """
    timed = device.platform == "cpu"
    if timed:
        inputs = [_gated(value) if isinstance(value, jax.Array) else value for value in inputs]
    gates = [value for value in inputs if isinstance(value, jax.Array)]
    with (
        jax.transfer_guard_host_to_device("disallow_explicit"),
        jax.transfer_guard_device_to_device("disallow_explicit"),
        jax.transfer_guard_device_to_host("disallow"),
        _counting_device_gets() as explicit,
    ):
        started = time.perf_counter()
        try:
            outputs = fn(*inputs)
        except jax.errors.JaxRuntimeError as error:
            if timed or _DEVICE_TO_HOST_REFUSAL not in str(error):
                raise
            refusal = str(error).splitlines()[0]
            return HostReads(explicit[0], f"refused by the guard: {refusal}", "transfer guard")
        returned = time.perf_counter() - started
        # A read of anything computed from the inputs had to wait for them. (`jax.Array`'s
        # annotations lack `is_ready`, which every concrete array has.)
        waited = bool(gates) and all(gate.is_ready() for gate in gates)  # type: ignore[attr-defined]
    jax.block_until_ready(outputs)
    if not timed:
        return HostReads(explicit[0], "", "transfer guard")
    method = (
        f"returned after {returned * 1e3:.0f} ms, "
        f"its inputs {'ready' if waited else 'still pending'}"
    )
    if waited and not explicit[0]:
        return HostReads(0, f"the call waited for its inputs' values ({method})", method)
    return HostReads(explicit[0], "", method)


_DEVICE_TO_HOST_REFUSAL = "Disallowed device-to-host transfer"
"""How JAX's guard words its refusal of a read from an accelerator (jax 0.4 to 0.11)."""


@contextmanager
def _counting_device_gets() -> Iterator[list[int]]:
    """Count explicit reads while the block runs: calls of ``jax.device_get``, and of the backend's
    one read per run, `host_reads.read_back` (which reads without ``jax.device_get`` on the host
    platform, and counts once where it calls it)."""
    from gpubackend import host_reads

    original_device_get, original_read_back = jax.device_get, host_reads.read_back
    count = [0]

    def counted_device_get(tree):
        count[0] += 1
        return original_device_get(tree)

    def counted_read_back(values, on_host_platform):
        count[0] += 1
        return original_read_back(values, on_host_platform)

    jax.device_get, host_reads.read_back = counted_device_get, counted_read_back
    try:
        yield count
    finally:
        jax.device_get, host_reads.read_back = original_device_get, original_read_back


# The wait must dwarf a call's own dispatch time, also on a loaded machine.
_GATE_TARGET_SECONDS = 0.25
_GATE_PROBE_ROUNDS = 16


@partial(jax.jit, static_argnums=1)
def _wait_then_pass(value: jax.Array, rounds: int) -> jax.Array:
    """``value``, available only after ``rounds`` dense products on its device."""
    matrix = jnp.eye(256, dtype=jnp.float32) * 0.5
    spun = jax.lax.fori_loop(0, rounds, lambda _, a: jnp.tanh(a @ matrix), matrix)
    return value + (spun[0, 0] * 0).astype(value.dtype)


def _gated(value: jax.Array) -> jax.Array:
    return _wait_then_pass(value, _gate_rounds(next(iter(value.devices()))))


@cache
def _gate_rounds(device: jax.Device) -> int:
    """Rounds of the wait that take about `_GATE_TARGET_SECONDS` on ``device``."""
    probe = jax.device_put(np.zeros((), np.float32), device)
    rounds = _GATE_PROBE_ROUNDS
    for _ in range(2):
        jax.block_until_ready(_wait_then_pass(probe, rounds))
        started = time.perf_counter()
        jax.block_until_ready(_wait_then_pass(probe, rounds))
        seconds = time.perf_counter() - started
        if seconds >= _GATE_TARGET_SECONDS / 2:
            break
        rounds = max(rounds + 1, int(rounds * _GATE_TARGET_SECONDS / max(seconds, 1e-4)))
    return rounds


def error_summary(error: BaseException) -> str:
    """The error's type and the first line of its message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:400] if text else ''}"


def guarded(name: str, check: Callable[[], CheckResult]) -> CheckResult:
    """Run a check; a check that crashes is reported as that check failing, with the error."""
    try:
        return check()
    except Exception as error:  # noqa: BLE001 - reported, never swallowed
        return CheckResult(name, False, f"the check raised {error_summary(error)}")


def host_copy(outputs: Sequence) -> list[np.ndarray]:
    return [np.array(out, copy=True) for out in outputs]
