"""The inner linear solvers of scipy's ``KrylovJacobian`` under JAX, one restart cycle each as it
runs them: ``scipy.sparse.linalg.lgmres`` (``maxiter=1``, the default) and ``gmres``
(``restart=inner_maxiter``, ``maxiter=1``), both from ``x0 = 0`` without a preconditioner. They
are the Numba solvers of `gpubackend.solvers.krylov_inner`, whose docstring describes them, on
fixed-size arrays: the Krylov vectors fill the first rows of arrays sized for the longest cycle,
and every loop runs over those static sizes, masked past the rows in use.

``matvec(v) -> A v`` is a pure function (the finite-difference product of
`gpubackend.dispatch.jax.krylov`).

They are hand-written rather than ``lineax.GMRES``, which is not scipy's
gmres: lineax scales its tolerance elementwise (``atol + rtol |b|``, not
scipy's ``max(atol, rtol |b|)`` on the norm), tests it only at the end of a
full restart cycle (scipy's stops within the cycle once the rotated residual
meets ``ptol``, which fixes how many products, so equation evaluations, each
step takes) after an extra product for the true residual, and has no lgmres
(outer directions carried between calls).

scipy's gmres closes its cycle with one more product, the true residual, which changes nothing
it returns; it is left out here (under jit its value would be discarded anyway), so gmres
evaluates the equations once fewer per nonlinear step than scipy.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from gpubackend.dispatch.jax.implicit import varying_leaves_like
from gpubackend.dispatch.jax.nonlin_solve import norm

MatVec = Callable[[jax.Array], jax.Array]


def _lartg(f, g):
    """LAPACK's ``lartg``: ``(c, s, r)`` with ``[c s; -s c] [f; g] = [r; 0]``."""
    d = jnp.sqrt(f * f + g * g)
    r = jnp.where(f > 0.0, d, -d)
    general = (jnp.abs(f) / d, g / r, r)
    along_g = (jnp.zeros_like(f), jnp.sign(g), jnp.abs(g))
    along_f = (jnp.ones_like(f), jnp.zeros_like(f), f)
    return tuple(
        jnp.where(g == 0.0, kept, jnp.where(f == 0.0, zeroed, rotated))
        for kept, zeroed, rotated in zip(along_f, along_g, general, strict=True)
    )


def _reduce_column(column, j, cosines, sines):
    """``column`` of the Hessenberg matrix with the first ``j`` rotations applied and the one
    zeroing its entry ``j + 1`` added: ``(column, cosines, sines)``."""

    def rotate(k, column):
        c, s = cosines[k], sines[k]
        upper, lower = column[k], column[k + 1]
        rotated = column.at[k].set(c * upper + s * lower).at[k + 1].set(-s * upper + c * lower)
        return jnp.where(k < j, rotated, column)

    column = jax.lax.fori_loop(0, cosines.shape[0], rotate, column)
    c, s, r = _lartg(column[j], column[j + 1])
    column = column.at[j].set(r).at[j + 1].set(0.0)
    return column, cosines.at[j].set(c), sines.at[j].set(s)


def _orthogonalise(w, basis, count):
    """Modified Gram-Schmidt of ``w`` against the first ``count`` rows of ``basis``: ``(w after,
    the coefficients)``, the coefficients zero past ``count``."""

    def project_out(i, carry):
        w, coefficients = carry
        alpha = basis[i] @ w
        active = i < count
        return (
            jnp.where(active, w - alpha * basis[i], w),
            coefficients.at[i].set(jnp.where(active, alpha, 0.0)),
        )

    start = varying_leaves_like((w, jnp.zeros(basis.shape[0], w.dtype)), (w, basis))
    return jax.lax.fori_loop(0, basis.shape[0], project_out, start)


def _combination(coefficients, vectors, count):
    """``sum_{i < count} coefficients[i] vectors[i]``."""
    used = (jnp.arange(vectors.shape[0]) < count)[:, None]
    return jnp.sum(jnp.where(used, coefficients[:, None] * vectors, 0.0), axis=0)


class _FlexibleArnoldi(eqx.Module):
    """lgmres's flexible GMRES cycle after ``columns`` products: its Krylov vectors ``vs`` and the
    directions ``zs`` they came from, the Givens-reduced Hessenberg matrix ``r`` and the first row
    of the rotations' product, ``rotated_e1`` (scipy's ``Q[0]``)."""

    columns: jax.Array
    vs: jax.Array
    zs: jax.Array
    r: jax.Array
    cosines: jax.Array
    sines: jax.Array
    rotated_e1: jax.Array
    stopped: jax.Array


def _fgmres(matvec: MatVec, v0, inner_m: int, ptol, outer, kept):
    """scipy's ``_fgmres`` with ``prepend_outer_v``: ``(zs, y, columns)``; ``y`` NaN where the
    small system is not finite (scipy's ``LinAlgError``)."""
    n, dtype = v0.shape[0], v0.dtype
    most = inner_m + outer.shape[0]
    eps = float(jnp.finfo(dtype).eps)

    def product(s: _FlexibleArnoldi) -> _FlexibleArnoldi:
        j = s.columns
        z = jnp.where(j == kept, s.vs[0], s.vs[j])
        if outer.shape[0]:
            z = jnp.where(j < kept, outer[jnp.minimum(j, outer.shape[0] - 1)], z)
        w = matvec(z)
        w_norm = norm(w)
        w, column = _orthogonalise(w, s.vs, j + 1)
        h = norm(w)
        column = column.at[j + 1].set(h)
        inverse = 1.0 / h
        w = jnp.where(jnp.isfinite(inverse), w * inverse, w)
        breakdown = ~(h > eps * w_norm)
        column, cosines, sines = _reduce_column(column, j, s.cosines, s.sines)
        upper = s.rotated_e1[j]
        rotated_e1 = s.rotated_e1.at[j].set(cosines[j] * upper).at[j + 1].set(-sines[j] * upper)
        return _FlexibleArnoldi(
            columns=j + 1,
            vs=s.vs.at[j + 1].set(w),
            zs=s.zs.at[j].set(z),
            r=s.r.at[:, j].set(column),
            cosines=cosines,
            sines=sines,
            rotated_e1=rotated_e1,
            stopped=(jnp.abs(rotated_e1[j + 1]) < ptol) | breakdown,
        )

    start = _FlexibleArnoldi(
        columns=jnp.array(0),
        vs=jnp.zeros((most + 1, n), dtype).at[0].set(v0),
        zs=jnp.zeros((most, n), dtype),
        r=jnp.zeros((most + 1, most), dtype),
        cosines=jnp.zeros(most, dtype),
        sines=jnp.zeros(most, dtype),
        rotated_e1=jnp.zeros(most + 1, dtype).at[0].set(1.0),
        stopped=jnp.array(False),
    )
    start = varying_leaves_like(start, (v0, ptol, outer, kept))
    end = jax.lax.while_loop(lambda s: ~s.stopped & (s.columns < inner_m + kept), product, start)
    # The small triangular system, zero-padded to its largest size: the padding adds only zero
    # singular values, which the least-squares cutoff drops, so the used block solves as alone.
    used = jnp.arange(most) < end.columns
    r = jnp.where(used[:, None] & used[None, :], end.r[:most], 0.0)
    last = end.columns - 1
    finite = jnp.isfinite(end.r[last, last]) & jnp.all(jnp.isfinite(r))
    r = jnp.where(finite, r, 0.0)
    # scipy's ``lstsq`` (LAPACK's ``gelsd``), singular values below ``eps`` times the largest cut.
    y = jnp.linalg.lstsq(r, jnp.where(used, end.rotated_e1[:most], 0.0), rcond=eps)[0]
    return end.zs, jnp.where(finite, jnp.where(used, y, 0.0), jnp.nan), end.columns


def lgmres(matvec: MatVec, b, rtol, atol, inner_m: int, outer, kept):
    """One cycle of scipy's ``lgmres`` from zero: ``(x, outer, kept)``, the directions kept from
    earlier calls being the first ``kept`` rows of ``outer`` (unit vectors, oldest first, at most
    ``len(outer)``), this call's added where it moved."""
    b_norm = norm(b)
    atol = jnp.maximum(atol, rtol * b_norm)
    # The residual at x = 0 is b, without a product (scipy's matvec returns 0 * v there).
    solved_at_zero = b_norm <= atol

    def cycle():
        v0 = b * (1.0 / b_norm)
        ptol = jnp.minimum(1.0, atol / b_norm)
        zs, y, columns = _fgmres(matvec, v0, inner_m, ptol, outer, kept)
        y = y * b_norm
        # Where the small system is not finite scipy's lgmres returns its start.
        return jnp.where(jnp.all(jnp.isfinite(y)), _combination(y, zs, columns), 0.0)

    # Where b is not finite (scipy's ValueError) x stays zero, a zero step: the solve fails.
    x = jax.lax.cond(solved_at_zero, lambda: jnp.zeros_like(b), cycle)
    x_norm = norm(x)
    if outer.shape[0]:
        # The newest direction goes last; full, the oldest leaves.
        full = kept == outer.shape[0]
        shifted = jnp.where(full, jnp.roll(outer, -1, axis=0), outer)
        grown = shifted.at[jnp.where(full, kept - 1, kept)].set(x / x_norm)
        keep = x_norm > 0.0
        outer = jnp.where(keep, grown, outer)
        kept = jnp.where(keep, jnp.minimum(kept + 1, outer.shape[0]), kept)
    return jnp.where(b_norm == 0.0, b, x), outer, kept


class _Arnoldi(eqx.Module):
    """gmres's cycle after ``columns`` products: the Krylov vectors ``v``, the Givens-reduced
    Hessenberg matrix ``h`` and the rotated right-hand side ``s``."""

    columns: jax.Array
    v: jax.Array
    h: jax.Array
    cosines: jax.Array
    sines: jax.Array
    s: jax.Array
    stopped: jax.Array


def gmres(matvec: MatVec, b, rtol, atol, restart: int):
    """One cycle of scipy's ``gmres`` from zero, of at most ``min(restart, len(b))`` products."""
    n, dtype = b.shape[0], b.dtype
    restart = min(restart, n)
    eps = jnp.finfo(dtype).eps
    b_norm = norm(b)
    atol = jnp.maximum(atol, rtol * b_norm)
    ptol = b_norm * jnp.minimum(1.0, atol / b_norm)

    def product(state: _Arnoldi) -> _Arnoldi:
        col = state.columns
        w = matvec(state.v[col])
        h0 = norm(w)
        w, column = _orthogonalise(w, state.v, col + 1)
        h1 = norm(w)
        breakdown = h1 <= eps * h0
        column = column.at[col + 1].set(jnp.where(breakdown, 0.0, h1))
        w = jnp.where(breakdown, w, w * (1.0 / h1))
        column, cosines, sines = _reduce_column(column, col, state.cosines, state.sines)
        rotated = -sines[col] * state.s[col]
        s = state.s.at[col].set(cosines[col] * state.s[col]).at[col + 1].set(rotated)
        return _Arnoldi(
            columns=col + 1,
            v=state.v.at[col + 1].set(w),
            h=state.h.at[:, col].set(column),
            cosines=cosines,
            sines=sines,
            s=s,
            stopped=(jnp.abs(rotated) <= ptol) | breakdown,
        )

    start = _Arnoldi(
        columns=jnp.array(0),
        v=jnp.zeros((restart + 1, n), dtype).at[0].set(b * (1.0 / b_norm)),
        h=jnp.zeros((restart + 1, restart), dtype),
        cosines=jnp.zeros(restart, dtype),
        sines=jnp.zeros(restart, dtype),
        s=jnp.zeros(restart + 1, dtype).at[0].set(b_norm),
        stopped=jnp.array(False),
    )

    start = varying_leaves_like(start, (b, ptol))

    def cycle():
        end = jax.lax.while_loop(lambda s: ~s.stopped & (s.columns < restart), product, start)
        last = end.columns - 1
        rows = jnp.arange(restart)
        y = jnp.where(rows <= last, end.s[:restart], 0.0)
        y = y.at[last].set(jnp.where(end.h[last, last] == 0.0, 0.0, y[last]))

        def back_substitute(i, y):
            k = restart - 1 - i
            y_k = y[k] / end.h[k, k]
            eliminated = jnp.where(rows < k, y - y_k * end.h[:restart, k], y).at[k].set(y_k)
            return jnp.where((k <= last) & (y[k] != 0.0), eliminated, y)

        y = jax.lax.fori_loop(0, restart - 1, back_substitute, y)
        y = y.at[0].set(jnp.where(y[0] != 0.0, y[0] / end.h[0, 0], y[0]))
        return _combination(y, end.v[:restart], end.columns)

    # scipy returns without a product where b is zero (b itself) or already within atol (zero).
    x = jax.lax.cond((b_norm == 0.0) | (b_norm < atol), jnp.zeros_like, lambda b: cycle(), b)
    return jnp.where(b_norm == 0.0, b, x)
