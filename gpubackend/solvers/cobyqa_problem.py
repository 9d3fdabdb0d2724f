"""The problem COBYQA iterates on (port of scipy's vendored ``cobyqa/problem.py`` without
constraints): variables fixed by equal bounds are removed, ``x0`` is clipped into the bounds,
and with ``scale`` and finite bounds the free variables are mapped onto ``[-1, 1]``.

Without constraints every point is feasible (its constraint violation is 0), so COBYQA's filter
of evaluated points keeps one: the first with the least value, or the first evaluated where that
was NaN (a NaN point is never replaced, as in COBYQA).
"""

import numpy as np

from gpubackend.solvers.cobyqa_model import EPS
from gpubackend.solvers.ieee import ieee_njit

BARRIER = 2.0**100
"""COBYQA's ``BARRIER``: the model sees values clipped to +-BARRIER, NaN as +BARRIER."""


@ieee_njit
def _largest_finite(values, largest):
    for v in values:
        if np.isfinite(v):
            largest = max(largest, abs(v))
    return largest


@ieee_njit
def arrays_tol(xl, xu) -> float:
    """COBYQA's ``get_arrays_tol(xl, xu)``."""
    weight = _largest_finite(xu, _largest_finite(xl, 1.0))
    return 10.0 * EPS * max(xl.shape[0], 1.0) * weight


@ieee_njit
def free_problem(x0, xl_in, xu_in, scale):
    """``(fixed, fixed_val, xl, xu, x0, factor, shift, feasible)``: the mask and values of the fixed
    variables, the free variables' (scaled) bounds and start, the scaling ``x = factor * y +
    shift``; ``feasible`` False where scipy's ``is_feasible`` is (crossed or infinite-only bounds:
    nothing is then clipped)."""
    xl = np.where(np.isnan(xl_in), -np.inf, xl_in)
    xu = np.where(np.isnan(xu_in), np.inf, xu_in)
    feasible = np.all(xl <= xu) and np.all(xl < np.inf) and np.all(xu > -np.inf)
    tol = arrays_tol(xl, xu)
    fixed = (xl <= xu) & (np.abs(xl - xu) < tol)
    fixed_val = np.minimum(np.maximum(0.5 * (xl[fixed] + xu[fixed]), xl[fixed]), xu[fixed])
    free = ~fixed
    xl_free, xu_free = xl[free], xu[free]
    feasible_free = (
        np.all(xl_free <= xu_free) and np.all(xl_free < np.inf) and np.all(xu_free > -np.inf)
    )
    x0_free = x0[free]
    if feasible_free:
        x0_free = np.minimum(np.maximum(x0_free, xl_free), xu_free)
    n = x0_free.shape[0]
    if scale and feasible_free and np.all(np.isfinite(xl_free)) and np.all(np.isfinite(xu_free)):
        factor = 0.5 * (xu_free - xl_free)
        shift = 0.5 * (xu_free + xl_free)
        return (
            fixed,
            fixed_val,
            -np.ones(n),
            np.ones(n),
            (x0_free - shift) / factor,
            factor,
            shift,
            feasible,
        )
    return fixed, fixed_val, xl_free, xu_free, x0_free, np.ones(n), np.zeros(n), feasible


@ieee_njit
def full_x(x, fixed, fixed_val, factor, shift, xl, xu, feasible):
    """scipy's ``build_x``: the fixed variables back in, unscaled, clipped into the bounds."""
    x_full = np.empty(fixed.shape[0])
    i_fixed = 0
    i_free = 0
    for i in range(fixed.shape[0]):
        if fixed[i]:
            x_full[i] = fixed_val[i_fixed]
            i_fixed += 1
        else:
            x_full[i] = x[i_free] * factor[i_free] + shift[i_free]
            i_free += 1
    if feasible:
        return np.minimum(np.maximum(x_full, xl), xu)
    return x_full


@ieee_njit
def takes_into_filter(filled, best_value, value) -> bool:
    """Whether COBYQA's filter keeps an evaluation of ``value`` over its one point."""
    if not filled:
        return True
    return not np.isnan(value) and not np.isnan(best_value) and value < best_value


@ieee_njit
def clipped(value) -> float:
    """The value the models see."""
    if np.isnan(value):
        return BARRIER
    return max(min(value, BARRIER), -BARRIER)
