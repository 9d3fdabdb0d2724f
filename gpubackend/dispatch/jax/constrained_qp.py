"""The equality-constrained quadratic subproblems of scipy's ``trust-constr`` in JAX.

Ports of scipy's ``_trustregion_constr/qp_subproblem.py`` (``box_intersections``,
``sphere_intersections``, ``box_sphere_intersections``, ``modified_dogleg``,
``projected_cg``) and of the projections of ``projections.py`` that scipy picks
for the sparse Jacobian of bounds: ``AugmentedSystem``, solves of
``[[I, A.T], [A, 0]]`` (here a dense LU, scipy's a sparse SuperLU: the same
projections up to rounding) with scipy's iterative refinement of the null-space
projection. Branches are selections, loops `jax.lax.while_loop`, so every
function traces under jit, vmap and inside a mesh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from gpubackend.dispatch.jax.implicit import varying_leaves_like
from gpubackend.dispatch.jax.trust_subproblems import boundary_intersections

_ORTHOGONALITY_TOLERANCE = 1e-12
_MAX_REFINEMENTS = 3
_CLOSE_TO_ZERO = 1e-25


class Interval(NamedTuple):
    """``x(t) = z + t d`` lies inside the constraints for ``low <= t <= high`` where
    ``intersect``."""

    low: jax.Array
    high: jax.Array
    intersect: jax.Array


def _none(d) -> Interval:
    zero = jnp.zeros((), d.dtype)
    return Interval(zero, zero, jnp.array(False))


def _on_segment(interval: Interval, entire_line: bool) -> Interval:
    """scipy's restriction of a line's interval to the segment ``0 <= t <= 1``."""
    if entire_line:
        return interval
    outside = (interval.high < 0) | (interval.low > 1)
    zero = jnp.zeros_like(interval.low)
    return Interval(
        jnp.where(outside, zero, jnp.maximum(0, interval.low)),
        jnp.where(outside, zero, jnp.minimum(1, interval.high)),
        interval.intersect & ~outside,
    )


def _unless(degenerate, interval: Interval, d) -> Interval:
    none = _none(d)
    return Interval(*(jnp.where(degenerate, a, b) for a, b in zip(none, interval, strict=True)))


def sphere_intersections(z, d, radius, entire_line: bool = False) -> Interval:
    """scipy's ``sphere_intersections``: the segment (or line) ``z + t d`` in ``|x| <= radius``."""
    low, high = boundary_intersections(z, d, radius)
    finite = _on_segment(Interval(low, high, jnp.array(True)), entire_line)
    infinite = (-jnp.inf, jnp.inf) if entire_line else (0.0, 1.0)
    unbounded = jnp.isinf(radius)
    interval = Interval(
        jnp.where(unbounded, jnp.asarray(infinite[0], d.dtype), finite.low),
        jnp.where(unbounded, jnp.asarray(infinite[1], d.dtype), finite.high),
        unbounded | finite.intersect,
    )
    # A negative discriminant (no intersection) leaves both ends NaN.
    degenerate = (jnp.linalg.norm(d) == 0) | (~unbounded & jnp.isnan(high))
    return _unless(degenerate, interval, d)


def box_intersections(z, d, lower, upper, entire_line: bool = False) -> Interval:
    """scipy's ``box_intersections``: the segment (or line) ``z + t d`` in ``lower <= x <=
    upper``."""
    moving = d != 0
    outside_still = jnp.any(~moving & ((z < lower) | (z > upper)))
    safe_d = jnp.where(moving, d, 1.0)
    to_lower, to_upper = (lower - z) / safe_d, (upper - z) / safe_d
    low = jnp.max(jnp.where(moving, jnp.minimum(to_lower, to_upper), -jnp.inf))
    high = jnp.min(jnp.where(moving, jnp.maximum(to_lower, to_upper), jnp.inf))
    interval = _on_segment(Interval(low, high, low <= high), entire_line)
    return _unless((jnp.linalg.norm(d) == 0) | outside_still, interval, d)


def box_sphere_intersections(z, d, lower, upper, radius, entire_line: bool = False) -> Interval:
    """scipy's ``box_sphere_intersections``: inside both the box and the ball."""
    box = box_intersections(z, d, lower, upper, entire_line)
    sphere = sphere_intersections(z, d, radius, entire_line)
    low, high = jnp.maximum(box.low, sphere.low), jnp.minimum(box.high, sphere.high)
    return Interval(low, high, box.intersect & sphere.intersect & (low <= high))


def _inside(x, lower, upper):
    return jnp.all(lower <= x) & jnp.all(x <= upper)


class Projections(NamedTuple):
    """scipy's ``projections(A, "AugmentedSystem")`` of an ``(m, n)`` ``A`` of full row rank."""

    jacobian: jax.Array
    factors: tuple[jax.Array, jax.Array]
    """The LU factors of ``[[I, A.T], [A, 0]]``."""

    @classmethod
    def of(cls, jacobian) -> Projections:
        m, n = jacobian.shape
        system = jnp.block(
            [
                [jnp.eye(n, dtype=jacobian.dtype), jacobian.T],
                [jacobian, jnp.zeros((m, m), jacobian.dtype)],
            ]
        )
        return cls(jacobian, jsl.lu_factor(system))

    def _solve(self, rhs):
        return jsl.lu_solve(self.factors, rhs)

    def null_space(self, x):
        """``x - A.T inv(A A.T) A x``, refined (at most 3 times) until orthogonal to ``A``'s rows
        within 1e-12, as scipy's."""
        m, n = self.jacobian.shape
        rhs = jnp.concatenate([x, jnp.zeros(m, x.dtype)])
        norm_a = jnp.linalg.norm(self.jacobian)

        def unorthogonal(carry):
            k, solution = carry
            z = solution[:n]
            norm_z = jnp.linalg.norm(z)
            degenerate = (norm_z == 0) | (norm_a == 0)
            orthogonality = jnp.linalg.norm(self.jacobian @ z) / jnp.where(
                degenerate, 1.0, norm_a * norm_z
            )
            return (k < _MAX_REFINEMENTS) & ~degenerate & (orthogonality > _ORTHOGONALITY_TOLERANCE)

        def refined(carry):
            k, solution = carry
            residual = rhs - jnp.concatenate(
                [solution[:n] + self.jacobian.T @ solution[n:], self.jacobian @ solution[:n]]
            )
            return k + 1, solution + self._solve(residual)

        # Inside a manual mesh the carry starts as varying as the refinements make it.
        start = varying_leaves_like((jnp.array(0), self._solve(rhs)), (x, self.jacobian))
        _, solution = jax.lax.while_loop(unorthogonal, refined, start)
        return solution[:n]

    def least_squares(self, x):
        """``inv(A A.T) A x``."""
        m, n = self.jacobian.shape
        return self._solve(jnp.concatenate([x, jnp.zeros(m, x.dtype)]))[n:]

    def row_space(self, x):
        """``A.T inv(A A.T) x``: the least-norm solution of ``A y = x``."""
        n = self.jacobian.shape[1]
        return self._solve(jnp.concatenate([jnp.zeros(n, x.dtype), x]))[:n]


def modified_dogleg(projections: Projections, b, radius, lower, upper):
    """scipy's ``modified_dogleg``: about the least ``|A x + b|`` with ``|x| <= radius`` and
    ``lower <= x <= upper``."""
    a = projections.jacobian
    newton = -projections.row_space(b)
    gradient = a.T @ b
    a_gradient = a @ gradient
    curvature = jnp.dot(a_gradient, a_gradient)
    cauchy = -jnp.dot(gradient, gradient) / jnp.where(curvature == 0, 1.0, curvature) * gradient
    origin = jnp.zeros_like(cauchy)
    toward_newton = box_sphere_intersections(cauchy, newton - cauchy, lower, upper, radius)
    toward_cauchy = box_sphere_intersections(origin, cauchy, lower, upper, radius)
    first = jnp.where(
        toward_newton.intersect,
        cauchy + toward_newton.high * (newton - cauchy),
        toward_cauchy.high * cauchy,
    )
    second = box_sphere_intersections(origin, newton, lower, upper, radius).high * newton
    best = jnp.where(
        jnp.linalg.norm(a @ first + b) < jnp.linalg.norm(a @ second + b), first, second
    )
    interior = _inside(newton, lower, upper) & (jnp.linalg.norm(newton) <= radius)
    return jnp.where(interior, newton, best)


class _CGCarry(NamedTuple):
    i: jax.Array
    x: jax.Array
    r: jax.Array
    p: jax.Array
    hessian_p: jax.Array
    rt_g: jax.Array
    infeasible: jax.Array
    """scipy's ``counter``: iterates in a row outside the box."""
    last_feasible: jax.Array
    done: jax.Array


def projected_cg(
    hessian: Callable, c, projections: Projections, radius, lower, upper, max_iter: int
):
    """scipy's ``projected_cg`` with ``b = 0`` (the tangential step): about the least
    ``x.H x / 2 + c.x`` with ``A x = 0``, ``|x| <= radius`` and ``lower <= x <= upper``, at most
    ``max_iter`` (``n - m``) iterations, as many infeasible ones."""
    x = jnp.zeros_like(c)
    r = projections.null_space(c)
    g = projections.null_space(r)
    p = -g
    rt_g = jnp.dot(g, g)
    tol = jnp.maximum(jnp.minimum(0.01 * jnp.sqrt(rt_g), 0.1 * rt_g), _CLOSE_TO_ZERO)

    def running(carry: _CGCarry):
        return ~carry.done & (carry.i < max_iter)

    def body(carry: _CGCarry) -> _CGCarry:
        converged = carry.rt_g < tol
        x, p = carry.x, carry.p
        curvature = jnp.dot(carry.hessian_p, p)
        negative = curvature <= 0
        along_line = box_sphere_intersections(x, p, lower, upper, radius, entire_line=True)
        on_line = jnp.clip(
            jnp.where(along_line.intersect, x + along_line.high * p, x), lower, upper
        )
        alpha = carry.rt_g / jnp.where(negative, 1.0, curvature)
        x_next = x + alpha * p
        crosses = jnp.linalg.norm(x_next) >= radius
        along_step = box_sphere_intersections(x, alpha * p, lower, upper, radius)
        cut = jnp.clip(
            jnp.where(along_step.intersect, x + along_step.high * alpha * p, x), lower, upper
        )
        infeasible = jnp.where(_inside(x_next, lower, upper), 0, carry.infeasible + 1)
        recovered = (infeasible > 0) & along_step.intersect
        last_feasible = jnp.where(recovered, cut, carry.last_feasible)
        infeasible = jnp.where(recovered, 0, infeasible)
        given_up = ~negative & ~crosses & (infeasible > max_iter)
        stop = converged | negative | crosses | given_up
        r_next = carry.r + alpha * carry.hessian_p
        g_next = projections.null_space(r_next)
        rt_next = jnp.dot(g_next, g_next)
        p_next = -g_next + (rt_next / carry.rt_g) * p
        continued = _CGCarry(
            carry.i + 1,
            x_next,
            g_next,
            p_next,
            hessian(p_next),
            jnp.dot(g_next, g_next),
            infeasible,
            last_feasible,
            jnp.array(False),
        )
        ended = carry._replace(
            x=jnp.where(converged | given_up, x, jnp.where(negative, on_line, cut)),
            infeasible=jnp.where(converged | negative | crosses, carry.infeasible, infeasible),
            last_feasible=jnp.where(
                converged | negative | crosses, carry.last_feasible, last_feasible
            ),
            done=jnp.array(True),
        )
        return jax.tree.map(lambda e, c: jnp.where(stop, e, c), ended, continued)

    start = _CGCarry(
        jnp.array(0),
        x,
        r,
        p,
        hessian(p),
        rt_g,
        jnp.array(0),
        jnp.zeros_like(x),
        radius < _CLOSE_TO_ZERO,
    )
    end = jax.lax.while_loop(running, body, varying_leaves_like(start, (c, radius)))
    return jnp.where(_inside(end.x, lower, upper), end.x, end.last_feasible)
