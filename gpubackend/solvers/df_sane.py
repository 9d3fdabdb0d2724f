"""DF-SANE, the derivative-free spectral residual method (port of scipy's ``_root_df_sane``).

Each iteration steps along ``-sigma F`` with a nonmonotone backtracking
search that tries ``+alpha`` and ``-alpha`` in turn (La Cruz, Martinez and
Raydan's, or Cheng and Li's with ``line_search="cheng"``), then takes the
spectral coefficient ``sigma = s.s / s.y`` from the step. The merit is
``|F|**2`` and the slack ``eta_k = |F(x0)|**2 / (1 + k)**2``, scipy's default
``eta_strategy``. Only the equations are evaluated, never a Jacobian.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.small_vectors import dot, norm

# scipy's search parameters (``_nonmonotone_line_search_cruz`` / ``_cheng``), not options.
GAMMA = 1e-4
TAU_MIN = 0.1
TAU_MAX = 0.5
NU = 0.85


@numba_njit(inline="always")
def ieee_ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` as numpy divides (inf or NaN for a zero denominator), where
    Numba's Python error model would raise ``ZeroDivisionError``."""
    if denominator != 0.0:
        return numerator / denominator
    if numerator == 0.0 or np.isnan(numerator):
        return np.nan
    return np.inf if (numerator > 0) == (not np.signbit(denominator)) else -np.inf


@numba_njit(inline="always")
def clip(value: float, lower: float, upper: float) -> float:
    """``np.clip`` of a float: NaN stays NaN."""
    if value < lower:
        return lower
    if value > upper:
        return upper
    return value


@numba_njit(inline="always")
def next_trial_length(alpha: float, merit: float, trial_merit: float) -> float:
    """The minimiser of the quadratic through the merit along the search, kept within
    ``[TAU_MIN alpha, TAU_MAX alpha]``."""
    trial = ieee_ratio(alpha * alpha * merit, trial_merit + (2 * alpha - 1) * merit)
    return clip(trial, TAU_MIN * alpha, TAU_MAX * alpha)


@numba_njit(inline="always")
def bounded_spectral_coefficient(sigma: float, sigma_eps: float) -> float:
    """scipy's safeguard: ``sigma_eps <= |sigma| <= 1 / sigma_eps`` (NaN stays NaN)."""
    if abs(sigma) > 1 / sigma_eps:
        return np.sign(sigma) / sigma_eps
    if abs(sigma) < sigma_eps:
        return sigma_eps
    return sigma


def make_df_sane(residual: Callable) -> Callable:
    """``solve(x0, args, settings: DFSaneSettings) -> (x, converged)``.

    ``converged`` is scipy's ``success``: ``|F| < ftol |F(x0)| + fatol`` at the
    returned iterate; out of evaluations (``maxfev``, the first included) it is
    False and ``x`` is the last accepted iterate, as in scipy.
    """

    @numba_njit
    def solve(x0, args, settings):
        if settings.M < 1:
            raise ValueError("root(method='df-sane') option 'M' must be at least 1")
        cheng = settings.line_search == "cheng"
        x = x0.copy()
        residuals = residual(x, args)
        evaluations = 1
        merit = norm(residuals) ** 2
        first_merit = merit
        threshold = settings.ftol * np.sqrt(first_merit) + settings.fatol
        sigma = settings.sigma_0
        # The last M merits, for La Cruz's search (a ring; ``recent`` of them are filled).
        window = np.empty(settings.M)
        window[0] = merit
        recent, newest = 1, 0
        # Cheng and Li's averaged merit and its weight.
        average, weight = first_merit, 1.0
        k = 0
        while True:
            if np.sqrt(merit) < threshold:
                return x, True
            sigma = bounded_spectral_coefficient(sigma, settings.sigma_eps)
            direction = -sigma * residuals
            eta = first_merit / (1 + k) ** 2
            reference = average if cheng else np.max(window[:recent])
            alpha_plus = alpha_minus = 1.0
            while True:
                if evaluations >= settings.maxfev:
                    return x, False
                trial = x + alpha_plus * direction
                trial_residuals = residual(trial, args)
                evaluations += 1
                trial_merit = norm(trial_residuals) ** 2
                if trial_merit <= reference + eta - GAMMA * alpha_plus**2 * merit:
                    break
                next_plus = next_trial_length(alpha_plus, merit, trial_merit)
                if evaluations >= settings.maxfev:
                    return x, False
                trial = x - alpha_minus * direction
                trial_residuals = residual(trial, args)
                evaluations += 1
                trial_merit = norm(trial_residuals) ** 2
                if trial_merit <= reference + eta - GAMMA * alpha_minus**2 * merit:
                    break
                alpha_minus = next_trial_length(alpha_minus, merit, trial_merit)
                alpha_plus = next_plus
            if cheng:
                next_weight = NU * weight + 1
                average = (NU * weight * (average + eta) + trial_merit) / next_weight
                weight = next_weight
            step = trial - x
            sigma = ieee_ratio(dot(step, step), dot(step, trial_residuals - residuals))
            x, residuals, merit = trial, trial_residuals, trial_merit
            newest = (newest + 1) % settings.M
            window[newest] = merit
            recent = min(recent + 1, settings.M)
            k += 1

    return solve
