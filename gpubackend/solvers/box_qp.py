"""The minimiser of a strictly convex quadratic over a box, exactly: a primal active-set method.

``min 0.5 s'Bs + g's`` subject to ``lower <= s <= upper`` (``-inf``/``inf``
where a side is open). SLSQP's search direction is this problem (Kraft's
LSQ reduces it to a least-distance problem solved by NNLS); B positive
definite makes its solution unique, so any exact method finds the same step.
Here the variables off their bounds take a Newton step on the reduced
problem (a Cholesky solve of B's free block), stopped at the first bound it
crosses, which then joins the active set; once a full step stays inside, the
bound whose multiplier has the wrong sign most leaves the set, until none has.
"""

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers.trust_subproblems import _cholesky_solve

FREE, AT_LOWER, AT_UPPER = 0, 1, 2


@numba_njit
def box_qp(hessian, gradient, lower, upper, max_changes):
    """``(s, solved)``; ``solved`` is False where B's free block is not positive definite or the
    active set changed more than ``max_changes`` times (scipy's NNLS: more than 3n iterations)."""
    n = gradient.shape[0]
    s = np.zeros(n)
    state = np.zeros(n, dtype=np.int8)
    for i in range(n):
        s[i] = min(max(0.0, lower[i]), upper[i])
    reduced = np.empty((n, n))
    rhs = np.empty(n)
    for _ in range(max_changes + 1):
        for i in range(n):
            total = gradient[i]
            for j in range(n):
                total += hessian[i, j] * s[j]
            rhs[i] = -total if state[i] == FREE else 0.0
            for j in range(n):
                both_free = state[i] == FREE and state[j] == FREE
                reduced[i, j] = hessian[i, j] if both_free else (1.0 if i == j else 0.0)
        step, factored = _cholesky_solve(reduced, rhs)
        if not factored:
            return s, False
        length, blocking, side = 1.0, -1, FREE
        for i in range(n):
            if step[i] < 0.0 and s[i] + step[i] < lower[i]:
                to_bound = (lower[i] - s[i]) / step[i]
                if to_bound < length:
                    length, blocking, side = to_bound, i, AT_LOWER
            elif step[i] > 0.0 and s[i] + step[i] > upper[i]:
                to_bound = (upper[i] - s[i]) / step[i]
                if to_bound < length:
                    length, blocking, side = to_bound, i, AT_UPPER
        for i in range(n):
            s[i] += length * step[i]
        if blocking >= 0:
            s[blocking] = lower[blocking] if side == AT_LOWER else upper[blocking]
            state[blocking] = side
            continue
        # The reduced problem is solved: release the bound whose multiplier is most wrong.
        worst, leaving = 0.0, -1
        for i in range(n):
            if state[i] == FREE:
                continue
            total = gradient[i]
            for j in range(n):
                total += hessian[i, j] * s[j]
            wrong = -total if state[i] == AT_LOWER else total
            if wrong > worst:
                worst, leaving = wrong, i
        if leaving < 0:
            return s, True
        state[leaving] = FREE
    return s, False
