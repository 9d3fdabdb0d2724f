"""scipy's Powell (``_minimize_powell``) as an optimistix minimiser.

Each optimistix step is one scipy iteration: a line search along every
direction in turn (scipy's ``_linesearch_powell``: Brent's method from
``bracket``'s downhill search without bounds; with ``bounds``, fminbound on
the segment inside the box, through ``tan`` where it is open on one side), then
the extrapolated point, which may replace the direction of largest decrease.
A line search's result is the best point its scalar minimiser evaluated (the
point Brent's method and fminbound return). The budgets are scipy's: every
evaluation counts, the line searches' included, and one past ``maxfev`` is
refused and ends the solve at the last completed line search, where scipy's
wrapper raises. The verdict is scipy's ``warnflag``: success once the
decrease meets ``ftol`` with neither budget spent, no NaN, and ``x`` inside the
bounds.

The Numba solver (`gpubackend.solvers.powell`) is the same algorithm in loops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.nelder_mead import box_bounds, flat_objective

LINE_SEARCH_MAXITER = 500
"""scipy's ``minimize_scalar`` default, which its line searches keep."""

_GOLD, _GROW_LIMIT, _VERY_SMALL, _BRACKET_MAXITER = 1.618034, 110.0, 1e-21, 1000
"""scipy's ``bracket``."""
_BRENT_MIN_TOL, _BRENT_GOLDEN = 1.0e-11, 0.3819660
"""scipy's ``Brent``."""
_SQRT_EPS, _FMINBOUND_GOLDEN = 1.4832396974191326e-08, 0.3819660112501051
"""scipy's ``_minimize_scalar_bounded`` (``sqrt(2.2e-16)`` and ``(3 - sqrt(5)) / 2``)."""


class _Tally(NamedTuple):
    """A line search's evaluations: the count so far, the best step and value, and whether one
    was refused (past ``maxfev``)."""

    evaluations: jax.Array
    best_step: jax.Array
    best_value: jax.Array
    refused: jax.Array


class _Line(NamedTuple):
    """The objective along ``x + t direction``, counted against ``max_evaluations``; with
    ``tangent``, the step is ``tan(s)``."""

    value_of: Callable[[jax.Array], jax.Array]
    x: jax.Array
    direction: jax.Array
    tangent: jax.Array
    max_evaluations: int

    def __call__(self, s: jax.Array, tally: _Tally) -> tuple[jax.Array, _Tally]:
        refused = tally.refused | (tally.evaluations >= self.max_evaluations)
        step = jnp.where(self.tangent, jnp.tan(s), s)
        f = jax.lax.cond(
            refused,
            lambda _: jnp.array(jnp.inf, self.x.dtype),
            lambda t: self.value_of(self.x + t * self.direction),
            step,
        )
        # Brent's method and fminbound both move to a point at least as low.
        better = ~refused & (f <= tally.best_value)
        return f, _Tally(
            evaluations=tally.evaluations + ~refused,
            best_step=jnp.where(better, step, tally.best_step),
            best_value=jnp.where(better, f, tally.best_value),
            refused=refused,
        )


def line_for_search(x, direction, lower, upper) -> tuple[jax.Array, jax.Array]:
    """scipy's ``_line_for_search``: the steps ``t`` with ``lower <= x + t direction <= upper``,
    over the direction's nonzero entries; ``(0, 0)`` where none lead back inside."""
    moves = direction != 0
    safe = jnp.where(moves, direction, 1.0)
    low, high = (lower - x) / safe, (upper - x) / safe
    forward = direction > 0
    lmin = jnp.max(jnp.where(moves, jnp.where(forward, low, high), -jnp.inf))
    lmax = jnp.min(jnp.where(moves, jnp.where(forward, high, low), jnp.inf))
    inside = lmax >= lmin
    return jnp.where(inside, lmin, 0.0), jnp.where(inside, lmax, 0.0)


def _bracket(line: _Line, tally: _Tally):
    """scipy's ``bracket(f, 0, 1)``: ``(found, xa, xb, xc, fb, tally)``."""
    zero = jnp.zeros((), line.x.dtype)
    fa, tally = line(zero, tally)
    fb, tally = line(zero + 1, tally)
    uphill = fa < fb
    xa, xb = jnp.where(uphill, zero + 1, zero), jnp.where(uphill, zero, zero + 1)
    fa, fb = jnp.where(uphill, fb, fa), jnp.where(uphill, fa, fb)
    xc = xb + _GOLD * (xb - xa)
    fc, tally = line(xc, tally)

    def running(state):
        _, _, _, fb, fc, iteration, done, tally = state[1:]
        return (fc < fb) & ~done & (iteration <= _BRACKET_MAXITER) & ~tally.refused

    def expand(state):
        xa, xb, xc, fa, fb, fc, iteration, _, tally = state
        tmp1 = (xb - xa) * (fb - fc)
        tmp2 = (xb - xc) * (fb - fa)
        val = tmp2 - tmp1
        denom = jnp.where(jnp.abs(val) < _VERY_SMALL, 2.0 * _VERY_SMALL, 2.0 * val)
        w = xb - ((xb - xc) * tmp2 - (xb - xa) * tmp1) / denom
        wlim = xb + _GROW_LIMIT * (xc - xb)
        golden = xc + _GOLD * (xc - xb)
        between = (w - xc) * (xb - w) > 0.0
        at_limit = ~between & ((w - wlim) * (wlim - xc) >= 0.0)
        before_limit = ~between & ~at_limit & ((w - wlim) * (xc - w) > 0.0)
        first = jnp.where(between | before_limit, w, jnp.where(at_limit, wlim, golden))
        f_first, tally = line(first, tally)
        found_low = between & (f_first < fc)
        found_high = between & ~found_low & (f_first > fb)
        between_golden = between & ~found_low & ~found_high
        keeps_going = before_limit & (f_first < fc)
        second = jnp.where(keeps_going, first + _GOLD * (first - xc), golden)
        f_second, tally = jax.lax.cond(
            between_golden | keeps_going,
            lambda point, counted: line(point, counted),
            lambda _, counted: (jnp.array(jnp.inf, zero.dtype), counted),
            second,
            tally,
        )
        # The next triple after the shift (xb, xc, w); a found bracket stops without it.
        uses_second = between_golden | keeps_going
        nb = jnp.where(keeps_going, first, xc)
        fnb = jnp.where(keeps_going, f_first, fc)
        na = jnp.where(keeps_going, xc, xb)
        fna = jnp.where(keeps_going, fc, fb)
        nc = jnp.where(uses_second, second, first)
        fnc = jnp.where(uses_second, f_second, f_first)
        shifted = (na, nb, nc, fna, fnb, fnc)
        low = (xb, first, xc, fb, f_first, fc)
        high = (xa, xb, first, fa, fb, f_first)
        chosen = [
            jnp.where(found_low, lo, jnp.where(found_high, hi, sh))
            for lo, hi, sh in zip(low, high, shifted, strict=True)
        ]
        return (*chosen, iteration + 1, found_low | found_high, tally)

    state = (xa, xb, xc, fa, fb, fc, jnp.array(0), jnp.array(False), tally)
    xa, xb, xc, fa, fb, fc, _, _, tally = jax.lax.while_loop(running, expand, state)
    found = (
        (((fb < fc) & (fb <= fa)) | ((fb < fa) & (fb <= fc)))
        & (((xa < xb) & (xb < xc)) | ((xc < xb) & (xb < xa)))
        & jnp.isfinite(xa)
        & jnp.isfinite(xb)
        & jnp.isfinite(xc)
    )
    return found, xa, xb, xc, fb, tally


def _brent(line: _Line, xtol: jax.Array, tally: _Tally) -> _Tally:
    """scipy's ``Brent.optimize`` from its default bracket; its points land in the tally."""
    found, xa, xb, xc, fb, tally = _bracket(line, tally)

    def running(state):
        x, _, _, _, _, _, a, b, _, _, iteration, tally = state
        tol2 = 2.0 * (xtol * jnp.abs(x) + _BRENT_MIN_TOL)
        xmid = 0.5 * (a + b)
        return (
            (jnp.abs(x - xmid) >= tol2 - 0.5 * (b - a))
            & (iteration < LINE_SEARCH_MAXITER)
            & ~tally.refused
        )

    def iterate(state):
        x, w, v, fx, fw, fv, a, b, deltax, rat, iteration, tally = state
        tol1 = xtol * jnp.abs(x) + _BRENT_MIN_TOL
        tol2 = 2.0 * tol1
        xmid = 0.5 * (a + b)
        golden_delta = jnp.where(x >= xmid, a - x, b - x)
        tmp1 = (x - w) * (fx - fv)
        tmp2 = (x - v) * (fx - fw)
        p = (x - v) * tmp2 - (x - w) * tmp1
        tmp2 = 2.0 * (tmp2 - tmp1)
        p = jnp.where(tmp2 > 0.0, -p, p)
        tmp2 = jnp.abs(tmp2)
        parabolic = (
            (jnp.abs(deltax) > tol1)
            & (p > tmp2 * (a - x))
            & (p < tmp2 * (b - x))
            & (jnp.abs(p) < jnp.abs(0.5 * tmp2 * deltax))
        )
        parabolic_rat = p / jnp.where(parabolic, tmp2, 1.0)
        u = x + parabolic_rat
        near_end = ((u - a) < tol2) | ((b - u) < tol2)
        parabolic_rat = jnp.where(near_end, jnp.where(xmid - x >= 0, tol1, -tol1), parabolic_rat)
        deltax = jnp.where(parabolic, rat, golden_delta)
        rat = jnp.where(parabolic, parabolic_rat, _BRENT_GOLDEN * golden_delta)
        u = jnp.where(jnp.abs(rat) < tol1, jnp.where(rat >= 0, x + tol1, x - tol1), x + rat)
        fu, tally = line(u, tally)
        worse = fu > fx
        a = jnp.where(worse, jnp.where(u < x, u, a), jnp.where(u >= x, x, a))
        b = jnp.where(worse, jnp.where(u < x, b, u), jnp.where(u >= x, b, x))
        second = worse & ((fu <= fw) | (w == x))
        third = worse & ~second & ((fu <= fv) | (v == x) | (v == w))
        new_v = jnp.where(worse, jnp.where(second, w, jnp.where(third, u, v)), w)
        new_fv = jnp.where(worse, jnp.where(second, fw, jnp.where(third, fu, fv)), fw)
        new_w = jnp.where(worse, jnp.where(second, u, w), x)
        new_fw = jnp.where(worse, jnp.where(second, fu, fw), fx)
        new_x, new_fx = jnp.where(worse, x, u), jnp.where(worse, fx, fu)
        return (
            new_x,
            new_w,
            new_v,
            new_fx,
            new_fw,
            new_fv,
            a,
            b,
            deltax,
            rat,
            iteration + 1,
            tally,
        )

    zero = jnp.zeros((), xb.dtype)
    start = (xb, xb, xb, fb, fb, fb, jnp.minimum(xa, xc), jnp.maximum(xa, xc), zero, zero)
    iterations = jnp.where(found, 0, LINE_SEARCH_MAXITER)
    return jax.lax.while_loop(running, iterate, (*start, iterations, tally))[-1]


def _fminbound(line: _Line, lo: jax.Array, hi: jax.Array, xatol, tally: _Tally) -> _Tally:
    """scipy's ``_minimize_scalar_bounded`` on ``[lo, hi]``; its points land in the tally."""
    fulc = lo + _FMINBOUND_GOLDEN * (hi - lo)
    fx, tally = line(fulc, tally)
    zero = jnp.zeros((), fulc.dtype)

    def running(state):
        xf, _, _, _, _, _, a, b, _, _, evaluations, tally = state
        tol2 = 2.0 * (_SQRT_EPS * jnp.abs(xf) + xatol / 3.0)
        return (
            (jnp.abs(xf - 0.5 * (a + b)) > tol2 - 0.5 * (b - a))
            & (evaluations < LINE_SEARCH_MAXITER)
            & ~tally.refused
        )

    def iterate(state):
        xf, nfc, fulc, fx, fnfc, ffulc, a, b, e, rat, evaluations, tally = state
        xm = 0.5 * (a + b)
        tol1 = _SQRT_EPS * jnp.abs(xf) + xatol / 3.0
        tol2 = 2.0 * tol1
        r = (xf - nfc) * (fx - ffulc)
        q = (xf - fulc) * (fx - fnfc)
        p = (xf - fulc) * q - (xf - nfc) * r
        q = 2.0 * (q - r)
        p = jnp.where(q > 0.0, -p, p)
        q = jnp.abs(q)
        parabolic = (
            (jnp.abs(e) > tol1)
            & (jnp.abs(p) < jnp.abs(0.5 * q * e))
            & (p > q * (a - xf))
            & (p < q * (b - xf))
        )
        parabolic_rat = p / jnp.where(parabolic, q, 1.0)
        trial = xf + parabolic_rat
        toward_middle = tol1 * (jnp.sign(xm - xf) + ((xm - xf) == 0))
        near_end = ((trial - a) < tol2) | ((b - trial) < tol2)
        parabolic_rat = jnp.where(near_end, toward_middle, parabolic_rat)
        golden_e = jnp.where(xf >= xm, a - xf, b - xf)
        e = jnp.where(parabolic, rat, golden_e)
        rat = jnp.where(parabolic, parabolic_rat, _FMINBOUND_GOLDEN * golden_e)
        x = xf + (jnp.sign(rat) + (rat == 0)) * jnp.maximum(jnp.abs(rat), tol1)
        fu, tally = line(x, tally)
        lower = fu <= fx
        a = jnp.where(lower, jnp.where(x >= xf, xf, a), jnp.where(x < xf, x, a))
        b = jnp.where(lower, jnp.where(x >= xf, b, xf), jnp.where(x < xf, b, x))
        second = ~lower & ((fu <= fnfc) | (nfc == xf))
        third = ~lower & ~second & ((fu <= ffulc) | (fulc == xf) | (fulc == nfc))
        new_fulc = jnp.where(lower | second, nfc, jnp.where(third, x, fulc))
        new_ffulc = jnp.where(lower | second, fnfc, jnp.where(third, fu, ffulc))
        new_nfc = jnp.where(lower, xf, jnp.where(second, x, nfc))
        new_fnfc = jnp.where(lower, fx, jnp.where(second, fu, fnfc))
        new_xf, new_fx = jnp.where(lower, x, xf), jnp.where(lower, fu, fx)
        return (
            new_xf,
            new_nfc,
            new_fulc,
            new_fx,
            new_fnfc,
            new_ffulc,
            a,
            b,
            e,
            rat,
            evaluations + 1,
            tally,
        )

    start = (fulc, fulc, fulc, fx, fx, fx, lo, hi, zero, zero, jnp.array(1), tally)
    return jax.lax.while_loop(running, iterate, start)[-1]


RUNNING, ENDED = -1, 0
"""The solve's status; once ended, the verdict is read off the state (scipy's ``warnflag``)."""


class _PowellState(eqx.Module):
    x: jax.Array
    fval: jax.Array
    directions: jax.Array
    """``(n, n)``: one search direction per row."""
    previous: jax.Array
    """``x`` at the start of the iteration (scipy's ``x1``)."""
    evaluations: jax.Array
    iterations: jax.Array
    status: jax.Array


class ScipyPowell(optx.AbstractMinimiser):
    """scipy's ``_minimize_powell``; ``lower`` and ``upper`` are the settings' bound tuples."""

    xtol: float
    ftol: float
    max_iterations: int = eqx.field(static=True)
    max_evaluations: int = eqx.field(static=True)
    lower: tuple[float, ...] = eqx.field(static=True)
    upper: tuple[float, ...] = eqx.field(static=True)
    # optimistix reads these off any minimiser; the verdict above replaces them.
    rtol: float
    atol: float
    norm: Callable

    def _line_search(self, value_of, x, direction, fval, evaluations, lower, upper):
        """scipy's ``_linesearch_powell``: ``(fval, step, evaluations, refused)``; the step is 0
        along a zero direction (no evaluation)."""
        lmin, lmax = line_for_search(x, direction, lower, upper)
        unbounded = jnp.isinf(lmin) & jnp.isinf(lmax)
        tangent = ~unbounded & (jnp.isinf(lmin) | jnp.isinf(lmax))
        line = _Line(value_of, x, direction, tangent, self.max_evaluations)
        tally = _Tally(
            evaluations=evaluations,
            best_step=jnp.zeros((), x.dtype),
            best_value=jnp.array(jnp.inf, x.dtype),
            refused=jnp.array(False),
        )
        tol = jnp.asarray(self.xtol * 100.0, x.dtype)
        ends = jnp.where(tangent, jnp.arctan(jnp.stack([lmin, lmax])), jnp.stack([lmin, lmax]))
        tally = jax.lax.cond(
            ~jnp.any(direction != 0),
            lambda: tally._replace(best_value=fval),
            lambda: jax.lax.cond(
                unbounded,
                lambda: _brent(line, tol, tally),
                lambda: _fminbound(line, ends[0], ends[1], tol / 100.0, tally),
            ),
        )
        return tally.best_value, tally.best_step, tally.evaluations, tally.refused

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _PowellState:
        n = y.size
        box_bounds(self.lower, self.upper, n, y.dtype)
        x = jnp.ravel(y)
        allowed = self.max_evaluations > 0
        fval = flat_objective(fn, y, args)(x) if allowed else jnp.array(jnp.nan, y.dtype)
        return _PowellState(
            x=x,
            fval=fval,
            directions=jnp.eye(n, dtype=y.dtype),
            previous=x,
            evaluations=jnp.array(int(allowed)),
            iterations=jnp.array(0),
            status=jnp.array(RUNNING if allowed else ENDED),
        )

    def step(self, fn, y, args, options, state: _PowellState, tags):
        n = y.size
        lower, upper = box_bounds(self.lower, self.upper, n, y.dtype)
        value_of = flat_objective(fn, y, args)

        def along_direction(i, carry):
            x, fval, evaluations, refused, delta, biggest = carry
            f_line, step, counted, refused_now = jax.lax.cond(
                refused,
                lambda: (fval, jnp.zeros((), x.dtype), evaluations, refused),
                lambda: self._line_search(
                    value_of, x, state.directions[i], fval, evaluations, lower, upper
                ),
            )
            decrease = fval - f_line
            moves = ~refused_now
            grows = moves & (decrease > delta)
            return (
                jnp.where(moves, x + step * state.directions[i], x),
                jnp.where(moves, f_line, fval),
                counted,
                refused_now,
                jnp.where(grows, decrease, delta),
                jnp.where(grows, i, biggest),
            )

        fx = state.fval
        zero = jnp.zeros((), y.dtype)
        x, fval, evaluations, refused, delta, biggest = jax.lax.fori_loop(
            0,
            n,
            along_direction,
            (state.x, fx, state.evaluations, jnp.array(False), zero, jnp.array(0)),
        )
        iterations = state.iterations + ~refused
        ends = (
            refused
            | (2.0 * (fx - fval) <= self.ftol * (jnp.abs(fx) + jnp.abs(fval)) + 1e-20)
            | (evaluations >= self.max_evaluations)
            | (iterations >= self.max_iterations)
            | (jnp.isnan(fx) & jnp.isnan(fval))
        )

        def extrapolate(_):
            extrapolated = x - state.previous
            _, lmax = line_for_search(x, extrapolated, lower, upper)
            far = x + jnp.minimum(lmax, 1.0) * extrapolated
            f_far = value_of(far)
            t = 2.0 * (fx + f_far - 2.0 * fval) * (fx - fval - delta) ** 2
            t = t - delta * (fx - f_far) ** 2
            searches = (fx > f_far) & (t < 0.0)
            f_line, step, counted, refused_now = jax.lax.cond(
                searches,
                lambda: self._line_search(
                    value_of, x, extrapolated, fval, evaluations + 1, lower, upper
                ),
                lambda: (fval, zero, evaluations + 1, jnp.array(False)),
            )
            moved = step * extrapolated
            replaces = searches & ~refused_now & jnp.any(moved != 0)
            directions = state.directions
            directions = jnp.where(
                replaces, directions.at[biggest].set(directions[n - 1]), directions
            )
            directions = jnp.where(replaces, directions.at[n - 1].set(moved), directions)
            updates = searches & ~refused_now
            return (
                jnp.where(updates, x + moved, x),
                jnp.where(updates, f_line, fval),
                directions,
                counted,
                refused_now,
            )

        searched = x
        x, fval, directions, evaluations, refused = jax.lax.cond(
            ends,
            lambda _: (x, fval, state.directions, evaluations, refused),
            extrapolate,
            None,
        )
        new_state = _PowellState(
            x=x,
            fval=fval,
            directions=directions,
            previous=searched,
            evaluations=evaluations,
            iterations=iterations,
            status=jnp.where(ends | refused, ENDED, RUNNING),
        )
        return x.reshape(y.shape), new_state, None

    def terminate(self, fn, y, args, options, state: _PowellState, tags):
        lower, upper = box_bounds(self.lower, self.upper, y.size, y.dtype)
        succeeded = (
            jnp.all((lower <= state.x) & (state.x <= upper))
            & (state.evaluations < self.max_evaluations)
            & (state.iterations < self.max_iterations)
            & ~jnp.isnan(state.fval)
            & ~jnp.any(jnp.isnan(state.x))
        )
        # optimistix goes on while the result is successful: so it is, too, while running.
        result = optx.RESULTS.where(
            (state.status == RUNNING) | succeeded,
            optx.RESULTS.successful,
            optx.RESULTS.nonlinear_max_steps_reached,
        )
        return state.status != RUNNING, result

    def postprocess(self, fn, y, aux, args, options, state: _PowellState, tags, result):
        return state.x.reshape(y.shape), aux, {}
