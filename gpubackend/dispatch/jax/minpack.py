"""What MINPACK's root finders (`hybrid_powell`, `levenberg_marquardt`) share in JAX: the scaling
and trust region they start from, their verdicts as optimistix results, and the QR factorization
with column pivoting (``qrfac``) that ``lmder`` steers by.

LAPACK's pivoted QR (``geqp3``) picks the same columns, but JAX offers it on
a GPU only through MAGMA; these loops run wherever JAX does. The pivot order
decides which component a rank-deficient Jacobian leaves out of the
Gauss-Newton step (a zero column goes last), as in scipy's ``lm``.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

RUNNING, CONVERGED, FAILED = 0, 1, 2
"""A solve's status, carried in its state."""


def norm(v):
    """MINPACK's ``enorm`` (without its guards against overflow)."""
    return jnp.sqrt(jnp.sum(v * v))


def initial_scaling(column_norms, y, factor: float):
    """``(diag, xnorm, delta)``: the variables scaled by the first Jacobian's column norms (1 for a
    zero column), the scaled start's norm, and the first trust region, ``factor`` times it."""
    diag = jnp.where(column_norms == 0, 1.0, column_norms)
    xnorm = norm(diag * y)
    return diag, xnorm, jnp.where(xnorm != 0, factor * xnorm, factor)


class MinpackRootFinder(optx.AbstractRootFinder):
    """An optimistix root finder whose state carries a MINPACK status (`RUNNING`, ...).

    ``maxfev`` counts evaluations of the equations, the first included; the first trust region is
    ``factor`` times the scaled start's norm.
    """

    # mypy reads a default into optimistix's abstract fields: these have none, as in optimistix.
    xtol: float  # type: ignore[misc]
    factor: float  # type: ignore[misc]
    maxfev: int = eqx.field(static=True)  # type: ignore[misc]
    # optimistix reads these off any root finder; the verdicts above replace them, and a stand-in
    # inside a manual mesh stops on them (`optimize_lowering`).
    rtol: float
    atol: float
    norm: Callable = optx.max_norm

    def jacobian(self, fn, y, args):
        return jax.jacfwd(lambda x: fn(x, args)[0])(y)

    def terminate(self, fn, y, args, options, state, tags):
        result = optx.RESULTS.where(
            state.status == FAILED, optx.RESULTS.nonlinear_divergence, optx.RESULTS.successful
        )
        return state.status != RUNNING, result

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return y, aux, {}


def pivoted_householder_qr(a):
    """``(factored, rdiag, acnorm, permutation)``: ``factored`` holds the Householder vectors below
    (and on) its diagonal and ``R``'s strict upper triangle above it, ``rdiag`` ``R``'s diagonal,
    ``acnorm`` the input's column norms, and ``permutation[j]`` the input column in position
    ``j`` (largest remaining norm first)."""
    m, n = a.shape
    eps = jnp.finfo(a.dtype).eps
    rows, columns = jnp.arange(m), jnp.arange(n)
    acnorm = jnp.sqrt(jnp.sum(a * a, axis=0))

    def reduce_column(j, carry):
        a, rdiag, work, permutation = carry
        largest = jnp.argmax(jnp.where(columns >= j, rdiag, -jnp.inf))
        swapped = jnp.where(columns == j, largest, jnp.where(columns == largest, j, columns))
        a = a[:, swapped]
        permutation = permutation[swapped]
        rdiag = rdiag.at[largest].set(rdiag[j])
        work = work.at[largest].set(work[j])
        below = rows >= j
        column = jnp.where(below, a[:, j], 0.0)
        column_norm = norm(column)
        column_norm = jnp.where(a[j, j] < 0, -column_norm, column_norm)
        reflects = column_norm != 0
        vector = column / jnp.where(reflects, column_norm, 1.0)
        vector = vector.at[j].add(1.0)
        later = (columns > j) & reflects
        scale = (vector @ a) / vector[j]
        a = jnp.where(later[None, :], a - jnp.outer(vector, scale), a)
        a = jnp.where(reflects & below[:, None] & (columns == j)[None, :], vector[:, None], a)
        # The remaining columns' norms below row j, downdated, or recomputed where that loses them.
        ratio = a[j, :] / jnp.where(rdiag != 0, rdiag, 1.0)
        downdated = rdiag * jnp.sqrt(jnp.maximum(0.0, 1 - ratio**2))
        lost = 0.05 * (downdated / jnp.where(work != 0, work, 1.0)) ** 2 <= eps
        recomputed = jnp.sqrt(jnp.sum(jnp.where((rows > j)[:, None], a * a, 0.0), axis=0))
        updated = jnp.where(lost, recomputed, downdated)
        moving = later & (rdiag != 0)
        rdiag = jnp.where(moving, updated, rdiag)
        work = jnp.where(moving & lost, recomputed, work)
        rdiag = rdiag.at[j].set(-column_norm)
        return a, rdiag, work, permutation

    a, rdiag, _, permutation = jax.lax.fori_loop(
        0, min(m, n), reduce_column, (a, acnorm, acnorm, columns)
    )
    return a, rdiag, acnorm, permutation


def apply_qt(factored, v):
    """``Q^T v`` for the Householder vectors `pivoted_householder_qr` left in ``factored``."""
    m, n = factored.shape
    rows = jnp.arange(m)

    def reflect(j, v):
        vector = jnp.where(rows >= j, factored[:, j], 0.0)
        pivot = factored[j, j]
        scale = -(vector @ v) / jnp.where(pivot != 0, pivot, 1.0)
        return jnp.where(pivot != 0, v + scale * vector, v)

    return jax.lax.fori_loop(0, min(m, n), reflect, v)
