"""scipy's ``minimize_scalar`` methods as optimistix minimisers: ``brent`` (``Brent.optimize``),
``golden`` (``_minimize_scalar_golden``) and ``bounded`` (``_minimize_scalar_bounded``,
fminbound).

``init`` finds the start as scipy does (``bracket``'s downhill search from a 2-point bracket or
``(0, 1)``, a 3-point bracket as given, the golden-section point of ``bounds``); each optimistix
step is one scipy iteration, one evaluation. The solve ends where scipy's loop does, and the
verdict is scipy's ``success``: ``brent`` and ``golden`` fail once ``maxiter`` iterations are
done (converged or not) or where no valid bracket was found (scipy's ``BracketError``, whose
result is the lowest of the three points), ``bounded`` once ``maxiter`` evaluations are spent
(its ``flag`` 1); all three where ``x`` or ``f`` is NaN. An invalid 3-point bracket, which
scipy refuses with a ``ValueError``, fails as an invalid found one does. The iterations
(`brent_trial`/`brent_moved`, `fminbound_trial`/`fminbound_moved`) are also Powell's line
searches (`powell`). The Numba solvers (`gpubackend.solvers.brent_minimize`, `golden`,
`bounded_minimize`) are the same ports in loops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from gpubackend.dispatch.jax.bracket import Bracket, bracket

_BRENT_MIN_TOL, _BRENT_GOLDEN = 1.0e-11, 0.3819660
"""scipy's ``Brent``."""
_SQRT_EPS, _FMINBOUND_GOLDEN = 1.4832396974191326e-08, 0.3819660112501051
"""scipy's ``_minimize_scalar_bounded`` (``sqrt(2.2e-16)`` and ``(3 - sqrt(5)) / 2``)."""
_GOLDEN_RATIO = 0.61803399
"""scipy's ``_minimize_scalar_golden`` (``_gR``)."""


def _parabola(x, w, v, fx, fw, fv) -> tuple[jax.Array, jax.Array]:
    """The parabolic step through the three best points as scipy's Brent and fminbound write it:
    ``(p, q)`` with the step ``p / q``, ``q >= 0``."""
    tmp1 = (x - w) * (fx - fv)
    tmp2 = (x - v) * (fx - fw)
    p = (x - v) * tmp2 - (x - w) * tmp1
    q = 2.0 * (tmp2 - tmp1)
    return jnp.where(q > 0.0, -p, p), jnp.abs(q)


class BrentPoints(eqx.Module):
    """scipy's ``Brent``: the best point ``x``, the second and third best ``w``, ``v``, their
    values, the interval ``[a, b]`` and the last two steps ``deltax``, ``rat``."""

    x: jax.Array
    w: jax.Array
    v: jax.Array
    fx: jax.Array
    fw: jax.Array
    fv: jax.Array
    a: jax.Array
    b: jax.Array
    deltax: jax.Array
    rat: jax.Array


def brent_points(found: Bracket) -> BrentPoints:
    """Brent's start from ``bracket``'s three points."""
    zero = jnp.zeros_like(found.xb)
    return BrentPoints(
        x=found.xb,
        w=found.xb,
        v=found.xb,
        fx=found.fb,
        fw=found.fb,
        fv=found.fb,
        a=jnp.minimum(found.xa, found.xc),
        b=jnp.maximum(found.xa, found.xc),
        deltax=zero,
        rat=zero,
    )


def brent_converged(points: BrentPoints, xtol) -> jax.Array:
    tol2 = 2.0 * (xtol * jnp.abs(points.x) + _BRENT_MIN_TOL)
    return jnp.abs(points.x - 0.5 * (points.a + points.b)) < tol2 - 0.5 * (points.b - points.a)


def brent_trial(points: BrentPoints, xtol) -> tuple[jax.Array, BrentPoints]:
    """The point Brent's iteration evaluates, and the points with its steps."""
    x, w, v, a, b = (points.x, points.w, points.v, points.a, points.b)
    fx, fw, fv = points.fx, points.fw, points.fv
    tol1 = xtol * jnp.abs(x) + _BRENT_MIN_TOL
    tol2 = 2.0 * tol1
    xmid = 0.5 * (a + b)
    golden_delta = jnp.where(x >= xmid, a - x, b - x)
    p, tmp2 = _parabola(x, w, v, fx, fw, fv)
    parabolic = (
        (jnp.abs(points.deltax) > tol1)
        & (p > tmp2 * (a - x))
        & (p < tmp2 * (b - x))
        & (jnp.abs(p) < jnp.abs(0.5 * tmp2 * points.deltax))
    )
    parabolic_rat = p / jnp.where(parabolic, tmp2, 1.0)
    u = x + parabolic_rat
    near_end = ((u - a) < tol2) | ((b - u) < tol2)
    parabolic_rat = jnp.where(near_end, jnp.where(xmid - x >= 0, tol1, -tol1), parabolic_rat)
    deltax = jnp.where(parabolic, points.rat, golden_delta)
    rat = jnp.where(parabolic, parabolic_rat, _BRENT_GOLDEN * golden_delta)
    u = jnp.where(jnp.abs(rat) < tol1, jnp.where(rat >= 0, x + tol1, x - tol1), x + rat)
    return u, eqx.tree_at(lambda s: (s.deltax, s.rat), points, (deltax, rat))


def brent_moved(points: BrentPoints, u, fu) -> BrentPoints:
    """The points after ``f(u) = fu``."""
    x, w, v, a, b = (points.x, points.w, points.v, points.a, points.b)
    fx, fw, fv = points.fx, points.fw, points.fv
    worse = fu > fx
    second = worse & ((fu <= fw) | (w == x))
    third = worse & ~second & ((fu <= fv) | (v == x) | (v == w))
    return BrentPoints(
        x=jnp.where(worse, x, u),
        w=jnp.where(worse, jnp.where(second, u, w), x),
        v=jnp.where(worse, jnp.where(second, w, jnp.where(third, u, v)), w),
        fx=jnp.where(worse, fx, fu),
        fw=jnp.where(worse, jnp.where(second, fu, fw), fx),
        fv=jnp.where(worse, jnp.where(second, fw, jnp.where(third, fu, fv)), fw),
        a=jnp.where(worse, jnp.where(u < x, u, a), jnp.where(u >= x, x, a)),
        b=jnp.where(worse, jnp.where(u < x, b, u), jnp.where(u >= x, b, x)),
        deltax=points.deltax,
        rat=points.rat,
    )


class FminboundPoints(eqx.Module):
    """scipy's ``_minimize_scalar_bounded``: the best point ``xf``, the second and third best
    ``nfc``, ``fulc``, their values, the interval ``[a, b]`` and the last two steps ``e``,
    ``rat``."""

    xf: jax.Array
    nfc: jax.Array
    fulc: jax.Array
    fx: jax.Array
    fnfc: jax.Array
    ffulc: jax.Array
    a: jax.Array
    b: jax.Array
    e: jax.Array
    rat: jax.Array


def fminbound_start(lower, upper) -> jax.Array:
    """The point fminbound evaluates first."""
    return lower + _FMINBOUND_GOLDEN * (upper - lower)


def fminbound_points(lower, upper, fx) -> FminboundPoints:
    """fminbound's start on ``[lower, upper]``, ``fx`` the value at `fminbound_start`."""
    start = fminbound_start(lower, upper)
    zero = jnp.zeros_like(start)
    return FminboundPoints(start, start, start, fx, fx, fx, lower, upper, zero, zero)


def _fminbound_tol1(points: FminboundPoints, xatol) -> jax.Array:
    return _SQRT_EPS * jnp.abs(points.xf) + xatol / 3.0


def fminbound_converged(points: FminboundPoints, xatol) -> jax.Array:
    tol2 = 2.0 * _fminbound_tol1(points, xatol)
    xm = 0.5 * (points.a + points.b)
    return jnp.abs(points.xf - xm) <= tol2 - 0.5 * (points.b - points.a)


def fminbound_trial(points: FminboundPoints, xatol) -> tuple[jax.Array, FminboundPoints]:
    """The point fminbound's iteration evaluates, and the points with its steps."""
    xf, nfc, fulc, a, b = (points.xf, points.nfc, points.fulc, points.a, points.b)
    fx, fnfc, ffulc = points.fx, points.fnfc, points.ffulc
    xm = 0.5 * (a + b)
    tol1 = _fminbound_tol1(points, xatol)
    tol2 = 2.0 * tol1
    p, q = _parabola(xf, nfc, fulc, fx, fnfc, ffulc)
    parabolic = (
        (jnp.abs(points.e) > tol1)
        & (jnp.abs(p) < jnp.abs(0.5 * q * points.e))
        & (p > q * (a - xf))
        & (p < q * (b - xf))
    )
    parabolic_rat = p / jnp.where(parabolic, q, 1.0)
    trial = xf + parabolic_rat
    toward_middle = tol1 * (jnp.sign(xm - xf) + ((xm - xf) == 0))
    near_end = ((trial - a) < tol2) | ((b - trial) < tol2)
    parabolic_rat = jnp.where(near_end, toward_middle, parabolic_rat)
    golden_e = jnp.where(xf >= xm, a - xf, b - xf)
    e = jnp.where(parabolic, points.rat, golden_e)
    rat = jnp.where(parabolic, parabolic_rat, _FMINBOUND_GOLDEN * golden_e)
    x = xf + (jnp.sign(rat) + (rat == 0)) * jnp.maximum(jnp.abs(rat), tol1)
    return x, eqx.tree_at(lambda s: (s.e, s.rat), points, (e, rat))


def fminbound_moved(points: FminboundPoints, x, fu) -> FminboundPoints:
    """The points after ``f(x) = fu``."""
    xf, nfc, fulc, a, b = (points.xf, points.nfc, points.fulc, points.a, points.b)
    fx, fnfc, ffulc = points.fx, points.fnfc, points.ffulc
    lower = fu <= fx
    second = ~lower & ((fu <= fnfc) | (nfc == xf))
    third = ~lower & ~second & ((fu <= ffulc) | (fulc == xf) | (fulc == nfc))
    return FminboundPoints(
        xf=jnp.where(lower, x, xf),
        nfc=jnp.where(lower, xf, jnp.where(second, x, nfc)),
        fulc=jnp.where(lower | second, nfc, jnp.where(third, x, fulc)),
        fx=jnp.where(lower, fu, fx),
        fnfc=jnp.where(lower, fx, jnp.where(second, fu, fnfc)),
        ffulc=jnp.where(lower | second, fnfc, jnp.where(third, fu, ffulc)),
        a=jnp.where(lower, jnp.where(x >= xf, xf, a), jnp.where(x < xf, x, a)),
        b=jnp.where(lower, jnp.where(x >= xf, b, xf), jnp.where(x < xf, b, x)),
        e=points.e,
        rat=points.rat,
    )


class GoldenPoints(eqx.Module):
    """scipy's ``_minimize_scalar_golden``: the outer points ``x0``, ``x3`` and the inner ``x1``,
    ``x2`` with their values."""

    x0: jax.Array
    x1: jax.Array
    x2: jax.Array
    x3: jax.Array
    f1: jax.Array
    f2: jax.Array


def _evaluated(fn, args) -> Callable[[jax.Array, Any], tuple[jax.Array, Any]]:
    """``fn`` as `bracket`'s evaluator, counting nothing."""
    return lambda x, counter: (fn(x, args)[0], counter)


def _bracketed(fn, args, options, dtype) -> Bracket:
    """scipy's start of ``brent`` and ``golden``: ``options["bracket"]`` holds 0, 2 or 3 points."""
    points = jnp.asarray(options["bracket"], dtype)
    if points.shape[0] != 3:
        start = points if points.shape[0] == 2 else jnp.array([0.0, 1.0], dtype)
        return bracket(_evaluated(fn, args), start[0], start[1], None)
    xa, xb, xc = jnp.minimum(points[0], points[2]), points[1], jnp.maximum(points[0], points[2])
    fa, fb, fc = (fn(x, args)[0] for x in (xa, xb, xc))
    found = (xa < xb) & (xb < xc) & (fb < fa) & (fb < fc)
    return Bracket(found, xa, xb, xc, fa, fb, fc, None)


def _lowest(found: Bracket) -> jax.Array:
    """scipy's result where no valid bracket was found: the lowest of the three points, NaN where
    any point or value is NaN."""
    xs = jnp.stack([found.xa, found.xb, found.xc])
    fs = jnp.stack([found.fa, found.fb, found.fc])
    nan = jnp.any(jnp.isnan(xs)) | jnp.any(jnp.isnan(fs))
    return jnp.where(nan, jnp.nan, xs[jnp.argmin(fs)])


class _ScalarState(eqx.Module):
    points: Any
    """The method's points (`BrentPoints`, `GoldenPoints`, `FminboundPoints`)."""
    iterations: jax.Array
    """Iterations (``brent``, ``golden``) or evaluations (``bounded``) so far."""
    ended: jax.Array
    failed: jax.Array
    """Whether scipy's verdict is already known to be failure (no bracket, budget spent)."""
    last: jax.Array
    """The value at the last point evaluated (``bounded`` reads it for NaN)."""


def _verdict(state: _ScalarState, x, fx):
    """optimistix's result: successful while running, and after where scipy's ``success`` is."""
    succeeded = ~state.failed & ~jnp.isnan(x) & ~jnp.isnan(fx) & ~jnp.isnan(state.last)
    return optx.RESULTS.where(
        ~state.ended | succeeded, optx.RESULTS.successful, optx.RESULTS.nonlinear_max_steps_reached
    )


class _BracketedMinimiser(optx.AbstractMinimiser):
    """``brent`` and ``golden``: scipy's loop of at most ``maxiter`` iterations from a bracket
    (``options["bracket"]``, 0, 2 or 3 points)."""

    xtol: float
    maxiter: int = eqx.field(static=True)
    # optimistix reads these off any minimiser; the verdict above replaces them.
    rtol: float
    atol: float
    norm: Callable

    def _start(self, found: Bracket, fn, args) -> Any:
        raise NotImplementedError

    def _converged(self, points) -> jax.Array:
        raise NotImplementedError

    def _iterated(self, points, fn, args) -> Any:
        raise NotImplementedError

    def _best(self, points) -> tuple[jax.Array, jax.Array]:
        raise NotImplementedError

    def _state(self, points, iterations, failed) -> _ScalarState:
        ended = failed | self._converged(points) | (iterations >= self.maxiter)
        zero = jnp.zeros_like(self._best(points)[1])
        return _ScalarState(points, iterations, ended, failed | (iterations >= self.maxiter), zero)

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _ScalarState:
        found = _bracketed(fn, args, options, f_struct.dtype)
        points = self._start(found, fn, args)
        # Where no bracket was found scipy raises before its loop: the result is the lowest point.
        lowest = _lowest(found)
        points = jax.tree_util.tree_map(lambda p: jnp.where(found.found, p, lowest), points)
        return self._state(points, jnp.array(0), ~found.found)

    def step(self, fn, y, args, options, state: _ScalarState, tags):
        points = self._iterated(state.points, fn, args)
        state = self._state(points, state.iterations + 1, state.failed)
        return self._best(points)[0], state, None

    def terminate(self, fn, y, args, options, state: _ScalarState, tags):
        return state.ended, _verdict(state, *self._best(state.points))

    def postprocess(self, fn, y, aux, args, options, state, tags, result) -> tuple[Any, Any, dict]:
        return self._best(state.points)[0], aux, {}


class ScipyBrent(_BracketedMinimiser):
    """scipy's ``minimize_scalar(method="brent")``."""

    def _start(self, found, fn, args) -> BrentPoints:
        return brent_points(found)

    def _converged(self, points: BrentPoints) -> jax.Array:
        return brent_converged(points, self.xtol)

    def _iterated(self, points: BrentPoints, fn, args) -> BrentPoints:
        u, points = brent_trial(points, self.xtol)
        return brent_moved(points, u, fn(u, args)[0])

    def _best(self, points: BrentPoints) -> tuple[jax.Array, jax.Array]:
        return points.x, points.fx


class ScipyGolden(_BracketedMinimiser):
    """scipy's ``minimize_scalar(method="golden")``."""

    def _start(self, found, fn, args) -> GoldenPoints:
        xa, xb, xc = found.xa, found.xb, found.xc
        right = jnp.abs(xc - xb) > jnp.abs(xb - xa)
        x1 = jnp.where(right, xb, xb - (1 - _GOLDEN_RATIO) * (xb - xa))
        x2 = jnp.where(right, xb + (1 - _GOLDEN_RATIO) * (xc - xb), xb)
        return GoldenPoints(xa, x1, x2, xc, fn(x1, args)[0], fn(x2, args)[0])

    def _converged(self, points: GoldenPoints) -> jax.Array:
        width = jnp.abs(points.x3 - points.x0)
        return width <= self.xtol * (jnp.abs(points.x1) + jnp.abs(points.x2))

    def _iterated(self, points: GoldenPoints, fn, args) -> GoldenPoints:
        x0, x1, x2, x3 = points.x0, points.x1, points.x2, points.x3
        right = points.f2 < points.f1
        trial = jnp.where(
            right,
            _GOLDEN_RATIO * x2 + (1 - _GOLDEN_RATIO) * x3,
            _GOLDEN_RATIO * x1 + (1 - _GOLDEN_RATIO) * x0,
        )
        f_trial = fn(trial, args)[0]
        return GoldenPoints(
            x0=jnp.where(right, x1, x0),
            x1=jnp.where(right, x2, trial),
            x2=jnp.where(right, trial, x1),
            x3=jnp.where(right, x3, x2),
            f1=jnp.where(right, points.f2, f_trial),
            f2=jnp.where(right, f_trial, points.f1),
        )

    def _best(self, points: GoldenPoints) -> tuple[jax.Array, jax.Array]:
        first = points.f1 < points.f2
        return jnp.where(first, points.x1, points.x2), jnp.where(first, points.f1, points.f2)


class ScipyBounded(optx.AbstractMinimiser):
    """scipy's ``minimize_scalar(method="bounded")`` on ``options["bounds"]``; ``maxiter`` counts
    evaluations (fminbound's ``maxfun``)."""

    xatol: float
    maxiter: int = eqx.field(static=True)
    # optimistix reads these off any minimiser; the verdict above replaces them.
    rtol: float
    atol: float
    norm: Callable

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _ScalarState:
        lower, upper = (jnp.asarray(end, f_struct.dtype) for end in options["bounds"])
        fx = fn(fminbound_start(lower, upper), args)[0]
        points = fminbound_points(lower, upper, fx)
        # scipy refuses bounds that are not finite and ordered (ValueError): NaN, and failure.
        valid = jnp.isfinite(lower) & jnp.isfinite(upper) & (lower <= upper)
        points = jax.tree_util.tree_map(lambda p: jnp.where(valid, p, jnp.nan), points)
        # The budget is read after an iteration only: scipy iterates once even where maxfun is 1.
        ended = ~valid | fminbound_converged(points, self.xatol)
        inf = jnp.array(jnp.inf, fx.dtype)
        return _ScalarState(points, jnp.array(1), ended, ~valid, inf)

    def step(self, fn, y, args, options, state: _ScalarState, tags):
        x, points = fminbound_trial(state.points, self.xatol)
        fu = fn(x, args)[0]
        points = fminbound_moved(points, x, fu)
        evaluations = state.iterations + 1
        spent = evaluations >= self.maxiter
        ended = spent | fminbound_converged(points, self.xatol)
        return points.xf, _ScalarState(points, evaluations, ended, spent, fu), None

    def terminate(self, fn, y, args, options, state: _ScalarState, tags):
        return state.ended, _verdict(state, state.points.xf, state.points.fx)

    def postprocess(self, fn, y, aux, args, options, state, tags, result) -> tuple[Any, Any, dict]:
        return state.points.xf, aux, {}
