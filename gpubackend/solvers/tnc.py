"""Truncated Newton with bounds (port of scipy's ``minimize(method="TNC")``: ``tnc.c``).

Stephen Nash's TNBC as Jean-Sebastien Roy wrote it in C and scipy runs it:
``fun(x, args)`` returns the objective and its gradient in float64. Each
iteration takes a direction from truncated preconditioned CG on the Newton
equations (`tnc_direction`, Hessian products by differences of gradients), then
a Gill-Murray line search along it (`tnc_line_search`), on variables scaled to
the box (or to ``1 + |x0|``) and an objective rescaled when its gradient's size
drifts. Variables at a bound whose gradient points out are held there (the
active set, ``pivot``). The variables ``bounds`` fix are left out, and the
objective is evaluated as scipy evaluates it (`tnc_objective`): at ``x0`` first,
at TNC's points, and at the result (scipy's wrapper re-evaluates there).

``converged`` is scipy's ``success``: TNC stopped on the projected gradient, the
change of ``f`` or the step (return codes 0-2); the budget ``maxfun``, a failed
line search, no progress or all variables constant (scale 0) are failures.
"""

from collections.abc import Callable

import numpy as np
from numba.extending import overload

from gpubackend.solvers import tnc_maxfun
from gpubackend.solvers.box_bounds import box_bounds
from gpubackend.solvers.ieee import ieee_njit
from gpubackend.solvers.small_vectors import dot
from gpubackend.solvers.tnc_direction import make_tnc_direction
from gpubackend.solvers.tnc_line_search import LS_FAIL, LS_MAXFUN, LS_OK, make_tnc_line_search
from gpubackend.solvers.tnc_objective import free_problem, make_tnc_objective
from gpubackend.solvers.tnc_vectors import (
    project,
    projected_norm,
    scale_gradient_into,
    scaled_norm,
)

_EPS = float(np.finfo(np.float64).eps)

# tnc.c's return codes (scipy's ``status``); scipy's success is -1 < rc < 3.
LOCALMINIMUM, FCONVERGED, XCONVERGED, MAXFUN, LSFAIL, CONSTANT, NOPROGRESS = 0, 1, 2, 3, 4, 5, 6


def _as_vector(values):
    """Typed in Numba only (below): a settings tuple of floats, empty or not, as an array."""
    raise NotImplementedError


@overload(_as_vector)
def _as_vector_overload(values):
    if len(values.types) == 0:
        return lambda values: np.empty(0)
    return lambda values: np.array(values, dtype=np.float64)


@ieee_njit
def _clip(x, low, up):
    """``tnc.c``'s ``coercex``."""
    for i in range(x.shape[0]):
        if x[i] < low[i]:
            x[i] = low[i]
        elif x[i] > up[i]:
            x[i] = up[i]


@ieee_njit
def _active_bounds(x, pivot, xscale, xoffset, low, up):
    """``tnc.c``'s ``setConstraints``: -1 at the lower bound, 1 at the upper, 2 constant."""
    for i in range(x.shape[0]):
        value = x[i] * xscale[i] + xoffset[i]
        if xscale[i] == 0.0:
            pivot[i] = 2
        elif low[i] != -np.inf and value - low[i] <= _EPS * 10.0 * (abs(low[i]) + 1.0):
            pivot[i] = -1
        elif up[i] != np.inf and value - up[i] >= _EPS * 10.0 * (abs(up[i]) + 1.0):
            pivot[i] = 1
        else:
            pivot[i] = 0


@ieee_njit
def _max_step(step, x, direction, pivot, low, up, xscale, xoffset):
    """``tnc.c``'s ``stepMax``: ``step`` shortened to stay inside the bounds."""
    for i in range(x.shape[0]):
        if pivot[i] == 0 and direction[i] != 0.0:
            if direction[i] < 0.0:
                room = (low[i] - xoffset[i]) / xscale[i] - x[i]
                if room > step * direction[i]:
                    step = room / direction[i]
            else:
                room = (up[i] - xoffset[i]) / xscale[i] - x[i]
                if room < step * direction[i]:
                    step = room / direction[i]
    return step


@ieee_njit
def _add_bounds(x, direction, pivot, low, up, xscale, xoffset):
    """``tnc.c``'s ``addConstraint``: hold the free variables the step took onto a bound (at
    it); whether any."""
    added = False
    for i in range(x.shape[0]):
        if pivot[i] == 0 and direction[i] != 0.0:
            if direction[i] < 0.0 and low[i] != -np.inf:
                if x[i] * xscale[i] + xoffset[i] - low[i] <= _EPS * 10.0 * (abs(low[i]) + 1.0):
                    pivot[i] = -1
                    x[i] = (low[i] - xoffset[i]) / xscale[i]
                    added = True
            elif up[i] != np.inf:
                if up[i] - (x[i] * xscale[i] + xoffset[i]) <= _EPS * 10.0 * (abs(up[i]) + 1.0):
                    pivot[i] = 1
                    x[i] = (up[i] - xoffset[i]) / xscale[i]
                    added = True
    return added


@ieee_njit
def _release_bound(gtpnew, gnorm, pgtolfs, f, f_last_constraint, g, pivot):
    """``tnc.c``'s ``removeConstraint``: once the decrease since the last change of the active
    set is small or the projected gradient is, free the bound whose multiplier is most negative;
    whether any."""
    if (f_last_constraint - f) <= (gtpnew * -0.5) and gnorm > pgtolfs:
        return False
    imax = -1
    cmax = 0.0
    for i in range(g.shape[0]):
        if pivot[i] == 2:
            continue
        t = -pivot[i] * g[i]
        if t < cmax:
            cmax = t
            imax = i
    if imax != -1:
        pivot[imax] = 0
        return True
    return False


@ieee_njit
def _initial_step(fnew, fmin, gtp, smax):
    """``tnc.c``'s ``initialStep``: the step a quadratic reaching ``fmin`` (minfev) would take,
    at most 1 and ``smax``."""
    d = abs(fnew - fmin)
    alpha = 1.0
    if d * 2.0 <= -gtp and d >= _EPS:
        alpha = d * -2.0 / gtp
    if alpha >= smax:
        alpha = smax
    return alpha


@ieee_njit
def _scaling(x, low, up, scale, offset):
    """``(xscale, xoffset)``: ``scale``'s magnitudes, else the box's width where both bounds are
    finite, else ``1 + |x|``; ``offset``, else the box's centre, else ``x``. A zero scale fixes
    the variable at ``x`` (``low`` and ``up`` move there)."""
    n = x.shape[0]
    xscale, xoffset = np.empty(n), np.empty(n)
    for i in range(n):
        if scale.shape[0] != 0:
            xscale[i] = abs(scale[i])
            xoffset[i] = x[i]
            if xscale[i] == 0.0:
                low[i] = up[i] = x[i]
        elif low[i] != -np.inf and up[i] != np.inf:
            xscale[i] = up[i] - low[i]
            xoffset[i] = (up[i] + low[i]) * 0.5
        else:
            xscale[i] = 1.0 + abs(x[i])
            xoffset[i] = x[i]
        if offset.shape[0] != 0:
            xoffset[i] = offset[i]
    return xscale, xoffset


def make_tnc(fun: Callable) -> Callable:
    """``solve(x0, args, settings: TNCSettings) -> (x, converged)``."""
    evaluate = make_tnc_objective(fun)
    direction = make_tnc_direction(evaluate)
    line_search = make_tnc_line_search(evaluate)

    @ieee_njit
    def minimize(x, f, gfull, low, up, xscale, xoffset, settings, options, problem):
        """``tnc.c``'s ``tnc_minimize`` from the (unscaled) ``x`` where ``f``, ``gfull`` were
        evaluated; ``x`` ends unscaled at the result. Returns the return code."""
        maxCGit, maxnfeval, eta, stepmx, accuracy, ftol, xtol, pgtol, rescale = options
        fmin = settings.minfev
        n = x.shape[0]
        nfeval = 1
        g, oldg, temp, pk = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
        sk, yk, sr, yr = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
        diagb = np.ones(n)
        pivot = np.zeros(n, dtype=np.int64)
        work = (
            np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n),
            np.empty(n), np.empty(n), np.empty(n),
        )  # fmt: skip
        search_work = (np.empty(n), np.empty(n), np.empty(n))
        difnew = 0.0
        epsred = 0.05
        upd1 = True
        icycle = n - 1
        newcon = True
        lreset = False
        yrsr = yksk = 0.0
        fscale = 1.0
        alpha = 0.0
        rc = LOCALMINIMUM

        for i in range(n):
            if xscale[i] > 0.0:
                x[i] = (x[i] - xoffset[i]) / xscale[i]
        _active_bounds(x, pivot, xscale, xoffset, low, up)
        scale_gradient_into(g, gfull, xscale, fscale)
        # A variable at a bound whose gradient points inwards is free.
        for i in range(n):
            if -pivot[i] * g[i] < 0.0:
                pivot[i] = 0
        project(g, pivot)
        gnorm = scaled_norm(g)
        f_last_constraint = f
        f_last_reset = f

        while True:
            if scaled_norm(g) <= pgtol * fscale:
                rc = LOCALMINIMUM
                break
            if nfeval >= maxnfeval:
                rc = MAXFUN
                break
            newscale = scaled_norm(g)
            if newscale > _EPS and abs(np.log10(newscale)) > rescale:
                # Rescale f to a unit gradient and restart the preconditioner.
                newscale = 1.0 / newscale
                f *= newscale
                fscale *= newscale
                gnorm *= newscale
                f_last_constraint *= newscale
                f_last_reset *= newscale
                difnew *= newscale
                for i in range(n):
                    g[i] *= newscale
                    diagb[i] = 1.0
                upd1 = True
                icycle = n - 1
                newcon = True

            xnorm = projected_norm(x, pivot, temp)
            oldnfeval = nfeval
            memory = (diagb, sk, yk, sr, yr, upd1, lreset, yksk, yrsr)
            nfeval = direction(
                pk, x, g, memory, maxCGit, maxnfeval, nfeval, (xscale, xoffset, fscale, low, up),
                pivot, accuracy, gnorm, xnorm, problem, work,
            )  # fmt: skip

            if not newcon:
                if not lreset:
                    # Accumulate the steps and gradient changes since the last reset.
                    for i in range(n):
                        sr[i] += sk[i]
                        yr[i] += yk[i]
                    icycle += 1
                else:
                    sr[:] = sk
                    yr[:] = yk
                    f_last_reset = f
                    icycle = 1

            oldg[:] = g
            oldf = f
            oldgtp = dot(pk, g)
            ustpmax = stepmx / (scaled_norm(pk) + _EPS)
            spe = _max_step(ustpmax, x, pk, pivot, low, up, xscale, xoffset)

            if spe > 0.0:
                alpha = _initial_step(f, fmin / fscale, oldgtp, spe)
                lsrc, f, alpha, nfeval = line_search(
                    x, pk, f, alpha, gfull, low, up, xscale, xoffset, fscale, pivot, eta, ftol,
                    spe, maxnfeval, nfeval, problem, *search_work,
                )  # fmt: skip
                if lsrc == LS_FAIL:
                    rc = LSFAIL
                    break
                if alpha >= 0.9 * ustpmax:
                    stepmx *= 1e2
                if alpha - spe >= -_EPS * 10.0:
                    # The step reached the box: a new bound.
                    newcon = True
                else:
                    if lsrc != LS_OK:
                        rc = MAXFUN if lsrc == LS_MAXFUN else LSFAIL
                        break
                    newcon = False
            else:
                newcon = True

            if newcon:
                if not _add_bounds(x, pk, pivot, low, up, xscale, xoffset):
                    if nfeval == oldnfeval:
                        rc = NOPROGRESS
                        break
                f_last_constraint = f

            difold = difnew
            difnew = oldf - f
            if icycle == 1:
                # First iteration of a cycle: adapt the reduction the reset test asks for.
                if difnew > difold * 2.0:
                    epsred += epsred
                if difnew < difold * 0.5:
                    epsred *= 0.5

            scale_gradient_into(g, gfull, xscale, fscale)
            gnorm = projected_norm(g, pivot, temp)
            released = _release_bound(oldgtp, gnorm, pgtol * fscale, f, f_last_constraint, g, pivot)
            if released:
                gnorm = projected_norm(g, pivot, temp)
                f_last_constraint = f

            if not released and not newcon:
                if abs(difnew) <= ftol * fscale:
                    rc = FCONVERGED
                    break
                if alpha * scaled_norm(pk) <= xtol:
                    rc = XCONVERGED
                    break

            project(g, pivot)

            if not newcon:
                for i in range(n):
                    yk[i] = g[i] - oldg[i]
                    sk[i] = alpha * pk[i]
                yksk = dot(yk, sk)
                if icycle == (n - 1) or difnew < epsred * (f_last_reset - f):
                    lreset = True
                else:
                    yrsr = dot(yr, sr)
                    lreset = yrsr <= 0.0
                upd1 = False

        for i in range(n):
            x[i] = x[i] * xscale[i] + xoffset[i]
        _clip(x, low, up)
        return rc

    @ieee_njit
    def tnc(x, low, up, settings, problem):
        """``tnc.c``'s ``tnc``: checks, scaling and scipy's defaults, then ``minimize``."""
        n = x.shape[0]
        scale, offset = _as_vector(settings.scale), _as_vector(settings.offset)
        if (scale.shape[0] != 0 and scale.shape[0] != n) or (
            offset.shape[0] != 0 and offset.shape[0] != n
        ):
            raise ValueError("tnc: vector sizes must be equal")
        _clip(x, low, up)
        maxnfeval = tnc_maxfun(settings.maxfun, n)
        if maxnfeval < 1:
            return MAXFUN
        gfull = np.empty(n)
        f = evaluate(x, gfull, problem)
        constant = 0
        for i in range(n):
            if low[i] == up[i] or (scale.shape[0] != 0 and scale[i] == 0.0):
                constant += 1
        if constant == n:
            return CONSTANT
        xscale, xoffset = _scaling(x, low, up, scale, offset)

        rteps = np.sqrt(_EPS)
        stepmx = 1.0e1 if settings.stepmx < rteps * 10.0 else settings.stepmx
        eta = 0.25 if settings.eta < 0.0 or settings.eta >= 1.0 else settings.eta
        rescale = 1.3 if settings.rescale < 0 else settings.rescale
        maxCGit = settings.maxCGit
        if maxCGit < 0:
            maxCGit = min(max(n // 2, 1), 50)
        maxCGit = min(maxCGit, n)
        accuracy = rteps if settings.accuracy <= _EPS else settings.accuracy
        ftol = accuracy if settings.ftol < 0.0 else settings.ftol
        pgtol = 1e-2 * np.sqrt(accuracy) if settings.gtol < 0.0 else settings.gtol
        xtol = rteps if settings.xtol < 0.0 else settings.xtol
        options = (maxCGit, maxnfeval, eta, stepmx, accuracy, ftol, xtol, pgtol, rescale)
        return minimize(x, f, gfull, low, up, xscale, xoffset, settings, options, problem)

    @ieee_njit
    def solve(x0, args, settings):
        n = x0.shape[0]
        lo, hi = box_bounds(settings.bounds, n)
        problem, free = free_problem(x0, lo, hi, args)
        point = problem[2]
        gradient = np.empty(free.shape[0])
        # scipy's ScalarFunction evaluates x0 (fixed variables at their bound) before TNC.
        evaluate(x0[free], gradient, problem)
        if free.shape[0] == 0:
            # All variables fixed: scipy returns the bounds, a success.
            return point.copy(), True
        x = x0[free]
        rc = tnc(x, lo[free], hi[free], settings, problem)
        # scipy's wrapper evaluates at the result again (once more unless it was the last point).
        evaluate(x, gradient, problem)
        return point.copy(), -1 < rc < 3

    return solve
