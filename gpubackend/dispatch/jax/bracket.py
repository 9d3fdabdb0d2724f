"""scipy's ``optimize.bracket``: the downhill search for three points around a scalar minimum,
which scipy's Brent and golden-section methods start from (and Powell's line searches).

The objective is evaluated through ``evaluate(x, counter) -> (f, counter)``, so that a caller
can count evaluations against its own budget (`powell` does); ``stopped(counter)`` ends the
search early, as a refused evaluation does there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

_GOLD, _GROW_LIMIT, _VERY_SMALL, _MAX_ITER = 1.618034, 110.0, 1e-21, 1000
"""scipy's ``bracket``."""

Evaluate = Callable[..., tuple[jax.Array, Any]]


class Bracket(NamedTuple):
    """``bracket``'s ``(xa, xb, xc, fa, fb, fc)``, whether they make a valid bracket (scipy raises
    `BracketError` where not), and the evaluator's counter after the search."""

    found: jax.Array
    xa: jax.Array
    xb: jax.Array
    xc: jax.Array
    fa: jax.Array
    fb: jax.Array
    fc: jax.Array
    counter: Any


def bracket(
    evaluate: Evaluate,
    xa: jax.Array,
    xb: jax.Array,
    counter: Any,
    stopped: Callable[[Any], jax.Array] = lambda counter: jnp.array(False),
) -> Bracket:
    """scipy's ``bracket(f, xa, xb)``, step for step."""
    fa, counter = evaluate(xa, counter)
    fb, counter = evaluate(xb, counter)
    uphill = fa < fb
    xa, xb = jnp.where(uphill, xb, xa), jnp.where(uphill, xa, xb)
    fa, fb = jnp.where(uphill, fb, fa), jnp.where(uphill, fa, fb)
    xc = xb + _GOLD * (xb - xa)
    fc, counter = evaluate(xc, counter)

    def running(state):
        _, _, _, _, fb, fc, iteration, done, counter = state
        return (fc < fb) & ~done & (iteration <= _MAX_ITER) & ~stopped(counter)

    def expand(state):
        xa, xb, xc, fa, fb, fc, iteration, _, counter = state
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
        f_first, counter = evaluate(first, counter)
        found_low = between & (f_first < fc)
        found_high = between & ~found_low & (f_first > fb)
        between_golden = between & ~found_low & ~found_high
        keeps_going = before_limit & (f_first < fc)
        second = jnp.where(keeps_going, first + _GOLD * (first - xc), golden)
        f_second, counter = jax.lax.cond(
            between_golden | keeps_going,
            # A plain function: cond takes weak references to its branches.
            lambda point, counted: evaluate(point, counted),
            lambda _, counted: (jnp.array(jnp.inf, xa.dtype), counted),
            second,
            counter,
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
        return (*chosen, iteration + 1, found_low | found_high, counter)

    state = (xa, xb, xc, fa, fb, fc, jnp.array(0), jnp.array(False), counter)
    xa, xb, xc, fa, fb, fc, _, _, counter = jax.lax.while_loop(running, expand, state)
    found = (
        (((fb < fc) & (fb <= fa)) | ((fb < fa) & (fb <= fc)))
        & (((xa < xb) & (xb < xc)) | ((xc < xb) & (xb < xa)))
        & jnp.isfinite(xa)
        & jnp.isfinite(xb)
        & jnp.isfinite(xc)
    )
    return Bracket(found, xa, xb, xc, fa, fb, fc, counter)
