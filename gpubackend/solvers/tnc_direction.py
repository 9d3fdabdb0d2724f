"""TNC's search direction (``tnc.c``'s ``tnc_direction``): truncated preconditioned CG.

CG on the Newton equations ``H z = -g`` over the free variables, each product
``H v`` a forward difference of gradients (one objective evaluation, counted in
TNC's budget). The preconditioner is a two-step self-scaled BFGS update
(``msolve``) of a diagonal that CG itself refines (``diagonalScaling``); CG stops
when the quadratic model no longer falls enough, at ``maxCGit`` products, or one
evaluation before the budget.
"""

from collections.abc import Callable

from gpubackend.solvers.ieee import ieee_njit
from gpubackend.solvers.small_vectors import dot
from gpubackend.solvers.tnc_vectors import (
    project,
    scale_gradient_into,
    unscaled_point_into,
)

_CG_TOLERANCE = 1e-12
_SMALLEST_DIAGONAL = 1e-6


@ieee_njit(inline="always")
def _self_scaled_bfgs(sj, hjv, hjyj, yjsj, yjhyj, vsj, vhyj, out):
    """``out = H_{j+1} v`` from ``H_j v`` by one BFGS update with the pair ``(sj, yj)``
    (``tnc.c``'s ``ssbfgs`` with ``gamma = 1``); ``out`` may be ``hjv``."""
    delta = beta = 0.0
    if yjsj != 0.0:
        delta = (yjhyj / yjsj + 1.0) * vsj / yjsj - vhyj / yjsj
        beta = -vsj / yjsj
    for i in range(out.shape[0]):
        out[i] = hjv[i] + delta * sj[i] + beta * hjyj[i]


@ieee_njit
def precondition(g, y, memory, hg, hyk, hyr):
    """``y = M^-1 g`` (``tnc.c``'s ``msolve``): the diagonal alone on the first cycle, otherwise
    BFGS updates of it by the last step and, unless reset, the accumulated one."""
    diagb, sk, yk, sr, yr, upd1, lreset, yksk, yrsr = memory
    n = g.shape[0]
    if upd1:
        for i in range(n):
            y[i] = g[i] / diagb[i]
        return
    gsk = dot(g, sk)
    if lreset:
        for i in range(n):
            rdiagb = 1.0 / diagb[i]
            hg[i] = g[i] * rdiagb
            hyk[i] = yk[i] * rdiagb
        ykhyk = dot(yk, hyk)
        ghyk = dot(g, hyk)
        _self_scaled_bfgs(sk, hg, hyk, yksk, ykhyk, gsk, ghyk, y)
        return
    for i in range(n):
        rdiagb = 1.0 / diagb[i]
        hg[i] = g[i] * rdiagb
        hyk[i] = yk[i] * rdiagb
        hyr[i] = yr[i] * rdiagb
    gsr = dot(g, sr)
    ghyr = dot(g, hyr)
    yrhyr = dot(yr, hyr)
    _self_scaled_bfgs(sr, hg, hyr, yrsr, yrhyr, gsr, ghyr, hg)
    yksr = dot(yk, sr)
    ykhyr = dot(yk, hyr)
    _self_scaled_bfgs(sr, hyk, hyr, yrsr, yrhyr, yksr, ykhyr, hyk)
    ykhyk = dot(hyk, yk)
    ghyk = dot(hyk, g)
    _self_scaled_bfgs(sk, hg, hyk, yksk, ykhyk, gsk, ghyk, y)


@ieee_njit(inline="always")
def _one_if_zero(value):
    """A curvature or norm as ``initPreconditioner`` divides by it: 0 becomes 1."""
    return 1.0 if value == 0.0 else value


@ieee_njit
def _initial_diagonal(emat, memory, bsk):
    """The diagonal CG starts from (``tnc.c``'s ``initPreconditioner``): the last one, updated by
    the BFGS pairs ``precondition`` uses."""
    diagb, sk, yk, sr, yr, upd1, lreset, yksk, yrsr = memory
    n = emat.shape[0]
    if upd1:
        emat[:] = diagb
        return
    if lreset:
        for i in range(n):
            bsk[i] = diagb[i] * sk[i]
        sds = _one_if_zero(dot(sk, bsk))
        yksk = _one_if_zero(yksk)
        for i in range(n):
            td = diagb[i]
            emat[i] = td - td * td * sk[i] * sk[i] / sds + yk[i] * yk[i] / yksk
        return
    for i in range(n):
        bsk[i] = diagb[i] * sr[i]
    sds = _one_if_zero(dot(sr, bsk))
    srds = dot(sk, bsk)
    yrsk = dot(yr, sk)
    yrsr = _one_if_zero(yrsr)
    for i in range(n):
        td = diagb[i]
        bsk[i] = td * sk[i] - bsk[i] * srds / sds + yr[i] * yrsk / yrsr
        emat[i] = td - td * td * sr[i] * sr[i] / sds + yr[i] * yr[i] / yrsr
    sds = _one_if_zero(dot(sk, bsk))
    yksk = _one_if_zero(yksk)
    for i in range(n):
        emat[i] -= bsk[i] * bsk[i] / sds + yk[i] * yk[i] / yksk


def make_tnc_direction(evaluate: Callable) -> Callable:
    """``direction(...) -> nfeval``; see ``direction``."""

    @ieee_njit
    def direction(
        zsol, x, g, memory, maxCGit, maxnfeval, nfeval, scaling, pivot, accuracy, gnorm, xnorm,
        problem, work,
    ):  # fmt: skip
        """``zsol`` = TNC's direction at scaled ``x`` with scaled, projected gradient ``g``;
        ``memory`` is the preconditioner's (``diagb`` is refined in place), ``scaling``
        ``(xscale, xoffset, fscale, low, up)``; ``work`` holds nine vectors of scratch."""
        xscale, xoffset, fscale, low, up = scaling
        n = x.shape[0]
        if maxCGit == 0:
            for i in range(n):
                zsol[i] = -g[i]
            project(zsol, pivot)
            return nfeval
        r, v, zk, emat, gv, point, hg, hyk, hyr = work
        _initial_diagonal(emat, memory, hg)
        for i in range(n):
            r[i] = -g[i]
            v[i] = 0.0
            zsol[i] = 0.0
        qold = 0.0
        rzold = 0.0
        delta = accuracy * (xnorm + 1.0)
        for k in range(maxCGit):
            project(r, pivot)
            precondition(r, zk, memory, hg, hyk, hyr)
            project(zk, pivot)
            rz = dot(r, zk)
            if (rz / gnorm < _CG_TOLERANCE) or (nfeval >= maxnfeval - 1):
                # Truncated: out of curvature or one evaluation from the budget.
                if k == 0:
                    for i in range(n):
                        zsol[i] = -g[i]
                    project(zsol, pivot)
                break
            beta = 0.0 if k == 0 else rz / rzold
            for i in range(n):
                v[i] = zk[i] + beta * v[i]
            project(v, pivot)
            # H v by a forward difference of gradients (hessianTimesVector).
            unscaled_point_into(point, x, delta, v, xscale, xoffset, low, up)
            evaluate(point, gv, problem)
            nfeval += 1
            scale_gradient_into(gv, gv, xscale, fscale)
            dinv = 1.0 / delta
            for i in range(n):
                gv[i] = (gv[i] - g[i]) * dinv
                if xscale[i] == 0.0:
                    gv[i] = 0.0
            project(gv, pivot)
            vgv = dot(v, gv)
            if vgv / gnorm < _CG_TOLERANCE:
                # Truncated: negative or no curvature along v.
                if k == 0:
                    precondition(g, zsol, memory, hg, hyk, hyr)
                    for i in range(n):
                        zsol[i] = -zsol[i]
                    project(zsol, pivot)
                break
            # diagonalScaling: a diagonal BFGS update of the preconditioner.
            vr = 1.0 / dot(v, r)
            vgv_inverse = 1.0 / vgv
            for i in range(n):
                emat[i] += -r[i] * r[i] * vr + gv[i] * gv[i] * vgv_inverse
                if emat[i] <= _SMALLEST_DIAGONAL:
                    emat[i] = 1.0
            alpha = rz / vgv
            for i in range(n):
                zsol[i] += alpha * v[i]
            for i in range(n):
                r[i] += -alpha * gv[i]
            gtp = dot(zsol, g)
            pr = dot(r, zsol)
            qnew = (gtp + pr) * 0.5
            qtest = (k + 1) * (1.0 - qold / qnew)
            if qtest <= 0.5:
                break
            if gtp > 0.0:
                # Not a descent direction any more: step back.
                for i in range(n):
                    zsol[i] += -alpha * v[i]
                break
            qold = qnew
            rzold = rz
        memory[0][:] = emat
        return nfeval

    return direction
