"""Moré-Thuente line search: a port of MINPACK-2's ``dcsrch``/``dcstep`` as scipy runs them.

scipy's ``line_search_wolfe1`` (its Python port in ``scipy/optimize/_dcsrch.py``)
is the first search of BFGS and Newton-CG. As in MINPACK, the search is
reverse communication on scalars: `start` and `iterate` take the step's value
and slope and say where to evaluate next, and the caller evaluates (see
`gpubackend.solvers.wolfe12`). So no array passes through the search, which
keeps Numba's reference counting out of the per-evaluation path.
``iterate`` answers `FAILED` where scipy's search gets ``WARN`` or ``ERROR``,
or a non-finite step.
"""

from typing import NamedTuple

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

# scipy's line_search_wolfe1: relative width below which the bracket counts as collapsed.
_XTOL = 1e-14
# dcsrch's constants: bisection share, bracket shrink test, extrapolation bounds.
_P5 = 0.5
_P66 = 0.66
_XTRAPL = 1.1
_XTRAPU = 4.0


@numba_njit
def _cubic_gamma(theta, d1, d2, clamp_negative):
    s = max(abs(theta), abs(d1), abs(d2))
    radical = (theta / s) ** 2 - (d1 / s) * (d2 / s)
    if clamp_negative:
        radical = max(0.0, radical)
    return s * np.sqrt(radical)


@numba_njit
def _clip(value, low, high):
    """``np.clip`` for a float: NaN stays NaN, so the search sees it and stops."""
    if value < low:
        return low
    if value > high:
        return high
    return value


@numba_njit
def _cubic_step_towards(stp, fp, dp, other, f_other, d_other):
    """Minimiser of the cubic through (stp, fp, dp) and (other, f_other, d_other), as dcstep writes
    it from ``stp``."""
    theta = 3.0 * (f_other - fp) / (stp - other) + d_other + dp
    gamma = _cubic_gamma(theta, d_other, dp, False)
    if stp > other:
        gamma = -gamma
    p = (gamma - dp) + theta
    q = ((gamma - dp) + gamma) + d_other
    return stp + p / q * (other - stp)


@numba_njit
def dcstep(stx, fx, dx, sty, fy, dy, stp, fp, dp, brackt, stpmin, stpmax):
    """A safeguarded trial step and the updated interval ``(stx, fx, dx, sty, fy, dy, stp, brackt)``
    (MINPACK-2)."""
    sgnd = np.sign(dp) * np.sign(dx)
    if fp > fx:
        # Higher function value: the minimum is bracketed.
        theta = 3.0 * (fx - fp) / (stp - stx) + dx + dp
        gamma = _cubic_gamma(theta, dx, dp, False)
        if stp < stx:
            gamma = -gamma
        p = (gamma - dx) + theta
        q = ((gamma - dx) + gamma) + dp
        stpc = stx + p / q * (stp - stx)
        stpq = stx + ((dx / ((fx - fp) / (stp - stx) + dx)) / 2.0) * (stp - stx)
        stpf = stpc if abs(stpc - stx) <= abs(stpq - stx) else stpc + (stpq - stpc) / 2.0
        brackt = True
    elif sgnd < 0.0:
        # Derivatives of opposite sign: the minimum is bracketed.
        stpc = _cubic_step_towards(stp, fp, dp, stx, fx, dx)
        stpq = stp + (dp / (dp - dx)) * (stx - stp)
        stpf = stpc if abs(stpc - stp) > abs(stpq - stp) else stpq
        brackt = True
    elif abs(dp) < abs(dx):
        # Same sign, the derivative's magnitude decreases.
        theta = 3.0 * (fx - fp) / (stp - stx) + dx + dp
        gamma = _cubic_gamma(theta, dx, dp, True)
        if stp > stx:
            gamma = -gamma
        p = (gamma - dp) + theta
        q = (gamma + (dx - dp)) + gamma
        r = p / q
        if r < 0.0 and gamma != 0.0:
            stpc = stp + r * (stx - stp)
        elif stp > stx:
            stpc = stpmax
        else:
            stpc = stpmin
        stpq = stp + (dp / (dp - dx)) * (stx - stp)
        if brackt:
            stpf = stpc if abs(stpc - stp) < abs(stpq - stp) else stpq
            if stp > stx:
                stpf = min(stp + _P66 * (sty - stp), stpf)
            else:
                stpf = max(stp + _P66 * (sty - stp), stpf)
        else:
            stpf = _clip(stpc if abs(stpc - stp) > abs(stpq - stp) else stpq, stpmin, stpmax)
    elif brackt:
        # Same sign, the derivative's magnitude does not decrease: cubic through stp and sty.
        stpf = _cubic_step_towards(stp, fp, dp, sty, fy, dy)
    elif stp > stx:
        stpf = stpmax
    else:
        stpf = stpmin
    if fp > fx:
        sty, fy, dy = stp, fp, dp
    else:
        if sgnd < 0.0:
            sty, fy, dy = stx, fx, dx
        stx, fx, dx = stp, fp, dp
    return stx, fx, dx, sty, fy, dy, stpf, brackt


class SearchState(NamedTuple):
    """``dcsrch``'s saved variables: (stx, fx, gx) the best step so far, (sty, fy, gy) the
    interval's other end."""

    brackt: bool
    stage: int
    finit: float
    ginit: float
    gtest: float
    gtol: float
    width: float
    width1: float
    stx: float
    fx: float
    gx: float
    sty: float
    fy: float
    gy: float
    stmin: float
    stmax: float
    stpmin: float
    stpmax: float


# What `iterate` asks of the caller.
EVALUATE, CONVERGED, FAILED = 0, 1, 2


@numba_njit
def start(stp, phi0, derphi0, c1, c2, stpmin, stpmax):
    """``(state, status)`` for a search from ``stp``; status `EVALUATE` (at ``stp``) or `FAILED`
    (bad input)."""
    state = SearchState(
        False,
        1,
        phi0,
        derphi0,
        c1 * derphi0,
        c2,
        stpmax - stpmin,
        (stpmax - stpmin) / _P5,
        0.0,
        phi0,
        derphi0,
        0.0,
        phi0,
        derphi0,
        0.0,
        stp + _XTRAPU * stp,
        stpmin,
        stpmax,
    )
    if stp < stpmin or stp > stpmax or derphi0 >= 0.0:
        return state, FAILED
    return state, EVALUATE


@numba_njit
def iterate(s, stp, f, g):
    """``(state, next step, status)`` after evaluating value ``f`` and slope ``g`` at ``stp``."""
    brackt, stage, stx, fx, gx, sty, fy, gy = (
        s.brackt,
        s.stage,
        s.stx,
        s.fx,
        s.gx,
        s.sty,
        s.fy,
        s.gy,
    )
    width, width1, stmin, stmax = s.width, s.width1, s.stmin, s.stmax
    ftest = s.finit + stp * s.gtest
    if stage == 1 and f <= ftest and g >= 0.0:
        stage = 2
    if f <= ftest and abs(g) <= s.gtol * -s.ginit:
        return s, stp, CONVERGED
    if (
        (brackt and (stp <= stmin or stp >= stmax))
        or (brackt and stmax - stmin <= _XTOL * stmax)
        or (stp == s.stpmax and f <= ftest and g <= s.gtest)
        or (stp == s.stpmin and (f > ftest or g >= s.gtest))
    ):
        return s, stp, FAILED
    gtest = s.gtest
    if stage == 1 and f <= fx and f > ftest:
        # dcsrch's modified function psi(stp) = f(stp) - f(0) - c1 stp f'(0) while stage 1 lasts.
        stx, fxm, gxm, sty, fym, gym, stp, brackt = dcstep(
            stx,
            fx - stx * gtest,
            gx - gtest,
            sty,
            fy - sty * gtest,
            gy - gtest,
            stp,
            f - stp * gtest,
            g - gtest,
            brackt,
            stmin,
            stmax,
        )
        fx, fy = fxm + stx * gtest, fym + sty * gtest
        gx, gy = gxm + gtest, gym + gtest
    else:
        stx, fx, gx, sty, fy, gy, stp, brackt = dcstep(
            stx, fx, gx, sty, fy, gy, stp, f, g, brackt, stmin, stmax
        )
    if brackt:
        if abs(sty - stx) >= _P66 * width1:
            stp = stx + _P5 * (sty - stx)
        width1 = width
        width = abs(sty - stx)
        stmin, stmax = min(stx, sty), max(stx, sty)
    else:
        stmin = stp + _XTRAPL * (stp - stx)
        stmax = stp + _XTRAPU * (stp - stx)
    stp = _clip(stp, s.stpmin, s.stpmax)
    if brackt and (stp <= stmin or stp >= stmax or stmax - stmin <= _XTOL * stmax):
        stp = stx
    state = SearchState(
        brackt,
        stage,
        s.finit,
        s.ginit,
        gtest,
        s.gtol,
        width,
        width1,
        stx,
        fx,
        gx,
        sty,
        fy,
        gy,
        stmin,
        stmax,
        s.stpmin,
        s.stpmax,
    )
    return state, stp, EVALUATE if np.isfinite(stp) else FAILED
