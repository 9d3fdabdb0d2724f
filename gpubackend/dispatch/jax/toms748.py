"""Alefeld, Potra and Shi's Algorithm 748 as an optimistix root finder: scipy's
``root_scalar(method="toms748")`` (``TOMS748Solver`` with ``k=1``, what ``root_scalar`` passes).

``init`` evaluates the bracket's ends and takes scipy's first (secant) step,
which scipy counts as its first iteration; each optimistix step is one further
scipy iteration: an inverse cubic interpolation step (Newton steps on the
quadratic through three points where the values are too close), a double-length
secant step from the endpoint with the smaller value, and a bisection where the
bracket did not halve. Converged once ``|a - b| <= xtol + rtol |b|`` (the root is
then the midpoint) or at an exact zero of ``f``. The Numba solver
(`gpubackend.solvers.toms748`) is the same port.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

_MU = 0.5


class _Toms748State(eqx.Module):
    a: jax.Array
    b: jax.Array
    fa: jax.Array
    fb: jax.Array
    d: jax.Array
    """The point the last update dropped from the bracket, and ``e`` the one before."""
    fd: jax.Array
    e: jax.Array
    fe: jax.Array
    has_e: jax.Array
    root: jax.Array
    """The midpoint of the bracket, or the exact zero once one is found (``found``)."""
    found: jax.Array


def _bracketed(a, b, fa, fb, d, fd, e, fe, has_e: bool) -> _Toms748State:
    """The state around ``[a, b]``, no zero found yet: the root is the midpoint."""
    return _Toms748State(
        a=a,
        b=b,
        fa=fa,
        fb=fb,
        d=d,
        fd=fd,
        e=e,
        fe=fe,
        has_e=jnp.array(has_e),
        root=(a + b) / 2,
        found=jnp.array(False),
    )


def _rebracketed(a, b, fa, fb, c, fc):
    """scipy's ``_update_bracket``: ``(a, b, fa, fb, dropped, f(dropped))``."""
    replaces_a = jnp.sign(fa) * jnp.sign(fc) > 0
    dropped, f_dropped = jnp.where(replaces_a, a, b), jnp.where(replaces_a, fa, fb)
    a, fa = jnp.where(replaces_a, c, a), jnp.where(replaces_a, fc, fa)
    b, fb = jnp.where(replaces_a, b, c), jnp.where(replaces_a, fb, fc)
    return a, b, fa, fb, dropped, f_dropped


def _distinct(values, eps):
    """scipy's ``_notclose``: all nonzero, finite and pairwise further apart than ``32 eps``."""
    ok = jnp.array(True)
    for i, value in enumerate(values):
        ok &= (value != 0) & jnp.isfinite(value)
        for other in values[i + 1 :]:
            ok &= jnp.abs(value - other) > 32 * eps
    return ok


def _inverse_cubic_zero(xs, ys):
    """The inverse cubic through the four points at 0, by Neville's scheme (scipy's
    ``_interpolated_poly``)."""
    q = [[x] for x in xs]
    p = [[x] for x in xs]
    for k in range(1, 4):
        for i in range(k, 4):
            alpha = p[i][k - 1] - q[i - 1][k - 1]
            difference = ys[i - k] - ys[i]
            q[i].append(ys[i] / difference * alpha)
            p[i].append(ys[i - k] / difference * alpha)
    return ((q[3][1] + q[3][2]) + q[3][3]) + q[3][0]


def _newton_quadratic(a, b, fa, fb, d, fd, steps: int):
    """``steps`` Newton steps on the quadratic through ``(a, b, d)`` (scipy's
    ``_newton_quadratic``)."""
    slope = (fb - fa) / (b - a)
    curvature = ((fd - fb) / (d - b) - slope) / (d - a)
    middle = (a + b) / 2
    r = jnp.where(jnp.sign(curvature) * jnp.sign(fa) > 0, a, b)
    stopped = jnp.array(False)
    for _ in range(steps):
        quadratic = (curvature * (r - b) + slope) * (r - a) + fa
        r1 = r - quadratic / (slope + curvature * (2 * r - a - b))
        inside = (a < r1) & (r1 < b)
        fallback = jnp.where((a < r) & (r < b), r, middle)
        r = jnp.where(stopped, r, jnp.where(inside, r1, fallback))
        stopped |= ~inside
    return jnp.where(curvature == 0, a - fa / slope, r)


class Toms748(optx.AbstractRootFinder):
    """scipy's TOMS 748 (``k=1``) on a bracket given as ``options["lower"]``,
    ``options["upper"]``."""

    # optimistix reads these off any root finder: scipy's xtol and rtol.
    rtol: float
    atol: float
    norm: Callable = optx.max_norm

    def _with_root(self, state: _Toms748State, c, fc) -> _Toms748State:
        """``state`` after ``f(c) = fc`` at an exact zero: converged there."""
        found = fc == 0
        return eqx.tree_at(
            lambda s: (s.root, s.found),
            state,
            (jnp.where(found, c, state.root), state.found | found),
        )

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _Toms748State:
        a = jnp.asarray(options["lower"], f_struct.dtype)
        b = jnp.asarray(options["upper"], f_struct.dtype)
        fa, _ = fn(a, args)
        fb, _ = fn(b, args)
        # The first step has two points only: a secant step.
        lower_smaller = jnp.abs(fb) > jnp.abs(fa)
        secant = jnp.where(
            lower_smaller, (-fa / fb * b + a) / (1 - fa / fb), (-fb / fa * a + b) / (1 - fb / fa)
        )
        c = jnp.where((fa != fb) & (a < secant) & (secant < b), secant, (a + b) / 2)
        fc, _ = fn(c, args)
        next_a, next_b, next_fa, next_fb, d, fd = _rebracketed(a, b, fa, fb, c, fc)
        nan = jnp.full_like(a, jnp.nan)
        state = _bracketed(next_a, next_b, next_fa, next_fb, d, fd, nan, nan, has_e=False)
        state = self._with_root(state, c, fc)
        state = self._with_root(state, b, fb)
        return self._with_root(state, a, fa)

    def step(self, fn, y, args, options, state: _Toms748State, tags):
        eps = jnp.finfo(state.a.dtype).eps
        a, b, fa, fb, d, fd = state.a, state.b, state.fa, state.fb, state.d, state.fd
        width = b - a

        interpolated = _inverse_cubic_zero((a, b, d, state.e), (fa, fb, fd, state.fe))
        interpolates = (
            state.has_e
            & _distinct((fa, fb, fd, state.fe), eps)
            & (a < interpolated)
            & (interpolated < b)
        )
        c = jnp.where(interpolates, interpolated, _newton_quadratic(a, b, fa, fb, d, fd, 2))
        fc, _ = fn(c, args)
        first_zero = (c, fc)
        e, fe = d, fd
        a, b, fa, fb, d, fd = _rebracketed(a, b, fa, fb, c, fc)

        # A double-length secant step from the endpoint with the smaller value.
        lower_smaller = jnp.abs(fa) < jnp.abs(fb)
        u, fu = jnp.where(lower_smaller, a, b), jnp.where(lower_smaller, fa, fb)
        other, f_other = jnp.where(lower_smaller, b, a), jnp.where(lower_smaller, fb, fa)
        middle = (a + b) / 2
        c = u - 2 * fu / ((fb - fa) / (b - a))
        towards = jnp.where(lower_smaller, 1.0, -1.0).astype(a.dtype)
        nudged = jnp.where(
            jnp.frexp(fu)[1] < jnp.frexp(f_other)[1] - 50,
            (31 * u + other) / 32,
            u + (towards * jnp.abs(c) * self.rtol + towards * self.atol),
        )
        nudged = jnp.where((a < nudged) & (nudged < b), nudged, middle)
        c = jnp.where(
            jnp.abs(c - u) > 0.5 * (b - a),
            middle,
            jnp.where(jnp.abs(c - u) <= eps * jnp.abs(u), nudged, c),
        )
        fc, _ = fn(c, args)
        second_zero = (c, fc)
        e, fe = d, fd
        a, b, fa, fb, d, fd = _rebracketed(a, b, fa, fb, c, fc)

        # Bisect where the bracket did not halve.
        bisects = b - a > _MU * width
        z = (a + b) / 2
        fz, _ = fn(z, args)
        bisected = _rebracketed(a, b, fa, fb, z, fz)
        e, fe = jnp.where(bisects, d, e), jnp.where(bisects, fd, fe)
        a, b, fa, fb, d, fd = (
            jnp.where(bisects, new, old)
            for new, old in zip(bisected, (a, b, fa, fb, d, fd), strict=True)
        )

        new_state = _bracketed(a, b, fa, fb, d, fd, e, fe, has_e=True)
        new_state = self._with_root(new_state, z, jnp.where(bisects, fz, 1.0))
        new_state = self._with_root(new_state, *second_zero)
        new_state = self._with_root(new_state, *first_zero)
        # The earliest zero wins (applied last); one found before this step freezes the state.
        new_state = jax.tree_util.tree_map(
            lambda old, new: jnp.where(state.found, old, new), state, new_state
        )
        return new_state.root, new_state, None

    def terminate(self, fn, y, args, options, state: _Toms748State, tags):
        converged = jnp.abs(state.a - state.b) <= self.atol + self.rtol * jnp.abs(state.b)
        return state.found | converged, optx.RESULTS.successful

    def postprocess(self, fn, y, aux, args, options, state, tags, result) -> tuple[Any, Any, dict]:
        return state.root, aux, {}
