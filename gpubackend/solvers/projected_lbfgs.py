"""Limited-memory BFGS with box bounds (gpubackend's ``minimize(method="L-BFGS-B")``).

Not a port of the Fortran L-BFGS-B (generalised Cauchy point and subspace
minimisation): a projected quasi-Newton method. Variables at a bound whose
gradient pushes outwards are held fixed; the two-loop L-BFGS direction acts on
the others; a backtracking Armijo search runs along the projected path.
It stops on scipy's criteria: projected-gradient infinity norm ``<= gtol``, or
relative decrease of ``f`` ``<= ftol`` (both success), or ``maxiter``/``maxfun``.

Every vector operation is a loop into work arrays allocated once per solve, as
in `gpubackend.solvers.bfgs`: numpy temporaries and BLAS dots cost more than
the arithmetic on the few variables these problems hold.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.box_bounds import clip, expand_bound
from gpubackend.solvers.small_vectors import dot, max_abs, norm

_ARMIJO = 1e-4
_CURVATURE_EPS = 2.2e-16


@numba_njit(inline="always")
def _two_loop(q, s_hist, y_hist, rho, count, newest, alpha, r):
    """``r = H q`` for the L-BFGS inverse-Hessian approximation (ring buffer of ``count`` pairs);
    ``alpha`` is work."""
    m, n = s_hist.shape
    for j in range(n):
        r[j] = q[j]
    for k in range(count):
        i = (newest - k) % m
        alpha[i] = rho[i] * dot(s_hist[i], r)
        for j in range(n):
            r[j] -= alpha[i] * y_hist[i, j]
    if count > 0:
        scale = dot(s_hist[newest], y_hist[newest]) / dot(y_hist[newest], y_hist[newest])
        for j in range(n):
            r[j] *= scale
    for k in range(count - 1, -1, -1):
        i = (newest - k) % m
        beta = rho[i] * dot(y_hist[i], r)
        for j in range(n):
            r[j] += s_hist[i, j] * (alpha[i] - beta)


def make_projected_lbfgs(fun: Callable) -> Callable:
    """``solve(x0, args, settings: LBFGSBSettings) -> (x, converged)``.

    ``settings.bounds`` is ``(lower, upper)``: tuples with one entry per
    element of ``x`` or a single entry for all (``-inf``/``inf`` when unbounded).
    """

    @numba_njit
    def solve(x0, args, settings):
        maxcor, ftol, gtol = settings.maxcor, settings.ftol, settings.gtol
        maxiter, maxfun, maxls = settings.maxiter, settings.maxfun, settings.maxls
        lower, upper = settings.bounds
        n = x0.shape[0]
        lo = expand_bound(lower, n)
        hi = expand_bound(upper, n)
        x, x_new = np.empty(n), np.empty(n)
        for i in range(n):
            x[i] = clip(np.float64(x0[i]), lo[i], hi[i])
        f, g = fun(x, args)
        nfev = 1
        s_hist = np.zeros((maxcor, n))
        y_hist = np.zeros((maxcor, n))
        rho, alpha = np.zeros(maxcor), np.zeros(maxcor)
        q, hq, direction, s, y = np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n)
        held = np.empty(n, dtype=np.bool_)
        count = 0
        newest = maxcor - 1
        for _ in range(maxiter):
            for i in range(n):
                direction[i] = clip(x[i] - g[i], lo[i], hi[i]) - x[i]
            if max_abs(direction) <= gtol:
                return x, True
            for i in range(n):
                held[i] = (x[i] <= lo[i] and g[i] > 0) or (x[i] >= hi[i] and g[i] < 0)
                q[i] = 0.0 if held[i] else g[i]
            _two_loop(q, s_hist, y_hist, rho, count, newest, alpha, hq)
            for i in range(n):
                direction[i] = 0.0 if held[i] else -hq[i]
            if dot(g, direction) >= 0.0:
                count = 0
                for i in range(n):
                    direction[i] = -q[i]
            step = 1.0 if count > 0 else min(1.0, 1.0 / norm(direction))
            accepted = False
            for _ in range(maxls):
                decrease = 0.0
                for i in range(n):
                    x_new[i] = clip(x[i] + step * direction[i], lo[i], hi[i])
                    decrease += g[i] * (x_new[i] - x[i])
                f_new, g_new = fun(x_new, args)
                nfev += 1
                if np.isfinite(f_new) and f_new <= f + _ARMIJO * decrease:
                    accepted = True
                    break
                if nfev >= maxfun:
                    break
                # Minimiser of the quadratic through f, the slope and f_new, kept in [0.1, 0.5] of
                # the step.
                curvature = f_new - f - decrease
                shrink = 0.5
                if np.isfinite(f_new) and curvature > 0.0:
                    shrink = min(0.5, max(0.1, -decrease / (2.0 * curvature)))
                step *= shrink
            if not accepted:
                return x, False
            for i in range(n):
                s[i] = x_new[i] - x[i]
                y[i] = g_new[i] - g[i]
            sy = dot(s, y)
            if sy > _CURVATURE_EPS * dot(y, y):
                newest = (newest + 1) % maxcor
                for i in range(n):
                    s_hist[newest, i] = s[i]
                    y_hist[newest, i] = y[i]
                rho[newest] = 1.0 / sy
                count = min(count + 1, maxcor)
            relative_decrease = (f - f_new) / max(abs(f), abs(f_new), 1.0)
            x, x_new = x_new, x
            f, g = f_new, g_new
            if relative_decrease <= ftol:
                return x, True
            if nfev >= maxfun:
                return x, False
        return x, False

    return solve
