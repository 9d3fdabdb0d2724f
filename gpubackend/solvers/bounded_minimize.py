"""Bounded scalar minimisation (port of scipy's ``_minimize_scalar_bounded``, fminbound)."""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

_SQRT_EPS = np.sqrt(2.2e-16)
_GOLDEN_MEAN = 0.5 * (3.0 - np.sqrt(5.0))


def make_bounded_minimize(fun: Callable) -> Callable:
    """``solve(args, x0, bounds, settings: BoundedMinimizeSettings) -> (x, converged)``; ``x0`` is
    unused, as in scipy.

    ``settings.maxiter`` counts evaluations, as scipy's does (fminbound's ``maxfun``).

    Bounds that are not two finite, ordered numbers give ``converged=False``.
    """

    @numba_njit
    def solve(args, x0, bounds, settings):
        xatol, maxfun = settings.xatol, settings.maxiter
        if (
            bounds.shape[0] != 2
            or not (np.isfinite(bounds[0]) and np.isfinite(bounds[1]))
            or bounds[0] > bounds[1]
        ):
            return np.nan, False
        a, b = bounds[0], bounds[1]
        fulc = a + _GOLDEN_MEAN * (b - a)
        nfc = xf = fulc
        rat = e = 0.0
        x = xf
        fx = fun(x, args)
        num = 1
        fu = np.inf
        ffulc = fnfc = fx
        xm = 0.5 * (a + b)
        tol1 = _SQRT_EPS * abs(xf) + xatol / 3.0
        tol2 = 2.0 * tol1
        hit_limit = False
        while abs(xf - xm) > (tol2 - 0.5 * (b - a)):
            golden = True
            if abs(e) > tol1:
                golden = False
                r = (xf - nfc) * (fx - ffulc)
                q = (xf - fulc) * (fx - fnfc)
                p = (xf - fulc) * q - (xf - nfc) * r
                q = 2.0 * (q - r)
                if q > 0.0:
                    p = -p
                q = abs(q)
                r = e
                e = rat
                if abs(p) < abs(0.5 * q * r) and p > q * (a - xf) and p < q * (b - xf):
                    rat = p / q
                    x = xf + rat
                    if (x - a) < tol2 or (b - x) < tol2:
                        si = np.sign(xm - xf) + ((xm - xf) == 0)
                        rat = tol1 * si
                else:
                    golden = True
            if golden:
                e = a - xf if xf >= xm else b - xf
                rat = _GOLDEN_MEAN * e
            si = np.sign(rat) + (rat == 0)
            x = xf + si * max(abs(rat), tol1)
            fu = fun(x, args)
            num += 1
            if fu <= fx:
                if x >= xf:
                    a = xf
                else:
                    b = xf
                fulc, ffulc = nfc, fnfc
                nfc, fnfc = xf, fx
                xf, fx = x, fu
            else:
                if x < xf:
                    a = x
                else:
                    b = x
                if fu <= fnfc or nfc == xf:
                    fulc, ffulc = nfc, fnfc
                    nfc, fnfc = x, fu
                elif fu <= ffulc or fulc == xf or fulc == nfc:
                    fulc, ffulc = x, fu
            xm = 0.5 * (a + b)
            tol1 = _SQRT_EPS * abs(xf) + xatol / 3.0
            tol2 = 2.0 * tol1
            if num >= maxfun:
                hit_limit = True
                break
        return xf, not (hit_limit or np.isnan(xf) or np.isnan(fx) or np.isnan(fu))

    return solve
