"""scipy's ``minimize(method="TNC")`` (``tnc.c``) as an optimistix minimiser, the port the Numba
solver runs (`gpubackend.solvers.tnc`, where the method is described) step for step.

Each optimistix step is one iteration of ``tnc_minimize``'s main loop: the
rescaling of ``f``, the direction (`tnc_direction`, truncated preconditioned CG,
a loop of its own), the update of the preconditioner's pairs, the step to the
box (``stepMax``) and the Gill-Murray line search (`tnc_line_search`, another
loop), the active set (bounds added and released) and the tests on ``f``'s
change, the step and the projected gradient. The state keeps ``tnc.c``'s scaled
variables, so the trial points are scipy's (to rounding: the sums here are
XLA's reductions, not ``tnc.c``'s running ones), and both counts of the
objective's calls (`tnc_vectors.Evaluations`): scipy's ``nfev`` and ``tnc.c``'s
budget. The verdict is ``tnc.c``'s return code, scipy's ``status``: success for
0-2 (projected gradient, ``f``'s change, the step), failure for 3 (``maxfun``),
4 (line search), 5 (all variables constant) and 6 (no progress). Which
variables ``bounds`` fix, the options and everything scipy decides before the
loop are known when the lowering is traced (`TNCOptions`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from gpubackend.dispatch.jax.implicit import varying_leaves_like
from gpubackend.dispatch.jax.newton_cg import GRADIENT_OPTION
from gpubackend.dispatch.jax.scipy_status import status_verdict
from gpubackend.dispatch.jax.tnc_direction import Memory, direction
from gpubackend.dispatch.jax.tnc_line_search import LS_FAIL, LS_MAXFUN, LS_OK, line_search
from gpubackend.dispatch.jax.tnc_vectors import (
    EPS,
    Evaluations,
    Objective,
    Scaling,
    ValueGradient,
    project,
    projected_norm,
    scaled_norm,
)
from gpubackend.scipy_options import settings as s
from gpubackend.scipy_options.budgets import tnc_maxfun

RUNNING = -2
LOCALMINIMUM, FCONVERGED, XCONVERGED, MAXFUN, LSFAIL, CONSTANT, NOPROGRESS = range(7)
"""``tnc.c``'s return codes (scipy's ``status``), and the solve's status while it runs."""


class TNCOptions(NamedTuple):
    """What ``tnc.c`` decides before its loop, from scipy's options and ``bounds``: the
    defaults of the options left negative or near 0, and the free variables."""

    free: tuple[int, ...]
    """The variables ``bounds`` leave free: scipy takes the fixed ones out of the problem."""
    low: tuple[float, ...]
    up: tuple[float, ...]
    """All variables' bounds."""
    scale: tuple[float, ...]
    offset: tuple[float, ...]
    max_cg_iterations: int
    max_evaluations: int
    eta: float
    stepmx: float
    accuracy: float
    fmin: float
    ftol: float
    xtol: float
    pgtol: float
    rescale: float
    early_status: int
    """``RUNNING``, or the code ``tnc`` returns before its loop (no free variable, no budget,
    all variables constant)."""

    def free_indices(self) -> np.ndarray:
        return np.array(self.free, dtype=np.intp)


def tnc_options(settings: s.TNCSettings, low: np.ndarray, up: np.ndarray) -> TNCOptions:
    """``tnc.c``'s ``tnc`` before ``tnc_minimize``, on the settings and the bounds of all
    ``len(low)`` variables; scipy's ``ValueError`` for a ``scale`` or ``offset`` whose size is not
    the free variables'."""
    free = np.nonzero(low != up)[0]
    n = free.size
    for name in ("scale", "offset"):
        if len(getattr(settings, name)) not in (0, n):
            raise ValueError("tnc: vector sizes must be equal")
    rteps = float(np.sqrt(EPS))
    max_cg_iterations = settings.maxCGit
    if max_cg_iterations < 0:
        max_cg_iterations = min(max(n // 2, 1), 50)
    accuracy = rteps if settings.accuracy <= EPS else settings.accuracy
    max_evaluations = tnc_maxfun(settings.maxfun, n)
    constant = settings.scale != () and not any(settings.scale)
    early_status = RUNNING
    if n == 0:
        # All variables fixed: scipy returns the bounds, a success.
        early_status = LOCALMINIMUM
    elif max_evaluations < 1:
        early_status = MAXFUN
    elif constant:
        early_status = CONSTANT
    return TNCOptions(
        free=tuple(int(i) for i in free),
        low=tuple(float(v) for v in low),
        up=tuple(float(v) for v in up),
        scale=tuple(float(v) for v in settings.scale),
        offset=tuple(float(v) for v in settings.offset),
        max_cg_iterations=min(max_cg_iterations, n),
        max_evaluations=max_evaluations,
        eta=0.25 if settings.eta < 0.0 or settings.eta >= 1.0 else settings.eta,
        stepmx=1.0e1 if settings.stepmx < rteps * 10.0 else settings.stepmx,
        accuracy=accuracy,
        fmin=settings.minfev,
        ftol=accuracy if settings.ftol < 0.0 else settings.ftol,
        xtol=rteps if settings.xtol < 0.0 else settings.xtol,
        pgtol=float(1e-2 * np.sqrt(accuracy)) if settings.gtol < 0.0 else settings.gtol,
        rescale=1.3 if settings.rescale < 0 else settings.rescale,
        early_status=early_status,
    )


class _TNCState(eqx.Module):
    x: jax.Array
    """Scaled, of the free variables."""
    f: jax.Array
    """Scaled by ``fscale``."""
    gradient: jax.Array
    """At ``x``, of the free variables, unscaled."""
    g: jax.Array
    """At ``x``, scaled and projected."""
    pivot: jax.Array
    """-1 at the lower bound, 1 at the upper, 2 constant, 0 free."""
    memory: Memory
    scaling: Scaling
    fscale: jax.Array
    gnorm: jax.Array
    f_last_constraint: jax.Array
    f_last_reset: jax.Array
    difnew: jax.Array
    epsred: jax.Array
    icycle: jax.Array
    newcon: jax.Array
    stepmx: jax.Array
    evaluations: Evaluations
    iterations: jax.Array
    status: jax.Array


def _value_gradient(fn, y, args, options) -> ValueGradient:
    """The objective and its gradient in float64 on the flat full point: the op's own gradient
    where it has one (``jac=True``, as scipy is given it), else JAX's."""
    if options is not None and GRADIENT_OPTION in options:
        own = options[GRADIENT_OPTION]

        def value_gradient(x):
            f, gradient = own(x.reshape(y.shape).astype(y.dtype), args)
            return jnp.asarray(f, jnp.float64), jnp.reshape(gradient, (-1,)).astype(jnp.float64)

        return value_gradient

    def value(x):
        return jnp.asarray(fn(x.astype(y.dtype).reshape(y.shape), args)[0], jnp.float64)

    return jax.value_and_grad(value)


def _active_bounds(x, scaling: Scaling) -> jax.Array:
    """``setConstraints``: -1 at the lower bound, 1 at the upper, 2 constant."""
    value = x * scaling.xscale + scaling.xoffset
    low, up = scaling.low, scaling.up
    at_low = (low != -jnp.inf) & (value - low <= EPS * 10.0 * (jnp.abs(low) + 1.0))
    at_up = (up != jnp.inf) & (value - up >= EPS * 10.0 * (jnp.abs(up) + 1.0))
    return jnp.where(scaling.xscale == 0.0, 2, jnp.where(at_low, -1, jnp.where(at_up, 1, 0)))


def _max_step(step, x, direction, pivot, scaling: Scaling) -> jax.Array:
    """``stepMax``: ``step`` shortened to stay inside the bounds."""
    moving = (pivot == 0) & (direction != 0.0)
    bound = jnp.where(direction < 0.0, scaling.low, scaling.up)
    room = (bound - scaling.xoffset) / scaling.xscale - x
    shorter = moving & jnp.where(direction < 0.0, room > step * direction, room < step * direction)
    return jnp.min(jnp.where(shorter, room / direction, step), initial=step)


def _add_bounds(x, direction, pivot, scaling: Scaling):
    """``addConstraint``: ``(x, pivot, added)`` with the free variables the step took onto a
    bound held at it."""
    low, up, xscale, xoffset = scaling.low, scaling.up, scaling.xscale, scaling.xoffset
    moving = (pivot == 0) & (direction != 0.0)
    value = x * xscale + xoffset
    downwards = direction < 0.0
    onto_low = (
        moving & downwards & (low != -jnp.inf) & (value - low <= EPS * 10.0 * (jnp.abs(low) + 1.0))
    )
    onto_up = (
        moving & ~downwards & (up != jnp.inf) & (up - value <= EPS * 10.0 * (jnp.abs(up) + 1.0))
    )
    x = jnp.where(
        onto_low, (low - xoffset) / xscale, jnp.where(onto_up, (up - xoffset) / xscale, x)
    )
    pivot = jnp.where(onto_low, -1, jnp.where(onto_up, 1, pivot))
    return x, pivot, jnp.any(onto_low | onto_up)


def _release_bound(gtpnew, gnorm, pgtolfs, f, f_last_constraint, g, pivot):
    """``removeConstraint``: ``(pivot, released)``, the bound whose multiplier is most negative
    freed once the decrease since the last change of the active set is small or the projected
    gradient is."""
    tries = ~(((f_last_constraint - f) <= (gtpnew * -0.5)) & (gnorm > pgtolfs))
    multiplier = jnp.where(pivot == 2, 0.0, -pivot * g)
    most_negative = jnp.argmin(multiplier)
    released = tries & (multiplier[most_negative] < 0.0)
    return jnp.where(released, pivot.at[most_negative].set(0), pivot), released


def _initial_step(fnew, fmin, gtp, smax) -> jax.Array:
    """``initialStep``: the step a quadratic reaching ``fmin`` (minfev) would take, at most 1
    and ``smax``."""
    d = jnp.abs(fnew - fmin)
    alpha = jnp.where((d * 2.0 <= -gtp) & (d >= EPS), d * -2.0 / gtp, 1.0)
    return jnp.where(alpha >= smax, smax, alpha)


class TNC(optx.AbstractMinimiser):
    """scipy's TNC inside ``bounds``, with the op's own gradient."""

    options: TNCOptions = eqx.field(static=True)
    # optimistix reads these off any minimiser; tnc.c's verdicts replace them.
    rtol: float
    atol: float
    norm: Callable

    def _objective(self, fn, y, args, options) -> Objective:
        full = jnp.where(
            np.array(self.options.low) == np.array(self.options.up),
            np.array(self.options.low),
            y.reshape(-1).astype(jnp.float64),
        )
        return Objective(_value_gradient(fn, y, args, options), self.options.free_indices(), full)

    def _scaling(self, x) -> Scaling:
        """``(xscale, xoffset)`` and the bounds, as ``tnc`` sets them from the clipped start."""
        o = self.options
        free = o.free_indices()
        low, up = np.array(o.low)[free], np.array(o.up)[free]
        xscale: jax.Array
        xoffset: jax.Array
        if o.scale:
            given = np.abs(np.array(o.scale))
            xscale, xoffset = jnp.asarray(given), x
            fixed = given == 0.0
            low_now, up_now = jnp.where(fixed, x, low), jnp.where(fixed, x, up)
        else:
            boxed = np.isfinite(low) & np.isfinite(up)
            box_low, box_up = np.where(boxed, low, 0.0), np.where(boxed, up, 0.0)
            xscale = jnp.where(boxed, box_up - box_low, 1.0 + jnp.abs(x))
            xoffset = jnp.where(boxed, (box_up + box_low) * 0.5, x)
            low_now, up_now = jnp.asarray(low), jnp.asarray(up)
        if o.offset:
            xoffset = jnp.asarray(np.array(o.offset))
        xscale = jnp.broadcast_to(xscale.astype(jnp.float64), x.shape)
        xoffset = jnp.broadcast_to(xoffset.astype(jnp.float64), x.shape)
        return Scaling(xscale, xoffset, low_now, up_now)

    def _next_status(self, g, fscale, evaluations: Evaluations) -> jax.Array:
        """The tests at the top of ``tnc_minimize``'s loop."""
        return jnp.where(
            scaled_norm(g) <= self.options.pgtol * fscale,
            LOCALMINIMUM,
            jnp.where(evaluations.requested >= self.options.max_evaluations, MAXFUN, RUNNING),
        )

    def init(self, fn, y, args, options, f_struct, aux_struct, tags) -> _TNCState:
        o = self.options
        objective = self._objective(fn, y, args, options)
        free = o.free_indices()
        start = objective.full[free]
        # scipy's ScalarFunction evaluates x0 (fixed variables at their bound) before TNC.
        _, _, full = objective.at(start)
        evaluations = Evaluations(jnp.array(0), jnp.array(1), full)
        low, up = np.array(o.low)[free], np.array(o.up)[free]
        x = jnp.clip(start, low, up)
        # tnc.c's own first call, at the start clipped into the bounds.
        f, gradient, full = objective.at(x)
        evaluations = evaluations.after(full)
        scaling = self._scaling(x)
        fscale = jnp.array(1.0)
        if o.early_status == RUNNING:
            x = jnp.where(scaling.xscale > 0.0, (x - scaling.xoffset) / scaling.xscale, x)
        else:
            # tnc returns before its loop, at the clipped start.
            scaling = Scaling(jnp.ones_like(x), jnp.zeros_like(x), scaling.low, scaling.up)
        pivot = _active_bounds(x, scaling)
        g = scaling.gradient(gradient, fscale)
        # A variable at a bound whose gradient points inwards is free.
        pivot = jnp.where(-pivot * g < 0.0, 0, pivot)
        g = project(g, pivot)
        zero = jnp.zeros_like(x)
        status = (
            self._next_status(g, fscale, evaluations)
            if o.early_status == RUNNING
            else jnp.array(o.early_status)
        )
        state = _TNCState(
            x=x,
            f=f,
            gradient=gradient,
            g=g,
            pivot=pivot,
            memory=Memory(
                diagb=jnp.ones_like(x),
                sk=zero,
                yk=zero,
                sr=zero,
                yr=zero,
                upd1=jnp.array(True),
                lreset=jnp.array(False),
                yksk=jnp.array(0.0),
                yrsr=jnp.array(0.0),
            ),
            scaling=scaling,
            fscale=fscale,
            gnorm=scaled_norm(g),
            f_last_constraint=f,
            f_last_reset=f,
            difnew=jnp.array(0.0),
            epsred=jnp.array(0.05),
            icycle=jnp.array(free.size - 1),
            newcon=jnp.array(True),
            stepmx=jnp.array(o.stepmx),
            evaluations=evaluations,
            iterations=jnp.array(0),
            status=status,
        )
        state = eqx.tree_at(
            lambda t: t.evaluations, state, self._counted_result(state, evaluations)
        )
        return varying_leaves_like(state, (y, f, gradient))

    def _result(self, state: _TNCState) -> jax.Array:
        """The free variables unscaled and clipped, where ``tnc`` returns them."""
        scaling = state.scaling
        return jnp.clip(state.x * scaling.xscale + scaling.xoffset, scaling.low, scaling.up)

    def _counted_result(self, state: _TNCState, evaluations: Evaluations) -> Evaluations:
        """``evaluations`` with, once the solve ends, scipy's last call (its wrapper evaluates the
        result again; a call only where it is a new point)."""
        full = state.evaluations.last.at[self.options.free_indices()].set(self._result(state))
        after = evaluations.after(full, state.status != RUNNING)
        return evaluations._replace(made=after.made, last=after.last)

    def step(self, fn, y, args, options, state: _TNCState, tags):
        o = self.options
        objective = self._objective(fn, y, args, options)
        n = len(o.free)
        scaling, pivot = state.scaling, state.pivot
        x, f, g, gnorm, fscale = state.x, state.f, state.g, state.gnorm, state.fscale
        memory = state.memory
        icycle, newcon = state.icycle, state.newcon
        f_last_constraint, f_last_reset, difnew = (
            state.f_last_constraint,
            state.f_last_reset,
            (state.difnew),
        )
        # Rescale f to a unit gradient and restart the preconditioner.
        newscale = scaled_norm(g)
        rescales = (newscale > EPS) & (jnp.abs(jnp.log10(newscale)) > o.rescale)
        factor = jnp.where(rescales, 1.0 / newscale, 1.0)

        def rescaled(value):
            return jnp.where(rescales, value * factor, value)

        f, fscale, gnorm = rescaled(f), rescaled(fscale), rescaled(gnorm)
        f_last_constraint, f_last_reset, difnew = (
            rescaled(f_last_constraint),
            rescaled(f_last_reset),
            rescaled(difnew),
        )
        g = rescaled(g)
        memory = memory._replace(
            diagb=jnp.where(rescales, 1.0, memory.diagb), upd1=memory.upd1 | rescales
        )
        icycle = jnp.where(rescales, n - 1, icycle)
        newcon = newcon | rescales

        xnorm = projected_norm(x, pivot)
        searched = direction(
            objective,
            x,
            g,
            memory,
            scaling,
            fscale,
            pivot,
            gnorm,
            xnorm,
            state.evaluations,
            o.max_cg_iterations,
            o.max_evaluations,
            o.accuracy,
        )
        pk, evaluations = searched.zsol, searched.evaluations
        memory = memory._replace(diagb=searched.diagb)
        oldnfeval = state.evaluations.requested

        # Accumulate the steps and gradient changes since the last reset.
        accumulate = ~newcon & ~memory.lreset
        restart = ~newcon & memory.lreset
        memory = memory._replace(
            sr=jnp.where(
                accumulate, memory.sr + memory.sk, jnp.where(restart, memory.sk, memory.sr)
            ),
            yr=jnp.where(
                accumulate, memory.yr + memory.yk, jnp.where(restart, memory.yk, memory.yr)
            ),
        )
        f_last_reset = jnp.where(restart, f, f_last_reset)
        icycle = jnp.where(accumulate, icycle + 1, jnp.where(restart, 1, icycle))

        oldg, oldf = g, f
        oldgtp = jnp.dot(pk, g)
        ustpmax = state.stepmx / (scaled_norm(pk) + EPS)
        spe = _max_step(ustpmax, x, pk, pivot, scaling)
        searches = spe > 0.0
        alpha = _initial_step(f, o.fmin / fscale, oldgtp, spe)
        search = line_search(
            objective,
            x,
            pk,
            f,
            jnp.where(searches, alpha, 1.0),
            state.gradient,
            scaling,
            fscale,
            pivot,
            jnp.where(searches, spe, 1.0),
            evaluations,
            o.eta,
            o.ftol,
            o.max_evaluations,
        )
        # No search where stepMax leaves no room (``spe <= 0``): its loop never ran there.
        search_failed = searches & (search.code == LS_FAIL)
        evaluations = jax.tree.map(
            lambda new, old: jnp.where(searches, new, old), search.evaluations, evaluations
        )
        alpha = jnp.where(searches, search.alpha, 0.0)
        x = jnp.where(searches, search.x, x)
        f = jnp.where(searches, search.f, f)
        gradient = jnp.where(searches, search.gradient, state.gradient)
        stepmx = jnp.where(searches & (alpha >= 0.9 * ustpmax), state.stepmx * 1e2, state.stepmx)
        # The step reached the box: a new bound.
        reached_box = alpha - spe >= -EPS * 10.0
        newcon = ~searches | reached_box
        search_stopped = searches & ~reached_box & (search.code != LS_OK)
        status = jnp.where(
            search_failed,
            LSFAIL,
            jnp.where(search_stopped, jnp.where(search.code == LS_MAXFUN, MAXFUN, LSFAIL), RUNNING),
        )

        # A failed search ends the solve before the active set changes.
        bounding = newcon & (status == RUNNING)
        x_bounded, pivot_bounded, added = _add_bounds(x, pk, pivot, scaling)
        x = jnp.where(bounding, x_bounded, x)
        pivot = jnp.where(bounding, pivot_bounded, pivot)
        status = jnp.where(
            bounding & ~added & (evaluations.requested == oldnfeval), NOPROGRESS, status
        )
        f_last_constraint = jnp.where(newcon, f, f_last_constraint)
        going = status == RUNNING
        iterations = state.iterations + going.astype(state.iterations.dtype)

        difold = difnew
        difnew = oldf - f
        # First iteration of a cycle: adapt the reduction the reset test asks for.
        epsred = state.epsred
        epsred = jnp.where((icycle == 1) & (difnew > difold * 2.0), epsred + epsred, epsred)
        epsred = jnp.where((icycle == 1) & (difnew < difold * 0.5), epsred * 0.5, epsred)

        g = scaling.gradient(gradient, fscale)
        gnorm = projected_norm(g, pivot)
        pivot_released, released = _release_bound(
            oldgtp, gnorm, o.pgtol * fscale, f, f_last_constraint, g, pivot
        )
        pivot = pivot_released
        gnorm = jnp.where(released, projected_norm(g, pivot), gnorm)
        f_last_constraint = jnp.where(released, f, f_last_constraint)
        settled = ~released & ~newcon
        converged = jnp.where(
            settled & (jnp.abs(difnew) <= o.ftol * fscale),
            FCONVERGED,
            jnp.where(settled & (alpha * scaled_norm(pk) <= o.xtol), XCONVERGED, RUNNING),
        )
        status = jnp.where(going, converged, status)
        g = project(g, pivot)

        yk = jnp.where(newcon, memory.yk, g - oldg)
        sk = jnp.where(newcon, memory.sk, alpha * pk)
        yksk = jnp.where(newcon, memory.yksk, jnp.dot(yk, sk))
        yrsr = jnp.dot(memory.yr, memory.sr)
        resets = (icycle == (n - 1)) | (difnew < epsred * (f_last_reset - f))
        memory = memory._replace(
            sk=sk,
            yk=yk,
            yksk=yksk,
            lreset=jnp.where(newcon, memory.lreset, resets | (yrsr <= 0.0)),
            yrsr=jnp.where(newcon | resets, memory.yrsr, yrsr),
            upd1=memory.upd1 & newcon,
        )
        status = jnp.where(status == RUNNING, self._next_status(g, fscale, evaluations), status)
        new_state = _TNCState(
            x=x,
            f=f,
            gradient=gradient,
            g=g,
            pivot=pivot,
            memory=memory,
            scaling=scaling,
            fscale=fscale,
            gnorm=gnorm,
            f_last_constraint=f_last_constraint,
            f_last_reset=f_last_reset,
            difnew=difnew,
            epsred=epsred,
            icycle=icycle,
            newcon=newcon,
            stepmx=stepmx,
            evaluations=evaluations,
            iterations=iterations,
            status=status,
        )
        new_state = eqx.tree_at(
            lambda t: t.evaluations, new_state, self._counted_result(new_state, evaluations)
        )
        return self._full(new_state, y), new_state, None

    def _full(self, state: _TNCState, y) -> jax.Array:
        """The full point of ``state``'s (unscaled) iterate, in ``y``'s shape and dtype."""
        full = state.evaluations.last.at[self.options.free_indices()].set(self._result(state))
        return full.reshape(y.shape).astype(y.dtype)

    def terminate(self, fn, y, args, options, state: _TNCState, tags):
        return status_verdict(
            state.status, RUNNING, state.status <= XCONVERGED, state.status == MAXFUN
        )

    def postprocess(self, fn, y, aux, args, options, state: _TNCState, tags, result):
        return self._full(state, y), aux, {}
