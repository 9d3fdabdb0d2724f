"""Newton's method for ``F(x) = 0`` with an analytic Jacobian (gpubackend's
``root(method="newton")``).

scipy's ``root`` has no plain Newton method; this one takes full Gauss-Newton
steps and converges when a step is at most ``xtol * (1 + |x|)``, or the
residual is exactly zero.
"""

from collections.abc import Callable

import numpy as np

from gpubackend.solvers.jit import solver_njit
from gpubackend.solvers.least_squares_step import gauss_newton_step


def make_newton_root(fun: Callable) -> Callable:
    """``solve(x0, args, settings: NewtonRootSettings) -> (x, converged)``; ``fun`` returns
    ``(F, J)``."""

    @solver_njit
    def solve(x0, args, settings):
        xtol = settings.xtol
        x = x0.astype(np.float64)
        for _ in range(settings.maxiter):
            residual, jacobian = fun(x, args)
            if np.all(residual == 0.0):
                return x, True
            ok, step = gauss_newton_step(jacobian, residual)
            if not ok:
                return x, False
            x = x + step
            if np.linalg.norm(step) <= xtol * (1.0 + np.linalg.norm(x)):
                return x, True
        return x, False

    return solve
