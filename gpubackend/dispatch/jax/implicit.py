"""Derivatives of an optimize op's solution by the implicit function theorem, with plain JAX
linear algebra, and a start value that varies across devices as the parameters do.

optimistix differentiates its solves with `optimistix.ImplicitAdjoint`, which
hands the Jacobian to ``lineax.linear_solve``. Two things break that on the
paths JAX samplers take:

- under ``jax.pmap`` and ``shard_map`` (numpyro's default ``chain_method``),
  lineax compares an operator's input and output structures including their
  shardings, and a symmetric-tagged Jacobian whose output varies across
  devices while its input does not is refused at trace time (lineax issue 185);
- the tangent solves run with ``throw=True`` whatever the caller asks, so a
  non-finite Jacobian (a NaN proposal of a sampler) raises from a host
  callback and aborts the whole run instead of giving a NaN gradient.

`implicitly_differentiated` wraps a solve in a ``jax.custom_jvp`` whose tangent
is ``-J^{-1} (dF/dparameters . dparameters)`` for the condition ``F`` the
solution satisfies (the objective's gradient for a minimum, the equations for a
root), with ``J`` from ``jax.jacfwd`` and the system solved by
``jnp.linalg.solve``: no lineax operator, no runtime check, and NaN in, NaN
out. It is the formula PyTensor's own symbolic gradients of these ops use.
`varying_like` gives the start value the device-varying type of the
parameters, so that optimistix's closure conversion and lineax's structure
checks see iterates and parameters of one type inside ``shard_map``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

Solve = Callable[[jax.Array, tuple[Any, ...]], tuple[jax.Array, jax.Array]]
"""``(start, inputs) -> (solution, success)``."""

Condition = Callable[[jax.Array, tuple[Any, ...]], jax.Array]
"""``(solution, inputs) -> residual``, zero at the solution, of the solution's shape."""


def _varying_axes(value: Any) -> frozenset:
    manual_axis_type = getattr(jax.typeof(value), "manual_axis_type", None)
    return getattr(manual_axis_type, "varying", frozenset())


def varying_like(start: jax.Array, inputs: tuple[Any, ...]) -> jax.Array:
    """``start``, marked as varying over every manual mesh axis (``shard_map``, ``pmap``) over
    which one of ``inputs`` varies; unchanged outside such a mesh."""
    wanted = frozenset().union(*(_varying_axes(leaf) for leaf in jax.tree.leaves(inputs)))
    missing = tuple(sorted(wanted - _varying_axes(start), key=str))
    if not missing:
        return start
    return jax.lax.pcast(start, missing, to="varying")


def varying_leaves_like(tree: Any, inputs: tuple[Any, ...]) -> Any:
    """``tree`` with every leaf `varying_like` ``inputs``: a loop's carry, inside a manual mesh,
    must start as varying as its body makes it."""
    return jax.tree.map(lambda leaf: varying_like(leaf, inputs), tree)


def _no_tangent(value: jax.Array) -> Any:
    """The zero tangent of a boolean, of its manual-mesh type (``float0`` with ``value``'s
    varying axes)."""
    return jax.custom_derivatives.zero_from_primal(value)


def implicitly_differentiated(solve: Solve, condition: Condition) -> Solve:
    """``solve`` with derivatives of its solution by the implicit function theorem.

    The solution's tangent is ``-J^{-1} (dF/dinputs . dinputs)``, where ``F`` is
    ``condition`` and ``J`` its Jacobian in the solution, both at the solution;
    the start value and ``success`` have no derivative. A singular or
    non-finite ``J`` gives a non-finite tangent, never an error.
    """

    @jax.custom_jvp
    def solved(start: jax.Array, inputs: tuple[Any, ...]) -> tuple[jax.Array, jax.Array]:
        return solve(start, inputs)

    @solved.defjvp
    def solved_jvp(primals, tangents):
        start, inputs = primals
        _, input_tangents = tangents
        solution, success = solved(start, inputs)

        def flat_condition(flat_solution: jax.Array) -> jax.Array:
            return jnp.ravel(condition(flat_solution.reshape(solution.shape), inputs))

        jacobian = jax.jacfwd(flat_condition)(jnp.ravel(solution))
        _, moved = jax.jvp(lambda ins: condition(solution, ins), (inputs,), (input_tangents,))
        step = jnp.linalg.solve(jacobian, jnp.ravel(moved).astype(jacobian.dtype))
        tangent = varying_like(-step.reshape(solution.shape).astype(solution.dtype), (solution,))
        return (solution, success), (tangent, _no_tangent(success))

    return solved
