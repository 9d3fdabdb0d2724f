"""JAX lowerings of the inverse regularized incomplete gamma and beta functions (PyTensor's
``gammaincinv``, ``gammainccinv``, ``betaincinv``), which stock JAX has only through
TensorFlow Probability: plain additions, so ``mode="JAX"`` users get them too.

PyMC draws a truncated Gamma, Beta or StudentT by its inverse CDF, which is one of these.

Each is solved by Newton's method on the logarithm of the CDF (or of the survival function,
whichever is at most 1/2 at the solution, so that a value near 1 is never formed), in a variable
that maps the support to the real line: ``log x`` for the gamma, ``logit x`` for the beta. Both
distributions are log-concave in that variable, so the function solved for is concave and
Newton's iterates approach the root from one side after at most one step, quadratically, with
no bracketing. The values come from ``jax.scipy.special.gammainc``/``gammaincc``/``betainc``,
so the result is as exact as they are. The initial guesses are Numerical Recipes' (3rd ed.,
6.2.1 and 6.4.1), written in the same variable.

Derivatives are implicit (custom JVPs): d x / d p is the reciprocal density, and for the
gamma d x / d a is ``-dP/da`` over the density. PyTensor defines no gradient in the shape
parameters; for the beta none is given here either, as JAX's own ``betainc`` has none.
Invalid arguments give NaN, and p = 0 or 1 the ends of the support, as in scipy.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.scipy.special import betainc, betaln, gammainc, gammaincc, gammaln, ndtri
from pytensor.link.jax.dispatch.basic import jax_funcify
from pytensor.scalar.math import BetaIncInv, GammaIncCInv, GammaIncInv

_MAX_NEWTON_STEPS = 60
"""Far more than needed (from these guesses, at most about 10): a stop, not a budget."""


def _float_arrays(*values) -> list[jax.Array]:
    dtype = jnp.result_type(*values, 1.0)
    arrays = jnp.broadcast_arrays(*(jnp.asarray(value, dtype) for value in values))
    return list(arrays)


def _representable(value: jax.Array) -> jax.Array:
    """Whether ``value`` is more than a factor 1024 from underflowing (XLA flushes subnormals to
    0, so the last digits before it are lost): where it is not, a stand-in gives its log."""
    return value > jnp.finfo(value.dtype).tiny * 1024


def _newton_step(exact: jax.Array, log_value, slope, stand_in, stand_in_slope, log_target):
    """The Newton step on log(value) - log_target: of the exact value where ``exact``, else of the
    stand-in, each with its own derivative."""
    log_value = jnp.where(exact, log_value, stand_in)
    return (log_value - log_target) / jnp.where(exact, slope, stand_in_slope)


def _newton(step: Callable[[jax.Array], jax.Array], start: jax.Array) -> jax.Array:
    """Iterate ``y -= step(y)`` until no entry moves by more than a few ulps (or a non-finite step
    stops it)."""
    tolerance = 4 * jnp.finfo(start.dtype).eps

    def moving(carry):
        count, _, change = carry
        return (count < _MAX_NEWTON_STEPS) & (change > tolerance)

    def iterate(carry):
        count, y, _ = carry
        delta = step(y)
        delta = jnp.where(jnp.isfinite(delta), delta, 0.0)
        new_y = y - delta
        change = jnp.max(jnp.abs(delta) / jnp.maximum(1.0, jnp.abs(new_y)), initial=0.0)
        return count + 1, new_y, change

    infinity = jnp.asarray(jnp.inf, start.dtype)
    _, solution, _ = jax.lax.while_loop(moving, iterate, (0, start, infinity))
    return solution


def _gamma_log_solution(a: jax.Array, p: jax.Array, q: jax.Array) -> jax.Array:
    """log x with P(a, x) = p and Q(a, x) = q (p + q = 1, both given to keep the smaller exact)."""
    lower = p <= q
    log_target = jnp.log(jnp.where(lower, p, q))
    # Numerical Recipes' guess, for a <= 1 a power law at 0 and an exponential tail.
    t = 1 - a * (0.253 + a * 0.12)
    small_a = jnp.where(
        p < t,
        (jnp.log(p) - jnp.log(t)) / a,
        jnp.log1p(-(jnp.log(q) - jnp.log1p(-t))),
    )
    # For a > 1, Wilson-Hilferty, which falls far left in the lower tail; there the root of the
    # power law x^a / a!, which bounds P from above, is never right of P's and serves as a floor.
    z = jnp.where(lower, ndtri(p), -ndtri(q))
    base = 1 - 1 / (9 * a) + z / (3 * jnp.sqrt(a))
    wilson_hilferty = jnp.log(a) + 3 * jnp.log(jnp.maximum(base, 1e-3))
    power_law = (jnp.log(p) + gammaln(a + 1)) / a
    large_a = jnp.where(lower, jnp.maximum(wilson_hilferty, power_law), wilson_hilferty)
    start = jnp.where(a <= 1, small_a, large_a)

    def step(log_x):
        x = jnp.exp(log_x)
        value = jnp.where(lower, gammainc(a, x), gammaincc(a, x))
        log_value = jnp.log(value)
        # d log(value) / d log x = x * density / value, signed.
        slope = jnp.exp(a * log_x - x - gammaln(a) - log_value) * jnp.where(lower, 1.0, -1.0)
        # Where the value underflows (a target near the smallest float, or an iterate beyond
        # it), the leading terms of its series (lower: x^a e^-x / a! / (1 - x / (a + 1))) or
        # asymptotic expansion (upper: x^(a-1) e^-x / (a-1)! / (1 - (a - 1) / x)) stand in, so
        # that Newton goes on towards the root instead of stalling on log(0).
        ratio = jnp.where(lower, jnp.minimum(x / (a + 1), 0.5), jnp.minimum((a - 1) / x, 0.5))
        correction = -jnp.log1p(-ratio)
        # d correction / d log x: the ratio grows as x (lower) or as 1 / x (upper).
        correction_slope = jnp.where(ratio < 0.5, ratio / (1 - ratio), 0.0)
        stand_in = (
            jnp.where(lower, a * log_x - gammaln(a + 1), (a - 1) * log_x - gammaln(a))
            - x
            + correction
        )
        stand_in_slope = jnp.where(lower, a - x + correction_slope, (a - 1) - x - correction_slope)
        return _newton_step(
            _representable(value), log_value, slope, stand_in, stand_in_slope, log_target
        )

    return _newton(step, start)


def _gamma_inverse(a: jax.Array, p: jax.Array, q: jax.Array) -> jax.Array:
    valid = (a > 0) & jnp.isfinite(a) & (p >= 0) & (q >= 0)
    inner = (p > 0) & (q > 0) & valid
    safe = jnp.where(inner, a, 1.0), jnp.where(inner, p, 0.5), jnp.where(inner, q, 0.5)
    x = jnp.exp(_gamma_log_solution(*safe))
    end = jnp.where(p == 0, 0.0, jnp.inf)
    return jnp.where(inner, x, jnp.where(valid, end, jnp.nan))


def _gamma_inverse_slope(a: jax.Array, x: jax.Array) -> jax.Array:
    """d x / d p along P(a, x) = p: the reciprocal of the gamma density at x."""
    return jnp.exp(x - (a - 1) * jnp.log(x) + gammaln(a))


@jax.custom_jvp
def gammaincinv(a, p) -> jax.Array:
    """x with ``gammainc(a, x) == p``."""
    a, p = _float_arrays(a, p)
    return _gamma_inverse(a, p, 1 - p)


@jax.custom_jvp
def gammainccinv(a, q) -> jax.Array:
    """x with ``gammaincc(a, x) == q``."""
    a, q = _float_arrays(a, q)
    return _gamma_inverse(a, 1 - q, q)


def _gamma_jvp(inverse: Callable, sign: float) -> Callable:
    def jvp(primals, tangents):
        a, p = _float_arrays(*primals)
        a_dot, p_dot = tangents
        x = inverse(a, p)
        slope = _gamma_inverse_slope(a, x)
        # Implicit function theorem: dP/da + density * dx/da = 0, for P and Q alike.
        _, dp_along_a = jax.jvp(lambda shape: gammainc(shape, x), (a,), (a_dot,))
        return x, slope * (sign * p_dot - dp_along_a)

    return jvp


gammaincinv.defjvp(_gamma_jvp(gammaincinv, 1.0))
gammainccinv.defjvp(_gamma_jvp(gammainccinv, -1.0))


def _beta_logit_solution(a: jax.Array, b: jax.Array, p: jax.Array, q: jax.Array) -> jax.Array:
    """logit x with I_x(a, b) = p and 1 - I_x(a, b) = q (p + q = 1)."""
    lower = p <= q
    log_target = jnp.log(jnp.where(lower, p, q))
    # Numerical Recipes' guesses: for a, b >= 1 a normal approximation (Abramowitz and Stegun
    # 26.5.22), otherwise a power law at each end, chosen by the mass the two laws give.
    z = jnp.where(lower, -ndtri(p), ndtri(q))
    lam = (z**2 - 3) / 6
    h = 2 / (1 / (2 * a - 1) + 1 / (2 * b - 1))
    w = z * jnp.sqrt(jnp.maximum(h + lam, 0.0)) / h - (1 / (2 * b - 1) - 1 / (2 * a - 1)) * (
        lam + 5 / 6 - 2 / (3 * h)
    )
    normal_guess = jnp.log(a) - jnp.log(b) - 2 * w
    log_mass_a = a * jnp.log(a / (a + b)) - jnp.log(a)
    log_mass_b = b * jnp.log(b / (a + b)) - jnp.log(b)
    log_total = jnp.logaddexp(log_mass_a, log_mass_b)
    log_x = (jnp.log(a) + log_total + jnp.log(p)) / a
    log_1mx = (jnp.log(b) + log_total + jnp.log(q)) / b
    power_guess = jnp.where(
        jnp.log(p) < log_mass_a - log_total,
        log_x - jnp.log(-jnp.expm1(log_x)),
        jnp.log(-jnp.expm1(log_1mx)) - log_1mx,
    )
    start = jnp.where((a >= 1) & (b >= 1), normal_guess, power_guess)
    # The CDF grows with x, the survival function falls.
    sign = jnp.where(lower, 1.0, -1.0)
    log_beta = betaln(a, b)

    def step(logit_x):
        log_x, log_1mx = jax.nn.log_sigmoid(logit_x), jax.nn.log_sigmoid(-logit_x)
        x, one_minus_x = jnp.exp(log_x), jnp.exp(log_1mx)
        # betainc(a, b, x) computes 1 - I_{1-x}(b, a) beyond x = (a + 1) / (a + b + 2), with
        # 1 - x rounded (x = 1e-12 would lose 4 digits), so each side of that point takes
        # the call that does not: I_x(a, b) below it, I_{1-x}(b, a) above, and 1 minus it.
        below = x <= (a + 1) / (a + b + 2)
        direct = betainc(
            jnp.where(below, a, b), jnp.where(below, b, a), jnp.where(below, x, one_minus_x)
        )
        # The tail solved for is the one whose value is at most 1/2: it keeps its digits.
        value = jnp.where(below == lower, direct, 1 - direct)
        log_value = jnp.log(value)
        # d log(value) / d logit x = x^a (1 - x)^b / B(a, b) / value, signed.
        slope = sign * jnp.exp(a * log_x + b * log_1mx - log_beta - log_value)
        # Where the value underflows, the leading term of its series stands in (as for gamma):
        # x^a (1 - x)^b / B(a, b) over a (lower) or b (upper).
        stand_in = a * log_x + b * log_1mx - log_beta - jnp.log(jnp.where(lower, a, b))
        stand_in_slope = a * jax.nn.sigmoid(-logit_x) - b * jax.nn.sigmoid(logit_x)
        return _newton_step(
            _representable(value), log_value, slope, stand_in, stand_in_slope, log_target
        )

    return _newton(step, start)


@jax.custom_jvp
def betaincinv(a, b, p) -> jax.Array:
    """x with ``betainc(a, b, x) == p``."""
    a, b, p = _float_arrays(a, b, p)
    valid = (a > 0) & (b > 0) & jnp.isfinite(a) & jnp.isfinite(b) & (p >= 0) & (p <= 1)
    inner = (p > 0) & (p < 1) & valid
    safe_p = jnp.where(inner, p, 0.5)
    logit_x = _beta_logit_solution(
        jnp.where(inner, a, 1.0), jnp.where(inner, b, 1.0), safe_p, 1 - safe_p
    )
    end = jnp.where(p == 0, 0.0, 1.0)
    return jnp.where(inner, jax.nn.sigmoid(logit_x), jnp.where(valid, end, jnp.nan))


def _betaincinv_jvp(primals, tangents):
    a, b, p = _float_arrays(*primals)
    a_dot, b_dot, p_dot = tangents
    if not (isinstance(a_dot, SymbolicZero) and isinstance(b_dot, SymbolicZero)):
        # JAX's betainc refuses the same derivative; PyTensor's betaincinv has none either.
        raise ValueError("betaincinv gradient with respect to a and b not supported.")
    x = betaincinv(a, b, p)
    if isinstance(p_dot, SymbolicZero):
        return x, jnp.zeros_like(x)
    slope = jnp.exp(log_beta_slope(a, b, x))
    return x, slope * p_dot


def log_beta_slope(a: jax.Array, b: jax.Array, x: jax.Array) -> jax.Array:
    """log d x / d p along I_x(a, b) = p: minus the log of the beta density at x."""
    return betaln(a, b) - (a - 1) * jnp.log(x) - (b - 1) * jnp.log1p(-x)


betaincinv.defjvp(_betaincinv_jvp, symbolic_zeros=True)


@jax_funcify.register(GammaIncInv)
def jax_funcify_GammaIncInv(op, **kwargs) -> Callable:
    return gammaincinv


@jax_funcify.register(GammaIncCInv)
def jax_funcify_GammaIncCInv(op, **kwargs) -> Callable:
    return gammainccinv


@jax_funcify.register(BetaIncInv)
def jax_funcify_BetaIncInv(op, **kwargs) -> Callable:
    return betaincinv
