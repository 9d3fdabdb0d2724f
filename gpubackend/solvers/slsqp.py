"""scipy's SLSQP (Kraft's sequential least squares programming) without constraints.

With no equality or inequality constraints (PyTensor's ``minimize`` has none)
Kraft's method is a quasi-Newton method: the search direction minimises the
quadratic model ``g's + 0.5 s'Bs`` inside the bounds (`box_qp`), B is
updated by Powell's damped BFGS formula, and the step is chosen by Kraft's
inexact line search on ``f`` (the L1 merit function with no constraint
terms). The control flow is scipy's ``__slsqp_body`` line for line:

- before each iteration, ``maxiter`` iterations done is scipy's exit 9
  ("Iteration limit reached", a failure);
- ``|g's| < ftol`` at the start of an iteration is success without moving;
- ``g's >= 0`` (not a descent direction) resets B to the identity, at most 5
  times; then scipy's relaxed test decides (exit 8 or success);
- the line search tries ``alpha = 1`` and shrinks by the safeguarded
  quadratic interpolation ``max(h3 / (2 (h3 - h1)), 0.1)`` until
  ``f - f0 <= alpha g's / 10``, at most 10 times;
- after the step, ``|f - f0| < ftol`` or ``|s|_2 < ftol`` is success;
- a singular update (``s'y`` or ``s'Bs`` zero) resets B.

B is kept as a dense matrix instead of scipy's LDL' factors, and each trial
point evaluates the value and gradient together (scipy evaluates the gradient
only at the accepted point).
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.box_bounds import clip, expand_bound
from gpubackend.solvers.box_qp import box_qp
from gpubackend.solvers.small_vectors import dot, norm

_MAX_RESETS = 5
_MAX_LINE_SEARCH = 10
_SMALLEST_SHRINK = 0.1


@numba_njit(inline="always")
def _damped_bfgs_update(hessian, step, gradient_change, hessian_step):
    """Powell's damped BFGS update of B; False where it is singular (scipy then resets B)."""
    n = step.shape[0]
    for i in range(n):
        total = 0.0
        for j in range(n):
            total += hessian[i, j] * step[j]
        hessian_step[i] = total
    curvature = dot(step, gradient_change)
    model_curvature = dot(step, hessian_step)
    floor = 0.2 * model_curvature
    if curvature < floor:
        theta = (model_curvature - floor) / (model_curvature - curvature)
        curvature = floor
        for i in range(n):
            gradient_change[i] = theta * gradient_change[i] + (1.0 - theta) * hessian_step[i]
    if curvature == 0.0 or model_curvature == 0.0:
        return False
    for i in range(n):
        for j in range(n):
            hessian[i, j] += (
                gradient_change[i] * gradient_change[j] / curvature
                - hessian_step[i] * hessian_step[j] / model_curvature
            )
    return True


@numba_njit(inline="always")
def _reset(hessian):
    n = hessian.shape[0]
    for i in range(n):
        for j in range(n):
            hessian[i, j] = 1.0 if i == j else 0.0


def make_slsqp(fun: Callable) -> Callable:
    """``solve(x0, args, settings: SLSQPSettings) -> (x, converged)``; ``fun(x, args)`` returns
    ``(f, grad)``."""

    @numba_njit
    def solve(x0, args, settings):
        acc = abs(settings.ftol)
        relaxed = 10.0 * acc
        n = x0.shape[0]
        lower = expand_bound(settings.bounds[0], n)
        upper = expand_bound(settings.bounds[1], n)
        x = np.empty(n)
        for i in range(n):
            x[i] = clip(np.float64(x0[i]), lower[i], upper[i])
        f, g = fun(x, args)
        hessian = np.eye(n)
        x_start, to_lower, to_upper = np.empty(n), np.empty(n), np.empty(n)
        gradient_change, hessian_step = np.empty(n), np.empty(n)
        step = np.zeros(n)
        f_start = f
        resets = 1
        iterations = 0
        while iterations < settings.maxiter:
            iterations += 1
            for i in range(n):
                to_lower[i] = lower[i] - x[i]
                to_upper[i] = upper[i] - x[i]
            step, solved = box_qp(hessian, g, to_lower, to_upper, 3 * (2 * n + 1))
            if not solved:
                return x, False
            slope = dot(g, step)
            if abs(slope) < acc and f == f:
                return x, True
            f_start = f
            x_start[:] = x
            if slope >= 0.0:
                resets += 1
                if resets > _MAX_RESETS:
                    break
                _reset(hessian)
                continue
            alpha, expected = 1.0, slope
            f_new, g_new = f, g
            for line in range(1, _MAX_LINE_SEARCH + 2):
                expected *= alpha
                for i in range(n):
                    step[i] *= alpha
                    x[i] = x_start[i] + step[i]
                f_new, g_new = fun(x, args)
                decrease = f_new - f_start
                if decrease <= expected / 10.0 or line > _MAX_LINE_SEARCH:
                    break
                alpha = expected / (2.0 * (expected - decrease))
                # C's fmax: a NaN proposal (f NaN at the trial point) shrinks by the floor.
                alpha = alpha if alpha > _SMALLEST_SHRINK else _SMALLEST_SHRINK
            if (abs(f_new - f_start) < acc or norm(step) < acc) and f_new == f_new:
                return x, True
            for i in range(n):
                gradient_change[i] = g_new[i] - g[i]
            f, g = f_new, g_new
            if not _damped_bfgs_update(hessian, step, gradient_change, hessian_step):
                resets += 1
                if resets > _MAX_RESETS:
                    break
                _reset(hessian)
        else:
            return x, False  # scipy's exit 9: out of iterations
        # scipy's relaxed test after the resets run out (exit 8 where it fails).
        return x, (abs(f - f_start) < relaxed or norm(step) < relaxed) and f == f

    return solve
