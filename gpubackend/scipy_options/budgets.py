"""scipy's size-dependent iteration and evaluation budgets, for settings left at their default.

Plain arithmetic on numbers, so the Numba solvers compile these very
functions (``numba.njit(minimize_maxiter)``, `gpubackend.solvers`) and the JAX lowering calls them
at trace time: the rule lives here once.
"""

from gpubackend.scipy_options.settings import MINPACK_DEFAULT, SIZE_DEPENDENT, UNLIMITED


def minimize_maxiter(maxiter: int, n: int) -> int:
    """``maxiter``, or scipy's ``200 * len(x0)`` where it is `SIZE_DEPENDENT`."""
    return 200 * n if maxiter == SIZE_DEPENDENT else maxiter


def minpack_maxfev(maxfev: int, n: int) -> int:
    """``maxfev``; where it is `MINPACK_DEFAULT`, MINPACK's ``100 * (n + 1)`` (with a Jacobian)."""
    return 100 * (n + 1) if maxfev == MINPACK_DEFAULT else maxfev


def nonlin_maxiter(maxiter: int, nit: int, n: int) -> int:
    """``maxiter``; where it is `SIZE_DEPENDENT`, scipy's ``nit + 1``, or ``100 * (n + 1)`` without
    ``nit`` (``nonlin_solve``)."""
    if maxiter != SIZE_DEPENDENT:
        return maxiter
    return 100 * (n + 1) if nit == UNLIMITED else nit + 1
