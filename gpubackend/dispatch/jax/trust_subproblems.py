"""The quadratic subproblems of scipy's trust-region methods, in JAX.

Each minimises the model ``g . p + p . H p / 2`` over ``|p|_2 <= radius`` as
its scipy method does and returns a `SubproblemStep`:

- `exact` (``trust-exact``, and ``trust-krylov``: trlib's Lanczos solution
  converges to the same global minimiser) from the eigendecomposition of
  ``H``, as the Numba solver (`gpubackend.solvers.trust_exact`) does, where
  scipy iterates on Cholesky factors (Moré-Sorensen) to a relative accuracy;
- `dogleg` (``dogleg``): the Newton point inside the region, else the path
  from the Cauchy point towards it, cut at the boundary; a Hessian that is not
  positive definite is scipy's "linalg error";
- `steihaug_cg` (``trust-ncg``): conjugate gradients stopped at the boundary,
  at negative curvature or at scipy's forcing term ``min(0.5, sqrt|g|) |g|``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp


class SubproblemStep(NamedTuple):
    step: jax.Array
    hits_boundary: jax.Array
    factored: jax.Array
    """False where the method's factorization failed (scipy's ``LinAlgError``)."""


Subproblem = Callable[[jax.Array, jax.Array, jax.Array], SubproblemStep]
"""``(gradient, hessian, radius) -> SubproblemStep`` on vectors."""

_BISECTIONS = 100


def boundary_intersections(z, d, radius):
    """``(low, high)``: the two ``t`` with ``|z + t d| = radius``, with scipy's rounding-safe
    formula."""
    a = jnp.dot(d, d)
    b = 2 * jnp.dot(z, d)
    c = jnp.dot(z, z) - radius**2
    aux = b + jnp.copysign(jnp.sqrt(b * b - 4 * a * c), b)
    first, second = -aux / (2 * a), -2 * c / aux
    return jnp.minimum(first, second), jnp.maximum(first, second)


def exact(gradient, hessian, radius) -> SubproblemStep:
    eigenvalues, vectors = jnp.linalg.eigh(hessian)
    coords = vectors.T @ gradient
    lowest = eigenvalues[0]

    def shifted(shift):
        return -coords / (eigenvalues + shift)

    def length(shift):
        return jnp.linalg.norm(shifted(shift))

    interior = (lowest > 0) & (length(0.0) <= radius)
    # On the boundary the shift lies in [low, low + scale]: at low + scale every
    # |eigenvalue + shift| >= |g| / radius, so the step is no longer than the radius.
    low = jnp.maximum(0.0, -lowest)
    scale = jnp.linalg.norm(gradient) / radius + jnp.abs(lowest) + 1.0
    nearly_low = low + 1e-12 * scale
    # The hard case: the step stays inside even as the shift approaches -lowest; the missing
    # length goes along the lowest eigenvector.
    hard = length(nearly_low) <= radius
    resolved = eigenvalues + low > 1e-12 * scale
    hard_coords = jnp.where(resolved, -coords / jnp.where(resolved, eigenvalues + low, 1.0), 0.0)
    missing = jnp.sqrt(jnp.maximum(radius**2 - jnp.dot(hard_coords, hard_coords), 0.0))
    hard_coords = hard_coords.at[0].add(missing)

    def unresolved(bounds):
        i, below, above = bounds
        return (i < _BISECTIONS) & (above - below > 1e-14 * jnp.maximum(1.0, above))

    def bisected(bounds):
        i, below, above = bounds
        middle = 0.5 * (below + above)
        outside = length(middle) > radius
        return i + 1, jnp.where(outside, middle, below), jnp.where(outside, above, middle)

    _, _, shift = jax.lax.while_loop(unresolved, bisected, (0, nearly_low, low + scale))
    boundary_coords = jnp.where(hard, hard_coords, shifted(shift))
    step = vectors @ jnp.where(interior, shifted(0.0), boundary_coords)
    return SubproblemStep(step, ~interior, jnp.array(True))


def dogleg(gradient, hessian, radius) -> SubproblemStep:
    factor = jnp.linalg.cholesky(hessian)
    factored = jnp.all(jnp.isfinite(factor))
    newton = -jax.scipy.linalg.cho_solve((factor, True), gradient)
    cauchy = -(jnp.dot(gradient, gradient) / jnp.dot(gradient, hessian @ gradient)) * gradient
    cauchy_length = jnp.linalg.norm(cauchy)
    _, towards_newton = boundary_intersections(cauchy, newton - cauchy, radius)
    on_boundary = jnp.where(
        cauchy_length >= radius,
        cauchy * (radius / cauchy_length),
        cauchy + towards_newton * (newton - cauchy),
    )
    inside = jnp.linalg.norm(newton) < radius
    return SubproblemStep(jnp.where(inside, newton, on_boundary), ~inside, factored)


class _CGState(NamedTuple):
    iteration: jax.Array
    z: jax.Array
    residual: jax.Array
    direction: jax.Array
    done: jax.Array
    step: jax.Array
    hits_boundary: jax.Array


def steihaug_cg(gradient, hessian, radius) -> SubproblemStep:
    size = jnp.linalg.norm(gradient)
    tolerance = jnp.minimum(0.5, jnp.sqrt(size)) * size
    # Exact CG ends within n iterations; the cap only stops a loop that NaNs keep going.
    cap = 10 * gradient.shape[0] + 10

    def model(p):
        return jnp.dot(gradient, p) + 0.5 * jnp.dot(p, hessian @ p)

    def running(state: _CGState):
        return ~state.done & (state.iteration < cap)

    def iterate(state: _CGState) -> _CGState:
        z, r, d = state.z, state.residual, state.direction
        hd = hessian @ d
        curvature = jnp.dot(d, hd)
        low, high = boundary_intersections(z, d, radius)
        # Negative curvature: the better of the two boundary points along d.
        at_low, at_high = z + low * d, z + high * d
        downhill = jnp.where(model(at_low) < model(at_high), at_low, at_high)
        r_squared = jnp.dot(r, r)
        alpha = r_squared / curvature
        z_next = z + alpha * d
        r_next = r + alpha * hd
        r_next_squared = jnp.dot(r_next, r_next)
        negative = curvature <= 0
        leaves = ~negative & (jnp.linalg.norm(z_next) >= radius)
        small = ~negative & ~leaves & (jnp.sqrt(r_next_squared) < tolerance)
        step = jnp.where(negative, downhill, jnp.where(leaves, at_high, z_next))
        return _CGState(
            state.iteration + 1,
            z_next,
            r_next,
            -r_next + (r_next_squared / r_squared) * d,
            negative | leaves | small,
            step,
            negative | leaves,
        )

    zeros = jnp.zeros_like(gradient)
    start = _CGState(
        jnp.array(0), zeros, gradient, -gradient, jnp.array(False), zeros, jnp.array(False)
    )
    final = jax.lax.while_loop(running, iterate, start)
    step = jnp.where(final.done, final.step, final.z)
    return SubproblemStep(step, final.hits_boundary & final.done, jnp.array(True))
