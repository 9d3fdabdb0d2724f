"""scipy's line-search Newton-CG (``_minimize_newtoncg``) as an optimistix minimiser.

Each optimistix step is one scipy iteration: the Newton system ``H p = -g``
solved by truncated conjugate gradients (forcing term
``min(0.5, sqrt(|g|_1)) |g|_1``, stopped at negative or vanishing curvature,
a steepest-descent step where the first direction already curves down), then
scipy's line search (`wolfe_search.line_search_wolfe12`: Moré-Thuente, the
strong-Wolfe search where it fails). The verdicts are scipy's ``warnflag``:
converged once the 1-norm of an update is at most ``n * xtol`` (scipy's
``xtol`` is an average over the ``n`` variables, as in the Numba solver), out
of iterations after ``maxiter`` of them, failed where the line search finds no
step ("precision loss"), where conjugate gradients run out of their ``20 n``
iterations, or where the last value or update is NaN.

The derivatives are the op's own, as scipy is given them: its gradient output
(`GRADIENT_OPTION`), and its Hessian output where the op has one
(``hess=True``, the option `trust_region.DERIVATIVES_OPTION`). Without the
Hessian, scipy multiplies by it through finite differences of the gradient
(``approx_fhess_p``, a step of ``sqrt(eps)``); here the products are forward-mode
derivatives (``jax.linearize``) of the op's gradient graph, exact to rounding,
so the conjugate-gradient directions, and the iterates, can differ from scipy's
in the digits the finite differences get wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from gpubackend.dispatch.jax.trust_region import (
    CONVERGED,
    DERIVATIVES_OPTION,
    OUT_OF_ITERATIONS,
    RUNNING,
    scipy_verdict,
)
from gpubackend.dispatch.jax.wolfe_search import ValueAndGradient, line_search_wolfe12

GRADIENT_OPTION = "value_gradient"
"""optimistix option: ``(y, args) -> (f, grad)``, the objective's own gradient."""

NO_STEP, CONJUGATE_GRADIENTS_FAILED = 2, 3
"""scipy's ``warnflag`` where the line search fails, and where CG runs out or a NaN appears."""

# scipy's test of vanishing curvature uses float64's epsilon, whatever the dtype.
_CURVATURE_FLOOR = 3 * float(np.finfo(np.float64).eps)
# The step bounds scipy's Newton-CG leaves its Moré-Thuente search (line_search_wolfe1's defaults).
_STEP_MIN, _STEP_MAX = 1e-8, 50.0

HessianProduct = Callable[[jax.Array], jax.Array]


def flat_value_gradient(y, args, options) -> ValueAndGradient:
    """``x -> (f, grad)`` on the flat iterate, from the op's own gradient (`GRADIENT_OPTION`)."""
    own = options[GRADIENT_OPTION]

    def flat(x):
        f, gradient = own(x.reshape(y.shape).astype(y.dtype), args)
        return jnp.asarray(f, y.dtype), jnp.reshape(gradient, (y.size,)).astype(y.dtype)

    return flat


class _ConjugateGradients(NamedTuple):
    step: jax.Array
    residual: jax.Array
    direction: jax.Array
    dri0: jax.Array
    iteration: jax.Array
    stopped: jax.Array


def truncated_cg(hessian_product: HessianProduct, gradient) -> tuple[jax.Array, jax.Array]:
    """``(stopped, p)``: scipy's inexact solution of ``H p = -g``; ``stopped`` is False where its
    ``20 n`` iterations ran out."""
    size = jnp.sum(jnp.abs(gradient))
    forcing = jnp.minimum(0.5, jnp.sqrt(size)) * size
    start = _ConjugateGradients(
        step=jnp.zeros_like(gradient),
        residual=gradient,
        direction=-gradient,
        dri0=jnp.dot(gradient, gradient),
        iteration=jnp.array(0),
        stopped=jnp.array(False),
    )

    def running(s: _ConjugateGradients):
        return ~s.stopped & (s.iteration < 20 * gradient.shape[0])

    def iterated(s: _ConjugateGradients):
        small = jnp.sum(jnp.abs(s.residual)) <= forcing
        hp = hessian_product(s.direction)
        curvature = jnp.dot(s.direction, hp)
        flat = (curvature >= 0.0) & (curvature <= _CURVATURE_FLOOR)
        negative = curvature < 0.0
        stop = small | flat | negative
        # Negative curvature at once: a scaled steepest-descent step.
        steepest = ~small & negative & (s.iteration == 0)
        alpha = s.dri0 / curvature
        residual = s.residual + alpha * hp
        dri1 = jnp.dot(residual, residual)
        stopped_step = jnp.where(steepest, (s.dri0 / -curvature) * -gradient, s.step)
        return _ConjugateGradients(
            step=jnp.where(stop, stopped_step, s.step + alpha * s.direction),
            residual=jnp.where(stop, s.residual, residual),
            direction=jnp.where(stop, s.direction, -residual + (dri1 / s.dri0) * s.direction),
            dri0=jnp.where(stop, s.dri0, dri1),
            iteration=s.iteration + 1,
            stopped=stop,
        )

    end = jax.lax.while_loop(running, iterated, start)
    return end.stopped, end.step


class _NewtonCGState(eqx.Module):
    previous_f: jax.Array
    """The objective at the previous iterate (NaN before the first step): the line search's first
    trial extrapolates the last decrease."""
    iterations: jax.Array
    status: jax.Array


class ScipyNewtonCG(optx.AbstractMinimiser):
    """scipy's ``_minimize_newtoncg`` on the op's own gradient (and Hessian, where it has one)."""

    xtol: float
    c1: float
    c2: float
    # optimistix reads these off any minimiser; scipy's verdicts replace them.
    rtol: float
    atol: float
    norm: Callable
    max_iterations: int = eqx.field(static=True)

    def _curvature(self, y, args, options) -> tuple[jax.Array, jax.Array, HessianProduct]:
        """The value, the gradient and the Hessian's product with a vector, at the flat ``y``."""
        flat_y = jnp.reshape(y, (y.size,))
        if DERIVATIVES_OPTION in options:
            f, gradient, hessian = options[DERIVATIVES_OPTION](y, args)
            hessian = jnp.reshape(hessian, (y.size, y.size)).astype(y.dtype)
            f = jnp.asarray(f, y.dtype)
            return f, jnp.reshape(gradient, (y.size,)).astype(y.dtype), lambda p: hessian @ p
        value_gradient = flat_value_gradient(y, args, options)
        f, _ = value_gradient(flat_y)
        gradient, hessian_product = jax.linearize(lambda x: value_gradient(x)[1], flat_y)
        return f, gradient, hessian_product

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _NewtonCGState:
        # scipy checks its budget before the first iteration: maxiter=0 ends at x0, failed.
        status = OUT_OF_ITERATIONS if self.max_iterations <= 0 else RUNNING
        return _NewtonCGState(
            previous_f=jnp.array(jnp.nan, y.dtype),
            iterations=jnp.array(0),
            status=jnp.array(status),
        )

    def step(self, fn, y, args, options, state: _NewtonCGState, tags):
        flat_y = jnp.reshape(y, (y.size,))
        f, gradient, hessian_product = self._curvature(y, args, options)
        solved, direction = truncated_cg(hessian_product, gradient)
        search = line_search_wolfe12(
            flat_value_gradient(y, args, options),
            flat_y,
            direction,
            f,
            gradient,
            state.previous_f,
            self.c1,
            self.c2,
            _STEP_MIN,
            _STEP_MAX,
        )
        # A zero direction (the gradient too small for CG to take a step) leaves the point where
        # it is: scipy's line search accepts its unit step there, its value the cached one, and
        # the zero update converges. Here the value at the trial point is a separate evaluation
        # that XLA may round differently from ``f``, which would fail the search.
        stays = jnp.all(direction == 0)
        found = search.found | stays
        moves = solved & found
        update = jnp.where(stays, 0.0, search.alpha) * direction
        update_size = jnp.sum(jnp.abs(update))
        iterations = state.iterations + moves.astype(state.iterations.dtype)
        # scipy loops while the update is larger than xtol: a NaN one ends the loop too.
        small = ~(update_size > y.size * self.xtol)
        undefined = jnp.isnan(jnp.where(stays, f, search.f)) | jnp.isnan(update_size)
        status = jnp.where(
            ~solved,
            CONJUGATE_GRADIENTS_FAILED,
            jnp.where(
                ~found,
                NO_STEP,
                jnp.where(
                    small,
                    jnp.where(undefined, CONJUGATE_GRADIENTS_FAILED, CONVERGED),
                    jnp.where(iterations >= self.max_iterations, OUT_OF_ITERATIONS, RUNNING),
                ),
            ),
        )
        new_y = jnp.where(moves, flat_y + update, flat_y).reshape(y.shape).astype(y.dtype)
        return new_y, _NewtonCGState(previous_f=f, iterations=iterations, status=status), None

    def terminate(self, fn, y, args, options, state: _NewtonCGState, tags):
        return scipy_verdict(state.status)

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}
