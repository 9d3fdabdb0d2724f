"""TNC's line search (``tnc.c``'s ``linearSearch`` over ``getptcInit``/``getptcIter``) as a
`jax.lax.while_loop`, as the Numba solver runs it (`gpubackend.solvers.tnc_line_search`, where
Gill and Murray's safeguarded search is described): one pass of the loop per trial step, the
``goto``s of ``getptc`` as selections.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from gpubackend.dispatch.jax.implicit import varying_leaves_like
from gpubackend.dispatch.jax.tnc_vectors import (
    EPS,
    Evaluations,
    Objective,
    Scaling,
    projected_norm,
    scaled_norm,
)

_MAX_SEARCH_ITERATIONS = 64
_SUFFICIENT_DECREASE = 1e-4
_RTEPS = float(jnp.sqrt(EPS))
_BIG = 1.0 / (EPS * EPS)

# linearSearch's return codes.
LS_OK, LS_MAXFUN, LS_FAIL = 0, 1, 2


def _within_bound(step, scxbnd, reltol, abstol, xbnd, tol):
    """``getptc``'s last step: a step past the (scaled) bound lands on it and moves the bound
    left; no step is shorter than ``tol``. ``(step, scxbnd, u)``."""
    past = step >= scxbnd
    step = jnp.where(past, scxbnd, step)
    scxbnd = jnp.where(past, scxbnd - (reltol * jnp.abs(xbnd) + abstol) / (1.0 + reltol), scxbnd)
    short = jnp.abs(step) < tol
    u = jnp.where(short, jnp.where(step < 0.0, -tol, tol), step)
    return step, scxbnd, u


def _hypot_factor(larger, smaller):
    """``sqrt(1 + (smaller / larger) ** 2)``, 1 where the ratio is below ``larger``'s precision."""
    floor = jnp.where(larger > EPS, larger * EPS, 0.0)
    value = smaller / larger
    return jnp.where(smaller < floor, 1.0, jnp.sqrt(1.0 + value * value))


class _Search(NamedTuple):
    itcnt: jax.Array
    u: jax.Array
    step: jax.Array
    a: jax.Array
    b: jax.Array
    b1: jax.Array
    e: jax.Array
    xw: jax.Array
    fw: jax.Array
    gw: jax.Array
    xmin: jax.Array
    fmin: jax.Array
    gmin: jax.Array
    tol: jax.Array
    reltol: jax.Array
    abstol: jax.Array
    scxbnd: jax.Array
    factor: jax.Array
    braktd: jax.Array
    evaluating: jax.Array
    found: jax.Array
    best_gradient: jax.Array
    evaluations: Evaluations


class SearchResult(NamedTuple):
    code: jax.Array
    """``LS_OK``, ``LS_MAXFUN`` or ``LS_FAIL``."""
    x: jax.Array
    f: jax.Array
    gradient: jax.Array
    """At the best point where found (``x``, scaled ``f``, unscaled gradient), else as given."""
    alpha: jax.Array
    """The best step (the first trial step where the search refuses to start)."""
    evaluations: Evaluations


def _update(s: _Search, u, fu, gu, oldf, gtest1) -> _Search:
    """``getptcIter``'s update of the interval and the best point with the trial step ``u``."""
    chordu = oldf - (s.xmin + u) * gtest1
    lower = fu <= s.fmin
    lowered = lower & ~(fu > chordu)
    # No sufficient decrease: move the upper end here, with a value and slope that make the next
    # step bisect or aim at the chord's root.
    chordm = oldf - s.xmin * gtest1
    denom = chordm - s.fmin
    denom = jnp.where(
        jnp.abs(denom) < 1e-15, jnp.where(chordm - s.fmin < 0.0, -1e-15, 1e-15), denom
    )
    gu_chord = jnp.where(s.xmin != 0.0, s.gmin * (chordu - fu) / denom, -s.gmin)
    fu_chord = jnp.maximum(0.5 * u * (s.gmin + gu_chord) + s.fmin, s.fmin)
    above_chord = lower & ~lowered
    gu = jnp.where(above_chord, gu_chord, gu)
    fu = jnp.where(above_chord, fu_chord, fu)
    # A new best point: the interval moves with it.
    xmin = jnp.where(lowered, s.xmin + u, s.xmin)
    a_low, b_low = s.a - u, s.b - u
    a_low = jnp.where(gu <= 0.0, 0.0, a_low)
    b_low = jnp.where(gu <= 0.0, b_low, 0.0)
    # Otherwise the trial step bounds the interval.
    a_high = jnp.where(u < 0.0, u, s.a)
    b_high = jnp.where(u < 0.0, s.b, u)
    return s._replace(
        fw=jnp.where(lowered, s.fmin, fu),
        fmin=jnp.where(lowered, fu, s.fmin),
        gw=jnp.where(lowered, s.gmin, gu),
        gmin=jnp.where(lowered, gu, s.gmin),
        xmin=xmin,
        a=jnp.where(lowered, a_low, a_high),
        b=jnp.where(lowered, b_low, b_high),
        xw=jnp.where(lowered, -u, u),
        scxbnd=jnp.where(lowered, s.scxbnd - u, s.scxbnd),
        braktd=s.braktd | jnp.where(lowered, gu > 0.0, u >= 0.0),
        tol=jnp.where(lowered, jnp.abs(xmin) * s.reltol + s.abstol, s.tol),
    )


def _next_step(s: _Search, xmidpt, twotol, xbnd) -> _Search:
    """The next trial step: the minimum of a cubic through ``xmin`` and ``xw``, kept inside an
    artificial bound and off the interval's ends, else bisection or extrapolation."""
    fits = jnp.abs(s.e) > s.tol
    r = 3.0 * (s.fmin - s.fw) / s.xw + s.gmin + s.gw
    absr = jnp.abs(r)
    both_slopes = (s.gw != 0.0) & (s.gmin != 0.0)
    abgw, abgmin = jnp.abs(s.gw), jnp.abs(s.gmin)
    s_root = jnp.sqrt(abgmin) * jnp.sqrt(abgw)
    same_sign = s.gw / abgw * s.gmin > 0.0
    real = (r >= s_root) | (r <= -s_root)
    q_same = jnp.sqrt(jnp.abs(r + s_root)) * jnp.sqrt(jnp.abs(r - s_root))
    # sqrt(r * r + s * s) without under- or overflow.
    scale = jnp.where(absr >= s_root, absr, s_root)
    sumsq = jnp.where(absr >= s_root, _hypot_factor(absr, s_root), _hypot_factor(s_root, absr))
    q_opposite = jnp.where(scale < _BIG / sumsq, scale * sumsq, _BIG)
    q = jnp.where(both_slopes, jnp.where(same_sign, q_same, q_opposite), absr)
    fitted = fits & ~(both_slopes & same_sign & ~real)
    q = jnp.where(s.xw < 0.0, -q, q)
    s_fit = s.xw * (s.gmin - r - q)
    q_fit = s.gw - s.gmin + q + q
    s_fit = jnp.where(q_fit > 0.0, -s_fit, s_fit)
    q_fit = jnp.where(q_fit <= 0.0, -q_fit, q_fit)
    unfitted_s = jnp.where(fits & both_slopes, s_root, 0.0)
    cubic_s = jnp.where(fitted, s_fit, unfitted_s)
    cubic_q = jnp.where(fitted, q_fit, 0.0)
    cubic_r = jnp.where(fitted, s.e, 0.0)
    e = jnp.where(fitted & ((s.b1 != s.step) | s.braktd), s.step, s.e)

    # An artificial bound on the step.
    unbracketed_by_xw = (~s.braktd) | (
        ((s.a == 0.0) & (s.xw < 0.0)) | ((s.b == 0.0) & (s.xw > 0.0))
    )
    d2 = jnp.where(s.a == 0.0, s.b, s.a)
    ratio = -s.xw / d2
    inside = jnp.where(
        ratio < 1.0, 0.5 * d2 * jnp.sqrt(ratio), 5.0 * d2 * (0.1 + 1.0 / ratio) / 11.0
    )
    outward = jnp.minimum(-s.factor * s.xw, s.scxbnd)
    bounded = jnp.where(s.braktd, inside, outward)
    factor = jnp.where(
        unbracketed_by_xw & ~s.braktd & (outward != s.scxbnd), 5.0 * s.factor, s.factor
    )
    step = jnp.where(unbracketed_by_xw, bounded, xmidpt)
    a1 = jnp.where(unbracketed_by_xw & (step <= 0.0), step, s.a)
    b1 = jnp.where(unbracketed_by_xw & (step > 0.0), step, s.b)

    # The cubic's step only inside the interval and under half the last-but-one step.
    rejected = (
        (jnp.abs(cubic_s) <= jnp.abs(0.5 * cubic_q * cubic_r))
        | (cubic_s <= cubic_q * a1)
        | (cubic_s >= cubic_q * b1)
    )
    cubic_step = cubic_s / cubic_q
    # Not too close to a or b.
    near_end = (cubic_step - s.a < twotol) | (s.b - cubic_step < twotol)
    cubic_step = jnp.where(near_end, jnp.where(xmidpt <= 0.0, -s.tol, s.tol), cubic_step)
    step = jnp.where(rejected, step, cubic_step)
    e = jnp.where(rejected, s.b - s.a, e)
    step, scxbnd, u = _within_bound(step, s.scxbnd, s.reltol, s.abstol, xbnd, s.tol)
    return s._replace(u=u, step=step, b1=b1, e=e, scxbnd=scxbnd, factor=factor)


def line_search(
    objective: Objective,
    x: jax.Array,
    p: jax.Array,
    f: jax.Array,
    alpha: jax.Array,
    gradient: jax.Array,
    scaling: Scaling,
    fscale: jax.Array,
    pivot: jax.Array,
    xbnd: jax.Array,
    evaluations: Evaluations,
    eta: float,
    ftol: float,
    max_evaluations: int,
) -> SearchResult:
    """Search from scaled ``x`` along ``p`` from step ``alpha``, no further than ``xbnd``;
    ``f`` is scaled, ``gradient`` unscaled."""
    gu = scaling.slope(gradient, p, fscale)
    xnorm = projected_norm(x, pivot)
    pe = scaled_norm(p) + EPS
    reltol = _RTEPS * (xnorm + 1.0) / pe
    abstol = -EPS * (1.0 + jnp.abs(f)) / (gu - EPS)
    tnytol = EPS * (xnorm + 1.0) / pe
    # getptcInit
    refused = (alpha <= 0.0) | (xbnd <= tnytol) | (gu > 0.0)
    abstol = jnp.minimum(abstol, xbnd)
    b = xbnd + reltol * jnp.abs(xbnd) + abstol
    gtest1 = -_SUFFICIENT_DECREASE * gu
    gtest2 = -eta * gu
    step, scxbnd, u = _within_bound(alpha, xbnd, reltol, abstol, xbnd, abstol)
    zero = jnp.zeros_like(f)
    start = _Search(
        itcnt=jnp.array(0),
        u=u,
        step=step,
        a=zero,
        b=b,
        b1=b,
        e=b + b,
        xw=zero,
        fw=f,
        gw=gu,
        xmin=zero,
        fmin=f,
        gmin=gu,
        tol=abstol,
        reltol=reltol,
        abstol=abstol,
        scxbnd=scxbnd,
        factor=jnp.array(5.0),
        braktd=jnp.array(False),
        evaluating=~refused,
        found=jnp.array(False),
        best_gradient=gradient,
        evaluations=evaluations,
    )

    def searching(s: _Search):
        return (
            s.evaluating
            & (s.itcnt < _MAX_SEARCH_ITERATIONS)
            & (s.evaluations.requested < max_evaluations)
        )

    def trial(s: _Search) -> _Search:
        ualpha = s.xmin + s.u
        fu, trial_gradient, full = objective.at(scaling.point(x, ualpha, p))
        fu = fu * fscale
        gu = scaling.slope(trial_gradient, p, fscale)
        s = _update(
            s._replace(itcnt=s.itcnt + 1, evaluations=s.evaluations.after(full)),
            s.u,
            fu,
            gu,
            f,
            gtest1,
        )
        # Convergence check.
        twotol = s.tol + s.tol
        xmidpt = 0.5 * (s.a + s.b)
        converged = (jnp.abs(xmidpt) <= twotol - 0.5 * (s.b - s.a)) | (
            (jnp.abs(s.gmin) <= gtest2)
            & (s.fmin < f)
            & ((jnp.abs(s.xmin - xbnd) > s.tol) | ~s.braktd)
        )
        found = converged & (s.xmin != 0.0)
        # No decrease yet: go on with a smaller tolerance unless f's change is already within its
        # precision.
        retry = converged & ~found
        flat = retry & (jnp.abs(f - s.fw) <= ftol)
        shrink = retry & ~flat
        tol = jnp.where(shrink, 0.1 * s.tol, s.tol)
        s = s._replace(
            tol=tol,
            reltol=jnp.where(shrink, 0.1 * s.reltol, s.reltol),
            abstol=jnp.where(shrink, 0.1 * s.abstol, s.abstol),
            found=found,
            evaluating=~(found | flat | (shrink & (tol < tnytol))),
            best_gradient=jnp.where(s.xmin == ualpha, trial_gradient, s.best_gradient),
        )
        twotol = jnp.where(shrink, 0.1 * twotol, twotol)
        moved = _next_step(s, xmidpt, twotol, xbnd)
        return jax.tree.map(lambda new, old: jnp.where(s.evaluating, new, old), moved, s)

    # Inside a manual mesh the carry starts as varying as the body makes it.
    start = varying_leaves_like(start, (x, p, f, gradient, evaluations))
    end = jax.lax.while_loop(searching, trial, start)
    exhausted = end.evaluating & (end.itcnt >= _MAX_SEARCH_ITERATIONS)
    code = jnp.where(
        end.found,
        LS_OK,
        jnp.where(refused | exhausted | ~end.evaluating, LS_FAIL, LS_MAXFUN),
    )
    return SearchResult(
        code=code,
        x=jnp.where(end.found, x + end.xmin * p, x),
        f=jnp.where(end.found, end.fmin, f),
        gradient=jnp.where(end.found, end.best_gradient, gradient),
        alpha=jnp.where(refused, alpha, end.xmin),
        evaluations=end.evaluations,
    )
