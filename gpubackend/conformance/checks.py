"""The checks run on one compiled case. Each returns a `CheckResult` with a one-line detail."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
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
from gpubackend.device_inputs import DeviceResidentInput
from gpubackend.devices import resolve_device


def check_numerics(graph: CaseGraph, reference: Sequence[np.ndarray], calls: Sequence[Sequence]) -> CheckResult:
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
                return CheckResult("numerics", False, f"{where}: shape {got.shape}, expected {expected.shape}")
            if expected.dtype.kind in "biu":
                if not np.array_equal(got, expected):
                    return CheckResult("numerics", False, f"{where}: {got.tolist()}, expected {expected.tolist()}")
            elif not np.allclose(got, expected, rtol=graph.rtol, atol=graph.atol, equal_nan=True):
                error = np.max(np.abs(got.astype(float) - expected.astype(float)))
                return CheckResult("numerics", False, f"{where}: max abs error {error:.3g} (rtol {graph.rtol})")
    return CheckResult("numerics", True, f"{len(reference)} outputs match the reference over {len(calls)} calls")


def rederive_gradient(graph: CaseGraph) -> str:
    """Build (not compile) the gradient of the case's float outputs; say how it went."""
    cost_terms = [out.sum() for out in graph.outputs if out.type.dtype.startswith("float")]
    wrt = [inp for inp in graph.inputs if inp.type.dtype.startswith("float")]
    if not cost_terms or not wrt:
        return "no float outputs/inputs to differentiate"
    try:
        pytensor.grad(pytensor.tensor.add(*cost_terms), wrt, disconnected_inputs="ignore", null_gradients="return")
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
        return CheckResult("canonical_intact", False, f"after re-deriving the gradient: {difference}")
    return CheckResult("canonical_intact", True, f"{len(before)} inner-graph ops unchanged; {gradient}")


def check_rewrite_free(probe: RewriteFreeProbe) -> CheckResult:
    link, call = probe.counts[LINK], probe.counts[CALL]
    detail = f"link: {link.describe()}; calls: {call.describe()}"
    return CheckResult("rewrite_free", link.clean and call.clean, detail)


def check_baked(case: Case, graph: CaseGraph, fn: Function, bakes_inplace: bool) -> CheckResult:
    """The compiled graph holds baked ops; canonical ops it still holds carry no baked inplace."""
    canonical = inner_graph_ops(graph.outputs)
    canonical_ids = {id(op) for op in canonical}
    compiled = inner_graph_ops(fn.maker.fgraph.outputs)
    reused = [op for op in compiled if id(op) in canonical_ids]
    baked = [op for op in compiled if id(op) not in canonical_ids]
    detail = f"{len(baked)} baked inner-graph ops, {len(reused)} canonical ops left unchanged by baking"
    if count_inplace_nodes(reused):
        return CheckResult("baked", False, f"a canonical op carries inplace nodes in the compiled graph; {detail}")
    if bakes_inplace and case.inplace_opportunity:
        canonical_inplace, baked_inplace = count_inplace_nodes(canonical), count_inplace_nodes(baked)
        detail += f"; inplace nodes: {baked_inplace} baked, {canonical_inplace} canonical"
        if canonical_inplace or not baked_inplace:
            return CheckResult("baked", False, f"expected inplace only in the baked graph; {detail}")
    return CheckResult("baked", True, detail)


def resident_inputs(fn: Function, values: Sequence, device: jax.Device) -> list:
    """The test values, already on ``device`` wherever the function keeps that input on the device."""
    # input_storage continues with shared variables' containers after the explicit inputs
    return [
        jax.device_put(value, device) if isinstance(container.type, DeviceResidentInput) else value
        for container, value in zip(fn.input_storage, values, strict=False)
    ]


def check_resident(fn: Function, graph: CaseGraph, device_spec: str, outputs: Sequence) -> CheckResult:
    """Outputs are on the target device, and a warm call with resident inputs transfers nothing."""
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
        with jax.transfer_guard("disallow_explicit"):
            fn(*inputs)
    except Exception as error:  # noqa: BLE001 - any failure under the guard is the finding
        return CheckResult("resident", False, f"warm call under transfer guard: {error_summary(error)}")
    return CheckResult("resident", True, f"outputs on {device}; warm resident call made no transfer")


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
