"""Strong-Wolfe line search (Nocedal & Wright, algorithms 3.5 and 3.6).

A port of scipy's ``scalar_search_wolfe2``/``_zoom`` (scipy's fallback after
Moré-Thuente, see `gpubackend.solvers.wolfe12`) specialised to a vector
problem ``fun(x, args) -> (f, g)``: each trial step evaluates value and
gradient together, because the lowered inner graph computes both at once.
`make_strong_wolfe` closes over ``fun`` so Numba compiles it in.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.small_vectors import dot

_MAX_BRACKET_ITERS = 10
_MAX_ZOOM_ITERS = 10
_CUBIC_CHECK = 0.2
_QUADRATIC_CHECK = 0.1


@numba_njit
def _cubic_minimizer(a, fa, fpa, b, fb, c, fc):
    """Minimizer of the cubic through (a, fa), (b, fb), (c, fc) with slope fpa at a; NaN if none."""
    db = b - a
    dc = c - a
    denom = (db * dc) ** 2 * (db - dc)
    if denom == 0.0:
        return np.nan
    rb = fb - fa - fpa * db
    rc = fc - fa - fpa * dc
    cubic = (dc**2 * rb - db**2 * rc) / denom
    quad = (-(dc**3) * rb + db**3 * rc) / denom
    radical = quad * quad - 3.0 * cubic * fpa
    if radical < 0.0 or cubic == 0.0:
        return np.nan
    return a + (-quad + np.sqrt(radical)) / (3.0 * cubic)


@numba_njit
def _quadratic_minimizer(a, fa, fpa, b, fb):
    """Minimizer of the parabola through (a, fa), (b, fb) with slope fpa at a; NaN if none."""
    db = b - a
    if db == 0.0:
        return np.nan
    curvature = (fb - fa - fpa * db) / (db * db)
    if curvature == 0.0:
        return np.nan
    return a - fpa / (2.0 * curvature)


@numba_njit
def initial_step(phi0, old_phi0, derphi0) -> float:
    """scipy's first trial step: the previous decrease extrapolated, at most 1; 1 without a previous
    iterate (NaN)."""
    alpha1 = 1.0
    if derphi0 != 0.0 and np.isfinite(old_phi0):
        alpha1 = min(1.0, 1.01 * 2.0 * (phi0 - old_phi0) / derphi0)
        if alpha1 < 0.0:
            alpha1 = 1.0
    return alpha1


@numba_njit(inline="always")
def any_step(gk, pk, g_new, condition):
    """No condition beyond strong Wolfe's (scipy's ``extra_condition=None``)."""
    return True


def make_strong_wolfe(fun: Callable, accept: Callable = any_step) -> Callable:
    """``search(xk, pk, args, phi0, gk, old_phi0, c1, c2, x, condition) -> (found, alpha, f_new,
    g_new)``.

    The returned step satisfies the strong Wolfe conditions along ``pk`` and
    ``accept(gk, pk, g_new, condition)`` (scipy's ``extra_condition``; ``condition``
    is the caller's data for it); when ``found`` is False the other values are
    meaningless and the caller stops. ``x`` is a work vector of the size of ``xk``.
    """

    @numba_njit
    def trial(xk, pk, args, alpha, x):
        """Value, gradient and slope at ``xk + alpha * pk``, formed in the work vector ``x``."""
        for i in range(xk.shape[0]):
            x[i] = xk[i] + alpha * pk[i]
        f, g = fun(x, args)
        return f, g, dot(g, pk)

    @numba_njit
    def zoom(
        xk, pk, args, x, a_lo, a_hi, phi_lo, phi_hi, derphi_lo, phi0, derphi0, c1, c2, gk, condition
    ):
        phi_rec = phi0
        a_rec = 0.0
        for i in range(_MAX_ZOOM_ITERS + 1):
            dalpha = a_hi - a_lo
            lo, hi = (a_hi, a_lo) if dalpha < 0 else (a_lo, a_hi)
            a_j = np.nan
            if i > 0:
                cchk = _CUBIC_CHECK * dalpha
                a_j = _cubic_minimizer(a_lo, phi_lo, derphi_lo, a_hi, phi_hi, a_rec, phi_rec)
                if not np.isfinite(a_j) or a_j > hi - cchk or a_j < lo + cchk:
                    a_j = np.nan
            if not np.isfinite(a_j):
                qchk = _QUADRATIC_CHECK * dalpha
                a_j = _quadratic_minimizer(a_lo, phi_lo, derphi_lo, a_hi, phi_hi)
                if not np.isfinite(a_j) or a_j > hi - qchk or a_j < lo + qchk:
                    a_j = a_lo + 0.5 * dalpha
            phi_j, g_j, derphi_j = trial(xk, pk, args, a_j, x)
            if phi_j > phi0 + c1 * a_j * derphi0 or phi_j >= phi_lo:
                phi_rec = phi_hi
                a_rec = a_hi
                a_hi = a_j
                phi_hi = phi_j
            else:
                if abs(derphi_j) <= -c2 * derphi0 and accept(gk, pk, g_j, condition):
                    return True, a_j, phi_j, g_j
                if derphi_j * (a_hi - a_lo) >= 0:
                    phi_rec = phi_hi
                    a_rec = a_hi
                    a_hi = a_lo
                    phi_hi = phi_lo
                else:
                    phi_rec = phi_lo
                    a_rec = a_lo
                a_lo = a_j
                phi_lo = phi_j
                derphi_lo = derphi_j
        return False, a_lo, phi_lo, np.empty_like(xk)

    @numba_njit
    def search(xk, pk, args, phi0, gk, old_phi0, c1, c2, x, condition):
        derphi0 = dot(gk, pk)
        alpha1 = initial_step(phi0, old_phi0, derphi0)
        alpha0 = 0.0
        phi_a0 = phi0
        derphi_a0 = derphi0
        phi_a1, g_a1, derphi_a1 = trial(xk, pk, args, alpha1, x)
        for i in range(_MAX_BRACKET_ITERS):
            if alpha1 == 0.0:
                # The step slipped below machine precision.
                return False, alpha1, phi_a1, g_a1
            if phi_a1 > phi0 + c1 * alpha1 * derphi0 or (phi_a1 >= phi_a0 and i > 0):
                return zoom(
                    xk,
                    pk,
                    args,
                    x,
                    alpha0,
                    alpha1,
                    phi_a0,
                    phi_a1,
                    derphi_a0,
                    phi0,
                    derphi0,
                    c1,
                    c2,
                    gk,
                    condition,
                )
            if abs(derphi_a1) <= -c2 * derphi0 and accept(gk, pk, g_a1, condition):
                return True, alpha1, phi_a1, g_a1
            if derphi_a1 >= 0:
                return zoom(
                    xk,
                    pk,
                    args,
                    x,
                    alpha1,
                    alpha0,
                    phi_a1,
                    phi_a0,
                    derphi_a1,
                    phi0,
                    derphi0,
                    c1,
                    c2,
                    gk,
                    condition,
                )
            alpha0 = alpha1
            alpha1 = 2.0 * alpha1
            phi_a0 = phi_a1
            derphi_a0 = derphi_a1
            phi_a1, g_a1, derphi_a1 = trial(xk, pk, args, alpha1, x)
        # Like scipy, accept the last expansion step once the bracketing budget is spent.
        return True, alpha1, phi_a1, g_a1

    return search
