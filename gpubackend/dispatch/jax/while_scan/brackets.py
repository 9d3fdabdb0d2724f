"""scipy's refusal of a bracket without a sign change, for a linker that reads back.

scipy's bracketing ``root_scalar`` methods (bisect, brentq, brenth, ridder,
toms748) raise ``ValueError("f(a) and f(b) must have different signs")`` when
the equation has one sign at both ends of the bracket, as NUMBA's solvers do.
A traced solve cannot raise: its solution is NaN with ``success`` False. In
the top graph of a linker that reads back (JAX_GPU), the condition is a
run-time check (`checks`) read in the call's one read, so the call raises
scipy's error. Elsewhere (stock ``mode="JAX"``, inner graphs, a ``Blockwise``
of the op) the NaN and False stay.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytensor.graph.basic import Apply
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.tensor.optimize import RootScalarOp

from gpubackend.dispatch.jax.while_scan.checks import NodeResult
from gpubackend.dispatch.jax.while_scan.rules import BoundedLowering
from gpubackend.host_reads import RuntimeCheck
from gpubackend.scipy_options import scipy_method

NO_SIGN_CHANGE = RuntimeCheck(ValueError, "f(a) and f(b) must have different signs")


def bracketed_root_finds(order: Sequence[Apply]) -> set[Apply]:
    """The nodes of ``order`` that find a root inside a bracket."""
    return {
        node
        for node in order
        if isinstance(node.op, RootScalarOp) and scipy_method(node.op).needs_input == "bracket"
    }


def checked_bracket(op: RootScalarOp, node: Apply, **kwargs) -> BoundedLowering:
    """The op's lowering, with scipy's sign check of its bracket as a run-time check."""
    # The optimize lowerings import optimistix: only where an op is lowered (`optimize`).
    from gpubackend.dispatch.jax.optimize_lowering import bracket_accepted

    fn = jax_funcify(op, node=node, **kwargs)
    accepted = bracket_accepted(op, **kwargs)

    def root_find(*inputs):
        return NodeResult(list(fn(*inputs)), (accepted(*inputs),))

    return BoundedLowering(root_find, (None, None), (NO_SIGN_CHANGE,))
