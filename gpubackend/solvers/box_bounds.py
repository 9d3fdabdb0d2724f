"""Box bounds ``lower <= x <= upper`` as the native solvers take them from scipy's ``bounds``."""

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit


@numba_njit(inline="always")
def clip(value, low, high):
    # ufuncs on scalars: a NaN stays NaN, as with np.minimum/np.maximum on arrays.
    return np.minimum(np.maximum(value, low), high)


@numba_njit
def expand_bound(bound, n):
    """A bound tuple of length ``n``, or length 1 broadcast to ``n``."""
    if len(bound) != 1 and len(bound) != n:
        raise ValueError("`bounds` must hold one (lower, upper) pair per element of x")
    out = np.empty(n)
    for i in range(n):
        out[i] = bound[0] if len(bound) == 1 else bound[i]
    return out


@numba_njit
def box_bounds(bounds, n):
    """``(lower, upper)`` arrays of length ``n`` from the settings' bound tuples (`resolve` has
    checked their order)."""
    lower, upper = bounds
    return expand_bound(lower, n), expand_bound(upper, n)
