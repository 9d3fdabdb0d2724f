"""Alefeld, Potra and Shi's Algorithm 748 (port of scipy's ``TOMS748Solver``, with scipy's
``k=1``, the only value ``root_scalar`` passes).

Each iteration takes one inverse cubic interpolation step (or, where the
function values are too close, Newton steps on the quadratic through three
points), then a double-length secant step from the endpoint with the smaller
value, and bisects where the bracket did not halve.
"""

import math
from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

_EPS = float(np.finfo(np.float64).eps)
_MU = 0.5
_DISTINCT = 32 * _EPS
"""Function values closer than this are too close to interpolate through."""


@numba_njit(inline="always")
def _distinct(fa, fb, fd, fe) -> bool:
    """scipy's ``_notclose``: all four nonzero, finite and pairwise further apart than
    `_DISTINCT`."""
    values = (fa, fb, fd, fe)
    for i in range(4):
        if values[i] == 0 or not np.isfinite(values[i]):
            return False
        for j in range(i + 1, 4):
            if abs(values[i] - values[j]) <= _DISTINCT:
                return False
    return True


@numba_njit(inline="always")
def _rebracketed(a, b, fa, fb, c, fc):
    """scipy's ``_update_bracket``: ``(a, b, fa, fb, dropped, f(dropped))``."""
    if np.sign(fa) * np.sign(fc) > 0:
        return c, b, fc, fb, a, fa
    return a, c, fa, fc, b, fb


@numba_njit
def _inverse_cubic_zero(a, b, d, e, fa, fb, fd, fe) -> float:
    """The inverse cubic through the four points at 0, by Neville's scheme (scipy's
    ``_interpolated_poly``)."""
    ys = np.array([fa, fb, fd, fe])
    q = np.zeros((4, 4))
    p = np.zeros((4, 4))
    q[:, 0] = p[:, 0] = np.array([a, b, d, e])
    for k in range(1, 4):
        for i in range(k, 4):
            alpha = p[i, k - 1] - q[i - 1, k - 1]
            difference = ys[i - k] - ys[i]
            q[i, k] = ys[i] / difference * alpha
            p[i, k] = ys[i - k] / difference * alpha
    return ((q[3, 1] + q[3, 2]) + q[3, 3]) + q[3, 0]


@numba_njit
def _newton_quadratic(a, b, fa, fb, d, fd, steps) -> float:
    """``steps`` Newton steps on the quadratic through ``(a, b, d)``, started at the endpoint where
    it is convex towards the root; the midpoint where one leaves the bracket."""
    slope = (fb - fa) / (b - a)
    curvature = ((fd - fb) / (d - b) - slope) / (d - a)
    if curvature == 0:
        return a - fa / slope
    r = a if np.sign(curvature) * np.sign(fa) > 0 else b
    for _ in range(steps):
        quadratic = (curvature * (r - b) + slope) * (r - a) + fa
        r1 = r - quadratic / (slope + curvature * (2 * r - a - b))
        if not (a < r1 < b):
            if a < r < b:
                return r
            return (a + b) / 2.0
        r = r1
    return r


def make_toms748(fun: Callable) -> Callable:
    """``solve(args, x0, bracket, settings: RootScalarSettings) -> (x, converged)``; ``x0`` is
    unused.

    Converged once ``|a - b| <= xtol + rtol |b|`` (the midpoint) or at a zero of
    ``f``; ``maxiter`` counts scipy's iterations, the first secant step
    included. A bracket without a sign change or an infinite value of ``f``
    raises scipy's ``ValueError``; at a NaN value it stops there, not
    converged, as scipy's ``root_scalar`` does.
    """

    @numba_njit
    def evaluate(x, args):
        fx = fun(x, args)
        if np.isinf(fx):
            raise ValueError("toms748: invalid function value (infinite)")
        return fx

    @numba_njit
    def solve(args, x0, bracket, settings):
        xtol, rtol, maxiter = settings.xtol, settings.rtol, settings.maxiter
        if bracket.shape[0] < 2:
            return np.nan, False
        a, b = bracket[0], bracket[1]
        if not (np.isfinite(a) and np.isfinite(b)):
            raise ValueError("toms748: the bracket must be finite")
        fa = evaluate(a, args)
        if fa == 0 or np.isnan(fa):
            return a, fa == 0
        fb = evaluate(b, args)
        if fb == 0 or np.isnan(fb):
            return b, fb == 0
        if np.sign(fb) * np.sign(fa) > 0:
            raise ValueError("f(a) and f(b) must have different signs")

        # The first step has two points only: a secant step.
        c = np.nan
        if fa != fb:
            if abs(fb) > abs(fa):
                c = (-fa / fb * b + a) / (1 - fa / fb)
            else:
                c = (-fb / fa * a + b) / (1 - fb / fa)
        if not a < c < b:
            c = (a + b) / 2.0
        fc = evaluate(c, args)
        if fc == 0 or np.isnan(fc):
            return c, fc == 0
        # ``d`` is the point the last update dropped from the bracket, ``e`` the one before.
        a, b, fa, fb, d, fd = _rebracketed(a, b, fa, fb, c, fc)
        e = fe = np.nan
        has_e = False
        iterations = 1
        while True:
            iterations += 1
            width = b - a
            c = np.nan
            if has_e and _distinct(fa, fb, fd, fe):
                interpolated = _inverse_cubic_zero(a, b, d, e, fa, fb, fd, fe)
                if a < interpolated < b:
                    c = interpolated
            if np.isnan(c):
                c = _newton_quadratic(a, b, fa, fb, d, fd, 2)
            fc = evaluate(c, args)
            if fc == 0 or np.isnan(fc):
                return c, fc == 0
            e, fe, has_e = d, fd, True
            a, b, fa, fb, d, fd = _rebracketed(a, b, fa, fb, c, fc)

            # A double-length secant step from the endpoint with the smaller value.
            lower_is_smaller = abs(fa) < abs(fb)
            u, fu = (a, fa) if lower_is_smaller else (b, fb)
            slope = (fb - fa) / (b - a)
            c = u - 2 * fu / slope
            if abs(c - u) > 0.5 * (b - a):
                c = (a + b) / 2.0
            else:
                if abs(c - u) <= _EPS * abs(u):
                    other = b if lower_is_smaller else a
                    f_other = fb if lower_is_smaller else fa
                    if math.frexp(fu)[1] < math.frexp(f_other)[1] - 50:
                        c = (31 * u + other) / 32
                    else:
                        towards = 1.0 if lower_is_smaller else -1.0
                        c = u + (towards * abs(c) * rtol + towards * xtol)
                    if not a < c < b:
                        c = (a + b) / 2.0
            fc = evaluate(c, args)
            if fc == 0 or np.isnan(fc):
                return c, fc == 0
            e, fe = d, fd
            a, b, fa, fb, d, fd = _rebracketed(a, b, fa, fb, c, fc)

            if b - a > _MU * width:
                e, fe = d, fd
                z = (a + b) / 2.0
                fz = evaluate(z, args)
                if fz == 0 or np.isnan(fz):
                    return z, fz == 0
                a, b, fa, fb, d, fd = _rebracketed(a, b, fa, fb, z, fz)

            if abs(a - b) <= xtol + rtol * abs(b):
                return (a + b) / 2.0, True
            if iterations >= maxiter:
                return (a + b) / 2.0, False

    return solve
