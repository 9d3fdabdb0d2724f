"""scipy's size-dependent budgets from `gpubackend.scipy_options.budgets`, compiled for the
solvers."""

from gpubackend.scipy_options import budgets
from gpubackend.solvers.jit import solver_njit

minimize_maxiter = solver_njit(budgets.minimize_maxiter)
minpack_maxfev = solver_njit(budgets.minpack_maxfev)
