"""scipy's size-dependent iteration and evaluation budgets, for settings left at their default.

Plain arithmetic on numbers, so the Numba solvers compile these very
functions (``numba.njit(minimize_maxiter)``, `gpubackend.solvers`) and the JAX lowering calls them
at trace time: the rule lives here once.
"""

from gpubackend.scipy_options.settings import MINPACK_DEFAULT, SIZE_DEPENDENT, UNTIL_CONVERGED


def minimize_maxiter(maxiter: int, n: int) -> int:
    """``maxiter``, or scipy's ``200 * len(x0)`` where it is `SIZE_DEPENDENT`."""
    return 200 * n if maxiter == SIZE_DEPENDENT else maxiter


def tnc_maxfun(maxfun: int, n: int) -> int:
    """``maxfun``, or TNC's ``max(100, 10 * len(x0))`` where it is `SIZE_DEPENDENT`."""
    return max(100, 10 * n) if maxfun == SIZE_DEPENDENT else maxfun


def minpack_maxfev(maxfev: int, n: int) -> int:
    """``maxfev``; where it is `MINPACK_DEFAULT`, MINPACK's ``100 * (n + 1)`` (with a Jacobian)."""
    return 100 * (n + 1) if maxfev == MINPACK_DEFAULT else maxfev


def nonlin_maxiter(maxiter: int, nit: int, n: int) -> int:
    """``maxiter``; where it is `SIZE_DEPENDENT`, scipy's ``nit + 1``, or ``100 * (n + 1)`` without
    ``nit`` (``nonlin_solve``)."""
    if maxiter != SIZE_DEPENDENT:
        return maxiter
    return 100 * (n + 1) if nit == UNTIL_CONVERGED else nit + 1


NELDER_MEAD_PER_VARIABLE = 200
"""Nelder-Mead's default budgets: ``200 * len(x0)`` iterations and evaluations."""

POWELL_PER_VARIABLE = 1000
"""Powell's default budgets: ``1000 * len(x0)`` iterations and evaluations."""

UNLIMITED = 2**31 - 1
"""A budget scipy leaves at ``np.inf``: more than any solve can spend, and an int32 still."""


def direct_search_budgets(maxiter: int, maxfev: int, n: int, per_variable: int) -> tuple[int, int]:
    """``(maxiter, maxfev)`` of Nelder-Mead (``per_variable`` 200) and Powell (1000), as scipy sets
    them: both `SIZE_DEPENDENT` are ``per_variable * n`` each; one set leaves the other unlimited.
    """
    if maxiter == SIZE_DEPENDENT and maxfev == SIZE_DEPENDENT:
        return per_variable * n, per_variable * n
    if maxiter == SIZE_DEPENDENT:
        return UNLIMITED, maxfev
    if maxfev == SIZE_DEPENDENT:
        return maxiter, UNLIMITED
    return maxiter, maxfev
