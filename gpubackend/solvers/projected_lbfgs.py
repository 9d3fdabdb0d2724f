"""Limited-memory BFGS with box bounds (gpubackend's ``minimize(method="L-BFGS-B")``).

Not a port of the Fortran L-BFGS-B (generalised Cauchy point and subspace
minimisation): a projected quasi-Newton method. Variables at a bound whose
gradient pushes outwards are held fixed; the two-loop L-BFGS direction acts on
the others; a backtracking Armijo search runs along the projected path.
It stops on scipy's criteria: projected-gradient infinity norm ``<= gtol``, or
relative decrease of ``f`` ``<= ftol`` (both success), or ``maxiter``/``maxfun``.
"""

from collections.abc import Callable

import numpy as np

from gpubackend.solvers.jit import solver_njit

_ARMIJO = 1e-4
_CURVATURE_EPS = 2.2e-16


@solver_njit
def _two_loop(q, s_hist, y_hist, rho, count, newest):
    """``H q`` for the L-BFGS inverse-Hessian approximation (ring buffer of ``count`` pairs)."""
    m = s_hist.shape[0]
    alpha = np.zeros(m)
    r = q.copy()
    for k in range(count):
        i = (newest - k) % m
        alpha[i] = rho[i] * np.dot(s_hist[i], r)
        r -= alpha[i] * y_hist[i]
    if count > 0:
        r *= np.dot(s_hist[newest], y_hist[newest]) / np.dot(y_hist[newest], y_hist[newest])
    for k in range(count - 1, -1, -1):
        i = (newest - k) % m
        beta = rho[i] * np.dot(y_hist[i], r)
        r += s_hist[i] * (alpha[i] - beta)
    return r


@solver_njit
def _expand_bound(bound, n):
    """A bound tuple of length ``n``, or length 1 broadcast to ``n``."""
    if len(bound) != 1 and len(bound) != n:
        raise ValueError("L-BFGS-B `bounds` must hold one (lower, upper) pair per element of x")
    out = np.empty(n)
    for i in range(n):
        out[i] = bound[0] if len(bound) == 1 else bound[i]
    return out


def make_projected_lbfgs(fun: Callable) -> Callable:
    """``solve(x0, args, settings: LBFGSBSettings) -> (x, converged)``.

    ``settings.bounds`` is ``(lower, upper)``: tuples with one entry per
    element of ``x`` or a single entry for all (``-inf``/``inf`` when unbounded).
    """

    @solver_njit
    def solve(x0, args, settings):
        maxcor, ftol, gtol = settings.maxcor, settings.ftol, settings.gtol
        maxiter, maxfun, maxls = settings.maxiter, settings.maxfun, settings.maxls
        lower, upper = settings.bounds
        n = x0.shape[0]
        lo = _expand_bound(lower, n)
        hi = _expand_bound(upper, n)
        x = np.minimum(np.maximum(x0.astype(np.float64), lo), hi)
        f, g = fun(x, args)
        nfev = 1
        s_hist = np.zeros((maxcor, n))
        y_hist = np.zeros((maxcor, n))
        rho = np.zeros(maxcor)
        count = 0
        newest = maxcor - 1
        for _ in range(maxiter):
            projected = np.minimum(np.maximum(x - g, lo), hi) - x
            if np.max(np.abs(projected)) <= gtol:
                return x, True
            held = ((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0))
            q = np.where(held, 0.0, g)
            direction = -_two_loop(q, s_hist, y_hist, rho, count, newest)
            direction[held] = 0.0
            if np.dot(g, direction) >= 0.0:
                count = 0
                direction = -q
            step = 1.0 if count > 0 else min(1.0, 1.0 / np.linalg.norm(direction))
            accepted = False
            for _ in range(maxls):
                x_new = np.minimum(np.maximum(x + step * direction, lo), hi)
                f_new, g_new = fun(x_new, args)
                nfev += 1
                decrease = np.dot(g, x_new - x)
                if np.isfinite(f_new) and f_new <= f + _ARMIJO * decrease:
                    accepted = True
                    break
                if nfev >= maxfun:
                    break
                # Minimiser of the quadratic through f, the slope and f_new, kept in [0.1, 0.5] of the step.
                curvature = f_new - f - decrease
                shrink = 0.5
                if np.isfinite(f_new) and curvature > 0.0:
                    shrink = min(0.5, max(0.1, -decrease / (2.0 * curvature)))
                step *= shrink
            if not accepted:
                return x, False
            s = x_new - x
            y = g_new - g
            sy = np.dot(s, y)
            if sy > _CURVATURE_EPS * np.dot(y, y):
                newest = (newest + 1) % maxcor
                s_hist[newest] = s
                y_hist[newest] = y
                rho[newest] = 1.0 / sy
                count = min(count + 1, maxcor)
            relative_decrease = (f - f_new) / max(abs(f), abs(f_new), 1.0)
            x, f, g = x_new, f_new, g_new
            if relative_decrease <= ftol:
                return x, True
            if nfev >= maxfun:
                return x, False
        return x, False

    return solve
