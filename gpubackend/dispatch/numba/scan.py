"""NUMBA's Scan returning what the reference returns when it takes no step.

PyTensor's Scan, run for zero steps, returns every nit-sot empty, with every
axis of length 0 (``Scan.perform``), or, where the output's type knows an axis's
length, that length (as its C and JAX Scans do). Its Numba lowering returns the nit-sot's
buffer as allocated instead: where PyTensor's memory rewrite keeps only the
last entry (``pt.map(f, xs)[-1]``), a buffer of one unwritten entry, so
``[-1]`` of a map over an empty sequence returned ``0.0`` where the reference
raises ``IndexError``. This lowering is PyTensor's, its nit-sots replaced by
empty arrays when ``n_steps`` is 0; a Scan whose ``n_steps`` is a positive
constant, or that has no nit-sot, is PyTensor's as it is.
"""

from __future__ import annotations

from hashlib import sha256

import numpy as np
from pytensor.graph.basic import Constant
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key
from pytensor.link.numba.dispatch.scan import numba_funcify_Scan
from pytensor.scan.op import Scan

NO_STEP_VERSION = 2
"""Part of the cache key: a changed wrapper must not reuse a cached one."""


@register_funcify_and_cache_key(Scan)
def numba_funcify_Scan_without_steps(op: Scan, node, **kwargs):
    scan, stock_key = numba_funcify_Scan(op, node, **kwargs)
    n_steps = node.inputs[0]
    if (
        not op.info.n_nit_sot
        or stock_key is None
        or (isinstance(n_steps, Constant) and int(n_steps.data) >= 1)
    ):
        return scan, stock_key
    names = [f"input_{position}" for position in range(len(node.inputs))]
    outputs = [f"output_{position}" for position in range(len(node.outputs))]
    unpacked = outputs[0] if len(outputs) == 1 else ", ".join(outputs)
    lines = [
        f"def scan_without_steps({', '.join(names)}):",
        f"    {unpacked} = scan({', '.join(names)})",
        f"    if {names[0]} == 0:",
    ]
    for position in range(op.n_tap_outs, op.n_tap_outs + op.info.n_nit_sot):
        empty_shape = "(" + "".join(f"{length}, " for length in _empty_shape(node, position)) + ")"
        lines.append(
            f"        {outputs[position]} = np.empty({empty_shape}, {outputs[position]}.dtype)"
        )
    lines.append(f"    return {unpacked}")
    key = sha256(str((stock_key, NO_STEP_VERSION, __name__)).encode()).hexdigest()
    without_steps = compile_numba_function_src(
        "\n".join(lines), "scan_without_steps", global_env={"scan": scan, "np": np}, cache_key=key
    )
    # Through the module, as PyTensor's Scan lowering calls it: its tests run the lowerings as
    # plain Python by replacing it there.
    return numba_basic.numba_njit(without_steps), key


def _empty_shape(node, position: int) -> tuple[int, ...]:
    """The shape of output ``position`` of a Scan that took no step: no entry, and each other axis
    as long as its type says (0 where the type does not know it, as PyTensor's ``Scan.perform``
    makes every axis)."""
    return (0, *(length or 0 for length in node.outputs[position].type.shape[1:]))
