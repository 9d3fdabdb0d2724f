"""Diagonal Jacobian approximations for `nonlin_solve`: scipy's ``DiagBroyden``
(``root(method="diagbroyden")``), ``LinearMixing`` (``"linearmixing"``) and ``ExcitingMixing``
(``"excitingmixing"``).

Each keeps ``J^-1`` as a diagonal: ``-alpha I`` throughout (linear mixing);
per-element steps ``beta`` that grow by ``alpha`` while an element of ``F``
keeps its sign and fall back to ``alpha`` when it flips, within
``[0, alphamax]`` (exciting mixing); or the diagonal ``d`` of ``J`` itself,
given the diagonal part of Broyden's update (diagonal Broyden). ``alpha`` is
``jac_options.alpha``, or scipy's autoscaled one (`initial_alpha`).
"""

from typing import NamedTuple

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.nonlin_solve import initial_alpha, make_nonlin_solver
from gpubackend.solvers.small_vectors import norm


@numba_njit(error_model="numpy")
def setup_linear_mixing(x, f, options):
    return initial_alpha(options.alpha, x, f)


@numba_njit(error_model="numpy")
def inverse_times_linear_mixing(alpha, options, f, tol):
    return alpha, -alpha * f


@numba_njit
def update_linear_mixing(alpha, options, x, f, x_previous, f_previous):
    return alpha


class ExcitingSteps(NamedTuple):
    """Exciting mixing's ``J^-1 = -diag(beta)``; ``alpha`` is the increment and the reset value."""

    alpha: float
    beta: np.ndarray


@numba_njit(error_model="numpy")
def setup_exciting_mixing(x, f, options):
    alpha = initial_alpha(options.alpha, x, f)
    return ExcitingSteps(alpha, np.full(x.shape[0], alpha))


@numba_njit(error_model="numpy")
def inverse_times_exciting_mixing(steps, options, f, tol):
    return steps, -f * steps.beta


@numba_njit(error_model="numpy")
def update_exciting_mixing(steps, options, x, f, x_previous, f_previous):
    """scipy's ``ExcitingMixing._update``: the sign of ``F`` held, the step grows."""
    beta = steps.beta + steps.alpha
    beta[~(f * f_previous > 0)] = steps.alpha
    return ExcitingSteps(steps.alpha, np.minimum(np.maximum(beta, 0.0), options.alphamax))


@numba_njit(error_model="numpy")
def setup_diagonal_broyden(x, f, options):
    """``J``'s diagonal, ``-1 / alpha`` (scipy stores ``d = 1 / alpha`` for ``J = -diag(d)``)."""
    return np.full(x.shape[0], 1.0 / initial_alpha(options.alpha, x, f))


@numba_njit(error_model="numpy")
def inverse_times_diagonal_broyden(d, options, f, tol):
    return d, -f / d


@numba_njit(error_model="numpy")
def update_diagonal_broyden(d, options, x, f, x_previous, f_previous):
    """scipy's ``DiagBroyden._update``: the diagonal of Broyden's first update of ``J``."""
    dx, df = x - x_previous, f - f_previous
    return d - (df + d * dx) * dx / norm(dx) ** 2


make_linear_mixing = make_nonlin_solver(
    setup_linear_mixing, inverse_times_linear_mixing, update_linear_mixing
)
make_exciting_mixing = make_nonlin_solver(
    setup_exciting_mixing, inverse_times_exciting_mixing, update_exciting_mixing
)
make_diagonal_broyden = make_nonlin_solver(
    setup_diagonal_broyden, inverse_times_diagonal_broyden, update_diagonal_broyden
)
