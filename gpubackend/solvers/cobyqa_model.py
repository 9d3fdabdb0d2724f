"""COBYQA's quadratic models of the objective (port of scipy's vendored ``cobyqa/models.py``).

The interpolation set is ``x_base`` plus the columns of ``xpt`` (``n`` by
``npt = 2n + 1``). A model is ``(const, grad, i_hess, e_hess)``: its value at
``x_base + d`` is ``const + grad d + (sum_k i_hess[k] (xpt[:, k] d)^2 + d e_hess d) / 2``
(``const`` a one-element array, so that updates happen in place). Each model
solves COBYQA's KKT system of the minimum-Frobenius-norm interpolation through
the eigendecomposition of its matrix, cached for the ``xpt`` it was built on
(`new_system`) as scipy caches it, on scipy's LAPACK driver (`symmetric_eigen`);
eigenvalues at most ``eps`` in magnitude are dropped and make the model
"ill-conditioned".

Where scipy raises ``LinAlgError`` (a matrix or right-hand side that is not
finite) these functions return ``ok = False``.
"""

import numpy as np

from gpubackend.solvers.ieee import ieee_njit
from gpubackend.solvers.numpy_products import column_norms, dot, matmul, matvec, strided_dot, vecmat
from gpubackend.solvers.symmetric_eigen import eigh

EPS = float(np.finfo(float).eps)


@ieee_njit
def new_system(n, npt):
    """An empty interpolation system: ``(cached xpt, eigenvalues, eigenvectors as rows, right
    scaling, state)``, ``state`` = [built, finite matrix]. The rows are scipy's column-major
    eigenvector matrix in memory, so the products below see numpy's layouts."""
    size = npt + n + 1
    return (
        np.empty((n, npt)),
        np.empty(size),
        np.empty((size, size)),
        np.empty(size),
        np.zeros(2, np.int64),
    )


@ieee_njit
def _same(a, b) -> bool:
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            if a[i, j] != b[i, j]:
                return False
    return True


@ieee_njit
def _refresh(system, xpt):
    """scipy's ``build_system``: the scaled KKT matrix's eigendecomposition, rebuilt only when
    ``xpt`` changed."""
    cached_xpt, eig_values, eig_vectors, right_scaling, state = system
    if state[0] == 1 and _same(cached_xpt, xpt):
        return
    n, npt = xpt.shape
    size = npt + n + 1
    scale = EPS
    for column_norm in column_norms(xpt):
        scale = max(scale, column_norm)
    xpt_scale = xpt / scale
    a = np.zeros((size, size))
    a[:npt, :npt] = 0.5 * matmul(xpt_scale.T, xpt_scale) ** 2.0
    a[:npt, npt] = 1.0
    a[:npt, npt + 1 :] = xpt_scale.T
    a[npt, :npt] = 1.0
    a[npt + 1 :, :npt] = xpt_scale
    right_scaling[:npt] = 1.0 / scale**2.0
    right_scaling[npt] = scale**2.0
    right_scaling[npt + 1 :] = scale
    cached_xpt[:] = xpt
    state[0] = 1
    state[1] = 0
    if np.all(np.isfinite(a)):
        values, vectors, ok = eigh(a)
        eig_values[:] = values
        eig_vectors[:] = vectors.T
        state[1] = 1 if ok else 0


@ieee_njit
def solve_systems(system, xpt, rhs):
    """``(solutions, ill_conditioned, ok)`` of the interpolation system for the columns of
    ``rhs``, as scipy's ``Quadratic.solve_systems``."""
    _refresh(system, xpt)
    _, eig_values, eig_vectors, right_scaling, state = system
    rhs_scaled = rhs * right_scaling.reshape((-1, 1))
    if state[1] == 0 or not np.all(np.isfinite(rhs_scaled)):
        return np.zeros_like(rhs), False, False
    large = np.abs(eig_values) > EPS
    # numpy's eig_vectors[:, large] is column-major, its transpose these rows.
    kept_rows = eig_vectors[large]
    inv_eig_values = 1.0 / eig_values[large]
    projected = matmul(kept_rows, rhs_scaled) * inv_eig_values.reshape((-1, 1))
    solutions = matmul(kept_rows.T, projected) * right_scaling.reshape((-1, 1))
    return solutions, not np.all(large), True


@ieee_njit
def fit(system, xpt, values):
    """``(const, grad, i_hess, ill_conditioned, ok)`` of the model interpolating ``values`` (scipy's
    ``Quadratic._get_model``)."""
    n, npt = xpt.shape
    rhs = np.zeros((npt + n + 1, 1))
    rhs[:npt, 0] = values
    solution, ill_conditioned, ok = solve_systems(system, xpt, rhs)
    const = np.array([solution[npt, 0]])
    return const, solution[npt + 1 :, 0].copy(), solution[:npt, 0].copy(), ill_conditioned, ok


@ieee_njit
def hess_prod(xpt, i_hess, e_hess, v):
    """The model's Hessian times ``v``."""
    return matvec(e_hess, v) + matvec(xpt, i_hess * matvec(xpt.T, v))


@ieee_njit
def curv(xpt, i_hess, e_hess, v) -> float:
    """``v`` H ``v`` for the model's Hessian H."""
    return dot(vecmat(v, e_hess), v) + dot(i_hess, matvec(xpt.T, v) ** 2.0)


@ieee_njit
def curv_along_column(xpt, i_hess, e_hess, v) -> float:
    """`curv` where numpy's ``v`` is a column of a row-major matrix (its last product strided)."""
    return strided_dot(vecmat(v, e_hess), v) + dot(i_hess, matvec(xpt.T, v) ** 2.0)


@ieee_njit
def value(x_base, xpt, model, x) -> float:
    const, grad, i_hess, e_hess = model
    x_diff = x - x_base
    return (
        const[0]
        + dot(grad, x_diff)
        + 0.5 * (dot(i_hess, matvec(xpt.T, x_diff) ** 2.0) + dot(vecmat(x_diff, e_hess), x_diff))
    )


@ieee_njit
def gradient(x_base, xpt, model, x):
    _, grad, i_hess, e_hess = model
    return grad + hess_prod(xpt, i_hess, e_hess, x - x_base)


@ieee_njit
def update(system, xpt, model, k_new, dir_old, values_diff):
    """scipy's ``Quadratic.update`` after ``xpt[:, k_new]`` moved from ``dir_old``:
    ``(ill_conditioned, ok)``."""
    const, grad, i_hess, e_hess = model
    weight = i_hess[k_new]
    for i in range(e_hess.shape[0]):
        for j in range(e_hess.shape[1]):
            e_hess[i, j] += weight * (dir_old[i] * dir_old[j])
    i_hess[k_new] = 0.0
    d_const, d_grad, d_i_hess, ill_conditioned, ok = fit(system, xpt, values_diff)
    const += d_const
    grad += d_grad
    i_hess += d_i_hess
    return ill_conditioned, ok


@ieee_njit
def shift_model(x_base, xpt, model, new_x_base):
    """scipy's ``Quadratic.shift_x_base`` (before the interpolation set itself moves)."""
    const, grad, i_hess, e_hess = model
    new_const = value(x_base, xpt, model, new_x_base)
    new_grad = gradient(x_base, xpt, model, new_x_base)
    const[0] = new_const
    grad[:] = new_grad
    shift = new_x_base - x_base
    moved = matvec(xpt - 0.5 * shift.reshape((-1, 1)), i_hess)
    n = shift.shape[0]
    for i in range(n):
        for j in range(n):
            e_hess[i, j] += shift[i] * moved[j] + shift[j] * moved[i]


@ieee_njit
def determinants(system, x_base, xpt, x_new, k_new):
    """scipy's ``Models.determinants`` of replacing point ``k_new`` by ``x_new``, for every point
    where ``k_new`` is negative (scipy's ``None``): ``(sigma, ok)``, ``sigma`` one entry per point
    (the one of ``k_new`` alone otherwise)."""
    n, npt = xpt.shape
    size = npt + n + 1
    shift = x_new - x_base
    new_col = np.empty((size, 1))
    new_col[:npt, 0] = 0.5 * matvec(xpt.T, shift) ** 2.0
    new_col[npt, 0] = 1.0
    new_col[npt + 1 :, 0] = shift
    inv_new_col, _, ok = solve_systems(system, xpt, new_col)
    beta = 0.5 * dot(shift, shift) ** 2.0 - dot(new_col[:, 0], inv_new_col[:, 0])
    if k_new < 0:
        coord_vec = np.eye(size, npt)
        alpha_all, _, ok_alpha = solve_systems(system, xpt, coord_vec)
        sigma = np.empty(npt)
        for k in range(npt):
            sigma[k] = alpha_all[k, k] * beta + inv_new_col[k, 0] ** 2.0
        return sigma, ok and ok_alpha
    coord_vec = np.zeros((size, 1))
    coord_vec[k_new, 0] = 1.0
    alpha, _, ok_alpha = solve_systems(system, xpt, coord_vec)
    sigma = np.array([alpha[k_new, 0] * beta + inv_new_col[k_new, 0] ** 2.0])
    return sigma, ok and ok_alpha
