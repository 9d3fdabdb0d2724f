"""PRIMA's COBYLA trust-region subproblem (``trstlp``), as scipy 1.18's pyprima runs it.

Powell's algorithm finds the step ``d`` with ``|d| <= delta`` that first
minimises the greatest violation of the linearised constraints ``A' d <= b``
(stage 1), then the linear model ``g' d`` keeping that violation (stage 2),
moving along the boundary of an active set whose QR factors (``z`` and the
diagonal of R, ``zdota``) are updated by Givens rotations (PRIMA's
``qradd_Rdiag`` and ``qrexc_Rdiag``). Every array keeps its full size: the
active set is the first ``nact`` entries of ``iact``, and a least-squares
solve on the active columns is one on all of them with the others zeroed
(numpy's ``lstsq``, as pyprima's, at numpy's cut-off). Each ``break`` of
pyprima's loop ends the `jax.lax.while_loop` with what the iteration had
changed before it, as pyprima returns it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


def is_minor(x: jax.Array, ref: jax.Array) -> jax.Array:
    """PRIMA's ``isminor``: ``x`` is lost in rounding next to ``ref``."""
    refa = jnp.abs(ref) + 0.1 * jnp.abs(x)
    refb = jnp.abs(ref) + 0.2 * jnp.abs(x)
    return (jnp.abs(ref) >= refa) | (refa >= refb)


def plane_rotation(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """PRIMA's ``planerot``: ``(c, s)`` of the Givens rotation ``[[c, s], [-s, c]]`` taking
    ``(a, b)`` to ``(r, 0)``, guarded against NaN, infinities and overflow as PRIMA guards."""
    finfo = jnp.finfo(a.dtype)
    eps, tiny, huge = finfo.eps, finfo.tiny, finfo.max
    abs_a, abs_b = jnp.abs(a), jnp.abs(b)
    one, zero = jnp.ones_like(a), jnp.zeros_like(a)
    in_range = (
        (jnp.sqrt(tiny) < abs_a)
        & (abs_a < jnp.sqrt(huge / 2.1))
        & (jnp.sqrt(tiny) < abs_b)
        & (abs_b < jnp.sqrt(huge / 2.1))
    )
    r = jnp.sqrt(a * a + b * b)
    t_a = b / a
    u_a = jnp.maximum(jnp.maximum(1.0, jnp.abs(t_a)), jnp.sqrt(1 + t_a * t_a)) * jnp.sign(a)
    t_b = a / b
    u_b = jnp.maximum(jnp.maximum(1.0, jnp.abs(t_b)), jnp.sqrt(1 + t_b * t_b)) * jnp.sign(b)
    cases = [
        (jnp.isnan(a) | jnp.isnan(b), one, zero),
        (
            jnp.isinf(a) & jnp.isinf(b),
            jnp.sign(a) / jnp.sqrt(2.0).astype(a.dtype),
            jnp.sign(b) / jnp.sqrt(2.0).astype(a.dtype),
        ),
        ((abs_a <= 0) & (abs_b <= 0), one, zero),
        (abs_b <= eps * abs_a, jnp.sign(a), zero),
        (abs_a <= eps * abs_b, zero, jnp.sign(b)),
        (in_range, a / r, b / r),
        (abs_a > abs_b, 1 / u_a, t_a / u_a),
    ]
    c, s = t_b / u_b, 1 / u_b
    for applies, case_c, case_s in reversed(cases):
        c, s = jnp.where(applies, case_c, c), jnp.where(applies, case_s, s)
    return c, s


def _rotate_columns(q: jax.Array, k, first: jax.Array, second: jax.Array, c, s) -> jax.Array:
    """``q`` with columns ``k`` and ``k + 1`` set to ``[first, second] @ G'``."""
    return q.at[:, k].set(c * first + s * second).at[:, k + 1].set(c * second - s * first)


def qr_add(c: jax.Array, q: jax.Array, rdiag: jax.Array, n: jax.Array):
    """PRIMA's ``qradd_Rdiag``: the column ``c`` appended to the ``n`` factored ones where it is
    independent of them; ``(q, rdiag, n)``."""
    size = q.shape[1]
    eps = jnp.finfo(q.dtype).eps
    cqa = jnp.abs(c) @ jnp.abs(q)
    cq = c @ q
    cq = jnp.where(is_minor(cq, cqa), 0.0, cq)

    def rotate(i, carry):
        q, cq = carry
        k = size - 2 - i
        applies = (k >= n) & (jnp.abs(cq[k + 1]) > 0)
        cos, sin = plane_rotation(cq[k], cq[k + 1])
        rotated = _rotate_columns(q, k, q[:, k], q[:, k + 1], cos, sin)
        q = jnp.where(applies, rotated, q)
        cq = jnp.where(applies, cq.at[k].set(jnp.hypot(cq[k], cq[k + 1])), cq)
        return q, cq

    q, cq = jax.lax.fori_loop(0, max(size - 1, 0), rotate, (q, cq))
    at_n = cq[jnp.minimum(n, size - 1)]
    grows = (n < size) & (jnp.abs(at_n) > eps**2) & ~is_minor(at_n, cqa[jnp.minimum(n, size - 1)])
    n = n + grows
    last = jnp.clip(n - 1, 0, size - 1)
    rdiag = jnp.where(n >= 1, rdiag.at[last].set(cq[last]), rdiag)
    return q, rdiag, n


def qr_exchange(active: jax.Array, q: jax.Array, rdiag: jax.Array, n: jax.Array, i: jax.Array):
    """PRIMA's ``qrexc_Rdiag`` on the first ``n`` columns of ``active``: column ``i`` moved to the
    end of the factored ones; ``(q, rdiag)``."""
    size = q.shape[1]

    def rotate(k, q):
        applies = (k >= i) & (k < n - 1)
        following = active[:, jnp.minimum(k + 1, active.shape[1] - 1)]
        cos, sin = plane_rotation(rdiag[k + 1], q[:, k] @ following)
        rotated = _rotate_columns(q, k, q[:, k + 1], q[:, k], cos, sin)
        return jnp.where(applies, rotated, q)

    exchanged = jax.lax.fori_loop(0, max(size - 1, 0), rotate, q)
    index = jnp.arange(size)
    columns = active.shape[1]
    following = active[:, jnp.clip(index + 1, 0, columns - 1)]
    products = jnp.sum(exchanged * following, axis=0)
    last = jnp.clip(n - 1, 0, size - 1)
    moved = rdiag.at[last].set(exchanged[:, last] @ active[:, jnp.clip(i, 0, columns - 1)])
    moved = jnp.where((index >= i) & (index < n - 1), products, moved)
    valid = (i >= 0) & (i < n)
    return jnp.where(valid, exchanged, q), jnp.where(valid, moved, rdiag)


def active_least_squares(active: jax.Array, rhs: jax.Array, nact: jax.Array) -> jax.Array:
    """numpy's ``lstsq`` of the first ``nact`` columns of ``active`` against ``rhs`` (pyprima's
    ``lsqr``), zero past ``nact``."""
    size = active.shape[0]
    used = jnp.arange(active.shape[1]) < nact
    masked = jnp.where(used, active, 0.0)
    # numpy's cut-off for an (n, nact) matrix, nact <= n.
    rcond = float(jnp.finfo(active.dtype).eps) * size
    solution = jnp.linalg.lstsq(masked, rhs, rcond=rcond)[0]
    return jnp.where(used, solution, 0.0)


class _Loop(NamedTuple):
    iterations: jax.Array
    stopped: jax.Array
    iact: jax.Array
    nact: jax.Array
    d: jax.Array
    vmultc: jax.Array
    z: jax.Array
    zdota: jax.Array
    sdirn: jax.Array
    cviol: jax.Array
    optold: jax.Array
    nactold: jax.Array
    nfail: jax.Array
    icon: jax.Array


def rounded(product: jax.Array) -> jax.Array:
    """``product`` rounded on its own before it is summed, as numpy rounds it: XLA would fuse
    ``a * b + c`` into one FMA, whose other rounding decides differently whether a multiplier
    reaches zero exactly, and so which constraint the subproblem activates next."""
    return jax.lax.optimization_barrier(product)


def _swap(vector: jax.Array, i, j) -> jax.Array:
    return vector.at[i].set(vector[j]).at[j].set(vector[i])


def _tiny(value: jax.Array) -> jax.Array:
    return jnp.isnan(value) | (jnp.abs(value) <= jnp.finfo(value.dtype).eps ** 2)


def _stage(stage: int, a: jax.Array, b: jax.Array, delta, start: _Loop, mcon: int) -> _Loop:
    """pyprima's ``trstlp_sub`` loop from ``start``, on the ``mcon`` columns of ``a``."""
    num_vars = a.shape[0]
    num_constraints = mcon if stage == 1 else mcon - 1
    maxiter = min(10000, 100 * max(num_constraints, num_vars))
    huge = jnp.asarray(jnp.finfo(a.dtype).max, a.dtype)
    index = jnp.arange(mcon)

    def at(vector, k):
        # Python's index of k, -1 for the last entry.
        return vector[k % vector.shape[0]]

    def add(s: _Loop):
        icon, nact = s.icon, s.nact
        column = a[:, s.iact[icon]]
        z, zdota, nact_added = qr_add(column, s.z, s.zdota, nact)
        added = nact_added == nact + 1
        # Added: the new column takes slot nact - 1 of the active set.
        last = nact_added - 1
        vmultc_added = jnp.where(
            nact_added != icon + 1,
            s.vmultc.at[icon].set(at(s.vmultc, last)).at[last % mcon].set(0.0),
            s.vmultc.at[last % mcon].set(0.0),
        )
        iact_added = jnp.where(nact_added != icon + 1, _swap(s.iact, icon, last % mcon), s.iact)
        # Dependent: the active multipliers move until one reaches zero, and that column leaves.
        active = a[:, s.iact]
        vmultd = active_least_squares(active, column, nact)
        in_active = index < nact
        positive = in_active & (vmultd > 0) & (s.iact <= num_constraints)
        no_positive = ~jnp.any(positive)
        fracmult = jnp.where(positive, s.vmultc / vmultd, huge)
        frac = jnp.min(fracmult, initial=huge)
        vmultc_dependent = jnp.where(
            in_active, jnp.maximum(0.0, s.vmultc - rounded(frac * vmultd)), s.vmultc
        )
        # The multiplier that sets frac is zero (pyprima's rounding leaves it at most a few ulps).
        vmultc_dependent = jnp.where(index == jnp.argmin(fracmult), 0.0, vmultc_dependent)
        dependent_broke = no_positive | _tiny(at(zdota, nact - 1))
        last_dep = (nact - 1) % mcon
        vmultc_swapped = vmultc_dependent.at[icon].set(0.0).at[last_dep].set(frac)
        iact_swapped = _swap(s.iact, icon, last_dep)
        broke = ~added & dependent_broke
        vmultc = jnp.where(
            added,
            vmultc_added,
            jnp.where(
                no_positive, s.vmultc, jnp.where(dependent_broke, vmultc_dependent, vmultc_swapped)
            ),
        )
        iact = jnp.where(added, iact_added, jnp.where(dependent_broke, s.iact, iact_swapped))
        nact = nact_added
        if stage == 2:
            # The objective's column is kept last in the active set.
            reorders = ~broke & (at(iact, nact - 1) != mcon - 1)
            broke = broke | (reorders & (nact <= 1))
            reorders = reorders & (nact > 1)
            z_ex, zdota_ex = qr_exchange(a[:, iact], z, zdota, nact, nact - 2)
            pair = ((nact - 2) % mcon, (nact - 1) % mcon)
            z = jnp.where(reorders, z_ex, z)
            zdota = jnp.where(reorders, zdota_ex, zdota)
            iact = jnp.where(reorders, _swap(iact, *pair), iact)
            vmultc = jnp.where(reorders, _swap(vmultc, *pair), vmultc)
        pivot = at(zdota, nact - 1)
        broke = broke | _tiny(pivot)
        direction = at(z.T, nact - 1)
        if stage == 1:
            sdirn = s.sdirn - rounded((s.sdirn @ a[:, at(iact, nact - 1)] + 1) / pivot * direction)
        else:
            sdirn = -1 / pivot * direction
        return iact, nact, vmultc, z, zdota, sdirn, broke

    def remove(s: _Loop):
        icon, nact = s.icon, s.nact
        z, zdota = qr_exchange(a[:, s.iact], s.z, s.zdota, nact, icon)
        source = jnp.where(
            (index >= icon) & (index < nact - 1),
            index + 1,
            jnp.where(index == nact - 1, icon, index),
        )
        iact, vmultc = s.iact[source], s.vmultc[source]
        nact = nact - 1
        broke = (nact > 0) & _tiny(at(zdota, nact - 1))
        if stage == 1:
            direction = at(z.T, nact)
            sdirn = s.sdirn - rounded((s.sdirn @ direction) * direction)
        else:
            broke = broke | (nact < 0)
            sdirn = -1 / at(zdota, nact - 1) * at(z.T, nact - 1)
        return iact, nact, vmultc, z, zdota, sdirn, broke

    def body(s: _Loop) -> _Loop:
        optnew = s.cviol if stage == 1 else s.d @ a[:, mcon - 1]
        improved = (optnew < s.optold) | (s.nact > s.nactold)
        nactold = jnp.where(improved, s.nact, s.nactold)
        nfail = jnp.where(improved, 0, s.nfail + 1)
        optold = jnp.minimum(s.optold, optnew)
        counted = s._replace(nactold=nactold, nfail=nfail, optold=optold)
        iact, nact, vmultc, z, zdota, sdirn, broke = jax.lax.cond(
            s.icon >= s.nact, add, remove, counted
        )
        moved = counted._replace(iact=iact, nact=nact, vmultc=vmultc, z=z, zdota=zdota, sdirn=sdirn)
        broke = (nfail == 3) | broke
        # The step along sdirn to the trust region's boundary, or to the next constraint.
        d = s.d
        dd = delta * delta - d @ d
        ss = sdirn @ sdirn
        sd = sdirn @ d
        eps = jnp.finfo(d.dtype).eps
        ends = (dd <= 0) | (ss <= eps * delta * delta) | jnp.isnan(sd)
        sqrtd = jnp.maximum(
            jnp.maximum(jnp.sqrt(rounded(ss * dd) + rounded(sd * sd)), jnp.abs(sd)),
            jnp.sqrt(ss * dd),
        )
        step = jnp.where(sd > 0, dd / (sqrtd + sd), (sqrtd - sd) / ss)
        ends = ends | (step <= 0) | ~jnp.isfinite(step)
        cviol = s.cviol
        if stage == 1:
            ends = ends | is_minor(cviol, step)
            step = jnp.minimum(step, cviol)
        dnew = d + rounded(step * sdirn)
        active, b_active = a[:, iact], b[iact]
        in_active = index < nact
        if stage == 1:
            cviol = jnp.max(jnp.where(in_active, dnew @ active - b_active, 0.0), initial=0.0)
        vmultd = -active_least_squares(active, dnew, nact)
        if stage == 2:
            last = (nact - 1) % mcon
            vmultd = vmultd.at[last].set(jnp.maximum(0.0, vmultd[last]))
        cvshift = cviol - (dnew @ active - b_active)
        cvsabs = jnp.abs(dnew) @ jnp.abs(active) + jnp.abs(b_active) + cviol
        cvshift = jnp.where(is_minor(cvshift, cvsabs), 0.0, cvshift)
        vmultd = jnp.where(in_active, vmultd, cvshift)
        fracmult = jnp.where(vmultd < 0, vmultc / (vmultc - vmultd), huge)
        candidates = jnp.concatenate([jnp.ones((1,), d.dtype), fracmult])
        icon = jnp.argmin(candidates) - 1
        frac = jnp.min(candidates)
        d_new = rounded((1 - frac) * d) + rounded(frac * dnew)
        vmultc_new = jnp.maximum(0.0, rounded((1 - frac) * vmultc) + rounded(frac * vmultd))
        vmultc_new = jnp.where(index == icon, 0.0, vmultc_new)
        finite = jnp.isfinite(jnp.sum(jnp.abs(d_new))) & jnp.isfinite(jnp.sum(jnp.abs(vmultc_new)))
        if stage == 1:
            cviol_new = jnp.max(d_new @ a[:, :mcon] - b, initial=0.0)
        else:
            cviol_new = s.cviol
        stepped = moved._replace(
            d=jnp.where(finite, d_new, d),
            vmultc=vmultc_new,
            cviol=jnp.where(finite, cviol_new, s.cviol),
            icon=icon,
        )
        done = ~finite | (icon < 0) | (icon >= mcon)
        kept = jax.tree.map(lambda x, y: jnp.where(broke | ends, x, y), moved, stepped)
        stopped = broke | ends | done
        result = jax.tree.map(lambda x, y: jnp.where(nfail == 3, x, y), counted, kept)
        return result._replace(iterations=s.iterations + 1, stopped=stopped)

    def running(s: _Loop) -> jax.Array:
        return ~s.stopped & (s.iterations < maxiter)

    return jax.lax.while_loop(running, body, start)


def trust_region_step(a: jax.Array, b: jax.Array, delta: jax.Array, g: jax.Array) -> jax.Array:
    """pyprima's ``trstlp``: the step within ``delta`` for the constraints ``a' d <= b`` (``a`` of
    shape ``(n, m)``) and the objective's gradient ``g``."""
    num_vars, m = a.shape
    dtype = a.dtype
    huge = jnp.asarray(jnp.finfo(dtype).max, dtype)
    a_aug = jnp.concatenate([a, g[:, None]], axis=1)
    b_aug = jnp.concatenate([b, jnp.zeros((1,), dtype)])
    # Columns too large are scaled down, as pyprima scales them.
    largest = jnp.max(jnp.abs(a_aug), axis=0)
    scale = jnp.where(largest > 1e12, jnp.maximum(2 * jnp.finfo(dtype).tiny, 1 / largest), 1.0)
    a_aug = jnp.where(largest > 1e12, a_aug * scale, a_aug)
    b_aug = jnp.where(largest > 1e12, b_aug * scale, b_aug)
    identity = jnp.eye(num_vars, dtype=dtype)
    zero_d = jnp.zeros((num_vars,), dtype)
    iact1 = jnp.arange(m)
    if m > 0:
        b1 = b_aug[:m]
        cviol = jnp.max(-b1, initial=0.0)
        stage1 = _Loop(
            iterations=jnp.array(0),
            stopped=(cviol <= 0) | jnp.all(jnp.isnan(b1)),
            iact=iact1,
            nact=jnp.array(0),
            d=zero_d,
            vmultc=cviol + b1,
            z=identity,
            zdota=jnp.zeros((num_vars,), dtype),
            sdirn=zero_d,
            cviol=cviol,
            optold=huge,
            nactold=jnp.array(0),
            nfail=jnp.array(0),
            icon=jnp.nanargmax(-b1),
        )
        first = _stage(1, a_aug[:, :m], b1, delta, stage1, m)
        iact, nact, d, vmultc, z = first.iact, first.nact, first.d, first.vmultc, first.z
    else:
        iact, nact, d, vmultc, z = iact1, jnp.array(0), zero_d, b_aug[:0], identity
    mcon = m + 1
    iact = jnp.concatenate([iact, jnp.array([m])])
    vmultc = jnp.concatenate([vmultc, jnp.zeros((1,), dtype)])
    index = jnp.arange(num_vars)
    zdota = jnp.where(
        index < nact, jnp.sum(z * a_aug[:, iact[jnp.minimum(index, mcon - 1)]], axis=0), 0.0
    )
    stage2 = _Loop(
        iterations=jnp.array(0),
        stopped=d @ d >= delta * delta,
        iact=iact,
        nact=nact,
        d=d,
        vmultc=vmultc,
        z=z,
        zdota=zdota,
        sdirn=zero_d,
        cviol=jnp.max(d @ a_aug[:, :m] - b_aug[:m], initial=0.0),
        optold=huge,
        nactold=nact,
        nfail=jnp.array(0),
        icon=jnp.array(m),
    )
    return _stage(2, a_aug, b_aug, delta, stage2, mcon).d
