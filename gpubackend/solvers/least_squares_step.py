"""The Gauss-Newton step ``J p = -F`` that never raises.

``np.linalg.solve`` raises inside Numba on a singular Jacobian; a solver must
report failure instead, so a rank-deficient or non-finite system falls back to
the minimum-norm least-squares step, or reports ``ok=False``.
"""

import numpy as np

from gpubackend.solvers.jit import solver_njit


@solver_njit
def all_finite(a) -> bool:
    return np.all(np.isfinite(a))


@solver_njit
def gauss_newton_step(jacobian, residual):
    """``(ok, p)`` with ``p`` minimising ``|J p + F|``; ``ok`` is False on non-finite input."""
    if not (all_finite(jacobian) and all_finite(residual)):
        return False, np.zeros_like(residual)
    step = np.linalg.lstsq(jacobian, -residual)[0]
    return all_finite(step), step
