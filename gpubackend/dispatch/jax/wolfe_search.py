"""scipy's ``_line_search_wolfe12`` in JAX: Moré-Thuente (MINPACK-2 ``dcsrch``), then the
strong-Wolfe search (``scalar_search_wolfe2``) where it fails.

The same searches as the Numba solvers' (`gpubackend.solvers.more_thuente`,
`gpubackend.solvers.line_search`, `gpubackend.solvers.wolfe12`), written for
tracing: every branch of ``dcstep`` is computed and one is selected, and each
search is one ``lax.while_loop`` whose body evaluates one trial point, so under
``vmap`` the lanes search in step. Constants, budgets and tests are scipy's:
``dcsrch`` gets 99 evaluations after its start, the bracketing phase of the
strong-Wolfe search 10 doublings (its last step accepted unchecked, as scipy
does), and its zoom 11 trial points.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

ValueAndGradient = Callable[[jax.Array], tuple[jax.Array, jax.Array]]
"""``x -> (f, grad)`` on the flat iterate."""

# scipy's line_search_wolfe1: relative width below which the bracket counts as collapsed.
_XTOL = 1e-14
# dcsrch's constants: bisection share, bracket shrink test, extrapolation bounds.
_P5, _P66, _XTRAPL, _XTRAPU = 0.5, 0.66, 1.1, 4.0
# line_search_wolfe1 gives dcsrch 100 rounds, its start included.
_MORE_THUENTE_EVALUATIONS = 99
_MAX_BRACKET_ITERS = 10
_MAX_ZOOM_ITERS = 10
_CUBIC_CHECK, _QUADRATIC_CHECK = 0.2, 0.1


class SearchResult(NamedTuple):
    found: jax.Array
    """False where both searches failed (scipy's ``_LineSearchError``); the others are then
    meaningless."""
    alpha: jax.Array
    f: jax.Array
    """The objective at the accepted step."""


def initial_step(phi0, old_phi0, derphi0) -> jax.Array:
    """scipy's first trial step: the previous decrease extrapolated, at most 1; 1 without a previous
    value (NaN)."""
    extrapolated = 1.01 * 2.0 * (phi0 - old_phi0) / derphi0
    # Python's min(1.0, v): v only where it is smaller (a NaN v gives 1.0).
    alpha1 = jnp.where(extrapolated < 1.0, extrapolated, 1.0)
    alpha1 = jnp.where((derphi0 != 0.0) & jnp.isfinite(old_phi0), alpha1, 1.0)
    return jnp.where(alpha1 < 0.0, 1.0, alpha1)


# Moré-Thuente ------------------------------------------------------------------------------------


def _cubic_gamma(theta, d1, d2, clamp_negative: bool):
    s = jnp.maximum(jnp.maximum(jnp.abs(theta), jnp.abs(d1)), jnp.abs(d2))
    radical = (theta / s) ** 2 - (d1 / s) * (d2 / s)
    if clamp_negative:
        radical = jnp.maximum(0.0, radical)
    return s * jnp.sqrt(radical)


def _cubic_step_towards(stp, fp, dp, other, f_other, d_other):
    theta = 3.0 * (f_other - fp) / (stp - other) + d_other + dp
    gamma = _cubic_gamma(theta, d_other, dp, False)
    gamma = jnp.where(stp > other, -gamma, gamma)
    p = (gamma - dp) + theta
    q = ((gamma - dp) + gamma) + d_other
    return stp + p / q * (other - stp)


def _farther(a, b, reference):
    """``a`` where it is strictly farther from ``reference`` than ``b``."""
    return jnp.where(jnp.abs(a - reference) > jnp.abs(b - reference), a, b)


class _Interval(NamedTuple):
    """(stx, fx, gx) the best step so far, (sty, fy, gy) the interval's other end."""

    stx: jax.Array
    fx: jax.Array
    gx: jax.Array
    sty: jax.Array
    fy: jax.Array
    gy: jax.Array


def _dcstep(interval: _Interval, stp, fp, dp, brackt, stpmin, stpmax):
    """MINPACK-2's ``dcstep``: the safeguarded next step, the updated interval and ``brackt``."""
    stx, fx, dx, sty, fy, dy = interval
    sgnd = jnp.sign(dp) * jnp.sign(dx)
    # Case 1, a higher value: the minimum is bracketed.
    theta = 3.0 * (fx - fp) / (stp - stx) + dx + dp
    gamma = _cubic_gamma(theta, dx, dp, False)
    gamma = jnp.where(stp < stx, -gamma, gamma)
    stpc = stx + ((gamma - dx) + theta) / (((gamma - dx) + gamma) + dp) * (stp - stx)
    stpq = stx + ((dx / ((fx - fp) / (stp - stx) + dx)) / 2.0) * (stp - stx)
    higher = jnp.where(jnp.abs(stpc - stx) <= jnp.abs(stpq - stx), stpc, stpc + (stpq - stpc) / 2.0)
    # Case 2, slopes of opposite sign: the minimum is bracketed.
    secant = stp + (dp / (dp - dx)) * (stx - stp)
    opposite = _farther(_cubic_step_towards(stp, fp, dp, stx, fx, dx), secant, stp)
    # Case 3, the same sign and a decreasing slope magnitude.
    gamma3 = _cubic_gamma(theta, dx, dp, True)
    gamma3 = jnp.where(stp > stx, -gamma3, gamma3)
    r = ((gamma3 - dp) + theta) / ((gamma3 + (dx - dp)) + gamma3)
    stpc3 = jnp.where(
        (r < 0.0) & (gamma3 != 0.0), stp + r * (stx - stp), jnp.where(stp > stx, stpmax, stpmin)
    )
    towards_y = stp + _P66 * (sty - stp)
    inner = jnp.where(jnp.abs(stpc3 - stp) < jnp.abs(secant - stp), stpc3, secant)
    inner = jnp.where(stp > stx, jnp.minimum(towards_y, inner), jnp.maximum(towards_y, inner))
    decreasing = jnp.where(brackt, inner, jnp.clip(_farther(stpc3, secant, stp), stpmin, stpmax))
    # Case 4, the same sign and a slope magnitude that does not decrease.
    steep = jnp.where(
        brackt,
        _cubic_step_towards(stp, fp, dp, sty, fy, dy),
        jnp.where(stp > stx, stpmax, stpmin),
    )
    stpf = jnp.where(
        fp > fx,
        higher,
        jnp.where(sgnd < 0.0, opposite, jnp.where(jnp.abs(dp) < jnp.abs(dx), decreasing, steep)),
    )
    # The interval: a higher value replaces its far end, else the step becomes its best end.
    replace_y = (fp > fx) | (sgnd < 0.0)
    y_end = jnp.where(fp > fx, jnp.stack([stp, fp, dp]), jnp.stack([stx, fx, dx]))
    new_y = jnp.where(replace_y, y_end, jnp.stack([sty, fy, dy]))
    new_x = jnp.where(fp > fx, jnp.stack([stx, fx, dx]), jnp.stack([stp, fp, dp]))
    return _Interval(*new_x, *new_y), stpf, brackt | (fp > fx) | (sgnd < 0.0)


class _MoreThuente(NamedTuple):
    """``dcsrch``'s saved variables, the next step and the reverse-communication status."""

    brackt: jax.Array
    stage: jax.Array
    width: jax.Array
    width1: jax.Array
    interval: _Interval
    stmin: jax.Array
    stmax: jax.Array
    stp: jax.Array
    status: jax.Array
    evaluations: jax.Array
    f: jax.Array
    """The value at the step where the search converged."""


_EVALUATE, _CONVERGED, _FAILED = 0, 1, 2


def _more_thuente_start(stp, phi0, derphi0, stpmin, stpmax) -> _MoreThuente:
    bad = (stp < stpmin) | (stp > stpmax) | (derphi0 >= 0.0)
    zero = jnp.zeros_like(phi0)
    return _MoreThuente(
        brackt=jnp.array(False),
        stage=jnp.array(1),
        width=jnp.asarray(stpmax - stpmin, phi0.dtype),
        width1=jnp.asarray((stpmax - stpmin) / _P5, phi0.dtype),
        interval=_Interval(zero, phi0, derphi0, zero, phi0, derphi0),
        stmin=zero,
        stmax=stp + _XTRAPU * stp,
        stp=stp,
        status=jnp.where(bad, _FAILED, _EVALUATE),
        evaluations=jnp.array(0),
        f=phi0,
    )


def _more_thuente_iterate(s: _MoreThuente, f, g, finit, ginit, c1, c2, stpmin, stpmax):
    """``dcsrch`` after the value ``f`` and slope ``g`` at ``s.stp``."""
    stp, interval = s.stp, s.interval
    gtest = c1 * ginit
    ftest = finit + stp * gtest
    stage = jnp.where((s.stage == 1) & (f <= ftest) & (g >= 0.0), 2, s.stage)
    converged = (f <= ftest) & (jnp.abs(g) <= c2 * -ginit)
    failed = (
        (s.brackt & ((stp <= s.stmin) | (stp >= s.stmax)))
        | (s.brackt & (s.stmax - s.stmin <= _XTOL * s.stmax))
        | ((stp == stpmax) & (f <= ftest) & (g <= gtest))
        | ((stp == stpmin) & ((f > ftest) | (g >= gtest)))
    )
    # While stage 1 lasts, dcstep works on psi(stp) = f(stp) - f(0) - c1 stp f'(0).
    modified = (stage == 1) & (f <= interval.fx) & (f > ftest)
    shift = jnp.where(modified, gtest, 0.0)
    shifted = _Interval(
        interval.stx,
        interval.fx - interval.stx * shift,
        interval.gx - shift,
        interval.sty,
        interval.fy - interval.sty * shift,
        interval.gy - shift,
    )
    moved, next_stp, brackt = _dcstep(
        shifted, stp, f - stp * shift, g - shift, s.brackt, s.stmin, s.stmax
    )
    moved = _Interval(
        moved.stx,
        moved.fx + moved.stx * shift,
        moved.gx + shift,
        moved.sty,
        moved.fy + moved.sty * shift,
        moved.gy + shift,
    )
    span = jnp.abs(moved.sty - moved.stx)
    next_stp = jnp.where(
        brackt & (span >= _P66 * s.width1), moved.stx + _P5 * (moved.sty - moved.stx), next_stp
    )
    width1 = jnp.where(brackt, s.width, s.width1)
    width = jnp.where(brackt, span, s.width)
    stmin = jnp.where(
        brackt, jnp.minimum(moved.stx, moved.sty), next_stp + _XTRAPL * (next_stp - moved.stx)
    )
    stmax = jnp.where(
        brackt, jnp.maximum(moved.stx, moved.sty), next_stp + _XTRAPU * (next_stp - moved.stx)
    )
    next_stp = jnp.clip(next_stp, stpmin, stpmax)
    collapsed = brackt & (
        (next_stp <= stmin) | (next_stp >= stmax) | (stmax - stmin <= _XTOL * stmax)
    )
    next_stp = jnp.where(collapsed, moved.stx, next_stp)
    status = jnp.where(
        converged,
        _CONVERGED,
        jnp.where(failed | ~jnp.isfinite(next_stp), _FAILED, _EVALUATE),
    )
    # Converged or failed, the search keeps the step it evaluated.
    stopped = converged | failed
    return _MoreThuente(
        brackt=jnp.where(stopped, s.brackt, brackt),
        stage=stage,
        width=width,
        width1=width1,
        interval=jax.tree.map(lambda new, old: jnp.where(stopped, old, new), moved, interval),
        stmin=stmin,
        stmax=stmax,
        stp=jnp.where(stopped, stp, next_stp),
        status=status,
        evaluations=s.evaluations + 1,
        f=f,
    )


def _more_thuente(fun: ValueAndGradient, xk, pk, phi0, derphi0, stp, c1, c2, stpmin, stpmax):
    """scipy's ``line_search_wolfe1``: the converged search, or status `_FAILED` / `_EVALUATE`
    (out of evaluations)."""

    def searching(s: _MoreThuente):
        return (s.status == _EVALUATE) & (s.evaluations < _MORE_THUENTE_EVALUATIONS)

    def evaluated(s: _MoreThuente):
        f, g = fun(xk + s.stp * pk)
        return _more_thuente_iterate(s, f, jnp.dot(g, pk), phi0, derphi0, c1, c2, stpmin, stpmax)

    start = _more_thuente_start(stp, phi0, derphi0, stpmin, stpmax)
    return jax.lax.while_loop(searching, evaluated, start)


# Strong Wolfe ------------------------------------------------------------------------------------


def _cubic_minimizer(a, fa, fpa, b, fb, c, fc):
    """Minimizer of the cubic through (a, fa), (b, fb), (c, fc) with slope fpa at a; NaN if none."""
    db, dc = b - a, c - a
    denom = (db * dc) ** 2 * (db - dc)
    rb = fb - fa - fpa * db
    rc = fc - fa - fpa * dc
    cubic = (dc**2 * rb - db**2 * rc) / denom
    quad = (-(dc**3) * rb + db**3 * rc) / denom
    radical = quad * quad - 3.0 * cubic * fpa
    valid = (denom != 0.0) & (radical >= 0.0) & (cubic != 0.0)
    return jnp.where(valid, a + (-quad + jnp.sqrt(jnp.abs(radical))) / (3.0 * cubic), jnp.nan)


def _quadratic_minimizer(a, fa, fpa, b, fb):
    """Minimizer of the parabola through (a, fa), (b, fb) with slope fpa at a; NaN if none."""
    db = b - a
    curvature = (fb - fa - fpa * db) / (db * db)
    return jnp.where((db != 0.0) & (curvature != 0.0), a - fpa / (2.0 * curvature), jnp.nan)


_BRACKETING, _ZOOMING, _DONE = 0, 1, 2


class _Zoom(NamedTuple):
    """``_zoom``'s interval (the low end with its slope) and the point it last dropped."""

    a_lo: jax.Array
    a_hi: jax.Array
    phi_lo: jax.Array
    phi_hi: jax.Array
    derphi_lo: jax.Array
    a_rec: jax.Array
    phi_rec: jax.Array


def _zoom_from(a_lo, a_hi, phi_lo, phi_hi, derphi_lo, phi0) -> _Zoom:
    """``_zoom``'s start: the recorded point is the search's origin."""
    return _Zoom(a_lo, a_hi, phi_lo, phi_hi, derphi_lo, jnp.zeros_like(a_lo), phi0)


class _StrongWolfe(NamedTuple):
    phase: jax.Array
    iteration: jax.Array
    """Of the phase: bracketing doublings, or zoom trial points."""
    alpha0: jax.Array
    phi_a0: jax.Array
    derphi_a0: jax.Array
    alpha1: jax.Array
    """The bracketing phase's next trial step."""
    zoom: _Zoom
    found: jax.Array
    alpha: jax.Array
    f: jax.Array


def _zoom_step(iteration, s: _Zoom):
    """``_zoom``'s next trial step: the cubic's minimizer, else the quadratic's, else the middle."""
    dalpha = s.a_hi - s.a_lo
    lo, hi = jnp.minimum(s.a_lo, s.a_hi), jnp.maximum(s.a_lo, s.a_hi)

    def outside(a_j, check):
        return ~jnp.isfinite(a_j) | (a_j > hi - check) | (a_j < lo + check)

    cubic = _cubic_minimizer(s.a_lo, s.phi_lo, s.derphi_lo, s.a_hi, s.phi_hi, s.a_rec, s.phi_rec)
    cubic = jnp.where((iteration > 0) & ~outside(cubic, _CUBIC_CHECK * dalpha), cubic, jnp.nan)
    quadratic = _quadratic_minimizer(s.a_lo, s.phi_lo, s.derphi_lo, s.a_hi, s.phi_hi)
    quadratic = jnp.where(
        outside(quadratic, _QUADRATIC_CHECK * dalpha), s.a_lo + 0.5 * dalpha, quadratic
    )
    return jnp.where(jnp.isfinite(cubic), cubic, quadratic)


def _start_zoom(s: _StrongWolfe, zoom: _Zoom) -> _StrongWolfe:
    return s._replace(phase=jnp.array(_ZOOMING), iteration=jnp.array(0), zoom=zoom)


def _bracketed(s: _StrongWolfe, phi_a1, derphi_a1, phi0, derphi0, c1, c2) -> _StrongWolfe:
    """``scalar_search_wolfe2``'s bracketing loop after the trial at ``s.alpha1``."""
    alpha1 = s.alpha1
    # Out of doublings: scipy accepts the last step unchecked.
    exhausted = s.iteration >= _MAX_BRACKET_ITERS
    # The step slipped below machine precision.
    vanished = alpha1 == 0.0
    high = (phi_a1 > phi0 + c1 * alpha1 * derphi0) | ((phi_a1 >= s.phi_a0) & (s.iteration > 0))
    flat = jnp.abs(derphi_a1) <= -c2 * derphi0
    rising = derphi_a1 >= 0.0
    done = s._replace(phase=jnp.array(_DONE), found=~vanished, alpha=alpha1, f=phi_a1)
    zoom_low = _start_zoom(s, _zoom_from(s.alpha0, alpha1, s.phi_a0, phi_a1, s.derphi_a0, phi0))
    zoom_high = _start_zoom(s, _zoom_from(alpha1, s.alpha0, phi_a1, s.phi_a0, derphi_a1, phi0))
    doubled = s._replace(
        iteration=s.iteration + 1,
        alpha0=alpha1,
        phi_a0=phi_a1,
        derphi_a0=derphi_a1,
        alpha1=2.0 * alpha1,
    )
    cases = [
        (exhausted | vanished, done),
        (high, zoom_low),
        (flat, done),
        (rising, zoom_high),
    ]
    new = doubled
    for condition, state in reversed(cases):
        new = jax.tree.map(lambda a, b, c=condition: jnp.where(c, a, b), state, new)
    return new


def _zoomed(state: _StrongWolfe, a_j, phi_j, derphi_j, phi0, derphi0, c1, c2) -> _StrongWolfe:
    """``_zoom``'s loop after the trial at ``a_j``."""
    s = state.zoom
    high = (phi_j > phi0 + c1 * a_j * derphi0) | (phi_j >= s.phi_lo)
    accepted = ~high & (jnp.abs(derphi_j) <= -c2 * derphi0)
    flips = derphi_j * (s.a_hi - s.a_lo) >= 0.0
    # The recorded point: the old far end where the far end moves, else the old near end.
    far_moves = high | flips
    a_rec = jnp.where(far_moves, s.a_hi, s.a_lo)
    phi_rec = jnp.where(far_moves, s.phi_hi, s.phi_lo)
    a_hi = jnp.where(high, a_j, jnp.where(flips, s.a_lo, s.a_hi))
    phi_hi = jnp.where(high, phi_j, jnp.where(flips, s.phi_lo, s.phi_hi))
    iteration = state.iteration + 1
    out_of_trials = iteration > _MAX_ZOOM_ITERS
    return state._replace(
        phase=jnp.where(accepted | out_of_trials, _DONE, _ZOOMING),
        iteration=iteration,
        zoom=_Zoom(
            a_lo=jnp.where(high, s.a_lo, a_j),
            a_hi=a_hi,
            phi_lo=jnp.where(high, s.phi_lo, phi_j),
            phi_hi=phi_hi,
            derphi_lo=jnp.where(high, s.derphi_lo, derphi_j),
            a_rec=a_rec,
            phi_rec=phi_rec,
        ),
        found=accepted,
        alpha=a_j,
        f=phi_j,
    )


def _strong_wolfe(fun: ValueAndGradient, xk, pk, phi0, derphi0, alpha1, c1, c2, skip):
    """scipy's ``scalar_search_wolfe2`` (no ``amax``, no extra condition); none where ``skip``."""
    zero = jnp.zeros_like(phi0)
    start = _StrongWolfe(
        phase=jnp.where(skip, _DONE, _BRACKETING),
        iteration=jnp.array(0),
        alpha0=zero,
        phi_a0=phi0,
        derphi_a0=derphi0,
        alpha1=alpha1,
        # Placeholders until the bracketing phase starts the zoom.
        zoom=_zoom_from(zero, zero, phi0, phi0, derphi0, phi0),
        found=jnp.array(False),
        alpha=zero,
        f=phi0,
    )

    def searching(s: _StrongWolfe):
        return s.phase != _DONE

    def evaluated(s: _StrongWolfe):
        trial = jnp.where(s.phase == _BRACKETING, s.alpha1, _zoom_step(s.iteration, s.zoom))
        f, g = fun(xk + trial * pk)
        slope = jnp.dot(g, pk)
        return jax.tree.map(
            lambda bracketing, zooming: jnp.where(s.phase == _BRACKETING, bracketing, zooming),
            _bracketed(s, f, slope, phi0, derphi0, c1, c2),
            _zoomed(s, trial, f, slope, phi0, derphi0, c1, c2),
        )

    return jax.lax.while_loop(searching, evaluated, start)


def line_search_wolfe12(
    fun: ValueAndGradient, xk, pk, phi0, gk, old_phi0, c1, c2, stpmin, stpmax
) -> SearchResult:
    """A step along ``pk`` from ``xk`` (value ``phi0``, gradient ``gk``; ``old_phi0`` the previous
    iterate's value, NaN at the first) as scipy's ``_line_search_wolfe12`` finds it; ``stpmin`` and
    ``stpmax`` bound the Moré-Thuente search (scipy's ``amin``, ``amax``)."""
    derphi0 = jnp.dot(gk, pk)
    alpha1 = initial_step(phi0, old_phi0, derphi0)
    dtype = phi0.dtype
    stpmin, stpmax = jnp.asarray(stpmin, dtype), jnp.asarray(stpmax, dtype)
    first = _more_thuente(fun, xk, pk, phi0, derphi0, alpha1.astype(dtype), c1, c2, stpmin, stpmax)
    converged = first.status == _CONVERGED
    second = _strong_wolfe(fun, xk, pk, phi0, derphi0, alpha1.astype(dtype), c1, c2, converged)
    return SearchResult(
        found=converged | second.found,
        alpha=jnp.where(converged, first.stp, second.alpha),
        f=jnp.where(converged, first.f, second.f),
    )
