"""The Nelder-Mead simplex method (port of scipy's ``_minimize_neldermead``).

Derivative-free: ``fun(x, args)`` returns the objective alone, in float64.
scipy's steps, coefficients (``adaptive`` included), start simplex, clipping
into ``bounds`` and budgets: an evaluation past ``maxfev`` is refused, which
ends the solve where scipy's wrapper raises, with what the interrupted
iteration had already changed (a shrink's moved vertices). ``converged`` is
scipy's ``success``: the simplex met ``xatol`` and ``fatol`` before either
budget ran out.

The simplex is kept sorted by value with a stable insertion sort, in place:
ties keep their order, as numpy's sort does on arrays this small.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.scipy_options.budgets import NELDER_MEAD_PER_VARIABLE
from gpubackend.solvers import direct_search_budgets
from gpubackend.solvers.box_bounds import box_bounds

_NONZERO_DELTA, _ZERO_DELTA = 0.05, 0.00025
"""scipy's start simplex: each vertex moves one coordinate by 5%, or to 0.00025 from zero."""


@numba_njit(inline="always")
def _clip_into(x, lo, hi):
    # np.clip's semantics: a NaN stays NaN; unbounded (infinite) bounds change nothing.
    for i in range(x.shape[0]):
        x[i] = np.minimum(np.maximum(x[i], lo[i]), hi[i])


@numba_njit(inline="always")
def _along(out, xbar, worst, coefficient):
    """``out = (1 + coefficient) * xbar - coefficient * worst``: scipy's reflection (coefficient
    rho), expansion (rho chi), outside (psi rho) and inside (-psi) contraction."""
    for i in range(out.shape[0]):
        out[i] = (1.0 + coefficient) * xbar[i] - coefficient * worst[i]


@numba_njit(inline="always")
def _sort_by_value(sim, fsim):
    """Stable insertion sort of the vertices by value, in place."""
    n_vertices, n = sim.shape
    row = np.empty(n)
    for k in range(1, n_vertices):
        value = fsim[k]
        row[:] = sim[k]
        j = k - 1
        while j >= 0 and fsim[j] > value:
            fsim[j + 1] = fsim[j]
            sim[j + 1] = sim[j]
            j -= 1
        fsim[j + 1] = value
        sim[j + 1] = row


@numba_njit(inline="always")
def _start_simplex(x0, lo, hi):
    """scipy's start simplex around ``x0`` clipped into the bounds; vertices past an upper bound
    are reflected inside it first, so that clipping does not make the simplex degenerate."""
    n = x0.shape[0]
    sim = np.empty((n + 1, n))
    for k in range(n + 1):
        for i in range(n):
            # ufuncs on scalars clip as np.clip does: a NaN stays NaN.
            value = np.minimum(np.maximum(x0[i], lo[i]), hi[i])
            if k == i + 1:
                value = (1.0 + _NONZERO_DELTA) * value if value != 0.0 else _ZERO_DELTA
            if value > hi[i]:
                value = 2.0 * hi[i] - value
            sim[k, i] = np.minimum(np.maximum(value, lo[i]), hi[i])
    return sim


@numba_njit(inline="always")
def _coefficients(adaptive, n):
    """``(rho, chi, psi, sigma)``: scipy's, adapted to the dimension with ``adaptive`` (Gao and
    Han)."""
    if adaptive:
        dim = float(n)
        return 1.0, 1.0 + 2.0 / dim, 0.75 - 1.0 / (2.0 * dim), 1.0 - 1.0 / dim
    return 1.0, 2.0, 0.5, 0.5


@numba_njit(inline="always")
def _converged(sim, fsim, xatol, fatol):
    n_vertices, n = sim.shape
    for k in range(1, n_vertices):
        if abs(fsim[0] - fsim[k]) > fatol:
            return False
        for i in range(n):
            if abs(sim[k, i] - sim[0, i]) > xatol:
                return False
    return True


def make_nelder_mead(fun: Callable) -> Callable:
    """``solve(x0, args, settings: NelderMeadSettings) -> (x, converged)``."""

    @numba_njit
    def solve(x0, args, settings):
        xatol, fatol = settings.xatol, settings.fatol
        n = x0.shape[0]
        maxiter, maxfev = direct_search_budgets(
            settings.maxiter, settings.maxfev, n, NELDER_MEAD_PER_VARIABLE
        )
        rho, chi, psi, sigma = _coefficients(settings.adaptive, n)
        lo, hi = box_bounds(settings.bounds, n)
        sim = _start_simplex(x0, lo, hi)
        fsim = np.full(n + 1, np.inf)
        nfev = 0
        for k in range(min(n + 1, maxfev)):
            fsim[k] = fun(sim[k], args)
            nfev += 1
        _sort_by_value(sim, fsim)
        xbar, xr, trial = np.empty(n), np.empty(n), np.empty(n)
        iterations = 1
        while nfev < maxfev and iterations < maxiter:
            if _converged(sim, fsim, xatol, fatol):
                return sim[0].copy(), True
            for i in range(n):
                total = 0.0
                for k in range(n):
                    total += sim[k, i]
                xbar[i] = total / n
            worst = sim[n]
            _along(xr, xbar, worst, rho)
            _clip_into(xr, lo, hi)
            fxr = fun(xr, args)
            nfev += 1
            # An evaluation past maxfev is refused: the iteration ends there, uncounted.
            completed = True
            shrink = False
            if fsim[0] <= fxr < fsim[n - 1]:
                worst[:] = xr
                fsim[n] = fxr
            else:
                expands = fxr < fsim[0]
                outside = fxr < fsim[n]
                # Expansion, else the outside or the inside contraction.
                coefficient = rho * chi if expands else psi * rho if outside else -psi
                _along(trial, xbar, worst, coefficient)
                _clip_into(trial, lo, hi)
                if nfev >= maxfev:
                    completed = False
                else:
                    f_trial = fun(trial, args)
                    nfev += 1
                    if expands:
                        takes_trial = f_trial < fxr
                    else:
                        takes_trial = (f_trial <= fxr) if outside else (f_trial < fsim[n])
                        shrink = not takes_trial
                    if takes_trial:
                        worst[:] = trial
                        fsim[n] = f_trial
                    elif expands:
                        worst[:] = xr
                        fsim[n] = fxr
            if shrink:
                for k in range(1, n + 1):
                    for i in range(n):
                        sim[k, i] = sim[0, i] + sigma * (sim[k, i] - sim[0, i])
                    _clip_into(sim[k], lo, hi)
                    if nfev >= maxfev:
                        completed = False
                        break
                    fsim[k] = fun(sim[k], args)
                    nfev += 1
            if completed:
                iterations += 1
            _sort_by_value(sim, fsim)
        return sim[0].copy(), False

    return solve
