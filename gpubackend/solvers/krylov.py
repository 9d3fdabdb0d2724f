"""Newton-Krylov for `nonlin_solve`: scipy's ``KrylovJacobian`` (``root(method="krylov")``).

``J^-1 f`` is solved by an inner Krylov method (`gpubackend.solvers.krylov_inner`:
lgmres, scipy's default, or gmres) whose products ``J v`` are forward
differences at the last accepted point ``x0``:
``(F(x0 + sc v) - F(x0)) / sc`` with ``sc = omega / |v|`` and
``omega = rdiff max(1, |x0|_inf) / max(1, |F(x0)|_inf)``. The inner
tolerance is the driver's forcing term (``inner_rtol`` where given), the
absolute one ``inner_atol`` (scipy's 0). lgmres's outer directions are
carried from one nonlinear step to the next, as scipy carries its
``outer_v`` list. A non-finite product from a finite ``v`` is scipy's
``ValueError``.
"""

from typing import NamedTuple

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.krylov_inner import make_gmres, make_lgmres
from gpubackend.solvers.nonlin_solve import make_matrix_free_nonlin_solver
from gpubackend.solvers.small_vectors import all_finite, max_abs, norm

_SQRT_EPS = float(np.finfo(np.float64).eps ** 0.5)


class KrylovState(NamedTuple):
    """The point the products are taken at, their step scale, and lgmres's kept directions (the
    first ``kept`` rows of ``outer``, oldest first)."""

    x0: np.ndarray
    f0: np.ndarray
    omega: float
    outer: np.ndarray
    kept: int


@numba_njit(error_model="numpy")
def _at(x, f, options, outer, kept):
    """scipy's ``_update_diff_step`` at ``(x, F(x))``."""
    rdiff = _SQRT_EPS if np.isnan(options.rdiff) else options.rdiff
    omega = rdiff * max(1.0, max_abs(x)) / max(1.0, max_abs(f))
    return KrylovState(x, f, omega, outer, kept)


@numba_njit(error_model="numpy")
def setup(x, f, options):
    outer_k = options.outer_k if options.method == "lgmres" else 0
    return _at(x.copy(), f, options, np.zeros((outer_k, x.shape[0])), 0)


@numba_njit(error_model="numpy")
def update(state, options, x, f, x_previous, f_previous):
    return _at(x.copy(), f, options, state.outer, state.kept)


def bind_inverse_times(residual):
    @numba_njit(error_model="numpy")
    def jacobian_times(operand, v):
        """scipy's ``KrylovJacobian.matvec``."""
        state, args = operand
        v_norm = norm(v)
        if v_norm == 0.0:
            return 0.0 * v
        scale = state.omega / v_norm
        product = (residual(state.x0 + scale * v, args) - state.f0) / scale
        if not all_finite(product) and all_finite(v):
            raise ValueError("Function returned non-finite results")
        return product

    lgmres = make_lgmres(jacobian_times)
    gmres = make_gmres(jacobian_times)

    @numba_njit(error_model="numpy")
    def inverse_times(state, options, f, tol, args):
        """scipy's ``KrylovJacobian.solve``."""
        rtol = tol if np.isnan(options.inner_rtol) else options.inner_rtol
        if options.method == "gmres":
            restart = options.inner_maxiter if options.inner_restart < 0 else options.inner_restart
            return state, gmres((state, args), f, rtol, options.inner_atol, restart)
        x, kept = lgmres(
            (state, args),
            f,
            rtol,
            options.inner_atol,
            options.inner_inner_m,
            state.outer,
            state.kept,
        )
        return KrylovState(state.x0, state.f0, state.omega, state.outer, kept), x

    return inverse_times


make_krylov = make_matrix_free_nonlin_solver(setup, bind_inverse_times, update)
