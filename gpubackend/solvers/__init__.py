"""Numerical solvers written in Numba, one concept per module.

Every solver takes the problem as a first argument ``fun`` that is itself a
Numba-compiled function, plus a tuple ``args`` forwarded to it. Numba
specialises the solver on the type of ``fun``, so the objective is compiled
into the solver (no Python call per evaluation) and the result can be cached
on disk with the function that calls it.

Each solver's settings are the typed settings of its scipy method
(`gpubackend.scipy_options.settings`), read by name.

Solvers never raise on non-convergence: they return the last iterate with a
``converged`` flag.

Every solver compiles with PyTensor's own ``numba_njit``: solvers are only
called from other jitted code (the lowerings), so they skip the CPython wrapper
like PyTensor's kernels, and PyTensor's fastmath setting applies to them as it
does to the rest of the compiled graph. scipy's size-dependent budgets
(`gpubackend.scipy_options.budgets`) are compiled here for them.
"""

import numba

from gpubackend.scipy_options import budgets

# Compiled with numba's own njit, before anything loads PyTensor's Numba dispatch: loading it
# registers gpubackend's lowerings, which import the solver modules, and they import these from a
# package still initialising (integer arithmetic: PyTensor's fastmath flags change nothing here).
minimize_maxiter = numba.njit(budgets.minimize_maxiter)
minpack_maxfev = numba.njit(budgets.minpack_maxfev)
tnc_maxfun = numba.njit(budgets.tnc_maxfun)
nonlin_maxiter = numba.njit(budgets.nonlin_maxiter)
direct_search_budgets = numba.njit(budgets.direct_search_budgets)

# PyTensor's Numba dispatch next, so that it does not load halfway through a solver module.
import pytensor.link.numba.dispatch  # noqa: E402, F401
