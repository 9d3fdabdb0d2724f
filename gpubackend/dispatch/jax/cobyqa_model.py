"""COBYQA's quadratic models of the objective (scipy's vendored ``cobyqa/models.py``), as
`gpubackend.solvers.cobyqa_model` ports it.

The interpolation set is ``x_base`` plus the columns of ``xpt`` (``n`` by
``npt = 2n + 1``). A `Model`'s value at ``x_base + d`` is ``const + grad d +
(sum_k i_hess[k] (xpt[:, k] d)^2 + d e_hess d) / 2``. Each model solves
COBYQA's KKT system of the minimum-Frobenius-norm interpolation through the
eigendecomposition of its matrix (`System`, rebuilt whenever ``xpt`` moves, as
scipy's cache is), here ``jnp.linalg.eigh`` where scipy calls LAPACK's
``dsyevr``: the eigenvalues and the projections agree to rounding, not to the
last bit (eigenvectors may differ in sign, which the products cancel, and in
their last bits). Eigenvalues at most ``eps`` in magnitude are dropped and make
the model "ill-conditioned"; near that threshold rounding may decide it.

Where scipy raises ``LinAlgError`` (a matrix or right-hand side that is not
finite) these functions return ``ok = False``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp


class System(eqx.Module):
    """scipy's ``build_system``: the scaled KKT matrix's eigendecomposition."""

    eig_values: jax.Array
    eig_vectors: jax.Array
    """Columns, as ``eigh`` returns them."""
    right_scaling: jax.Array
    ok: jax.Array
    """The matrix was finite and its decomposition too."""


class Model(eqx.Module):
    const: jax.Array
    grad: jax.Array
    i_hess: jax.Array
    """The implicit Hessian's weights, one per interpolation point."""
    e_hess: jax.Array
    """The explicit Hessian."""


def build_system(xpt: jax.Array) -> System:
    n, npt = xpt.shape
    eps = jnp.finfo(xpt.dtype).eps
    scale = jnp.maximum(eps, jnp.max(jnp.linalg.norm(xpt, axis=0)))
    xpt_scale = xpt / scale
    size = npt + n + 1
    a = jnp.zeros((size, size), xpt.dtype)
    a = a.at[:npt, :npt].set(0.5 * (xpt_scale.T @ xpt_scale) ** 2)
    a = a.at[:npt, npt].set(1.0).at[npt, :npt].set(1.0)
    a = a.at[:npt, npt + 1 :].set(xpt_scale.T).at[npt + 1 :, :npt].set(xpt_scale)
    right_scaling = jnp.concatenate(
        [jnp.full((npt,), 1.0 / scale**2), scale[None] ** 2, jnp.full((n,), scale)]
    )
    finite = jnp.all(jnp.isfinite(a))
    values, vectors = jnp.linalg.eigh(jnp.where(finite, a, 0.0), symmetrize_input=False)
    ok = finite & jnp.all(jnp.isfinite(values)) & jnp.all(jnp.isfinite(vectors))
    return System(values, vectors, right_scaling, ok)


def solve_systems(system: System, rhs: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(solutions, ill_conditioned, ok)`` of the interpolation system for the columns of
    ``rhs``, as scipy's ``Quadratic.solve_systems``."""
    eps = jnp.finfo(rhs.dtype).eps
    rhs_scaled = rhs * system.right_scaling[:, None]
    ok = system.ok & jnp.all(jnp.isfinite(rhs_scaled))
    large = jnp.abs(system.eig_values) > eps
    inv_values = jnp.where(large, 1.0 / jnp.where(large, system.eig_values, 1.0), 0.0)
    vectors = system.eig_vectors
    projected = (vectors.T @ jnp.where(ok, rhs_scaled, 0.0)) * inv_values[:, None]
    solutions = (vectors @ projected) * system.right_scaling[:, None]
    return jnp.where(ok, solutions, 0.0), ~jnp.all(large), ok


def fit(system: System, xpt: jax.Array, values: jax.Array) -> tuple[Model, jax.Array, jax.Array]:
    """``(model, ill_conditioned, ok)`` interpolating ``values`` (scipy's
    ``Quadratic._get_model``), its explicit Hessian zero."""
    n, npt = xpt.shape
    rhs = jnp.zeros((npt + n + 1, 1), xpt.dtype).at[:npt, 0].set(values)
    solution, ill_conditioned, ok = solve_systems(system, rhs)
    model = Model(
        solution[npt, 0], solution[npt + 1 :, 0], solution[:npt, 0], jnp.zeros((n, n), xpt.dtype)
    )
    return model, ill_conditioned, ok


def hess_prod(xpt: jax.Array, model: Model, v: jax.Array) -> jax.Array:
    """The model's Hessian times ``v``."""
    return model.e_hess @ v + xpt @ (model.i_hess * (xpt.T @ v))


def curv(xpt: jax.Array, model: Model, v: jax.Array) -> jax.Array:
    """``v`` H ``v`` for the model's Hessian H."""
    return (v @ model.e_hess) @ v + model.i_hess @ (xpt.T @ v) ** 2


def value(x_base: jax.Array, xpt: jax.Array, model: Model, x: jax.Array) -> jax.Array:
    d = x - x_base
    return (
        model.const
        + model.grad @ d
        + 0.5 * (model.i_hess @ (xpt.T @ d) ** 2 + (d @ model.e_hess) @ d)
    )


def gradient(x_base: jax.Array, xpt: jax.Array, model: Model, x: jax.Array) -> jax.Array:
    return model.grad + hess_prod(xpt, model, x - x_base)


def update(
    system: System, xpt: jax.Array, model: Model, k_new, dir_old: jax.Array, values_diff
) -> tuple[Model, jax.Array, jax.Array]:
    """scipy's ``Quadratic.update`` after ``xpt[:, k_new]`` moved from ``dir_old`` (``system``
    built on the new ``xpt``): ``(model, ill_conditioned, ok)``."""
    e_hess = model.e_hess + model.i_hess[k_new] * jnp.outer(dir_old, dir_old)
    change, ill_conditioned, ok = fit(system, xpt, values_diff)
    updated = Model(
        model.const + change.const,
        model.grad + change.grad,
        model.i_hess.at[k_new].set(0.0) + change.i_hess,
        e_hess,
    )
    return updated, ill_conditioned, ok


def shift_model(x_base: jax.Array, xpt: jax.Array, model: Model, new_x_base: jax.Array) -> Model:
    """scipy's ``Quadratic.shift_x_base`` (before the interpolation set itself moves)."""
    shift = new_x_base - x_base
    moved = (xpt - 0.5 * shift[:, None]) @ model.i_hess
    return Model(
        value(x_base, xpt, model, new_x_base),
        gradient(x_base, xpt, model, new_x_base),
        model.i_hess,
        model.e_hess + (jnp.outer(shift, moved) + jnp.outer(moved, shift)),
    )


def _new_column(x_base, xpt, x_new):
    shift = x_new - x_base
    column = jnp.concatenate([0.5 * (xpt.T @ shift) ** 2, jnp.ones((1,), xpt.dtype), shift])
    return shift, column


def determinants(
    system: System, x_base: jax.Array, xpt: jax.Array, x_new: jax.Array, k_new=None
) -> tuple[jax.Array, jax.Array]:
    """scipy's ``Models.determinants`` of replacing point ``k_new`` by ``x_new``, or every point
    for ``None``: ``(sigma, ok)``, ``sigma`` one entry per point (a scalar for one)."""
    npt = xpt.shape[1]
    shift, new_col = _new_column(x_base, xpt, x_new)
    inv_new_col, _, ok = solve_systems(system, new_col[:, None])
    inv_new_col = inv_new_col[:, 0]
    beta = 0.5 * (shift @ shift) ** 2 - new_col @ inv_new_col
    size = new_col.shape[0]
    if k_new is None:
        alpha, _, ok_alpha = solve_systems(system, jnp.eye(size, npt, dtype=xpt.dtype))
        sigma = jnp.diagonal(alpha[:npt]) * beta + inv_new_col[:npt] ** 2
        return sigma, ok & ok_alpha
    coord_vec = (jnp.arange(size) == k_new).astype(xpt.dtype)[:, None]
    alpha, _, ok_alpha = solve_systems(system, coord_vec)
    return alpha[k_new, 0] * beta + inv_new_col[k_new] ** 2, ok & ok_alpha
