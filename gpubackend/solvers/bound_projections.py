"""scipy's projections of trust-constr's barrier subproblem when its constraints are box bounds.

With ``bounds`` only, trust-constr's barrier subproblem (`tr_interior_point`)
has the scaled Jacobian ``A = [J, diag(s)]`` over ``z = (x, s)``: one row per
finite bound, ``J``'s row ``+e_i`` for an upper bound (``x_i - ub_i <= 0``) and
``-e_i`` for a lower one (``lb_i - x_i <= 0``). scipy's Jacobian is sparse there
(``sparse_jacobian`` defaults to True with bounds), so its ``projections`` take
the ``AugmentedSystem`` route: a sparse LU of ``K = [[I, A'], [A, 0]]`` and
scipy's iterative refinement of the null-space projection. Here ``K`` is solved
through its Schur complement ``A A' = J J' + diag(s^2)``, which bound rows make
block diagonal: a 1x1 block ``1 + s_k^2`` per single bound and a 2x2 block
``[[1 + s_u^2, -1], [-1, 1 + s_l^2]]`` per variable bounded on both sides. The
solution is the same as scipy's up to rounding; scipy's refinement loop
(``orthogonality > 1e-12``, at most 3 steps) is kept.

A bound set is ``(variable, sign, partner)`` per row: the bounded variable, the
row's sign in ``J`` and the row of the variable's other bound (-1 if none).
"""

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.small_vectors import norm

_ORTHOGONALITY_TOLERANCE = 1e-12
_MAX_REFINEMENTS = 3


@numba_njit
def jacobian_times(variable, sign, slack, w):
    """``A w`` for ``w = (w_x, w_s)``."""
    m = variable.shape[0]
    n = w.shape[0] - m
    out = np.empty(m)
    for k in range(m):
        out[k] = sign[k] * w[variable[k]] + slack[k] * w[n + k]
    return out


@numba_njit
def jacobian_transpose_times(variable, sign, slack, y, n):
    """``A' y``, of length ``n + m``."""
    m = variable.shape[0]
    out = np.zeros(n + m)
    for k in range(m):
        out[variable[k]] += sign[k] * y[k]
        out[n + k] = slack[k] * y[k]
    return out


@numba_njit
def _schur_solve(partner, slack, r):
    """``(A A')^{-1} r``, block by block."""
    m = r.shape[0]
    y = np.empty(m)
    for k in range(m):
        diagonal = 1.0 + slack[k] * slack[k]
        other = partner[k]
        if other < 0:
            y[k] = r[k] / diagonal
        else:
            other_diagonal = 1.0 + slack[other] * slack[other]
            y[k] = (other_diagonal * r[k] + r[other]) / (diagonal * other_diagonal - 1.0)
    return y


@numba_njit
def _augmented_solve(variable, sign, partner, slack, p, q):
    """The solution ``(w, y)`` of ``K (w, y) = (p, q)``: ``w + A'y = p``, ``A w = q``."""
    n = p.shape[0] - variable.shape[0]
    y = _schur_solve(partner, slack, jacobian_times(variable, sign, slack, p) - q)
    return p - jacobian_transpose_times(variable, sign, slack, y, n), y


@numba_njit
def _orthogonality(variable, sign, slack, z):
    """scipy's ``|A z| / (|A|_F |z|)``."""
    norm_z = norm(z)
    norm_a = np.sqrt(variable.shape[0] + np.sum(slack * slack))
    if norm_z == 0.0 or norm_a == 0.0:
        return 0.0
    return norm(jacobian_times(variable, sign, slack, z)) / (norm_a * norm_z)


@numba_njit
def null_space(variable, sign, partner, slack, x):
    """scipy's ``Z x``: ``x`` projected on ``A``'s null space, with scipy's refinements."""
    m = variable.shape[0]
    zeros = np.zeros(m)
    w, y = _augmented_solve(variable, sign, partner, slack, x, zeros)
    for _ in range(_MAX_REFINEMENTS):
        if _orthogonality(variable, sign, slack, w) <= _ORTHOGONALITY_TOLERANCE:
            break
        n = x.shape[0] - m
        residual_w = x - w - jacobian_transpose_times(variable, sign, slack, y, n)
        residual_y = -jacobian_times(variable, sign, slack, w)
        dw, dy = _augmented_solve(variable, sign, partner, slack, residual_w, residual_y)
        w = w + dw
        y = y + dy
    return w


@numba_njit
def least_squares(variable, sign, partner, slack, x):
    """scipy's ``LS x``: the least-squares solution ``y`` of ``A' y = x``."""
    return _schur_solve(partner, slack, jacobian_times(variable, sign, slack, x))


@numba_njit
def row_space(variable, sign, partner, slack, b, n):
    """scipy's ``Y b``: the least-norm solution of ``A w = b``."""
    return jacobian_transpose_times(variable, sign, slack, _schur_solve(partner, slack, b), n)
