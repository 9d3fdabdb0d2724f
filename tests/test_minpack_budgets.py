"""``root(method="hybr" | "lm")`` with a budget of a few evaluations ends where scipy's does.

scipy runs MINPACK's ``hybrj`` and ``lmder``, whose ``maxfev`` (``lm``'s
``maxiter``) counts evaluations of the equations. Where the budget runs out
just before or after convergence, ``success`` depends on every trial point:
gpubackend's solvers, which evaluated the Jacobian at every accepted point
(hybr) or damped by Marquardt's rule (lm, and optimistix's solvers under JAX),
reported ``True`` where scipy reported ``False`` and the other way round. Both
backends now take MINPACK's trial points, so ``x`` agrees with scipy's to
rounding at every budget, and ``success`` with it. The reference is scipy run
by ``FAST_COMPILE``.
"""

from __future__ import annotations

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.optimize
from pytensor.tensor.optimize import RootOp, root

from gpubackend.dispatch.numba.optimize import NATIVE_SOLVERS
from gpubackend.dispatch.numba.optimize_plan import solver_plan

x = pt.vector("x")
a = pt.vector("a")

# name: (equations, start, parameters); each has a root, reached in 6 to 12 evaluations.
PROBLEMS = {
    "cubic": (x**3 - a, [1.0, 2.0], [2.0, 5.0]),
    "coupled": (
        pt.stack([x[0] ** 2 + x[1] - a[0], x[0] - x[1] ** 3 + a[1]]),
        [0.5, 0.5],
        [1.0, 0.5],
    ),
}
BUDGET_OPTION = {"hybr": "maxfev", "lm": "maxiter"}
BUDGETS = (3, 6, 8, 12)


def _solutions(method: str, name: str):
    """The problem solved at every budget, as one graph (one compile per mode)."""
    equations, _, _ = PROBLEMS[name]
    outputs = []
    for budget in BUDGETS:
        options = {"options": {BUDGET_OPTION[method]: budget}}
        outputs.extend(root(equations, x, method=method, optimizer_kwargs=options))
    return outputs


@pytest.mark.parametrize("mode", ["NUMBA", "JAX_GPU"])
@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize("method", ["hybr", "lm"])
def test_a_small_budget_ends_where_scipys_does(method, name, mode):
    outputs = _solutions(method, name)
    _, start, parameters = PROBLEMS[name]
    values = (np.array(start), np.array(parameters))
    reference = pytensor.function([x, a], outputs, mode="FAST_COMPILE")(*values)
    got = pytensor.function([x, a], outputs, mode=mode)(*values)
    verdicts = [bool(verdict) for verdict in reference[1::2]]
    # The budgets straddle convergence: some fail and some succeed in scipy.
    assert any(verdicts) and not all(verdicts)
    for position, budget in enumerate(BUDGETS):
        solution, success = (np.asarray(value) for value in got[2 * position : 2 * position + 2])
        expected, expected_success = reference[2 * position : 2 * position + 2]
        label = f"{method} {name} with a budget of {budget}"
        assert bool(success) == bool(expected_success), label
        np.testing.assert_allclose(solution, expected, rtol=1e-10, atol=1e-12, err_msg=label)


# The problems above written as Numba functions for the solvers themselves, counting their
# evaluations in ``args[1]``: equations in element 0, Jacobians in element 1.
@numba.njit
def _cubic(x, args):
    args[1][0] += 1
    return x**3 - args[0]


@numba.njit
def _cubic_jacobian(x, args):
    args[1][1] += 1
    return np.diag(3.0 * x**2)


@numba.njit
def _coupled(x, args):
    args[1][0] += 1
    a = args[0]
    return np.array([x[0] ** 2 + x[1] - a[0], x[0] - x[1] ** 3 + a[1]])


@numba.njit
def _coupled_jacobian(x, args):
    args[1][1] += 1
    return np.array([[2.0 * x[0], 1.0], [1.0, -3.0 * x[1] ** 2]])


HAND_WRITTEN = {"cubic": (_cubic, _cubic_jacobian), "coupled": (_coupled, _coupled_jacobian)}
# scipy's statuses for "maxfev evaluations reached".
OUT_OF_BUDGET = {"hybr": 2, "lm": 5}


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize("method", ["hybr", "lm"])
def test_a_trial_point_evaluates_the_equations_alone(method, name, budget):
    """MINPACK asks for the Jacobian only where it refactors (``fcn`` with ``iflag`` 2), and
    counts its budget in evaluations of the equations; before, each evaluation computed both."""
    equations, start, parameters = PROBLEMS[name]
    options = {"options": {BUDGET_OPTION[method]: budget}}
    [solution, _] = root(equations, x, method=method, optimizer_kwargs=options)
    plan = solver_plan(solution.owner.op)
    settings = plan.settings
    residual, jacobian = HAND_WRITTEN[name]
    solve = NATIVE_SOLVERS[(RootOp, plan.solver)][1](residual, jacobian)

    @numba.njit
    def counted_solve(x0, args):
        return solve(x0, args, settings)

    x0, a = np.array(start), np.array(parameters)
    counts = np.zeros(2, dtype=np.int64)
    counted_solve(x0, (a, counts))
    scratch = np.zeros(2, dtype=np.int64)
    expected = scipy.optimize.root(
        lambda point: residual(point, (a, scratch)),
        x0,
        jac=lambda point: jacobian(point, (a, scratch)),
        method=method,
        options={BUDGET_OPTION[method]: budget},
    )
    equations_evaluated, jacobians_evaluated = counts
    label = f"{method} {name} with a budget of {budget}"
    # scipy's njev is MINPACK's own count; its nfev adds scipy's checks at the start.
    assert jacobians_evaluated == expected.njev, label
    # Converged, MINPACK may have spent its last evaluation on it.
    if expected.status == OUT_OF_BUDGET[method]:
        assert equations_evaluated == budget, label
    else:
        assert equations_evaluated <= budget, label
    assert jacobians_evaluated < equations_evaluated, label
