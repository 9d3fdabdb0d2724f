"""``minimize(method="COBYLA")``: a port of PRIMA's COBYLA as scipy 1.18 runs it.

scipy's ``_minimize_cobyla`` runs ``scipy/_external/pyprima``, the Python
translation of Zaikun Zhang's PRIMA (BSD-3-Clause; Python translation by
Nickolai Belakovski). This module ports its driver (``pyprima/__init__.py``'s
``minimize``, ``cobyla/cobyla.py``, ``cobyla/cobylb.py``,
``cobyla/initialize.py``, ``common/evaluate.py``, ``ratio.py``, ``redrho.py``
and ``checkbreak.py``) for what PyTensor's ``minimize`` can pass: an objective
and box ``bounds``, which PRIMA takes as linear constraints ``-x <= -xl`` (the
finite lower bounds) and ``x <= xu`` (the finite upper ones). As pyprima does,
variables whose bounds coincide are fixed and left out, and ``x0`` is projected
into the box first. The subproblem, simplex and filter live in ``cobyla_*``.

scipy's options map as in ``_cobyla_py``: ``rhobeg``, ``tol`` (PRIMA's
``rhoend``), ``maxiter`` (``maxfun``), ``catol`` (``ctol``), ``f_target``;
pyprima's own options keep the values scipy leaves them (``cweight`` 1e8,
``eta1`` 0.1, ``eta2`` 0.7, ``gamma1`` 0.5, ``gamma2`` 2, ``maxfilt`` 2000),
and invalid values are replaced as pyprima's ``preproc`` replaces them.

The arithmetic keeps pyprima's order (IEEE, no fastmath); sums and products
are sequential loops where numpy may block them for BLAS, so trial points agree
with scipy's to rounding and, on short solves, to the last bits.
"""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from gpubackend.solvers.box_bounds import expand_bound
from gpubackend.solvers.cobyla_filter import CONSTRMAX, FUNCMAX, savefilt, selectx
from gpubackend.solvers.cobyla_qr import EPS, REALMAX
from gpubackend.solvers.cobyla_simplex import (
    DAMAGING_ROUNDING,
    INFO_DEFAULT,
    findpole,
    geostep,
    objective_gradient,
    predicted_violation,
    setdrop_tr,
    updatepole,
    updatexfc,
)
from gpubackend.solvers.cobyla_trust_region import trrad, trstlp
from gpubackend.solvers.ieee import ieee_njit
from gpubackend.solvers.small_vectors import dot, norm

# PRIMA's exit flags (``common/infos.py``): scipy's ``status``.
SMALL_TR_RADIUS = 0
FTARGET_ACHIEVED = 1
MAXFUN_REACHED = 3
MAXTR_REACHED = 20
NAN_INF_X = -1
NAN_INF_F = -2

BOUNDMAX = REALMAX / 4
"""A bound beyond this is no bound."""
_CWEIGHT = 1e8
_ETA1 = 0.1
_ETA2 = (_ETA1 + 2) / 3
_GAMMA1 = 0.5
_GAMMA2 = 2.0
_MAXFILT = 2000
_MIN_MAXFILT = 200
_MAXHISTMEM = min(300 * 10**6, np.iinfo(np.int32).max)
_RHOEND_DEFAULT = 1e-6
_CTOL_DEFAULT = float(np.sqrt(EPS))


class COBYLAResult(NamedTuple):
    """scipy's ``OptimizeResult`` fields of ``minimize(method="COBYLA")``."""

    x: np.ndarray
    fun: float
    nfev: int
    status: int
    maxcv: float
    success: bool


class _Problem(NamedTuple):
    """The objective on the free variables, as PRIMA sees it."""

    free: np.ndarray
    """Indices of the variables not fixed by their bounds."""
    full_x: np.ndarray
    """The whole ``x``, the fixed variables at their values (work space)."""
    bound_index: np.ndarray
    """Per bound constraint, its (free) variable."""
    bound_sign: np.ndarray
    """-1 for a lower bound, +1 for an upper one."""
    bvec: np.ndarray
    """The constraints are ``bound_sign * x[bound_index] <= bvec``."""


@ieee_njit
def _arrays_tol(lower, upper) -> float:
    """pyprima's ``get_arrays_tol(lb, ub)``: how close two bounds fix a variable."""
    weight = 1.0
    for array in (lower, upper):
        largest = 1.0
        for value in array:
            if np.isfinite(value):
                largest = max(largest, abs(value))
        weight = max(weight, largest)
    return 10.0 * EPS * max(lower.shape[0], 1.0) * weight


@ieee_njit
def _problem(x0, lower, upper):
    """``(problem, x)``: the free variables' constraints and start, projected into the box."""
    n_all = x0.shape[0]
    tol = _arrays_tol(lower, upper)
    full_x = np.empty(n_all)
    free_list = []
    for i in range(n_all):
        if lower[i] <= upper[i] and abs(lower[i] - upper[i]) < tol:
            full_x[i] = min(max(0.5 * (lower[i] + upper[i]), lower[i]), upper[i])
        else:
            free_list.append(i)
    if not free_list:
        raise ValueError("zero-size array to reduction operation maximum which has no identity")
    free = np.array(free_list)
    n = free.shape[0]
    x = np.empty(n)
    xl = np.empty(n)
    xu = np.empty(n)
    for k in range(n):
        i = free[k]
        # np.nanmin((np.nanmax((x0, lb)), ub)): NaN entries lose to numbers.
        value = x0[i]
        if np.isnan(value) or lower[i] > value:
            value = lower[i] if not np.isnan(lower[i]) else value
        if np.isnan(value) or upper[i] < value:
            value = upper[i] if not np.isnan(upper[i]) else value
        x[k] = value
        xl[k] = -BOUNDMAX if np.isnan(lower[i]) or lower[i] < -BOUNDMAX else lower[i]
        xu[k] = BOUNDMAX if np.isnan(upper[i]) or upper[i] > BOUNDMAX else upper[i]
    index_list, sign_list, bvec_list = [], [], []
    for k in range(n):
        if xl[k] > -BOUNDMAX:
            index_list.append(k)
            sign_list.append(-1.0)
            bvec_list.append(-xl[k])
    for k in range(n):
        if xu[k] < BOUNDMAX:
            index_list.append(k)
            sign_list.append(1.0)
            bvec_list.append(xu[k])
    m = len(index_list)
    bound_index = np.empty(m, dtype=np.int64)
    bound_sign = np.empty(m)
    bvec = np.empty(m)
    for r in range(m):
        bound_index[r] = index_list[r]
        bound_sign[r] = sign_list[r]
        bvec[r] = bvec_list[r]
    return _Problem(free, full_x, bound_index, bound_sign, bvec), x


@ieee_njit
def _constraint_gradients(problem: _Problem, n: int):
    """``amat.T``: the bound constraints' (constant) gradients, one column each."""
    a = np.zeros((n, problem.bvec.shape[0]))
    for r in range(problem.bvec.shape[0]):
        a[problem.bound_index[r], r] = problem.bound_sign[r]
    return a


@ieee_njit(inline="always")
def _bound_constraints(problem: _Problem, x, constr) -> None:
    """``amat @ x - bvec``."""
    for r in range(problem.bvec.shape[0]):
        constr[r] = problem.bound_sign[r] * x[problem.bound_index[r]] - problem.bvec[r]


@ieee_njit(inline="always")
def _moderate_f(f: float) -> float:
    """NaN reads as ``FUNCMAX``, values are clipped to ``[-REALMAX, FUNCMAX]``."""
    if np.isnan(f):
        return FUNCMAX
    return min(max(f, -REALMAX), FUNCMAX)


@ieee_njit(inline="always")
def _violation(constr) -> float:
    """``max(0, constr)``, NaN propagating as ``np.max`` does."""
    worst = 0.0
    for value in constr:
        if np.isnan(value):
            return value
        worst = max(worst, value)
    return worst


def _make_evaluate(fun: Callable) -> Callable:
    @ieee_njit
    def evaluate(problem: _Problem, x, args, constr) -> float:
        """pyprima's ``evaluate``: ``f(x)`` moderated, the constraint values into ``constr``."""
        _bound_constraints(problem, x, constr)
        has_nan = False
        for value in x:
            has_nan = has_nan or np.isnan(value)
        if has_nan:
            return np.nan
        for k in range(problem.free.shape[0]):
            problem.full_x[problem.free[k]] = min(max(x[k], -REALMAX), REALMAX)
        return _moderate_f(fun(problem.full_x, args))

    return evaluate


@ieee_njit
def _checkbreak(
    maxfun: int, nf: int, cstrv: float, ctol: float, f: float, ftarget: float, x
) -> int:
    """pyprima's ``checkbreak_con``: the exit flag, ``INFO_DEFAULT`` to go on."""
    info = INFO_DEFAULT
    for value in x:
        if not np.isfinite(value):
            info = NAN_INF_X
    if np.isnan(f) or np.isposinf(f) or np.isnan(cstrv) or np.isposinf(cstrv):
        info = NAN_INF_F
    if cstrv <= ctol and f <= ftarget:
        info = FTARGET_ACHIEVED
    if nf >= maxfun:
        info = MAXFUN_REACHED
    return info


@ieee_njit
def _redrat(ared: float, pred: float, rshrink: float) -> float:
    """The reduction ratio ``ared / pred``, guarded."""
    if np.isnan(ared):
        return -REALMAX
    if np.isnan(pred) or pred <= 0:
        return rshrink / 2 if ared > 0 else -REALMAX
    if np.isposinf(pred) and np.isposinf(ared):
        return 1.0
    if np.isposinf(pred) and np.isneginf(ared):
        return -REALMAX
    return ared / pred


@ieee_njit
def _redrho(rho_in: float, rhoend: float) -> float:
    """The next lower bound of the trust-region radius."""
    rho_ratio = rho_in / rhoend
    if rho_ratio > 250:
        return 0.1 * rho_in
    if rho_ratio <= 16:
        return rhoend
    return np.sqrt(rho_ratio) * rhoend


@ieee_njit
def _fcratio(conmat, fval) -> float:
    """The ratio of the objective's spread to the constraints' over the simplex."""
    fmin, fmax = np.min(fval), np.max(fval)
    denom = np.inf
    for c in range(conmat.shape[0]):
        cmin, cmax = -conmat[c, 0], -conmat[c, 0]
        for j in range(1, conmat.shape[1]):
            cmin = min(cmin, -conmat[c, j])
            cmax = max(cmax, -conmat[c, j])
        if cmin < 0.5 * cmax:
            denom = min(denom, max(cmax, 0.0) - cmin)
    if denom < np.inf and fmin < fmax:
        return (fmax - fmin) / denom
    return 0.0


@ieee_njit
def _predicted_reductions(a, conmat, cval, d, g) -> tuple[float, float]:
    """``(preref, prerec)``: the linear models' reductions of f and of the violation."""
    n = g.shape[0]
    return -dot(d, g), cval[n] - predicted_violation(conmat, a, d)


@ieee_njit
def _getcpen(a, conmat, cpen: float, cval, delta: float, fval, sim, simi) -> float:
    """The penalty parameter, raised until the trust-region step reduces the merit function
    (on copies of the simplex)."""
    conmat, cval, fval = conmat.copy(), cval.copy(), fval.copy()
    sim, simi = sim.copy(), simi.copy()
    n = sim.shape[0]
    for _ in range(n + 1):
        if updatepole(cpen, conmat, cval, fval, sim, simi) == DAMAGING_ROUNDING:
            break
        g = objective_gradient(fval, simi)
        d = trstlp(a, -conmat[:, n], delta, g)
        preref, prerec = _predicted_reductions(a, conmat, cval, d, g)
        if not (prerec > 0 and preref < 0):
            break
        cpen = max(cpen, min(-2 * preref / prerec, REALMAX))
        if findpole(cpen, cval, fval) == n:
            break
    return cpen


@ieee_njit(inline="always")
def _vertex_distances(x, sim, distsq) -> int:
    """The vertex nearest ``x`` (squared distances into ``distsq``)."""
    n = sim.shape[0]
    distsq[:] = 0.0
    for i in range(n):
        gap = x[i] - sim[i, n]
        distsq[n] += gap * gap
    for j in range(n):
        for i in range(n):
            gap = x[i] - (sim[i, n] + sim[i, j])
            distsq[j] += gap * gap
    return int(np.argmin(distsq))


@ieee_njit(inline="always")
def _column_norms_squared(sim):
    n = sim.shape[0]
    sizes = np.zeros(n)
    for j in range(n):
        for i in range(n):
            sizes[j] += sim[i, j] * sim[i, j]
    return sizes


class _Settings(NamedTuple):
    """scipy's options as pyprima's ``preproc`` leaves them."""

    rhobeg: float
    rhoend: float
    maxfun: int
    ctol: float
    ftarget: float
    maxfilt: int


@ieee_njit
def _preprocessed(settings, n: int, m: int) -> _Settings:
    """pyprima's ``preproc`` on scipy's options (invalid values replaced as it replaces them)."""
    rhobeg, rhoend = settings.rhobeg, settings.tol
    maxfun = max(settings.maxiter, n + 2)
    ftarget = -REALMAX if np.isnan(settings.f_target) else settings.f_target
    maxfilt = _MAXFILT
    unit_memo = (m + n + 2) * 8
    if maxfilt > _MAXHISTMEM / unit_memo:
        maxfilt = int(_MAXHISTMEM / unit_memo)
    maxfilt = min(maxfun, max(_MIN_MAXFILT, maxfilt))
    if abs(rhobeg - rhoend) < 1.0e2 * EPS * max(abs(rhobeg), 1.0):
        rhoend = rhobeg
    if rhobeg <= 0 or not np.isfinite(rhobeg):
        rhobeg = max(10 * rhoend, 1.0) if np.isfinite(rhoend) and rhoend > 0 else 1.0
    if rhoend <= 0 or rhobeg < rhoend or not np.isfinite(rhoend):
        rhoend = max(EPS, min(0.1 * rhobeg, _RHOEND_DEFAULT))
    ctol = settings.catol
    if np.isnan(ctol) or ctol < 0:
        ctol = _CTOL_DEFAULT
    return _Settings(rhobeg, rhoend, maxfun, ctol, ftarget, maxfilt)


def make_cobyla_minimize(fun: Callable) -> Callable:
    """``minimize(x0, args, settings: COBYLASettings) -> COBYLAResult``."""
    evaluate = _make_evaluate(fun)

    @ieee_njit
    def trial(problem, x, args, state, constr, rhoend, nf, nfilt, filt, ctol, cweight):
        """``(f, cstrv, nf, nfilt)`` at ``x``: a vertex's values where ``x`` is one (to
        ``1e-4 * rhoend``), else an evaluation, counted and offered to the filter."""
        fval, conmat, cval, sim, distsq = state
        j = _vertex_distances(x, sim, distsq)
        if distsq[j] <= (1e-4 * rhoend) * (1e-4 * rhoend):
            constr[:] = conmat[:, j]
            return fval[j], cval[j], nf, nfilt
        f = evaluate(problem, x, args, constr)
        cstrv = _violation(constr)
        cfilt, ffilt, xfilt = filt
        return f, cstrv, nf + 1, savefilt(cstrv, ctol, cweight, f, x, nfilt, cfilt, ffilt, xfilt)

    @ieee_njit
    def minimize(x0, args, settings) -> COBYLAResult:
        n_all = x0.shape[0]
        lower = expand_bound(settings.bounds[0], n_all)
        upper = expand_bound(settings.bounds[1], n_all)
        problem, x = _problem(x0, lower, upper)
        n = x.shape[0]
        m = problem.bvec.shape[0]
        a = _constraint_gradients(problem, n)
        opts = _preprocessed(settings, n, m)
        rhobeg, rhoend, maxfun, ctol, ftarget = (
            opts.rhobeg,
            opts.rhoend,
            opts.maxfun,
            opts.ctol,
            opts.ftarget,
        )
        eta1, eta2, gamma1, gamma2, cweight = _ETA1, _ETA2, _GAMMA1, _GAMMA2, _CWEIGHT

        # initxfc: the start simplex, x0 and x0 + rhobeg * e_j.
        constr = np.empty(m)
        sim = np.zeros((n, n + 1))
        for i in range(n):
            sim[i, i] = rhobeg
            sim[i, n] = x[i]
        simi = np.eye(n) / rhobeg
        evaluated = np.zeros(n + 1, dtype=np.bool_)
        fval = np.full(n + 1, REALMAX)
        cval = np.full(n + 1, REALMAX)
        conmat = np.full((m, n + 1), REALMAX)
        info = INFO_DEFAULT
        point = np.empty(n)
        for k in range(n + 1):
            point[:] = sim[:, n]
            if k == 0:
                j = n
                f = evaluate(problem, point, args, constr)
                for r in range(m):  # moderatec, on the start's constraints only
                    value = CONSTRMAX if np.isnan(constr[r]) else constr[r]
                    constr[r] = min(max(value, -CONSTRMAX), CONSTRMAX)
            else:
                j = k - 1
                point[j] += rhobeg
                f = evaluate(problem, point, args, constr)
            cstrv = _violation(constr)
            evaluated[j] = True
            fval[j] = f
            conmat[:, j] = constr
            cval[j] = cstrv
            info = _checkbreak(maxfun, k, cstrv, ctol, f, ftarget, point)
            if info != INFO_DEFAULT:
                break
            if j < n and fval[j] < fval[n]:
                fval[j], fval[n] = fval[n], fval[j]
                cval[j], cval[n] = cval[n], cval[j]
                for r in range(m):
                    conmat[r, j], conmat[r, n] = conmat[r, n], conmat[r, j]
                sim[:, n] = point
                sim[j, : j + 1] = -rhobeg
        nf = int(np.sum(evaluated))
        if evaluated.all():
            simi = np.linalg.inv(np.ascontiguousarray(sim[:, :n]))

        # initfilt
        maxfilt = min(max(opts.maxfilt, 1), maxfun)
        cfilt = np.zeros(maxfilt)
        ffilt = np.zeros(maxfilt)
        xfilt = np.zeros((n, maxfilt))
        nfilt = 0
        for i in range(n + 1):
            if evaluated[i]:
                point[:] = sim[:, i] + sim[:, n] if i < n else sim[:, i]
                nfilt = savefilt(cval[i], ctol, cweight, fval[i], point, nfilt, cfilt, ffilt, xfilt)

        state = (fval, conmat, cval, sim, np.zeros(n + 1))
        filt = (cfilt, ffilt, xfilt)
        d = np.zeros(n)
        if info == INFO_DEFAULT:
            rho = rhobeg
            delta = rhobeg
            cpenmin = EPS
            cpen = max(cpenmin, min(1.0e3, _fcratio(conmat, fval)))
            shortd = False
            ratio = -1.0
            jdrop_tr = 0
            gamma3 = max(1.0, min(0.75 * gamma2, 1.5))
            info = MAXTR_REACHED
            for _ in range(10 * maxfun):
                cpen = _getcpen(a, conmat, cpen, cval, delta, fval, sim, simi)
                if updatepole(cpen, conmat, cval, fval, sim, simi) == DAMAGING_ROUNDING:
                    info = DAMAGING_ROUNDING
                    break
                adequate_geo = np.all(_column_norms_squared(sim) <= 4 * (delta * delta))
                g = objective_gradient(fval, simi)
                d = trstlp(a, -conmat[:, n], delta, g)
                dnorm = min(delta, norm(d))
                shortd = dnorm <= 0.1 * rho
                preref, prerec = _predicted_reductions(a, conmat, cval, d, g)
                prerem = preref + cpen * prerec
                trfail = not (prerem > 1.0e-6 * min(cpen, 1.0) * rho)
                if shortd or trfail:
                    delta *= 0.1
                    if delta <= gamma3 * rho:
                        delta = rho
                else:
                    point[:] = sim[:, n] + d
                    f, cstrv, nf, nfilt = trial(
                        problem, point, args, state, constr, rhoend, nf, nfilt, filt, ctol, cweight
                    )
                    actrem = (fval[n] + cpen * cval[n]) - (f + cpen * cstrv)
                    ratio = _redrat(actrem, prerem, eta1)
                    delta = trrad(delta, dnorm, eta1, eta2, gamma1, gamma2, ratio)
                    if delta <= gamma3 * rho:
                        delta = rho
                    jdrop_tr = setdrop_tr(actrem > 0, d, delta, rho, sim, simi)
                    subinfo = updatexfc(
                        jdrop_tr, constr, cpen, cstrv, d, f, conmat, cval, fval, sim, simi
                    )
                    if subinfo == INFO_DEFAULT:
                        subinfo = _checkbreak(maxfun, nf, cstrv, ctol, f, ftarget, point)
                    if subinfo != INFO_DEFAULT:
                        info = subinfo
                        break
                bad_trstep = shortd or trfail or ratio <= 0 or jdrop_tr < 0
                improve_geo = bad_trstep and not adequate_geo
                reduce_rho = bad_trstep and adequate_geo and max(delta, dnorm) <= rho
                sizes = _column_norms_squared(sim)
                if improve_geo and not np.all(sizes <= 4 * (delta * delta)):
                    jdrop_geo = int(np.argmax(sizes))
                    d = geostep(jdrop_geo, a, conmat, cpen, delta / 2, fval, simi)
                    point[:] = sim[:, n] + d
                    f, cstrv, nf, nfilt = trial(
                        problem, point, args, state, constr, rhoend, nf, nfilt, filt, ctol, cweight
                    )
                    subinfo = updatexfc(
                        jdrop_geo, constr, cpen, cstrv, d, f, conmat, cval, fval, sim, simi
                    )
                    if subinfo == INFO_DEFAULT:
                        subinfo = _checkbreak(maxfun, nf, cstrv, ctol, f, ftarget, point)
                    if subinfo != INFO_DEFAULT:
                        info = subinfo
                        break
                if reduce_rho:
                    if rho <= rhoend:
                        info = SMALL_TR_RADIUS
                        break
                    delta = max(0.5 * rho, _redrho(rho, rhoend))
                    rho = _redrho(rho, rhoend)
                    cpen = max(cpenmin, min(cpen, _fcratio(conmat, fval)))
                    if updatepole(cpen, conmat, cval, fval, sim, simi) == DAMAGING_ROUNDING:
                        info = DAMAGING_ROUNDING
                        break
            # A last short step is worth one evaluation (PRIMA's final trust-region point).
            point[:] = sim[:, n] + d
            if info == SMALL_TR_RADIUS and shortd and norm(point - sim[:, n]) > 1.0e-3 * rhoend:
                if nf < maxfun:
                    f = evaluate(problem, point, args, constr)
                    nf += 1
                    nfilt = savefilt(
                        _violation(constr), ctol, cweight, f, point, nfilt, cfilt, ffilt, xfilt
                    )
            cweight = max(cpen, cweight)
        kopt = selectx(ffilt[:nfilt], cfilt[:nfilt], cweight, ctol)
        for k in range(n):
            problem.full_x[problem.free[k]] = xfilt[k, kopt]
        cstrv = cfilt[kopt]
        success = cstrv <= ctol and (info == SMALL_TR_RADIUS or info == FTARGET_ACHIEVED)
        return COBYLAResult(problem.full_x.copy(), ffilt[kopt], nf, info, cstrv, success)

    return minimize


def make_cobyla(fun: Callable) -> Callable:
    """``solve(x0, args, settings: COBYLASettings) -> (x, converged)``; ``converged`` is scipy's
    ``success``."""
    minimize = make_cobyla_minimize(fun)

    @ieee_njit
    def solve(x0, args, settings):
        result = minimize(x0, args, settings)
        return result.x, result.success

    return solve
