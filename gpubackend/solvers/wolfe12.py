"""scipy's ``_line_search_wolfe12``: Moré-Thuente first, the strong-Wolfe search when it fails.

BFGS and Newton-CG search this way in scipy, so following it keeps their
iterates, evaluation counts and ``success`` close to scipy's. Each caller
passes the step bounds scipy gives ``line_search_wolfe1``. The Moré-Thuente
rounds run here, around the scalar search of `more_thuente`, so each trial
point is formed and evaluated in this one function.
"""

from collections.abc import Callable

from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers import more_thuente
from gpubackend.solvers.line_search import any_step, initial_step, make_strong_wolfe
from gpubackend.solvers.small_vectors import dot

# scipy's line_search_wolfe1 gives dcsrch 100 rounds, its start included.
_MAX_EVALUATIONS = 99


def make_wolfe12(
    fun: Callable, stpmin: float, stpmax: float, accept: Callable = any_step
) -> Callable:
    """``search(xk, pk, args, phi0, gk, old_phi0, c1, c2, x, condition) -> (found, alpha, f_new,
    g_new)``.

    ``x`` is a work vector of the size of ``xk``; when ``found`` is False the
    other values are meaningless and the caller stops. A step must also pass
    ``accept(gk, pk, g_new, condition)`` (scipy's ``extra_condition``): a
    Moré-Thuente step that does not is handed to the strong-Wolfe search, as in scipy.
    """
    strong_wolfe = make_strong_wolfe(fun, accept)

    # Inlined into the solver, so that its arrays cross no call on the per-evaluation path.
    @numba_njit(inline="always")
    def search(xk, pk, args, phi0, gk, old_phi0, c1, c2, x, condition):
        n = xk.shape[0]
        derphi0 = dot(gk, pk)
        stp = initial_step(phi0, old_phi0, derphi0)
        state, status = more_thuente.start(stp, phi0, derphi0, c1, c2, stpmin, stpmax)
        evaluations = 0
        while status == more_thuente.EVALUATE and evaluations < _MAX_EVALUATIONS:
            for i in range(n):
                x[i] = xk[i] + stp * pk[i]
            f, g = fun(x, args)
            evaluations += 1
            alpha = stp
            state, stp, status = more_thuente.iterate(state, alpha, f, dot(g, pk))
            if status == more_thuente.CONVERGED:
                if accept(gk, pk, g, condition):
                    return True, alpha, f, g
                break
        return strong_wolfe(xk, pk, args, phi0, gk, old_phi0, c1, c2, x, condition)

    return search
