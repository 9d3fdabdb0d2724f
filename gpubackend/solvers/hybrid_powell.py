"""Powell's hybrid method for ``F(x) = 0`` with an analytic Jacobian: MINPACK's ``hybrj``, the
solver behind scipy's ``root(method="hybr")``.

The iteration is MINPACK's, step for step: the Jacobian is evaluated at the
start and again only after two failed steps in a row (a trial point evaluates
the equations alone: ``hybrj``'s ``fcn`` with ``iflag`` 1, not 2); in between,
Broyden's rank-one update corrects its QR factorization. The trust region, the scaling
by the Jacobian's column norms, the step (`scaled_dogleg`) and the five
verdicts (converged, ``maxfev`` reached, ``xtol`` too small, and two kinds of
slow progress) are ``hybrj``'s, so a budget of a few evaluations ends where
scipy's does, with the same ``success``. The update rotates ``R`` and ``Q`` by
MINPACK's Givens rotations (``r1updt``, ``r1mpyq``): a refactorization by
Householder reflections gives the same factors up to rounding, but where the
Jacobian is singular rounding decides whether a pivot is exactly zero, and the
steps part.
"""

from collections.abc import Callable

import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit

from gpubackend.solvers import minpack_maxfev
from gpubackend.solvers.householder_qr import apply_qt, form_q, householder_qr
from gpubackend.solvers.small_vectors import all_finite, norm
from gpubackend.solvers.trust_region import initial_scaling

_EPS = np.finfo(np.float64).eps
_GIANT = np.finfo(np.float64).max


@numba_njit
def _upper_triangle(factored, rdiag, r):
    """``R`` from `householder_qr`'s output."""
    n = r.shape[0]
    for i in range(n):
        for j in range(n):
            r[i, j] = factored[i, j] if j > i else 0.0
        r[i, i] = rdiag[i]


@numba_njit
def scaled_dogleg(r, diag, qtb, delta):
    """MINPACK's ``dogleg``: the minimiser of ``|R x - Q^T F|`` over ``|diag * x| <= delta`` along
    the dogleg from the scaled gradient to the Gauss-Newton point (``x`` is minus the step)."""
    n = qtb.shape[0]
    x = np.empty(n)
    for j in range(n - 1, -1, -1):
        total = 0.0
        for i in range(j + 1, n):
            total += r[j, i] * x[i]
        pivot = r[j, j]
        if pivot == 0.0:
            for i in range(j + 1):
                pivot = max(pivot, abs(r[i, j]))
            pivot = _EPS * pivot
            if pivot == 0.0:
                pivot = _EPS
        x[j] = (qtb[j] - total) / pivot
    scaled = diag * x
    gauss_newton_norm = norm(scaled)
    if gauss_newton_norm <= delta:
        return x
    gradient = np.zeros(n)
    for j in range(n):
        for i in range(j, n):
            gradient[i] += r[j, i] * qtb[j]
        gradient[j] /= diag[j]
    gradient_norm = norm(gradient)
    cauchy_norm = 0.0
    alpha = delta / gauss_newton_norm
    if gradient_norm != 0.0:
        for j in range(n):
            gradient[j] = (gradient[j] / gradient_norm) / diag[j]
        image = np.zeros(n)
        for j in range(n):
            total = 0.0
            for i in range(j, n):
                total += r[j, i] * gradient[i]
            image[j] = total
        image_norm = norm(image)
        cauchy_norm = (gradient_norm / image_norm) / image_norm
        alpha = 0.0
        if cauchy_norm < delta:
            residual_norm = norm(qtb)
            ratio = delta / gauss_newton_norm
            shrink = cauchy_norm / delta
            temp = (residual_norm / gradient_norm) * (residual_norm / gauss_newton_norm) * shrink
            temp = (
                temp
                - ratio * shrink**2
                + np.sqrt((temp - ratio) ** 2 + (1.0 - ratio**2) * (1.0 - shrink**2))
            )
            alpha = (ratio * (1.0 - shrink**2)) / temp
    along_gradient = (1.0 - alpha) * min(cauchy_norm, delta)
    return along_gradient * gradient + alpha * x


@numba_njit
def _givens(a, b):
    """``(cos, sin, tau)`` of the rotation that eliminates ``b`` against ``a``, and MINPACK's
    one-number record of it."""
    if abs(a) >= abs(b):
        tangent = b / a
        cos = 0.5 / np.sqrt(0.25 + 0.25 * tangent**2)
        sin = cos * tangent
        return cos, sin, sin
    cotangent = a / b
    sin = 0.5 / np.sqrt(0.25 + 0.25 * cotangent**2)
    cos = sin * cotangent
    tau = 1.0 / cos if abs(cos) * _GIANT > 1.0 else 1.0
    return cos, sin, tau


@numba_njit
def _rotation_of(tau):
    """``(cos, sin)`` from `_givens`'s record (``r1mpyq``)."""
    if abs(tau) > 1.0:
        cos = 1.0 / tau
        return cos, np.sqrt(1.0 - cos * cos)
    return np.sqrt(1.0 - tau * tau), tau


@numba_njit
def _rank_one_update(r, q, qtf, u, v):
    """MINPACK's ``r1updt`` and ``r1mpyq``: ``R^T + u v^T = S`` is rotated back to lower triangular
    by ``2 (n - 1)`` Givens rotations ``G``, ``r`` becomes ``(S G)^T``, and ``q`` and ``qtf`` are
    rotated by ``G`` (``v`` is overwritten with their records)."""
    n = r.shape[0]
    last = n - 1
    spike = np.zeros(n)
    spike[last] = r[last, last]
    for j in range(last - 1, -1, -1):
        if v[j] != 0.0:
            cos, sin, v_tau = _givens(v[last], v[j])
            v[last] = sin * v[j] + cos * v[last]
            v[j] = v_tau
            for i in range(j, n):
                rotated = cos * r[j, i] - sin * spike[i]
                spike[i] = sin * r[j, i] + cos * spike[i]
                r[j, i] = rotated
    for i in range(n):
        spike[i] += v[last] * u[i]
    for j in range(last):
        if spike[j] != 0.0:
            cos, sin, tau = _givens(r[j, j], spike[j])
            for i in range(j, n):
                rotated = cos * r[j, i] + sin * spike[i]
                spike[i] = -sin * r[j, i] + cos * spike[i]
                r[j, i] = rotated
            spike[j] = tau
    r[last, last] = spike[last]
    for rows in (q, qtf.reshape((1, n))):
        for j in range(last - 1, -1, -1):
            cos, sin = _rotation_of(v[j])
            for i in range(rows.shape[0]):
                rotated = cos * rows[i, j] - sin * rows[i, last]
                rows[i, last] = sin * rows[i, j] + cos * rows[i, last]
                rows[i, j] = rotated
        for j in range(last):
            cos, sin = _rotation_of(spike[j])
            for i in range(rows.shape[0]):
                rotated = cos * rows[i, j] + sin * rows[i, last]
                rows[i, last] = -sin * rows[i, j] + cos * rows[i, last]
                rows[i, j] = rotated


def make_hybrid_powell(residual: Callable, jacobian: Callable) -> Callable:
    """``solve(x0, args, settings: HybrSettings) -> (x, converged)``; ``residual(x, args)`` returns
    ``F``, ``jacobian(x, args)`` its Jacobian."""

    @numba_njit
    def solve(x0, args, settings):
        xtol, factor = settings.xtol, settings.factor
        x = x0.astype(np.float64)
        n = x.shape[0]
        maxfev = minpack_maxfev(settings.maxfev, n)
        fvec = residual(x, args)
        nfev = 1
        fnorm = norm(fvec)
        if not all_finite(fvec):
            return x, False
        diag = np.empty(n)
        r, q = np.empty((n, n)), np.empty((n, n))
        rdiag, norms = np.empty(n), np.empty(n)
        permutation = np.empty(n, dtype=np.int64)
        first = True
        successes = failures = slow_steps = slow_jacobians = 0
        delta = xnorm = 0.0
        while True:
            # (Re)evaluate the Jacobian: at the start, and after two failed steps in a row.
            factored = jacobian(x, args).astype(np.float64)
            if not all_finite(factored):
                return x, False
            householder_qr(factored, False, rdiag, norms, permutation)
            if first:
                xnorm, delta = initial_scaling(norms, x, factor, diag)
            qtf = fvec.copy()
            apply_qt(factored, qtf)
            _upper_triangle(factored, rdiag, r)
            form_q(factored, q)
            for j in range(n):
                diag[j] = max(diag[j], norms[j])
            fresh_jacobian = True
            while True:
                p = -scaled_dogleg(r, diag, qtf, delta)
                x_new = x + p
                pnorm = norm(diag * p)
                if first:
                    delta = min(delta, pnorm)
                fvec_new = residual(x_new, args)
                nfev += 1
                fnorm_new = norm(fvec_new) if all_finite(fvec_new) else np.inf
                actual = 1.0 - (fnorm_new / fnorm) ** 2 if fnorm_new < fnorm else -1.0
                predicted_qtf = qtf + r @ p
                predicted_norm = norm(predicted_qtf)
                predicted = 1.0 - (predicted_norm / fnorm) ** 2 if predicted_norm < fnorm else 0.0
                ratio = actual / predicted if predicted > 0.0 else 0.0
                if ratio < 0.1:
                    successes = 0
                    failures += 1
                    delta *= 0.5
                else:
                    failures = 0
                    successes += 1
                    if ratio >= 0.5 or successes > 1:
                        delta = max(delta, pnorm / 0.5)
                    if abs(ratio - 1.0) <= 0.1:
                        delta = pnorm / 0.5
                accepted = ratio >= 1e-4
                if accepted:
                    x = x_new
                    fvec = fvec_new
                    xnorm = norm(diag * x)
                    fnorm = fnorm_new
                    first = False
                slow_steps = 0 if actual >= 0.001 else slow_steps + 1
                if fresh_jacobian:
                    slow_jacobians += 1
                if actual >= 0.1:
                    slow_jacobians = 0
                if delta <= xtol * xnorm or fnorm == 0.0:
                    return x, True
                # maxfev reached, xtol too small, or no progress: scipy's statuses 2 to 5.
                if (
                    nfev >= maxfev
                    or 0.1 * max(0.1 * delta, pnorm) <= _EPS * xnorm
                    or slow_jacobians == 5
                    or slow_steps == 10
                ):
                    return x, False
                if failures == 2:
                    break
                # Broyden's update of the factored Jacobian, with the new Q^T F where it moved.
                qt_fvec_new = q.T @ fvec_new
                qt_change = (qt_fvec_new - predicted_qtf) / pnorm
                scaled_step = diag * ((diag * p) / pnorm)
                if accepted:
                    qtf = qt_fvec_new
                _rank_one_update(r, q, qtf, scaled_step, qt_change)
                fresh_jacobian = False

    return solve
