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

from gpubackend.solvers.small_vectors import dot, norm
from gpubackend.solvers.symmetric_eigen import eigh
from gpubackend.solvers.tnc_vectors import ieee_njit

EPS = float(np.finfo(float).eps)


@ieee_njit
def new_system(n, npt):
    """An empty interpolation system: ``(cached xpt, eigenvalues, eigenvectors, right scaling,
    state)``, ``state`` = [built, finite matrix]."""
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
    for k in range(npt):
        scale = max(scale, norm(xpt[:, k]))
    xpt_scale = xpt / scale
    a = np.zeros((size, size))
    for i in range(npt):
        for j in range(npt):
            a[i, j] = 0.5 * dot(xpt_scale[:, i], xpt_scale[:, j]) ** 2.0
        a[i, npt] = 1.0
        a[npt, i] = 1.0
        for j in range(n):
            a[i, npt + 1 + j] = xpt_scale[j, i]
            a[npt + 1 + j, i] = xpt_scale[j, i]
    right_scaling[:npt] = 1.0 / scale**2.0
    right_scaling[npt] = scale**2.0
    right_scaling[npt + 1 :] = scale
    cached_xpt[:] = xpt
    state[0] = 1
    state[1] = 0
    if np.all(np.isfinite(a)):
        values, vectors, ok = eigh(a)
        eig_values[:] = values
        eig_vectors[:] = vectors
        state[1] = 1 if ok else 0


@ieee_njit
def solve_systems(system, xpt, rhs):
    """``(solutions, ill_conditioned, ok)`` of the interpolation system for the columns of
    ``rhs``, as scipy's ``Quadratic.solve_systems``."""
    _refresh(system, xpt)
    _, eig_values, eig_vectors, right_scaling, state = system
    size, columns = rhs.shape
    rhs_scaled = np.empty((size, columns))
    for i in range(size):
        for j in range(columns):
            rhs_scaled[i, j] = rhs[i, j] * right_scaling[i]
    solutions = np.zeros((size, columns))
    if state[1] == 0 or not np.all(np.isfinite(rhs_scaled)):
        return solutions, False, False
    ill_conditioned = False
    projected = np.zeros(columns)
    for e in range(size):
        if not abs(eig_values[e]) > EPS:
            ill_conditioned = True
            continue
        inverse = 1.0 / eig_values[e]
        vector = eig_vectors[:, e]
        for j in range(columns):
            projected[j] = dot(vector, rhs_scaled[:, j]) * inverse
        for i in range(size):
            for j in range(columns):
                solutions[i, j] += vector[i] * projected[j]
    for i in range(size):
        for j in range(columns):
            solutions[i, j] *= right_scaling[i]
    return solutions, ill_conditioned, True


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
def _explicit_product(matrix, v):
    out = np.zeros(matrix.shape[0])
    for i in range(matrix.shape[0]):
        out[i] = dot(matrix[i], v)
    return out


@ieee_njit
def _implicit_product(xpt, i_hess, v):
    """``xpt @ (i_hess * (xpt.T @ v))``."""
    n, npt = xpt.shape
    out = np.zeros(n)
    for k in range(npt):
        weight = i_hess[k] * dot(xpt[:, k], v)
        for i in range(n):
            out[i] += xpt[i, k] * weight
    return out


@ieee_njit
def hess_prod(xpt, i_hess, e_hess, v):
    """The model's Hessian times ``v``."""
    return _explicit_product(e_hess, v) + _implicit_product(xpt, i_hess, v)


@ieee_njit
def _implicit_curv(xpt, i_hess, v) -> float:
    """``i_hess @ (xpt.T @ v) ** 2``."""
    total = 0.0
    for k in range(xpt.shape[1]):
        total += i_hess[k] * dot(xpt[:, k], v) ** 2.0
    return total


@ieee_njit
def _explicit_curv(e_hess, v) -> float:
    """``v @ e_hess @ v``, left to right."""
    return dot(_explicit_product(e_hess.T, v), v)


@ieee_njit
def curv(xpt, i_hess, e_hess, v) -> float:
    """``v`` H ``v`` for the model's Hessian H."""
    return _explicit_curv(e_hess, v) + _implicit_curv(xpt, i_hess, v)


@ieee_njit
def value(x_base, xpt, model, x) -> float:
    const, grad, i_hess, e_hess = model
    x_diff = x - x_base
    return (
        const[0]
        + dot(grad, x_diff)
        + 0.5 * (_implicit_curv(xpt, i_hess, x_diff) + _explicit_curv(e_hess, x_diff))
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
    n, npt = xpt.shape
    moved = np.zeros(n)
    for i in range(n):
        total = 0.0
        for k in range(npt):
            total += (xpt[i, k] - 0.5 * shift[i]) * i_hess[k]
        moved[i] = total
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
    for k in range(npt):
        new_col[k, 0] = 0.5 * dot(xpt[:, k], shift) ** 2.0
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
