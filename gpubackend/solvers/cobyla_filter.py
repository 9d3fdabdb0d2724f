"""COBYLA's filter of evaluated points and its choice of the point it returns.

Port of ``pyprima/common/selectx.py`` (``isbetter``, ``savefilt``, ``selectx``)
from scipy 1.18's ``scipy/_external/pyprima`` (BSD-3-Clause, Zaikun Zhang and
Nickolai Belakovski). The filter keeps the points no other dominates in
(objective, constraint violation); COBYLA returns the one ``selectx`` picks,
not its last iterate.
"""

import numpy as np

from gpubackend.solvers.cobyla_qr import EPS, REALMAX
from gpubackend.solvers.ieee import ieee_njit

FUNCMAX = 1e30
"""PRIMA's cap on objective values (NaN reads as it)."""
CONSTRMAX = FUNCMAX
"""PRIMA's cap on constraint values."""


@ieee_njit(inline="always")
def _is_nan_or_inf(value: float) -> bool:
    return np.isnan(value) or value == np.inf


@ieee_njit
def isbetter(f1: float, c1: float, f2: float, c2: float, ctol: float) -> bool:
    """Whether ``(f1, c1)`` is better than ``(f2, c2)``."""
    if (_is_nan_or_inf(f1) or _is_nan_or_inf(c1)) and not (
        _is_nan_or_inf(f2) or _is_nan_or_inf(c2)
    ):
        return True
    if (f1 < f2 and c1 <= c2) or (f1 <= f2 and c1 < c2):
        return True
    cref = 10 * max(EPS, min(ctol, 1.0e-2 * CONSTRMAX))
    return f1 < REALMAX and c1 <= ctol and (c2 > max(ctol, cref) or np.isnan(c2))


@ieee_njit
def savefilt(
    cstrv: float, ctol: float, cweight: float, f: float, x, nfilt: int, cfilt, ffilt, xfilt
) -> int:
    """Add ``x`` (``f``, ``cstrv``) to the first ``nfilt`` filter entries unless one is better;
    the new count."""
    for k in range(nfilt):
        if isbetter(ffilt[k], cfilt[k], f, cstrv, ctol) or (ffilt[k] <= f and cfilt[k] <= cstrv):
            return nfilt
    keep = np.empty(nfilt, dtype=np.bool_)
    for k in range(nfilt):
        keep[k] = not isbetter(f, cstrv, ffilt[k], cfilt[k], ctol)
    maxfilt = ffilt.shape[0]
    if np.sum(keep) == maxfilt:
        keep[_worst_entry(ctol, cweight, cfilt, ffilt)] = False
    kept = 0
    for k in range(nfilt):
        if keep[k]:
            xfilt[:, kept] = xfilt[:, k]
            ffilt[kept] = ffilt[k]
            cfilt[kept] = cfilt[k]
            kept += 1
    xfilt[:, kept] = x
    ffilt[kept] = f
    cfilt[kept] = cstrv
    return kept + 1


@ieee_njit
def _worst_entry(ctol: float, cweight: float, cfilt, ffilt) -> int:
    """The entry a full filter drops: of greatest merit, then violation."""
    cfilt_shifted = np.maximum(cfilt - ctol, 0.0)
    if cweight <= 0:
        phi = ffilt.copy()
    elif np.isposinf(cweight):
        phi = cfilt_shifted.copy()
    else:
        phi = np.empty(ffilt.shape[0])
        for k in range(ffilt.shape[0]):
            value = max(ffilt[k], -REALMAX)
            value = -REALMAX if np.isnan(value) else min(max(value, -REALMAX), REALMAX)
            phi[k] = value + cweight * cfilt_shifted[k]
    phimax = phi[0]
    for k in range(phi.shape[0]):
        if phi[k] > phimax:
            phimax = phi[k]
    cref = -np.inf
    for k in range(phi.shape[0]):
        if phi[k] >= phimax:
            cref = max(cref, cfilt_shifted[k])
    fref = -np.inf
    for k in range(phi.shape[0]):
        if cfilt_shifted[k] >= cref:
            fref = max(fref, ffilt[k])
    kworst = -1
    for k in range(phi.shape[0]):
        if not ffilt[k] > fref and (kworst < 0 or cfilt[k] > cfilt[kworst]):
            kworst = k
    return max(kworst, 0)


@ieee_njit
def selectx(fhist, chist, cweight: float, ctol: float) -> int:
    """The index of the point to return among ``fhist``/``chist``."""
    nhist = fhist.shape[0]
    fref, cref = REALMAX, REALMAX
    for f_cap, c_cap in ((FUNCMAX, CONSTRMAX), (REALMAX, CONSTRMAX), (FUNCMAX, REALMAX)):
        if np.any((fhist < f_cap) & (chist < c_cap)):
            fref, cref = f_cap, c_cap
            break
    usable = (fhist < fref) & (chist < cref)
    if not np.any(usable):
        return nhist - 1
    chist_shifted = np.maximum(chist - ctol, 0.0)
    cmin = np.min(chist_shifted[fhist < fref])
    cref = max(EPS, 2 * cmin)
    if cweight <= 0:
        phi = fhist.copy()
    elif np.isposinf(cweight):
        phi = chist_shifted.copy()
    else:
        phi = np.maximum(fhist, -REALMAX) + cweight * chist_shifted
    phimin = np.min(phi[(fhist < fref) & (chist_shifted <= cref)])
    cref = np.min(chist_shifted[(fhist < fref) & (phi <= phimin)])
    fref = np.min(fhist[chist_shifted <= cref])
    kopt = -1
    for k in range(nhist):
        if not fhist[k] > fref and (kopt < 0 or chist[k] < chist[kopt]):
            kopt = k
    return kopt
