"""Downhill bracketing of a scalar minimum (port of scipy's ``optimize.bracket``).

Also resolves the ``bracket`` input shared by Brent and golden-section search:
empty means scipy's default start ``(0, 1)``, two points are grown into a
bracket, three points are checked and used as given.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

_GOLD = 1.618034
_VERY_SMALL = 1e-21
_GROW_LIMIT = 110.0
_MAX_ITER = 1000


def make_bracket(fun: Callable) -> Callable:
    """``search(args, xa, xb) -> (found, xa, xb, xc, fa, fb, fc)`` with ``f(xb)`` below both
    ends."""

    @numba_njit
    def search(args, xa, xb):
        fa = fun(xa, args)
        fb = fun(xb, args)
        if fa < fb:
            xa, xb = xb, xa
            fa, fb = fb, fa
        xc = xb + _GOLD * (xb - xa)
        fc = fun(xc, args)
        iteration = 0
        while fc < fb:
            tmp1 = (xb - xa) * (fb - fc)
            tmp2 = (xb - xc) * (fb - fa)
            val = tmp2 - tmp1
            denom = 2.0 * _VERY_SMALL if abs(val) < _VERY_SMALL else 2.0 * val
            w = xb - ((xb - xc) * tmp2 - (xb - xa) * tmp1) / denom
            wlim = xb + _GROW_LIMIT * (xc - xb)
            if iteration > _MAX_ITER:
                return False, xa, xb, xc, fa, fb, fc
            iteration += 1
            if (w - xc) * (xb - w) > 0.0:
                fw = fun(w, args)
                if fw < fc:
                    xa, xb, fa, fb = xb, w, fb, fw
                    break
                elif fw > fb:
                    xc, fc = w, fw
                    break
                w = xc + _GOLD * (xc - xb)
                fw = fun(w, args)
            elif (w - wlim) * (wlim - xc) >= 0.0:
                w = wlim
                fw = fun(w, args)
            elif (w - wlim) * (xc - w) > 0.0:
                fw = fun(w, args)
                if fw < fc:
                    xb = xc
                    xc = w
                    w = xc + _GOLD * (xc - xb)
                    fb = fc
                    fc = fw
                    fw = fun(w, args)
            else:
                w = xc + _GOLD * (xc - xb)
                fw = fun(w, args)
            xa, xb, xc = xb, xc, w
            fa, fb, fc = fb, fc, fw
        valid = (
            ((fb < fc and fb <= fa) or (fb < fa and fb <= fc))
            and (xa < xb < xc or xc < xb < xa)
            and np.isfinite(xa)
            and np.isfinite(xb)
            and np.isfinite(xc)
        )
        return valid, xa, xb, xc, fa, fb, fc

    @numba_njit
    def resolve(args, points):
        """Bracket from the op's ``bracket`` input (0, 2 or 3 points)."""
        if points.shape[0] == 0:
            return search(args, 0.0, 1.0)
        if points.shape[0] == 2:
            return search(args, points[0], points[1])
        if points.shape[0] != 3:
            return False, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan
        xa, xb, xc = points[0], points[1], points[2]
        if xa > xc:
            xa, xc = xc, xa
        fa = fun(xa, args)
        fb = fun(xb, args)
        fc = fun(xc, args)
        valid = xa < xb < xc and fb < fa and fb < fc
        return valid, xa, xb, xc, fa, fb, fc

    return resolve
