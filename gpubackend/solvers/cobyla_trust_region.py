"""COBYLA's trust-region subproblem and radius update.

Port of ``pyprima/cobyla/trustregion.py`` (``trstlp``, ``trstlp_sub``, ``trrad``)
from scipy 1.18's ``scipy/_external/pyprima`` (BSD-3-Clause, Zaikun Zhang and
Nickolai Belakovski), keeping its order of operations. ``trstlp`` minimizes the
linear model ``g @ d`` of the objective subject to the linearized constraints
``A.T @ d <= b`` (made as feasible as possible first, stage 1) and
``|d| <= delta``, by Powell's active-set method.
"""

import numpy as np

from gpubackend.solvers.cobyla_qr import (
    EPS,
    REALMAX,
    REALMIN,
    column_dot,
    isminor,
    qradd_rdiag,
    qrexc_rdiag,
)
from gpubackend.solvers.ieee import ieee_njit
from gpubackend.solvers.small_vectors import dot


@ieee_njit
def trstlp(a, b, delta: float, g):
    """The step ``d`` of the subproblem: ``a`` is ``n x m`` (the constraints' gradients), ``b`` of
    length ``m``, ``g`` the objective's gradient."""
    n, m = a.shape
    vmultc = np.zeros(m + 1)
    iact = np.zeros(m + 1, dtype=np.int64)
    a_aug = np.empty((n, m + 1))
    a_aug[:, :m] = a
    a_aug[:, m] = g
    b_aug = np.zeros(m + 1)
    b_aug[:m] = b
    for i in range(m + 1):
        largest = 0.0
        for k in range(n):
            largest = max(largest, abs(a_aug[k, i]))
        if largest > 1e12:
            modscal = max(2 * REALMIN, 1 / largest)
            a_aug[:, i] *= modscal
            b_aug[i] *= modscal
    d = np.zeros(n)
    z = np.zeros((n, n))
    nact = _trstlp_sub(iact[:m], 0, 1, a_aug[:, :m], b_aug[:m], delta, d, vmultc[:m], z)
    _trstlp_sub(iact, nact, 2, a_aug, b_aug, delta, d, vmultc, z)
    return d


@ieee_njit
def _stage1_violation(d, a, b, iact, count: int) -> float:
    """``max(0, d @ a[:, iact[:count]] - b[iact[:count]])``."""
    worst = 0.0
    for k in range(count):
        j = iact[k]
        value = 0.0
        for i in range(d.shape[0]):
            value += d[i] * a[i, j]
        value -= b[j]
        if not value <= worst:
            worst = value
    return worst


@ieee_njit
def _least_squares(a, iact, nact: int, rhs):
    """``np.linalg.lstsq(a[:, iact[:nact]], rhs, rcond=None)[0]`` (pyprima's ``lsqr``)."""
    columns = np.empty((a.shape[0], nact))
    for k in range(nact):
        columns[:, k] = a[:, iact[k]]
    rcond = EPS * max(a.shape[0], nact)
    return np.linalg.lstsq(columns, rhs.copy(), rcond)[0]


@ieee_njit
def _trstlp_sub(iact, nact: int, stage: int, a, b, delta: float, d, vmultc, z) -> int:
    """One stage of ``trstlp``, updating ``iact``, ``d``, ``vmultc`` and ``z`` in place; returns
    the number of active constraints."""
    n = a.shape[0]
    mcon = a.shape[1]
    zdasav = np.zeros(n)
    vmultd = np.zeros(mcon)
    zdota = np.zeros(n)
    sdirn = np.zeros(n)
    if stage == 1:
        for i in range(mcon):
            iact[i] = i
        nact = 0
        d[:] = 0.0
        cviol = 0.0
        for i in range(mcon):
            if not -b[i] <= cviol:
                cviol = -b[i]
        for i in range(mcon):
            vmultc[i] = cviol + b[i]
        z[:, :] = 0.0
        for i in range(n):
            z[i, i] = 1.0
        if mcon == 0 or cviol <= 0:
            return nact
        icon = -1
        for i in range(mcon):
            if not np.isnan(b[i]) and (icon < 0 or -b[i] > -b[icon]):
                icon = i
        if icon < 0:
            return nact
        num_constraints = mcon
    else:
        if dot(d, d) >= delta * delta:
            return nact
        iact[mcon - 1] = mcon - 1
        vmultc[mcon - 1] = 0.0
        num_constraints = mcon - 1
        icon = mcon - 1
        cviol = 0.0
        for j in range(num_constraints):
            value = 0.0
            for i in range(n):
                value += d[i] * a[i, j]
            value -= b[j]
            if not value <= cviol:
                cviol = value
    for k in range(nact):
        zdota[k] = column_dot(z, k, a, iact[k])
    optold = REALMAX
    nactold = nact
    nfail = 0
    maxiter = min(10000, 100 * max(num_constraints, n))
    dnew = np.empty(n)
    for _ in range(maxiter):
        optnew = cviol if stage == 1 else _column_dot(d, a, mcon - 1)
        if optnew < optold or nact > nactold:
            nactold = nact
            nfail = 0
        else:
            nfail += 1
        optold = min(optold, optnew)
        if nfail == 3:
            break
        if icon >= nact:
            zdasav[:nact] = zdota[:nact]
            nactsav = nact
            nact = qradd_rdiag(a[:, iact[icon]], z, zdota, nact)
            if nact == nactsav + 1:
                if nact != icon + 1:
                    vmultc[icon] = vmultc[nact - 1]
                    vmultc[nact - 1] = 0.0
                    iact[icon], iact[nact - 1] = iact[nact - 1], iact[icon]
                else:
                    vmultc[nact - 1] = 0.0
            else:
                if nact > 0:
                    vmultd[:nact] = _least_squares(a, iact, nact, a[:, iact[icon]].copy())
                any_positive = False
                for k in range(nact):
                    if vmultd[k] > 0 and iact[k] <= num_constraints:
                        any_positive = True
                if not any_positive:
                    break
                vmultd[nact:mcon] = -1.0
                frac = REALMAX
                for k in range(nact):
                    ratio = REALMAX
                    if vmultd[k] > 0 and iact[k] <= num_constraints:
                        ratio = vmultc[k] / vmultd[k]
                    if ratio < frac:
                        frac = ratio
                for k in range(nact):
                    vmultc[k] = max(0.0, vmultc[k] - frac * vmultd[k])
                if np.isnan(zdota[nact - 1]) or abs(zdota[nact - 1]) <= EPS**2:
                    break
                vmultc[icon] = 0.0
                vmultc[nact - 1] = frac
                iact[icon], iact[nact - 1] = iact[nact - 1], iact[icon]
            if stage == 2 and iact[nact - 1] != mcon - 1:
                if nact <= 1:
                    break
                qrexc_rdiag(a, iact, z, zdota, nact, nact - 2)
                iact[nact - 2], iact[nact - 1] = iact[nact - 1], iact[nact - 2]
                vmultc[nact - 2], vmultc[nact - 1] = vmultc[nact - 1], vmultc[nact - 2]
            if np.isnan(zdota[nact - 1]) or abs(zdota[nact - 1]) <= EPS**2:
                break
            if stage == 1:
                scale = (dot(sdirn, a[:, iact[nact - 1]]) + 1) / zdota[nact - 1]
                for i in range(n):
                    sdirn[i] -= scale * z[i, nact - 1]
            else:
                scale = -1 / zdota[nact - 1]
                for i in range(n):
                    sdirn[i] = scale * z[i, nact - 1]
        else:
            qrexc_rdiag(a, iact, z, zdota, nact, icon)
            moved_index, moved_multiplier = iact[icon], vmultc[icon]
            for k in range(icon, nact - 1):
                iact[k] = iact[k + 1]
                vmultc[k] = vmultc[k + 1]
            iact[nact - 1] = moved_index
            vmultc[nact - 1] = moved_multiplier
            nact -= 1
            if stage == 2 and nact < 0:
                break
            if nact > 0 and (np.isnan(zdota[nact - 1]) or abs(zdota[nact - 1]) <= EPS**2):
                break
            if stage == 1:
                scale = dot(sdirn, z[:, nact])
                for i in range(n):
                    sdirn[i] -= scale * z[i, nact]
            else:
                scale = -1 / zdota[nact - 1]
                for i in range(n):
                    sdirn[i] = scale * z[i, nact - 1]
        dd = delta * delta - dot(d, d)
        ss = dot(sdirn, sdirn)
        sd = dot(sdirn, d)
        if dd <= 0 or ss <= EPS * delta * delta or np.isnan(sd):
            break
        sqrtd = max(np.sqrt(ss * dd + sd * sd), abs(sd), np.sqrt(ss * dd))
        step = dd / (sqrtd + sd) if sd > 0 else (sqrtd - sd) / ss
        if step <= 0 or not np.isfinite(step):
            break
        if stage == 1:
            if isminor(cviol, step):
                break
            step = min(step, cviol)
        for i in range(n):
            dnew[i] = d[i] + step * sdirn[i]
        if stage == 1:
            cviol = _stage1_violation(dnew, a, b, iact, nact)
        if nact > 0:
            vmultd[:nact] = -_least_squares(a, iact, nact, dnew)
        if stage == 2:
            vmultd[nact - 1] = max(0.0, vmultd[nact - 1])
        for k in range(nact, mcon):
            j = iact[k]
            product, magnitude = 0.0, 0.0
            for i in range(n):
                product += dnew[i] * a[i, j]
                magnitude += abs(dnew[i]) * abs(a[i, j])
            cvshift = cviol - (product - b[j])
            cvsabs = magnitude + abs(b[j]) + cviol
            vmultd[k] = 0.0 if isminor(cvshift, cvsabs) else cvshift
        frac = 1.0
        icon = -1
        for k in range(mcon):
            ratio = vmultc[k] / (vmultc[k] - vmultd[k]) if vmultd[k] < 0 else REALMAX
            if ratio < frac:
                frac = ratio
                icon = k
        finite_d, finite_vmultc = 0.0, 0.0
        dold = d.copy()
        for i in range(n):
            d[i] = (1 - frac) * d[i] + frac * dnew[i]
            finite_d += abs(d[i])
        for k in range(mcon):
            vmultc[k] = max(0.0, (1 - frac) * vmultc[k] + frac * vmultd[k])
            finite_vmultc += abs(vmultc[k])
        if not (np.isfinite(finite_d) and np.isfinite(finite_vmultc)):
            d[:] = dold
            break
        if stage == 1:
            cviol = _stage1_violation(d, a, b, np.arange(mcon), mcon)
        if icon < 0 or icon >= mcon:
            break
    return nact


@ieee_njit(inline="always")
def _column_dot(d, a, column: int) -> float:
    total = 0.0
    for i in range(d.shape[0]):
        total += d[i] * a[i, column]
    return total


@ieee_njit
def trrad(
    delta_in: float,
    dnorm: float,
    eta1: float,
    eta2: float,
    gamma1: float,
    gamma2: float,
    ratio: float,
) -> float:
    """The next trust-region radius after a step of length ``dnorm`` with reduction ``ratio``."""
    if ratio <= eta1:
        return gamma1 * dnorm
    if ratio <= eta2:
        return max(gamma1 * delta_in, dnorm)
    return max(gamma1 * delta_in, gamma2 * dnorm)
