"""Levenberg-Marquardt for ``F(x) = 0`` with an analytic Jacobian: MINPACK's ``lmder``, the solver
behind scipy's ``root(method="lm")``.

The iteration is MINPACK's, step for step: the Jacobian is evaluated and
factored by Householder reflections with column pivoting at every accepted
point (a trial point evaluates the equations alone: ``lmder``'s ``fcn`` with
``iflag`` 1, not 2); each trial step solves the damped least-squares problem
whose step fills the trust region (`levenberg_marquardt_parameter`, MINPACK's
``lmpar``, with the damped system solved by Givens rotations, ``qrsolv``); the
trust region, the scaling by the Jacobian's column norms and the verdicts are
``lmder``'s. Converged: small actual and predicted reductions (``ftol``), a
trust region below ``xtol`` relative to the scaled iterate, or a gradient
cosine below ``gtol`` (an exact root has cosine 0); failed: ``maxfev``
evaluations, or tolerances below what the arithmetic resolves. So a budget of a
few evaluations ends where scipy's does, with the same ``success``.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers import minpack_maxfev
from gpubackend.solvers.householder_qr import apply_qt, householder_qr
from gpubackend.solvers.small_vectors import all_finite, norm
from gpubackend.solvers.trust_region import initial_scaling

_EPS = np.finfo(np.float64).eps
_DWARF = np.finfo(np.float64).tiny


@numba_njit
def _damped_solve(r, permutation, diag, qtb, x, sdiag):
    """MINPACK's ``qrsolv``: ``x`` minimising ``|A x - b|^2 + |diag * x|^2`` where ``A P = Q R``
    and ``qtb = Q^T b``; the triangular ``S`` with ``S^T S = R^T R + (P^T D P)^2`` is left in
    ``r``'s strict lower triangle (transposed) and ``sdiag``."""
    n = r.shape[0]
    saved_diagonal = np.empty(n)
    rotated_qtb = np.empty(n)
    for j in range(n):
        for i in range(j, n):
            r[i, j] = r[j, i]
        saved_diagonal[j] = r[j, j]
        rotated_qtb[j] = qtb[j]
    for j in range(n):
        d = diag[permutation[j]]
        if d != 0.0:
            for k in range(j, n):
                sdiag[k] = 0.0
            sdiag[j] = d
            extra = 0.0
            for k in range(j, n):
                if sdiag[k] == 0.0:
                    continue
                if abs(r[k, k]) < abs(sdiag[k]):
                    cotangent = r[k, k] / sdiag[k]
                    sin = 0.5 / np.sqrt(0.25 + 0.25 * cotangent**2)
                    cos = sin * cotangent
                else:
                    tangent = sdiag[k] / r[k, k]
                    cos = 0.5 / np.sqrt(0.25 + 0.25 * tangent**2)
                    sin = cos * tangent
                r[k, k] = cos * r[k, k] + sin * sdiag[k]
                rotated = cos * rotated_qtb[k] + sin * extra
                extra = -sin * rotated_qtb[k] + cos * extra
                rotated_qtb[k] = rotated
                for i in range(k + 1, n):
                    rotated = cos * r[i, k] + sin * sdiag[i]
                    sdiag[i] = -sin * r[i, k] + cos * sdiag[i]
                    r[i, k] = rotated
        sdiag[j] = r[j, j]
        r[j, j] = saved_diagonal[j]
    rank = n
    for j in range(n):
        if sdiag[j] == 0.0 and rank == n:
            rank = j
        if rank < n:
            rotated_qtb[j] = 0.0
    for j in range(rank - 1, -1, -1):
        total = 0.0
        for i in range(j + 1, rank):
            total += r[i, j] * rotated_qtb[i]
        rotated_qtb[j] = (rotated_qtb[j] - total) / sdiag[j]
    for j in range(n):
        x[permutation[j]] = rotated_qtb[j]


@numba_njit
def levenberg_marquardt_parameter(r, permutation, diag, qtb, delta, par, x):
    """MINPACK's ``lmpar``: the damping ``par`` (returned) whose step ``x`` (minus the step) has
    ``|diag * x|`` within 10 % of ``delta``, or is the Gauss-Newton step inside it (``par = 0``);
    at most 10 solves."""
    n = r.shape[0]
    work = np.empty(n)
    sdiag = np.empty(n)
    rank = n
    for j in range(n):
        work[j] = qtb[j]
        if r[j, j] == 0.0 and rank == n:
            rank = j
        if rank < n:
            work[j] = 0.0
    for j in range(rank - 1, -1, -1):
        work[j] /= r[j, j]
        for i in range(j):
            work[i] -= r[i, j] * work[j]
    for j in range(n):
        x[permutation[j]] = work[j]
    scaled = diag * x
    dxnorm = norm(scaled)
    fp = dxnorm - delta
    if fp <= 0.1 * delta:
        return 0.0
    lower = 0.0
    if rank == n:
        for j in range(n):
            work[j] = diag[permutation[j]] * (scaled[permutation[j]] / dxnorm)
        for j in range(n):
            total = 0.0
            for i in range(j):
                total += r[i, j] * work[i]
            work[j] = (work[j] - total) / r[j, j]
        temp = norm(work)
        lower = ((fp / delta) / temp) / temp
    for j in range(n):
        total = 0.0
        for i in range(j + 1):
            total += r[i, j] * qtb[i]
        work[j] = total / diag[permutation[j]]
    gnorm = norm(work)
    upper = gnorm / delta
    if upper == 0.0:
        upper = _DWARF / min(delta, 0.1)
    par = min(max(par, lower), upper)
    if par == 0.0:
        par = gnorm / dxnorm
    damping = np.empty(n)
    for iteration in range(1, 11):
        if par == 0.0:
            par = max(_DWARF, 0.001 * upper)
        root_par = np.sqrt(par)
        for j in range(n):
            damping[j] = root_par * diag[j]
        _damped_solve(r, permutation, damping, qtb, x, sdiag)
        scaled = diag * x
        dxnorm = norm(scaled)
        previous = fp
        fp = dxnorm - delta
        if (
            abs(fp) <= 0.1 * delta
            or (lower == 0.0 and fp <= previous and previous < 0.0)
            or iteration == 10
        ):
            return par
        for j in range(n):
            work[j] = diag[permutation[j]] * (scaled[permutation[j]] / dxnorm)
        for j in range(n):
            work[j] /= sdiag[j]
            for i in range(j + 1, n):
                work[i] -= r[i, j] * work[j]
        temp = norm(work)
        correction = ((fp / delta) / temp) / temp
        if fp > 0.0:
            lower = max(lower, par)
        if fp < 0.0:
            upper = min(upper, par)
        par = max(lower, par + correction)
    return par


def make_levenberg_marquardt(residual: Callable, jacobian: Callable) -> Callable:
    """``solve(x0, args, settings: LMSettings) -> (x, converged)``; ``residual(x, args)`` returns
    ``F``, ``jacobian(x, args)`` its Jacobian.

    ``settings.maxiter`` counts evaluations of ``residual``, as scipy's does (MINPACK's
    ``maxfev``).
    """

    @numba_njit
    def solve(x0, args, settings):
        xtol, ftol, gtol, factor = settings.xtol, settings.ftol, settings.gtol, settings.factor
        x = x0.astype(np.float64)
        n = x.shape[0]
        maxfev = minpack_maxfev(settings.maxiter, n)
        fvec = residual(x, args)
        nfev = 1
        if not all_finite(fvec):
            return x, False
        fnorm = norm(fvec)
        diag = np.empty(n)
        rdiag, norms = np.empty(n), np.empty(n)
        permutation = np.empty(n, dtype=np.int64)
        step = np.empty(n)
        predicted_image = np.empty(n)
        par = 0.0
        first = True
        delta = xnorm = 0.0
        while True:
            r = jacobian(x, args).astype(np.float64)
            if not all_finite(r):
                return x, False
            householder_qr(r, True, rdiag, norms, permutation)
            if first:
                xnorm, delta = initial_scaling(norms, x, factor, diag)
            qtf_full = fvec.astype(np.float64).copy()
            apply_qt(r, qtf_full)
            qtf = qtf_full[:n].copy()
            for j in range(n):
                r[j, j] = rdiag[j]
            r = r[:n, :].copy()
            gnorm = 0.0
            if fnorm != 0.0:
                for j in range(n):
                    column = permutation[j]
                    if norms[column] != 0.0:
                        total = 0.0
                        for i in range(j + 1):
                            total += r[i, j] * (qtf[i] / fnorm)
                        gnorm = max(gnorm, abs(total / norms[column]))
            if gnorm <= gtol:
                return x, True
            for j in range(n):
                diag[j] = max(diag[j], norms[j])
            while True:
                par = levenberg_marquardt_parameter(r, permutation, diag, qtf, delta, par, step)
                p = -step
                x_new = x + p
                pnorm = norm(diag * p)
                if first:
                    delta = min(delta, pnorm)
                fvec_new = residual(x_new, args)
                nfev += 1
                # NaN where the equations are: no reduction, as MINPACK's comparisons read it.
                fnorm_new = norm(fvec_new)
                actual = 1.0 - (fnorm_new / fnorm) ** 2 if 0.1 * fnorm_new < fnorm else -1.0
                for i in range(n):
                    predicted_image[i] = 0.0
                for j in range(n):
                    moved = p[permutation[j]]
                    for i in range(j + 1):
                        predicted_image[i] += r[i, j] * moved
                temp1 = norm(predicted_image) / fnorm
                temp2 = (np.sqrt(par) * pnorm) / fnorm
                predicted = temp1**2 + temp2**2 / 0.5
                directional = -(temp1**2 + temp2**2)
                ratio = actual / predicted if predicted != 0.0 else 0.0
                if ratio <= 0.25:
                    if actual >= 0.0:
                        shrink = 0.5
                    else:
                        shrink = 0.5 * directional / (directional + 0.5 * actual)
                    if 0.1 * fnorm_new >= fnorm or shrink < 0.1:
                        shrink = 0.1
                    delta = shrink * min(delta, pnorm / 0.1)
                    par = par / shrink
                elif par == 0.0 or ratio >= 0.75:
                    delta = pnorm / 0.5
                    par = 0.5 * par
                accepted = ratio >= 1e-4
                if accepted:
                    x = x_new
                    fvec = fvec_new
                    xnorm = norm(diag * x)
                    fnorm = fnorm_new
                    first = False
                small_reduction = abs(actual) <= ftol and predicted <= ftol and 0.5 * ratio <= 1.0
                if small_reduction or delta <= xtol * xnorm:
                    return x, True
                # maxfev reached, or tolerances below what the arithmetic resolves: statuses 5 to 8.
                if (
                    nfev >= maxfev
                    or (abs(actual) <= _EPS and predicted <= _EPS and 0.5 * ratio <= 1.0)
                    or delta <= _EPS * xnorm
                    or gnorm <= _EPS
                ):
                    return x, False
                if accepted:
                    break

    return solve
