"""The start that scipy's C bracketing root methods share (``bisect.c``, ``brentq.c``,
``brenth.c``, ``ridder.c``)."""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit


def make_bracket_start(fun: Callable) -> Callable:
    """``start(bracket, args) -> (fa, fb, stops, x, converged)``: ``f`` at the bracket's ends, and
    whether scipy stops there, at ``x``: at a zero of ``f`` (converged) or at a NaN value (not
    converged, as scipy's ``root_scalar`` reports it); a bracket of fewer than two ends stops at
    NaN. A bracket without a sign change raises scipy's ``ValueError``."""

    @numba_njit(inline="always")
    def start(bracket, args):
        if bracket.shape[0] < 2:
            return np.nan, np.nan, True, np.nan, False
        xa, xb = bracket[0], bracket[1]
        fa = fun(xa, args)
        if np.isnan(fa):
            return fa, fa, True, xa, False
        fb = fun(xb, args)
        if np.isnan(fb):
            return fa, fb, True, xb, False
        if fa == 0:
            return fa, fb, True, xa, True
        if fb == 0:
            return fa, fb, True, xb, True
        if np.signbit(fa) == np.signbit(fb):
            raise ValueError("f(a) and f(b) must have different signs")
        return fa, fb, False, xa, False

    return start
