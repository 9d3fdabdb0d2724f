"""The problem COBYQA iterates on (scipy's vendored ``cobyqa/problem.py`` without constraints), as
`gpubackend.solvers.cobyqa_problem` ports it: variables fixed by equal bounds are removed, ``x0``
is clipped into the bounds, and with ``scale`` and finite bounds the free variables are mapped
onto ``[-1, 1]``. The bounds are settings, so all but ``x0`` is known when the solver is traced.

Without constraints every point is feasible, so COBYQA's filter of evaluated points keeps one:
the first with the least value, or the first evaluated where that was NaN.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gpubackend.dispatch.jax.cobyla import fixed_by_bounds

BARRIER = 2.0**100
"""COBYQA's ``BARRIER``: the model sees values clipped to +-BARRIER, NaN as +BARRIER."""


class Problem(NamedTuple):
    free: np.ndarray
    """Which variables are free (the others at ``fixed_values``)."""
    fixed_values: np.ndarray
    lower_full: np.ndarray
    upper_full: np.ndarray
    """Every variable's bounds (NaN as infinite), into which evaluated points are clipped."""
    lower: np.ndarray
    upper: np.ndarray
    """The free variables' bounds, scaled."""
    factor: np.ndarray
    shift: np.ndarray
    """A free variable is ``factor * y + shift`` of COBYQA's ``y``."""
    feasible: bool
    """scipy's ``is_feasible`` of the bounds (no crossed or infinite-only bound)."""
    clips_start: bool
    """Whether ``x0`` is clipped into the free variables' bounds (they are feasible)."""

    @property
    def n(self) -> int:
        return int(self.free.sum())


def _feasible(lower: np.ndarray, upper: np.ndarray) -> bool:
    return bool(np.all(lower <= upper) and np.all(lower < np.inf) and np.all(upper > -np.inf))


def bounded_problem(
    lower: tuple[float, ...], upper: tuple[float, ...], n: int, scale: bool
) -> Problem:
    """scipy's ``Problem`` of the settings' bound tuples for ``n`` variables."""
    if len(lower) not in (1, n) or len(upper) != len(lower):
        raise ValueError("`bounds` must hold one (lower, upper) pair per element of x")
    lb = np.broadcast_to(np.asarray(lower, np.float64), (n,))
    ub = np.broadcast_to(np.asarray(upper, np.float64), (n,))
    lb = np.where(np.isnan(lb), -np.inf, lb)
    ub = np.where(np.isnan(ub), np.inf, ub)
    fixed, fixed_values = fixed_by_bounds(lb, ub)
    free = ~fixed
    xl, xu = lb[free], ub[free]
    clips_start = _feasible(xl, xu)
    n_free = int(free.sum())
    factor, shift = np.ones(n_free), np.zeros(n_free)
    if scale and clips_start and np.all(np.isfinite(xl)) and np.all(np.isfinite(xu)):
        factor, shift = 0.5 * (xu - xl), 0.5 * (xu + xl)
        xl, xu = -np.ones(n_free), np.ones(n_free)
    return Problem(
        free, fixed_values, lb, ub, xl, xu, factor, shift, _feasible(lb, ub), clips_start
    )


def _typed(like: jax.Array, *arrays: np.ndarray) -> tuple[jax.Array, ...]:
    """The problem's arrays in the dtype of ``like`` (a float32 ``x`` stays float32)."""
    return tuple(jnp.asarray(array, like.dtype) for array in arrays)


def start(problem: Problem, x0: jax.Array) -> jax.Array:
    """COBYQA's ``x0`` among the free variables: clipped into their bounds, scaled."""
    free = np.flatnonzero(problem.free)
    x = x0[free]
    if problem.clips_start:
        lower, upper = _typed(x0, problem.lower_full[free], problem.upper_full[free])
        x = jnp.minimum(jnp.maximum(x, lower), upper)
    shift, factor = _typed(x0, problem.shift, problem.factor)
    return (x - shift) / factor


def full_x(problem: Problem, y: jax.Array, clips: bool = True) -> jax.Array:
    """scipy's ``build_x``: the fixed variables back in, unscaled, clipped into the bounds."""
    free = np.flatnonzero(problem.free)
    fixed_values, factor, shift = _typed(y, problem.fixed_values, problem.factor, problem.shift)
    x = fixed_values.at[free].set(y * factor + shift)
    if clips:
        lower, upper = _typed(y, problem.lower_full, problem.upper_full)
        return jnp.minimum(jnp.maximum(x, lower), upper)
    return x


def takes_into_filter(filled: jax.Array, best_value: jax.Array, value: jax.Array) -> jax.Array:
    """Whether COBYQA's filter keeps an evaluation of ``value`` over its one point."""
    return ~filled | (~jnp.isnan(value) & ~jnp.isnan(best_value) & (value < best_value))


def clipped(value: jax.Array) -> jax.Array:
    """The value the models see."""
    return jnp.where(jnp.isnan(value), BARRIER, jnp.clip(value, -BARRIER, BARRIER))
