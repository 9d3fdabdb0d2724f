"""Brent's method for scalar minimisation (port of scipy's ``Brent.optimize``)."""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.bracket import make_bracket

_MIN_TOL = 1.0e-11
_GOLDEN_SECTION = 0.3819660


def make_brent_minimize(fun: Callable) -> Callable:
    """``solve(args, x0, bracket, settings: BracketMinimizeSettings) -> (x, converged)``; ``x0`` is
    unused, as in scipy."""
    find_bracket = make_bracket(fun)

    @numba_njit
    def solve(args, x0, bracket, settings):
        xtol, maxiter = settings.xtol, settings.maxiter
        valid, xa, xb, xc, _fa, fb, _fc = find_bracket(args, bracket)
        if not valid:
            return xb, False
        x = w = v = xb
        fw = fv = fx = fb
        a, b = (xa, xc) if xa < xc else (xc, xa)
        deltax = 0.0
        rat = 0.0
        iteration = 0
        while iteration < maxiter:
            tol1 = xtol * abs(x) + _MIN_TOL
            tol2 = 2.0 * tol1
            xmid = 0.5 * (a + b)
            if abs(x - xmid) < (tol2 - 0.5 * (b - a)):
                break
            if abs(deltax) <= tol1:
                deltax = a - x if x >= xmid else b - x
                rat = _GOLDEN_SECTION * deltax
            else:
                tmp1 = (x - w) * (fx - fv)
                tmp2 = (x - v) * (fx - fw)
                p = (x - v) * tmp2 - (x - w) * tmp1
                tmp2 = 2.0 * (tmp2 - tmp1)
                if tmp2 > 0.0:
                    p = -p
                tmp2 = abs(tmp2)
                dx_temp = deltax
                deltax = rat
                if p > tmp2 * (a - x) and p < tmp2 * (b - x) and abs(p) < abs(0.5 * tmp2 * dx_temp):
                    rat = p / tmp2
                    u = x + rat
                    if (u - a) < tol2 or (b - u) < tol2:
                        rat = tol1 if xmid - x >= 0 else -tol1
                else:
                    deltax = a - x if x >= xmid else b - x
                    rat = _GOLDEN_SECTION * deltax
            if abs(rat) < tol1:
                u = x + tol1 if rat >= 0 else x - tol1
            else:
                u = x + rat
            fu = fun(u, args)
            if fu > fx:
                if u < x:
                    a = u
                else:
                    b = u
                if fu <= fw or w == x:
                    v, w, fv, fw = w, u, fw, fu
                elif fu <= fv or v == x or v == w:
                    v, fv = u, fu
            else:
                if u >= x:
                    a = x
                else:
                    b = x
                v, w, x = w, x, u
                fv, fw, fx = fw, fx, fu
            iteration += 1
        return x, iteration < maxiter and not (np.isnan(x) or np.isnan(fx))

    return solve
