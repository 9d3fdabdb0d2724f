"""Powell's conjugate-direction method (port of scipy's ``_minimize_powell``).

Derivative-free: ``fun(x, args)`` returns the objective alone, in float64.
Each iteration minimises along every direction in turn (scipy's
``_linesearch_powell``: Brent's method, `brent_minimize`, with its downhill
bracket; with ``bounds``, fminbound, `bounded_minimize`, on the segment inside
the box, through ``tan`` where it is open on one side), then tries the
extrapolated point and may replace the direction of largest decrease.
scipy's budgets count every evaluation, the line searches' included: one past
``maxfev`` is refused and ends the solve at the last completed line search,
where scipy's wrapper raises. ``converged`` is scipy's ``success``: the
decrease met ``ftol`` with neither budget spent, no NaN, and ``x`` inside the
bounds.

A line search's result is the best point its scalar minimiser evaluated (the
point Brent's method and fminbound return), read off the evaluations: the
scalar solvers are reused as they are, and an evaluation they ask for past the
budget returns ``inf`` and marks the solve as ended.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.scipy_options.budgets import POWELL_PER_VARIABLE
from gpubackend.scipy_options.settings import BoundedMinimizeSettings, BracketMinimizeSettings
from gpubackend.solvers import direct_search_budgets
from gpubackend.solvers.bounded_minimize import make_bounded_minimize
from gpubackend.solvers.box_bounds import box_bounds
from gpubackend.solvers.brent_minimize import make_brent_minimize

_LINE_SEARCH_MAXITER = 500
"""scipy's ``minimize_scalar`` default, which its line searches keep."""

# The line search's tally, a float64 array shared with its evaluations.
_EVALUATIONS, _MAX_EVALUATIONS, _REFUSED, _BEST_STEP, _BEST_VALUE = 0, 1, 2, 3, 4
_NO_INTERVAL = np.empty(0)


@numba_njit
def line_for_search(x, direction, lo, hi):
    """scipy's ``_line_for_search``: the steps ``t`` with ``lo <= x + t direction <= hi``, over
    the directions' nonzero entries; ``(0, 0)`` where none lead back inside."""
    lmin, lmax = -np.inf, np.inf
    for i in range(x.shape[0]):
        if direction[i] == 0.0:
            continue
        low = (lo[i] - x[i]) / direction[i]
        high = (hi[i] - x[i]) / direction[i]
        if direction[i] > 0:
            lmin, lmax = max(lmin, low), min(lmax, high)
        else:
            lmin, lmax = max(lmin, high), min(lmax, low)
    return (lmin, lmax) if lmax >= lmin else (0.0, 0.0)


def make_powell(fun: Callable) -> Callable:
    """``solve(x0, args, settings: PowellSettings) -> (x, converged)``."""

    @numba_njit
    def along_line(s, line_args):
        """The objective at step ``s`` (through ``tan`` when ``tangent``), counted and refused as
        scipy's wrapper counts and refuses; the best step so far is kept in the tally."""
        x, direction, args, point, tally, tangent = line_args
        if tally[_EVALUATIONS] >= tally[_MAX_EVALUATIONS]:
            tally[_REFUSED] = 1.0
            return np.inf
        tally[_EVALUATIONS] += 1.0
        step = np.tan(s) if tangent else s
        for i in range(x.shape[0]):
            point[i] = x[i] + step * direction[i]
        f = fun(point, args)
        # Brent's method and fminbound both move to a point at least as low.
        if f <= tally[_BEST_VALUE]:
            tally[_BEST_VALUE] = f
            tally[_BEST_STEP] = step
        return f

    brent = make_brent_minimize(along_line)
    bounded = make_bounded_minimize(along_line)

    @numba_njit
    def line_search(x, direction, fval, args, lo, hi, tol, point, tally):
        """scipy's ``_linesearch_powell``: ``(fval, step)`` along ``direction`` from ``x``; the
        step is 0 along a zero direction (no evaluation)."""
        if not np.any(direction != 0.0):
            return fval, 0.0
        tally[_BEST_STEP] = 0.0
        tally[_BEST_VALUE] = np.inf
        lmin, lmax = line_for_search(x, direction, lo, hi)
        if np.isinf(lmin) and np.isinf(lmax):
            brent(
                (x, direction, args, point, tally, False),
                0.0,
                _NO_INTERVAL,
                BracketMinimizeSettings(tol, _LINE_SEARCH_MAXITER),
            )
        else:
            tangent = np.isinf(lmin) or np.isinf(lmax)
            interval = np.empty(2)
            interval[0] = np.arctan(lmin) if tangent else lmin
            interval[1] = np.arctan(lmax) if tangent else lmax
            bounded(
                (x, direction, args, point, tally, tangent),
                0.0,
                interval,
                BoundedMinimizeSettings(tol / 100.0, _LINE_SEARCH_MAXITER),
            )
        return tally[_BEST_VALUE], tally[_BEST_STEP]

    @numba_njit
    def solve(x0, args, settings):
        xtol, ftol = settings.xtol, settings.ftol
        n = x0.shape[0]
        maxiter, maxfev = direct_search_budgets(
            settings.maxiter, settings.maxfev, n, POWELL_PER_VARIABLE
        )
        lo, hi = box_bounds(settings.bounds, n)
        x = x0.astype(np.float64)
        direc = np.eye(n)
        point, x1, x2, extrapolated = np.empty(n), x.copy(), np.empty(n), np.empty(n)
        tally = np.zeros(5)
        tally[_MAX_EVALUATIONS] = maxfev
        tol = xtol * 100.0
        if maxfev <= 0:
            return x, False
        tally[_EVALUATIONS] = 1.0
        fval = fun(x, args)
        iterations = 0
        while True:
            fx = fval
            bigind = 0
            delta = 0.0
            for i in range(n):
                fx2 = fval
                f_line, step = line_search(x, direc[i], fval, args, lo, hi, tol, point, tally)
                if tally[_REFUSED]:
                    break
                fval = f_line
                for j in range(n):
                    x[j] = x[j] + step * direc[i, j]
                if (fx2 - fval) > delta:
                    delta = fx2 - fval
                    bigind = i
            if tally[_REFUSED]:
                break
            iterations += 1
            if 2.0 * (fx - fval) <= ftol * (abs(fx) + abs(fval)) + 1e-20:
                break
            if tally[_EVALUATIONS] >= maxfev or iterations >= maxiter:
                break
            if np.isnan(fx) and np.isnan(fval):
                break
            for j in range(n):
                extrapolated[j] = x[j] - x1[j]
                x1[j] = x[j]
            _, lmax = line_for_search(x, extrapolated, lo, hi)
            reach = min(lmax, 1.0)
            for j in range(n):
                x2[j] = x[j] + reach * extrapolated[j]
            if tally[_EVALUATIONS] >= maxfev:
                break
            tally[_EVALUATIONS] += 1.0
            fx2 = fun(x2, args)
            if fx > fx2:
                t = 2.0 * (fx + fx2 - 2.0 * fval)
                temp = fx - fval - delta
                t *= temp * temp
                temp = fx - fx2
                t -= delta * temp * temp
                if t < 0.0:
                    f_line, step = line_search(
                        x, extrapolated, fval, args, lo, hi, tol, point, tally
                    )
                    if tally[_REFUSED]:
                        break
                    fval = f_line
                    for j in range(n):
                        extrapolated[j] = step * extrapolated[j]
                        x[j] = x[j] + extrapolated[j]
                    if np.any(extrapolated != 0.0):
                        direc[bigind] = direc[n - 1]
                        direc[n - 1] = extrapolated
        inside = np.all(lo <= x) and np.all(x <= hi)
        return x, (
            inside
            and tally[_EVALUATIONS] < maxfev
            and iterations < maxiter
            and not (np.isnan(fval) or np.isnan(x).any())
        )

    return solve
