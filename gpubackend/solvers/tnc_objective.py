"""The objective as scipy's TNC calls it: on the free variables, remembering the last point.

scipy's ``minimize(method="TNC")`` takes the variables that ``bounds`` fix
(lower == upper) out of the problem and calls the objective with them at their
bound. It is evaluated through scipy's ``ScalarFunction`` (and PyTensor's
one-entry cache), which calls the objective again only at a point different
from the last one: ``evaluate`` does the same, so the objective runs exactly as
often as under scipy, while ``tnc.c``'s own count (its ``maxfun`` budget) counts
every request.
"""

from collections.abc import Callable

import numpy as np

from gpubackend.solvers.ieee import ieee_njit

# The memo's scalars: the last value, and whether a point has been evaluated.
_LAST_VALUE, _HAS_LAST = 0, 1


@ieee_njit
def free_problem(x0, lo, hi, args):
    """``(problem, free)``: the state `make_tnc_objective`'s ``evaluate`` reads, and the indices
    of the variables the bounds leave free. The fixed ones sit at their bound in every point."""
    n = x0.shape[0]
    free = np.nonzero(lo != hi)[0]
    full = x0.copy()
    for i in range(n):
        if lo[i] == hi[i]:
            full[i] = lo[i]
    return (args, free, full, np.empty(n), np.empty(n), np.zeros(2)), free


def make_tnc_objective(fun: Callable) -> Callable:
    """``evaluate(point, gradient, problem) -> f`` on the free variables (``gradient`` receives
    theirs), from ``fun(x, args) -> (f, grad)`` on all of them."""

    @ieee_njit
    def evaluate(point, gradient, problem):
        args, free, full, last_point, last_gradient, memo = problem
        for k in range(free.shape[0]):
            full[free[k]] = point[k]
        same = memo[_HAS_LAST] != 0.0
        if same:
            for i in range(full.shape[0]):
                if full[i] != last_point[i]:
                    same = False
                    break
        if not same:
            f, g = fun(full, args)
            memo[_LAST_VALUE] = f
            memo[_HAS_LAST] = 1.0
            last_point[:] = full
            last_gradient[:] = g
        for k in range(free.shape[0]):
            gradient[k] = last_gradient[free[k]]
        return memo[_LAST_VALUE]

    return evaluate
