"""`DataDependentLengthError`s that name the op, the path the graph is on, and what the caller can
do there."""

from __future__ import annotations

from pytensor.conditional.op import LazyIfElse

from gpubackend.dispatch.jax.lowering_context import LoweringContext
from gpubackend.errors import DataDependentLengthError

_STOCK_PATH = (
    "a JAX linker that cannot read a length back to the "
    "host (mode='JAX', and get_jaxified_graph, which "
    "numpyro, blackjax and nutpie's JAX backend use)"
)
_INNER_PATH = (
    "the inner graph of another op (a Scan's body, "
    "an OpFromGraph), whose outputs need one shape for every call"
)
_STATIC_SHAPES = (
    "make the result a value of static shape: trace[-1], a "
    "reduction such as trace.sum(), or the trace padded to "
    "its bound (pt.set_subtensor(pt.zeros((n_steps, ...))[: trace.shape[0]], trace))"
)
_JAX_GPU = (
    "Where you compile the function yourself, mode='JAX_GPU' returns it (pytensor.function, or "
    "pm.sample(nuts_sampler='pymc', compile_kwargs={'mode': 'JAX_GPU'})); on this path, "
)


def _path(context: LoweringContext) -> str:
    return _INNER_PATH if context.nested else _STOCK_PATH


def run_time_length_output(scan, output, context: LoweringContext) -> DataDependentLengthError:
    advice = ("To run it, " if context.nested else _JAX_GPU) + _STATIC_SHAPES
    return DataDependentLengthError(
        f"{scan}: output {output} has the length of this "
        "while-Scan's trace, which depends on how many steps the "
        f"`until` condition allows; {_path(context)} "
        f"cannot return a data-dependent shape. {advice}."
    )


def no_length_rule(
    scan, consumer, reason: str, context: LoweringContext
) -> DataDependentLengthError:
    specialise = (
        ""
        if context.nested
        else " mode='JAX_GPU' specialises such a graph on the step counts taken instead."
    )
    advice = (
        # PyTensor moves the work only one branch of an ifelse needs into that branch, the trace's
        # reductions included: computing them first does not keep the trace out.
        "The branches of an ifelse that read the trace became a LazyIfElse: choose "
        "between the two values with pt.switch, which computes both"
        if isinstance(consumer.op, LazyIfElse)
        else f"Compute a value of static shape before {consumer.op} (trace[-1], a reduction, "
        "or the trace padded to its bound)"
    )
    return DataDependentLengthError(
        f"{scan}: its trace, of a length known only at run "
        f"time, reaches {consumer.op}, which needs its exact "
        f"length ({reason}); in {_path(context)} the length "
        f"cannot be read back. {advice}.{specialise}"
    )


def unbounded_step_count(scan, sizing_node) -> DataDependentLengthError:
    return DataDependentLengthError(
        f"{scan}: its number of steps, or the size of a buffer "
        "after it, is computed from values known only at run "
        f"time ({sizing_node.op} gets one), so JAX has no bound "
        "for its buffers while it traces the graph, on any "
        "path. Give the loop a bound known while tracing, a "
        "constant or a shape (under mode='JAX' and 'JAX_GPU' "
        "also an integer input of the function; get_jaxified_graph "
        "traces every input), and stop it early with "
        "`until`."
    )
