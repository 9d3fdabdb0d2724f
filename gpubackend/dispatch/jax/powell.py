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

from gpubackend.dispatch.jax.bracket import bracket
from gpubackend.dispatch.jax.nelder_mead import box_bounds, flat_objective
from gpubackend.dispatch.jax.scalar_minimize import (
    brent_converged,
    brent_moved,
    brent_points,
    brent_trial,
    fminbound_converged,
    fminbound_moved,
    fminbound_points,
    fminbound_start,
    fminbound_trial,
)

LINE_SEARCH_MAXITER = 500
"""scipy's ``minimize_scalar`` default, which its line searches keep."""


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


def _brent(line: _Line, xtol: jax.Array, tally: _Tally) -> _Tally:
    """scipy's ``Brent.optimize`` from its default bracket; its points land in the tally."""
    zero = jnp.zeros((), line.x.dtype)
    found = bracket(line.__call__, zero, zero + 1, tally, stopped=lambda tally: tally.refused)

    def running(state):
        points, iteration, tally = state
        return ~brent_converged(points, xtol) & (iteration < LINE_SEARCH_MAXITER) & ~tally.refused

    def iterate(state):
        points, iteration, tally = state
        u, points = brent_trial(points, xtol)
        fu, tally = line(u, tally)
        return brent_moved(points, u, fu), iteration + 1, tally

    iterations = jnp.where(found.found, 0, LINE_SEARCH_MAXITER)
    return jax.lax.while_loop(running, iterate, (brent_points(found), iterations, found.counter))[
        -1
    ]


def _fminbound(line: _Line, lo: jax.Array, hi: jax.Array, xatol, tally: _Tally) -> _Tally:
    """scipy's ``_minimize_scalar_bounded`` on ``[lo, hi]``; its points land in the tally."""
    fx, tally = line(fminbound_start(lo, hi), tally)

    def running(state):
        points, evaluations, tally = state
        return (
            ~fminbound_converged(points, xatol)
            & (evaluations < LINE_SEARCH_MAXITER)
            & ~tally.refused
        )

    def iterate(state):
        points, evaluations, tally = state
        x, points = fminbound_trial(points, xatol)
        fu, tally = line(x, tally)
        return fminbound_moved(points, x, fu), evaluations + 1, tally

    start = (fminbound_points(lo, hi, fx), jnp.array(1), tally)
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
