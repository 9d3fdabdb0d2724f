"""scipy's trust-region minimisation loop (``_minimize_trust_region``), one driver for
``trust-exact``, ``trust-krylov``, ``trust-ncg`` and ``dogleg``: only the subproblem differs.

The radius starts at ``initial_trust_radius`` and never exceeds
``max_trust_radius``; a step is accepted when ``rho > eta``; the loop stops
with success when ``|g|_2 < gtol`` (checked before the iteration budget, as
scipy does), and fails when the budget runs out, the model predicts no
decrease, or the subproblem fails (scipy's ``LinAlgError``); a non-finite
gradient at the start or at an accepted point raises scipy's ``ValueError``.
``fun(x, args)`` returns ``(f, grad, hess)``.

Each subproblem is ``subproblem(hess, grad, radius) -> (step, hits_boundary, solved)``;
``check_hessian(hess)`` runs on every Hessian evaluated and raises where scipy's
subproblem would refuse it on construction.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers import minimize_maxiter
from gpubackend.solvers.small_vectors import dot, norm
from gpubackend.solvers.trust_exact import exact_subproblem, refuse_non_finite
from gpubackend.solvers.trust_subproblems import dogleg_subproblem, steihaug_cg_subproblem


@numba_njit(inline="always")
def _gradient_norm(g):
    """``|g|_2``, or scipy's ``ValueError`` where ``g`` is not finite: scipy's subproblem takes
    it with ``scipy.linalg.norm``, which checks, at the start and at each accepted point."""
    for value in g:
        if not np.isfinite(value):
            raise ValueError("array must not contain infs or NaNs")
    return norm(g)


@numba_njit
def _accept_any(hessian):
    """scipy's CG-Steihaug and dogleg subproblems look at the Hessian only when they solve."""


def make_trust_region_minimize(fun: Callable, subproblem: Callable, check_hessian: Callable):
    """``solve(x0, args, settings: TrustRegionSettings) -> (x, converged)``."""

    @numba_njit
    def solve(x0, args, settings):
        gtol, radius = settings.gtol, settings.initial_trust_radius
        x = x0.astype(np.float64)
        maxiter = minimize_maxiter(settings.maxiter, x.shape[0])
        f, g, h = fun(x, args)
        check_hessian(h)
        if _gradient_norm(g) < gtol:
            return x, True
        k = 0
        while True:
            step, hits_boundary, solved = subproblem(h, g, radius)
            if not solved:
                return x, False
            # scipy's rounding: the model's value first, then the reduction from f (a reduction
            # below f's last digit is then 0, and fails as it does in scipy).
            predicted = f - (f + dot(g, step) + 0.5 * dot(step, h @ step))
            if predicted <= 0.0:
                return x, False
            x_new = x + step
            f_new, g_new, h_new = fun(x_new, args)
            check_hessian(h_new)
            rho = (f - f_new) / predicted
            if rho < 0.25:
                radius *= 0.25
            elif rho > 0.75 and hits_boundary:
                radius = min(2.0 * radius, settings.max_trust_radius)
            if rho > settings.eta:
                x, f, g, h = x_new, f_new, g_new, h_new
            k += 1
            if _gradient_norm(g) < gtol:
                return x, True
            if k >= maxiter:
                return x, False

    return solve


def make_trust_exact(fun: Callable) -> Callable:
    """scipy's ``trust-exact``: a non-finite Hessian (a NaN start) raises scipy's ``ValueError``."""
    return make_trust_region_minimize(fun, exact_subproblem, refuse_non_finite)


def make_trust_krylov(fun: Callable) -> Callable:
    """scipy's ``trust-krylov`` with the exact subproblem: trlib's Lanczos iterations converge to
    the model's global minimiser, which ``inexact=False`` asks them to reach (the same iterates
    as trust-exact); scipy's default ``inexact=True`` stops them early, on another path to the
    same minimiser (more iterations: on the 2-d Rosenbrock function, 36 against 26).

    Both methods share scipy's driver and its settings. A NaN start raises scipy's
    ``ValueError`` (scipy raises it at the gradient; its Hessian is NaN too).
    """
    return make_trust_exact(fun)


def make_trust_ncg(fun: Callable) -> Callable:
    """scipy's ``trust-ncg``: Steihaug's truncated conjugate gradients."""
    return make_trust_region_minimize(fun, steihaug_cg_subproblem, _accept_any)


def make_dogleg(fun: Callable) -> Callable:
    """scipy's ``dogleg``: fails (scipy's ``LinAlgError``) where the Hessian is not positive
    definite."""
    return make_trust_region_minimize(fun, dogleg_subproblem, _accept_any)
