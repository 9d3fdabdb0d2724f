"""TNC's line search (``tnc.c``'s ``linearSearch`` over ``getptcInit``/``getptcIter``).

Gill and Murray's safeguarded search: each trial step comes from a cubic fitted
through the two lowest points so far, else from bisection or extrapolation, and
the search stops at a step with sufficient decrease (``rmu = 1e-4``) whose slope
has shrunk by ``eta``. ``getptc``'s pointer arguments are the locals of one
loop here, its ``goto``s flags.
"""

from collections.abc import Callable

import numpy as np

from gpubackend.solvers.ieee import ieee_njit
from gpubackend.solvers.tnc_vectors import (
    projected_norm,
    scaled_norm,
    scaled_slope,
    unscaled_point_into,
)

_EPS = float(np.finfo(np.float64).eps)
_MAX_SEARCH_ITERATIONS = 64
_SUFFICIENT_DECREASE = 1e-4

# linearSearch's return codes.
LS_OK, LS_MAXFUN, LS_FAIL = 0, 1, 2


@ieee_njit(inline="always")
def _within_bound(step, scxbnd, reltol, abstol, xbnd, tol):
    """``getptc``'s last step, shared by both halves: a step past the (scaled) bound lands on it and
    moves the bound left; no step is shorter than ``tol``. ``(step, scxbnd, u)``."""
    if step >= scxbnd:
        step = scxbnd
        scxbnd -= (reltol * abs(xbnd) + abstol) / (1.0 + reltol)
    u = step
    if abs(step) < tol and step < 0.0:
        u = -tol
    if abs(step) < tol and step >= 0.0:
        u = tol
    return step, scxbnd, u


@ieee_njit(inline="always")
def _hypot_factor(larger, smaller):
    """``sqrt(1 + (smaller / larger) ** 2)``, 1 where the ratio is below ``larger``'s precision:
    ``hypot(larger, smaller) = larger * factor`` without under- or overflow."""
    floor = larger * _EPS if larger > _EPS else 0.0
    if smaller < floor:
        return 1.0
    value = smaller / larger
    return np.sqrt(1.0 + value * value)


def make_tnc_line_search(evaluate: Callable) -> Callable:
    """``search(...) -> (rc, f, alpha, nfeval)``; see ``search``."""

    @ieee_njit
    def search(
        x, p, f, alpha, gfull, low, up, xscale, xoffset, fscale, pivot, eta, ftol, xbnd,
        maxnfeval, nfeval, problem, work, trial_gradient, best_gradient,
    ):  # fmt: skip
        """Search from scaled ``x`` along ``p`` from step ``alpha``, no further than ``xbnd``.

        On success ``x``, ``gfull`` (the unscaled gradient) and ``f`` (scaled) move to the
        best point; otherwise they are left as they were. ``alpha`` is the best step found
        (the first trial step where ``getptcInit`` refuses).
        """
        n = x.shape[0]
        rteps = np.sqrt(_EPS)
        gu = scaled_slope(gfull, p, xscale, fscale)
        xnorm = projected_norm(x, pivot, work)
        pe = scaled_norm(p) + _EPS
        reltol = rteps * (xnorm + 1.0) / pe
        abstol = -_EPS * (1.0 + abs(f)) / (gu - _EPS)
        tnytol = _EPS * (xnorm + 1.0) / pe
        big = 1.0 / (_EPS * _EPS)
        u = alpha
        fu = f
        # getptcInit
        if u <= 0.0 or xbnd <= tnytol or gu > 0.0:
            return LS_FAIL, f, alpha, nfeval
        if xbnd < abstol:
            abstol = xbnd
        tol = abstol
        a = xw = xmin = 0.0
        oldf = fmin = fw = fu
        gw = gmin = gu
        step = u
        factor = 5.0
        braktd = False
        scxbnd = xbnd
        b = scxbnd + reltol * abs(scxbnd) + abstol
        e = b + b
        b1 = b
        gtest1 = -_SUFFICIENT_DECREASE * gu
        gtest2 = -eta * gu
        step, scxbnd, u = _within_bound(step, scxbnd, reltol, abstol, xbnd, tol)

        itcnt = 0
        evaluating, found = True, False
        while evaluating:
            itcnt += 1
            if itcnt > _MAX_SEARCH_ITERATIONS or nfeval >= maxnfeval:
                break
            ualpha = xmin + u
            unscaled_point_into(work, x, ualpha, p, xscale, xoffset, low, up)
            fu = evaluate(work, trial_gradient, problem) * fscale
            nfeval += 1
            gu = scaled_slope(trial_gradient, p, xscale, fscale)

            # getptcIter: update a, b, xw and xmin.
            lowered = False
            if fu <= fmin:
                chordu = oldf - (xmin + u) * gtest1
                if fu > chordu:
                    # No sufficient decrease: move the upper end here, with a value and slope that
                    # make the next step bisect or aim at the chord's root.
                    chordm = oldf - xmin * gtest1
                    gu = -gmin
                    denom = chordm - fmin
                    if abs(denom) < 1e-15:
                        denom = 1e-15
                        if chordm - fmin < 0.0:
                            denom = -denom
                    if xmin != 0.0:
                        gu = gmin * (chordu - fu) / denom
                    fu = 0.5 * u * (gmin + gu) + fmin
                    if fu < fmin:
                        fu = fmin
                else:
                    fw = fmin
                    fmin = fu
                    gw = gmin
                    gmin = gu
                    xmin += u
                    a -= u
                    b -= u
                    xw = -u
                    scxbnd -= u
                    if gu <= 0.0:
                        a = 0.0
                    else:
                        b = 0.0
                        braktd = True
                    tol = abs(xmin) * reltol + abstol
                    lowered = True
            if not lowered:
                if u < 0.0:
                    a = u
                else:
                    b = u
                    braktd = True
                xw = u
                fw = fu
                gw = gu

            # Convergence check.
            twotol = tol + tol
            xmidpt = 0.5 * (a + b)
            if (abs(xmidpt) <= twotol - 0.5 * (b - a)) or (
                abs(gmin) <= gtest2 and fmin < oldf and ((abs(xmin - xbnd) > tol) or (not braktd))
            ):
                if xmin != 0.0:
                    found = True
                    evaluating = False
                else:
                    # No decrease yet: go on with a smaller tolerance unless f's change is
                    # already within its precision.
                    if abs(oldf - fw) <= ftol:
                        evaluating = False
                    else:
                        tol = 0.1 * tol
                        if tol < tnytol:
                            evaluating = False
                        reltol = 0.1 * reltol
                        abstol = 0.1 * abstol
                        twotol = 0.1 * twotol
            if not evaluating:
                if xmin == ualpha:
                    best_gradient[:] = trial_gradient
                break

            # The next trial step: the minimum of a cubic through xmin and xw.
            r = q = s = 0.0
            if abs(e) > tol:
                r = 3.0 * (fmin - fw) / xw + gmin + gw
                absr = abs(r)
                q = absr
                fitted = True
                if gw != 0.0 and gmin != 0.0:
                    abgw = abs(gw)
                    abgmin = abs(gmin)
                    s = np.sqrt(abgmin) * np.sqrt(abgw)
                    if gw / abgw * gmin > 0.0:
                        if r >= s or r <= -s:
                            q = np.sqrt(abs(r + s)) * np.sqrt(abs(r - s))
                        else:
                            r = 0.0
                            q = 0.0
                            fitted = False
                    else:
                        # sqrt(r * r + s * s) without under- or overflow.
                        if absr >= s:
                            scale, sumsq = absr, _hypot_factor(absr, s)
                        else:
                            scale, sumsq = s, _hypot_factor(s, absr)
                        q = big
                        if scale < big / sumsq:
                            q = scale * sumsq
                if fitted:
                    if xw < 0.0:
                        q = -q
                    s = xw * (gmin - r - q)
                    q = gw - gmin + q + q
                    if q > 0.0:
                        s = -s
                    if q <= 0.0:
                        q = -q
                    r = e
                    if b1 != step or braktd:
                        e = step

            # An artificial bound on the step.
            a1 = a
            b1 = b
            step = xmidpt
            if (not braktd) or ((a == 0.0 and xw < 0.0) or (b == 0.0 and xw > 0.0)):
                if braktd:
                    # The minimum is not bracketed by 0 and xw: the step stays within (a1, b1).
                    d1 = xw
                    d2 = a
                    if a == 0.0:
                        d2 = b
                    u = -d1 / d2
                    step = 5.0 * d2 * (0.1 + 1.0 / u) / 11.0
                    if u < 1.0:
                        step = 0.5 * d2 * np.sqrt(u)
                else:
                    step = -factor * xw
                    if step > scxbnd:
                        step = scxbnd
                    if step != scxbnd:
                        factor = 5.0 * factor
                if step <= 0.0:
                    a1 = step
                if step > 0.0:
                    b1 = step

            # The cubic's step only inside the interval and under half the last-but-one step.
            if abs(s) <= abs(0.5 * q * r) or s <= q * a1 or s >= q * b1:
                e = b - a
            else:
                step = s / q
                # Not too close to a or b.
                if step - a < twotol or b - step < twotol:
                    step = -tol if xmidpt <= 0.0 else tol
            step, scxbnd, u = _within_bound(step, scxbnd, reltol, abstol, xbnd, tol)
            if xmin == ualpha:
                best_gradient[:] = trial_gradient

        if found:
            for i in range(n):
                x[i] += xmin * p[i]
            gfull[:] = best_gradient
            return LS_OK, fmin, xmin, nfeval
        if itcnt > _MAX_SEARCH_ITERATIONS or not evaluating:
            return LS_FAIL, f, xmin, nfeval
        return LS_MAXFUN, f, xmin, nfeval

    return search
