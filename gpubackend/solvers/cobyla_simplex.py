"""COBYLA's interpolation simplex: its pole, the vertex a new point replaces, and geometry steps.

Port of ``pyprima/cobyla/update.py`` (``findpole``, ``updatepole``,
``updatexfc``) and ``pyprima/cobyla/geometry.py`` (``setdrop_tr``, ``geostep``)
from scipy 1.18's ``scipy/_external/pyprima`` (BSD-3-Clause, Zaikun Zhang and
Nickolai Belakovski), keeping its order of operations.

The simplex is pyprima's: ``sim[:, n]`` is the pole (the best vertex by the
merit ``f + cpen * cstrv``), ``sim[:, j]`` the displacement of vertex ``j`` from
it, ``simi`` the inverse of ``sim[:, :n]``; ``fval``, ``cval`` (constraint
violation) and ``conmat`` (constraint values, one column per vertex) follow
the vertices. Everything is updated in place; the functions return PRIMA's
``info`` (``DAMAGING_ROUNDING`` where ``simi`` has lost accuracy).
"""

import numpy as np

from gpubackend.solvers.ieee import ieee_njit
from gpubackend.solvers.small_vectors import norm

INFO_DEFAULT = 0
DAMAGING_ROUNDING = 7
_ITOL = 1.0
"""How far ``simi @ sim[:, :n]`` may drift from the identity before the simplex is given up."""


@ieee_njit
def findpole(cpen: float, cval, fval) -> int:
    """The vertex of least merit ``fval + cpen * cval`` (of least violation among ties)."""
    n = fval.shape[0] - 1
    phi = fval + cpen * cval
    phimin = phi[0]
    for j in range(1, n + 1):
        if phi[j] < phimin:
            phimin = phi[j]
    moves = phimin < phi[n]
    for j in range(n + 1):
        if cval[j] < cval[n] and phi[j] <= phi[n]:
            moves = True
    if not moves:
        return n
    jopt = -1
    for j in range(n + 1):
        if not phi[j] > phimin and (jopt < 0 or cval[j] < cval[jopt]):
            jopt = j
    return jopt


@ieee_njit
def _inverse_error(simi, sim) -> float:
    """``max|simi @ sim[:, :n] - I|`` (NaN if any entry is)."""
    n = simi.shape[0]
    worst = 0.0
    for i in range(n):
        for j in range(n):
            total = 0.0
            for k in range(n):
                total += simi[i, k] * sim[k, j]
            error = abs(total - (1.0 if i == j else 0.0))
            if np.isnan(error):
                return error
            worst = max(worst, error)
    return worst


@ieee_njit
def _checked_inverse(sim, simi) -> bool:
    """Whether ``simi`` inverts ``sim[:, :n]`` well enough, after replacing it by a fresh inverse
    where that is closer."""
    erri = _inverse_error(simi, sim)
    if erri > 0.1 * _ITOL or np.isnan(erri):
        simi_test = np.linalg.inv(np.ascontiguousarray(sim[:, : simi.shape[0]]))
        erri_test = _inverse_error(simi_test, sim)
        if erri_test < erri or (np.isnan(erri) and not np.isnan(erri_test)):
            simi[:, :] = simi_test
            erri = erri_test
    return erri <= _ITOL


@ieee_njit
def _swap_with_pole(j: int, conmat, cval, fval) -> None:
    n = fval.shape[0] - 1
    fval[j], fval[n] = fval[n], fval[j]
    cval[j], cval[n] = cval[n], cval[j]
    for i in range(conmat.shape[0]):
        conmat[i, j], conmat[i, n] = conmat[i, n], conmat[i, j]


@ieee_njit
def updatepole(cpen: float, conmat, cval, fval, sim, simi) -> int:
    """Make the vertex of least merit the pole."""
    n = sim.shape[0]
    jopt = findpole(cpen, cval, fval)
    sim_old = sim.copy()
    simi_old = simi.copy()
    if 0 <= jopt < n:
        for i in range(n):
            sim[i, n] += sim[i, jopt]
        sim_jopt = sim[:, jopt].copy()
        sim[:, jopt] = 0.0
        for i in range(n):
            for j in range(n):
                sim[i, j] -= sim_jopt[i]
        column_sums = np.zeros(n)
        for i in range(n):
            for j in range(n):
                column_sums[j] += simi[i, j]
        simi[jopt, :] = -column_sums
    if _checked_inverse(sim, simi):
        if 0 <= jopt < n:
            _swap_with_pole(jopt, conmat, cval, fval)
        return INFO_DEFAULT
    sim[:, :] = sim_old
    simi[:, :] = simi_old
    return DAMAGING_ROUNDING


@ieee_njit
def updatexfc(
    jdrop: int, constr, cpen: float, cstrv: float, d, f: float, conmat, cval, fval, sim, simi
) -> int:
    """Replace vertex ``jdrop`` by the pole plus ``d`` (values ``f``, ``constr``, ``cstrv``),
    then re-pole."""
    n = sim.shape[0]
    if jdrop < 0:  # pyprima's "impossible" None: nothing changes
        return INFO_DEFAULT
    if jdrop < n:
        sim[:, jdrop] = d
        denominator = 0.0
        for k in range(n):
            denominator += simi[jdrop, k] * d[k]
        simi_jdrop = simi[jdrop, :] / denominator
        simid = np.zeros(n)
        for i in range(n):
            for k in range(n):
                simid[i] += simi[i, k] * d[k]
        for i in range(n):
            for j in range(n):
                simi[i, j] -= simid[i] * simi_jdrop[j]
        simi[jdrop, :] = simi_jdrop
    else:
        for i in range(n):
            sim[i, n] += d[i]
            for j in range(n):
                sim[i, j] -= d[i]
        simid = np.zeros(n)
        for i in range(n):
            for k in range(n):
                simid[i] += simi[i, k] * d[k]
        column_sums = np.zeros(n)
        for i in range(n):
            for j in range(n):
                column_sums[j] += simi[i, j]
        total = 0.0
        for i in range(n):
            total += simid[i]
        shrink = column_sums / (1 - total)
        for i in range(n):
            for j in range(n):
                simi[i, j] += simid[i] * shrink[j]
    if not _checked_inverse(sim, simi):
        # pyprima's "restore" aliases the updated arrays: the simplex stays as updated.
        return DAMAGING_ROUNDING
    fval[jdrop] = f
    conmat[:, jdrop] = constr
    cval[jdrop] = cstrv
    return updatepole(cpen, conmat, cval, fval, sim, simi)


@ieee_njit
def setdrop_tr(ximproved: bool, d, delta: float, rho: float, sim, simi) -> int:
    """The vertex a trust-region step's point replaces; -1 (pyprima's None) for none."""
    n = sim.shape[0]
    distsq = np.zeros(n + 1)
    for j in range(n):
        for i in range(n):
            gap = sim[i, j] - d[i] if ximproved else sim[i, j]
            distsq[j] += gap * gap
    if ximproved:
        for i in range(n):
            distsq[n] += d[i] * d[i]
    radius = max(rho, delta / 10)
    simid = np.zeros(n)
    for i in range(n):
        for k in range(n):
            simid[i] += simi[i, k] * d[k]
    total = 0.0
    for i in range(n):
        total += simid[i]
    score = np.empty(n + 1)
    for j in range(n + 1):
        weight = max(1.0, distsq[j] / (radius * radius))
        score[j] = weight * abs(simid[j] if j < n else 1 - total)
    if not ximproved:
        score[n] = -1.0
    jdrop = -1
    for j in range(n + 1):
        if np.isnan(score[j]):
            score[j] = -1.0
        if score[j] > 0 and (jdrop < 0 or score[j] > score[jdrop]):
            jdrop = j
    if ximproved and jdrop < 0:
        jdrop = int(np.argmax(distsq))
    return jdrop


@ieee_njit
def objective_gradient(fval, simi):
    """``(fval[:n] - fval[n]) @ simi``: the gradient of the linear interpolant of f."""
    n = simi.shape[0]
    g = np.zeros(n)
    for j in range(n):
        for k in range(n):
            g[j] += (fval[k] - fval[n]) * simi[k, j]
    return g


@ieee_njit
def _largest_violation(conmat, a, d, sign: float) -> float:
    """``max(0, conmat[:, n] + sign * d @ a)``."""
    n = a.shape[0]
    worst = 0.0
    for c in range(conmat.shape[0]):
        total = 0.0
        for i in range(n):
            total += d[i] * a[i, c]
        value = conmat[c, n] + sign * total
        if not value <= worst:
            worst = value
    return worst


@ieee_njit
def predicted_violation(conmat, a, d) -> float:
    """The linearized constraint violation at the pole plus ``d``."""
    return _largest_violation(conmat, a, d, 1.0)


@ieee_njit
def geostep(jdrop: int, a, conmat, cpen: float, delbar: float, fval, simi):
    """The step of length ``delbar`` improving the simplex's geometry at vertex ``jdrop``; ``a``
    holds the constraints' gradients (``n x m``)."""
    d = simi[jdrop, :].copy()
    d = delbar * (d / norm(d))
    g = objective_gradient(fval, simi)
    cvpd = _largest_violation(conmat, a, d, 1.0)
    cvnd = _largest_violation(conmat, a, d, -1.0)
    dg = 0.0
    for i in range(d.shape[0]):
        dg += d[i] * g[i]
    if -dg + cpen * cvnd < dg + cpen * cvpd:
        d *= -1
    return d
