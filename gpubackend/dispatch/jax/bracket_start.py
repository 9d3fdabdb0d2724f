"""What scipy's C bracketing root methods share (``bisect.c``, ``brentq.c``, ``brenth.c``,
``ridder.c``), for their optimistix ports: the start at the bracket's ends and the verdict.

The ports see the equation as scipy does, its signs as given: each method's
steps depend on the signs of ``f`` only through comparisons of them. A
bracket without a sign change, where scipy raises, is the lowering's to
answer (a traced function cannot raise).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx


class Verdict(eqx.Module):
    """Where a bracketing method stands: the point it returns, and whether it stopped there
    converged (an exact zero, or the bracket below the tolerance) or at a NaN value of ``f``
    (``diverged``: scipy's ``root_scalar`` reports no convergence)."""

    root: jax.Array
    converged: jax.Array
    diverged: jax.Array

    def stopped(self, stops, x, converged: bool) -> Verdict:
        """This verdict, or, where it has not stopped yet and ``stops``, stopped at ``x``: scipy
        returns at the first test that passes, so the earliest applied wins."""
        fresh = stops & ~(self.converged | self.diverged)
        return Verdict(
            root=jnp.where(fresh, x, self.root),
            converged=self.converged | (fresh & converged),
            diverged=self.diverged | (fresh & (not converged)),
        )

    def returning(self, x) -> Verdict:
        """This verdict, returning ``x`` unless it has stopped."""
        stopped = self.converged | self.diverged
        return Verdict(jnp.where(stopped, self.root, x), self.converged, self.diverged)


def running(root) -> Verdict:
    """Not stopped: ``root`` is what scipy returns should ``maxiter`` run out here."""
    return Verdict(root=root, converged=jnp.array(False), diverged=jnp.array(False))


def bracket_start(fn, args, options, dtype) -> tuple[Any, Any, Any, Any, Verdict]:
    """``(xa, xb, fa, fb, verdict)``: the bracket ``options["lower"], options["upper"]``, ``f`` at
    its ends, and scipy's stop there: at a NaN value (``xa``'s first), then at a zero. Unstopped,
    the verdict returns ``xa``."""
    xa = jnp.asarray(options["lower"], dtype)
    xb = jnp.asarray(options["upper"], dtype)
    fa, _ = fn(xa, args)
    fb, _ = fn(xb, args)
    verdict = (
        running(xa)
        .stopped(jnp.isnan(fa), xa, converged=False)
        .stopped(jnp.isnan(fb), xb, converged=False)
        .stopped(fa == 0, xa, converged=True)
        .stopped(fb == 0, xb, converged=True)
    )
    return xa, xb, fa, fb, verdict


class BracketRootFinder(optx.AbstractRootFinder):
    """A port of one of scipy's C bracketing methods: each optimistix step is one scipy
    iteration, so optimistix's ``max_steps`` is scipy's ``maxiter``; the state's ``verdict``
    (a `Verdict`) says when it stops and what it returns."""

    def terminate(self, fn, y, args, options, state, tags):
        verdict = state.verdict
        result = optx.RESULTS.where(
            verdict.diverged, optx.RESULTS.nonlinear_divergence, optx.RESULTS.successful
        )
        return verdict.converged | verdict.diverged, result

    def postprocess(self, fn, y, aux, args, options, state, tags, result) -> tuple[Any, Any, dict]:
        return state.verdict.root, aux, {}
