"""Typed settings of scipy's optimize methods: scipy's option names, scipy's defaults.

One `NamedTuple` per method family. A resolved op carries one of these, and
both backends read it by name: the JAX lowering turns it into an optimistix
solver and step budget, the Numba lowering hands it to its solver as is
(Numba types a `NamedTuple` field by field, so the settings compile in as
constants and, printed, key the on-disk cache).

Where scipy's default budget depends on the size of ``x`` (``200 * len(x0)``,
MINPACK's ``100 * (n + 1)``), the field holds a sentinel and `budgets` turns
it into a number once the size is known (at trace time under JAX, at run time
under Numba).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

SIZE_DEPENDENT = -1
"""``maxiter`` of a minimize method left at scipy's default ``200 * len(x0)`` (scipy: ``None``)."""

MINPACK_DEFAULT = 0
"""``maxfev`` (hybr) or ``maxiter`` (lm) left at MINPACK's default ``100 * (n + 1)``; scipy's own 0.
"""

_EPS = float(np.finfo(np.float64).eps)
SQRT_EPS = float(np.sqrt(_EPS))
MINPACK_XTOL = 1.49012e-08


class LineSearchSettings(NamedTuple):
    """``minimize(method="BFGS" | "CG")``: stop when ``max|grad| <= gtol``; BFGS also when a step is
    below ``xrtol``.

    CG takes no ``xrtol`` (scipy's CG has no such test): it stays 0.
    """

    gtol: float = 1e-5
    norm: float = np.inf
    maxiter: int = SIZE_DEPENDENT
    c1: float = 1e-4
    c2: float = 0.9
    xrtol: float = 0.0


class LBFGSBSettings(NamedTuple):
    """``minimize(method="L-BFGS-B")``; ``bounds`` is ``(lower, upper)``, one entry per element of x
    or one for all."""

    maxcor: int = 10
    ftol: float = 2.2204460492503131e-09
    gtol: float = 1e-5
    maxfun: int = 15000
    maxiter: int = 15000
    maxls: int = 20
    bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((-np.inf,), (np.inf,))


class NewtonCGSettings(NamedTuple):
    """``minimize(method="Newton-CG")``: stop when the 1-norm of the last update is at most
    ``xtol``."""

    xtol: float = 1e-5
    maxiter: int = SIZE_DEPENDENT
    c1: float = 1e-4
    c2: float = 0.9


class TrustRegionSettings(NamedTuple):
    """``minimize(method="trust-exact" | "trust-krylov" | "trust-ncg" | "dogleg")``: stop when
    ``|grad|_2 < gtol``.

    Only trust-krylov takes ``inexact`` (how loosely trlib solves its subproblems).
    """

    gtol: float = 1e-4
    maxiter: int = SIZE_DEPENDENT
    initial_trust_radius: float = 1.0
    max_trust_radius: float = 1000.0
    eta: float = 0.15
    inexact: bool = True


def wolfe_refusal(settings: LineSearchSettings | NewtonCGSettings) -> str | None:
    """scipy's refusal of Wolfe constants out of order (BFGS, CG, Newton-CG), or None."""
    if not 0.0 < settings.c1 < settings.c2 < 1.0:
        return "'c1' and 'c2' do not satisfy'0 < c1 < c2 < 1'."
    return None


def trust_region_refusal(settings: TrustRegionSettings) -> str | None:
    """What scipy's ``_minimize_trust_region`` refuses in ``settings`` before it evaluates
    anything, or None."""
    if not 0.0 <= settings.eta < 0.25:
        return f"invalid acceptance stringency: eta must be in [0, 0.25), got {settings.eta}"
    if settings.max_trust_radius <= 0.0:
        return f"the max trust radius must be positive, got {settings.max_trust_radius}"
    if settings.initial_trust_radius <= 0.0:
        return f"the initial trust radius must be positive, got {settings.initial_trust_radius}"
    if settings.initial_trust_radius >= settings.max_trust_radius:
        return (
            "the initial trust radius must be less than the max trust radius, got "
            f"{settings.initial_trust_radius} >= {settings.max_trust_radius}"
        )
    return None


class SLSQPSettings(NamedTuple):
    """``minimize(method="SLSQP")`` without constraints: stop when ``|g's|``, the change of ``f`` or
    the step's length is below ``ftol``; ``eps`` only sizes finite differences (the native solvers
    use the op's gradient)."""

    ftol: float = 1e-6
    maxiter: int = 100
    eps: float = SQRT_EPS
    bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((-np.inf,), (np.inf,))


class TrustConstrSettings(NamedTuple):
    """``minimize(method="trust-constr")`` without constraints: stop when ``max|grad| < gtol`` or
    the trust radius is below ``xtol``; ``maxiter`` counts the stopping tests, the first before
    any step. The barrier options act only on inequality constraints and finite bounds (scipy's
    interior-point method, which also needs the barrier parameter below ``barrier_tol`` for the
    ``xtol`` stop)."""

    gtol: float = 1e-8
    xtol: float = 1e-8
    barrier_tol: float = 1e-8
    maxiter: int = 1000
    initial_tr_radius: float = 1.0
    initial_constr_penalty: float = 1.0
    initial_barrier_parameter: float = 0.1
    initial_barrier_tolerance: float = 0.1
    bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((-np.inf,), (np.inf,))


class NelderMeadSettings(NamedTuple):
    """``minimize(method="Nelder-Mead")``: stop when the simplex spans at most ``xatol`` and its
    values at most ``fatol``; ``bounds`` clips every vertex, as scipy's does.

    ``maxiter`` and ``maxfev`` left at their defaults are both ``200 * len(x0)``; one of them set
    leaves the other unlimited (`budgets.direct_search_budgets`). ``initial_simplex`` is taken as
    given (no backend reads it: the lowerings refuse it by name).
    """

    xatol: float = 1e-4
    fatol: float = 1e-4
    adaptive: bool = False
    maxiter: int = SIZE_DEPENDENT
    maxfev: int = SIZE_DEPENDENT
    bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((-np.inf,), (np.inf,))
    initial_simplex: object = None


class COBYLASettings(NamedTuple):
    """``minimize(method="COBYLA")`` (PRIMA's COBYLA, as scipy's ``_minimize_cobyla`` calls it):
    the trust region starts at ``rhobeg`` and the solve stops once it has shrunk to ``tol``
    (PRIMA's ``rhoend``), after ``maxiter`` evaluations (PRIMA's ``maxfun``), or at a point
    within ``catol`` of feasibility whose value is at most ``f_target``. ``catol`` left unset is
    scipy's ``sqrt(eps)``; ``bounds`` are PRIMA's bound constraints."""

    rhobeg: float = 1.0
    tol: float = 1e-4
    maxiter: int = 1000
    catol: float = SQRT_EPS
    f_target: float = -np.inf
    bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((-np.inf,), (np.inf,))


class PowellSettings(NamedTuple):
    """``minimize(method="Powell")``: stop when an iteration lowers f by at most ``ftol`` relative
    to it; each line search stops at ``xtol``, within ``bounds`` where they are given.

    ``maxiter`` and ``maxfev`` left at their defaults are both ``1000 * len(x0)``; one of them set
    leaves the other unlimited (`budgets.direct_search_budgets`). ``direc`` is taken as given (no
    backend reads it: the lowerings refuse it by name).
    """

    xtol: float = 1e-4
    ftol: float = 1e-4
    maxiter: int = SIZE_DEPENDENT
    maxfev: int = SIZE_DEPENDENT
    bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((-np.inf,), (np.inf,))
    direc: object = None


class COBYQASettings(NamedTuple):
    """``minimize(method="COBYQA")`` without constraints: stop when the trust-region resolution
    has come down to ``final_tr_radius`` (``tol`` sets it), the objective reaches ``f_target``, or
    a budget runs out. ``maxfev`` and ``maxiter`` left at `SIZE_DEPENDENT` are ``500 * len(x0)``
    and ``1000 * len(x0)``. ``feasibility_tol`` only compares with the constraint violation,
    which is 0 without constraints (a negative one fails every solve, as scipy's). ``scale`` maps
    finite bounds onto ``[-1, 1]``.
    """

    maxfev: int = SIZE_DEPENDENT
    maxiter: int = SIZE_DEPENDENT
    f_target: float = -np.inf
    feasibility_tol: float = 1e-8
    initial_tr_radius: float = 1.0
    final_tr_radius: float = 1e-6
    scale: bool = False
    bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((-np.inf,), (np.inf,))


def cobyqa_refusal(settings: COBYQASettings) -> str | None:
    """What scipy's COBYQA refuses in ``settings`` before it evaluates anything, or None."""
    if settings.initial_tr_radius <= 0.0:
        return "The initial trust-region radius must be positive."
    if settings.final_tr_radius < 0.0:
        return "The final trust-region radius must be nonnegative."
    if settings.initial_tr_radius < settings.final_tr_radius:
        return (
            "The initial trust-region radius must be greater than or equal to the final "
            "trust-region radius."
        )
    if settings.maxfev == 0:
        return "The maximum number of function evaluations must be positive."
    if settings.maxiter == 0:
        return "The maximum number of iterations must be positive."
    return None


class TNCSettings(NamedTuple):
    """``minimize(method="TNC")`` (scipy's truncated Newton, ``tnc.c``), in scipy's option names.

    Negative ``eta``, ``ftol``, ``xtol``, ``gtol``, ``rescale`` and ``maxCGit``, and ``stepmx`` or
    ``accuracy`` near 0, are scipy's "use the default" (``tnc.c`` sets them once ``x0`` is known).
    ``maxfun`` left at `SIZE_DEPENDENT` is ``max(100, 10 * len(x0))``. ``scale`` and ``offset``
    are empty for scipy's ``None`` (from ``x0`` and the bounds), else one entry per variable.
    ``eps`` and ``finite_diff_rel_step`` only size finite differences, ``workers`` only runs them
    (the native solver uses the op's gradient); ``mesg_num`` only prints.
    """

    eps: float = 1e-8
    scale: tuple[float, ...] = ()
    offset: tuple[float, ...] = ()
    mesg_num: int = 0
    maxCGit: int = -1
    eta: float = -1.0
    stepmx: float = 0.0
    accuracy: float = 0.0
    minfev: float = 0.0
    ftol: float = -1.0
    xtol: float = -1.0
    gtol: float = -1.0
    rescale: float = -1.0
    finite_diff_rel_step: object = None
    maxfun: int = SIZE_DEPENDENT
    workers: object = None
    bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((-np.inf,), (np.inf,))


class HybrSettings(NamedTuple):
    """``root(method="hybr")`` (MINPACK hybrj): ``maxfev`` counts evaluations of the equations."""

    xtol: float = MINPACK_XTOL
    maxfev: int = MINPACK_DEFAULT
    factor: float = 100.0


class LMSettings(NamedTuple):
    """``root(method="lm")`` (MINPACK lmder): scipy's ``maxiter`` counts evaluations (MINPACK's
    maxfev)."""

    xtol: float = MINPACK_XTOL
    ftol: float = MINPACK_XTOL
    gtol: float = 0.0
    maxiter: int = MINPACK_DEFAULT
    factor: float = 100.0


class DFSaneSettings(NamedTuple):
    """``root(method="df-sane")``: stop when ``|F| < ftol * |F(x0)| + fatol`` (2-norm); at most
    ``maxfev`` evaluations of the equations, the first included.

    ``line_search`` is ``"cruz"`` or ``"cheng"``. ``fnorm`` and ``eta_strategy`` are callables no
    native solver runs: taken as given, refused by the lowerings.
    """

    ftol: float = 1e-8
    fatol: float = 1e-300
    maxfev: int = 1000
    M: int = 10
    sigma_eps: float = 1e-10
    sigma_0: float = 1.0
    line_search: str = "cruz"
    fnorm: object = None
    eta_strategy: object = None


class BracketMinimizeSettings(NamedTuple):
    """``minimize_scalar(method="brent" | "golden")``: relative tolerance ``xtol`` on the bracketed
    minimum."""

    xtol: float
    maxiter: int


class BoundedMinimizeSettings(NamedTuple):
    """``minimize_scalar(method="bounded")``: absolute tolerance ``xatol``; ``maxiter`` counts
    evaluations."""

    xatol: float = 1e-5
    maxiter: int = 500


class RootScalarSettings(NamedTuple):
    """``root_scalar``: stop when a step or bracket is at most ``xtol + rtol * |x|``; at most
    ``maxiter`` iterations."""

    xtol: float
    rtol: float
    maxiter: int


class SecantSettings(NamedTuple):
    """``root_scalar(method="secant")``; ``x1`` NaN stands for scipy's default second point next to
    ``x0``."""

    xtol: float = 1.48e-8
    rtol: float = 0.0
    maxiter: int = 50
    x1: float = np.nan


class BroydenJacobianOptions(NamedTuple):
    """``jac_options`` of ``root(method="broyden1" | "broyden2")``: the inverse Jacobian starts as
    ``-alpha I`` (NaN: scipy's ``None``, scaled from ``x0`` and ``F(x0)``); past ``max_rank``
    updates ``reduction_method`` drops some."""

    alpha: float = np.nan
    reduction_method: str = "restart"
    max_rank: float = np.inf


class AndersonJacobianOptions(NamedTuple):
    """``jac_options`` of ``root(method="anderson")``: mixing over the last ``M`` steps, with
    regularisation ``w0``."""

    alpha: float = np.nan
    w0: float = 0.01
    M: int = 5


class MixingJacobianOptions(NamedTuple):
    """``jac_options`` of ``root(method="diagbroyden" | "linearmixing")``."""

    alpha: float = np.nan


class ExcitingMixingJacobianOptions(NamedTuple):
    """``jac_options`` of ``root(method="excitingmixing")``: per-element step sizes in
    ``[0, alphamax]``."""

    alpha: float = np.nan
    alphamax: float = 1.0


class KrylovJacobianOptions(NamedTuple):
    """``jac_options`` of ``root(method="krylov")``: Jacobian-vector products by forward
    differences of relative step ``rdiff`` (NaN: scipy's ``None``, ``sqrt(eps)``), inverted by
    ``method`` (``"lgmres"`` or ``"gmres"``), one restart cycle per nonlinear step.

    ``lgmres`` builds ``inner_inner_m`` Krylov vectors after the ``outer_k``
    directions kept from earlier steps (scipy passes it no ``inner_maxiter``);
    ``gmres`` builds ``inner_restart`` (-1: ``inner_maxiter``), at most
    ``len(x)``. ``inner_rtol`` (NaN: the driver's forcing term) and
    ``inner_atol`` are the inner solver's tolerances. ``inner_M`` (a
    preconditioner, scipy's default ``None``) is taken as given and refused
    unless ``None``.
    """

    rdiff: float = np.nan
    method: str = "lgmres"
    inner_maxiter: int = 20
    outer_k: int = 10
    inner_inner_m: int = 30
    inner_restart: int = -1
    inner_rtol: float = np.nan
    inner_atol: float = 0.0
    inner_M: object = None


NONLIN_JACOBIAN_OPTIONS = (
    BroydenJacobianOptions
    | AndersonJacobianOptions
    | MixingJacobianOptions
    | ExcitingMixingJacobianOptions
    | KrylovJacobianOptions
)

UNTIL_CONVERGED = -1
"""``nit`` left at scipy's default ``None``: iterate until the tolerances are met."""

NONLIN_FATOL = float(_EPS ** (1.0 / 3.0))


class NonlinSettings(NamedTuple):
    """``root(method=...)`` of scipy's ``nonlin_solve`` family (broyden1, anderson, ...).

    The four tolerances are scipy's ``ftol`` (relative to the first residual),
    ``fatol``, ``xtol`` (relative to ``x``) and ``xatol``, in the max-norm;
    infinity switches a test off, as scipy's ``None`` does (``fatol``'s
    default is ``eps ** (1/3)``). ``maxiter`` left at `SIZE_DEPENDENT` is
    ``nit + 1``, or ``100 * (len(x0) + 1)`` without ``nit``. ``line_search``
    is ``"armijo"``, ``"wolfe"`` or ``"none"`` (scipy's ``None``).
    """

    nit: int = UNTIL_CONVERGED
    maxiter: int = SIZE_DEPENDENT
    ftol: float = np.inf
    fatol: float = NONLIN_FATOL
    xtol: float = np.inf
    xatol: float = np.inf
    line_search: str = "armijo"
    jac_options: NONLIN_JACOBIAN_OPTIONS = MixingJacobianOptions()


NONLIN_CHOICES: dict[str, dict[object, str]] = {
    "line_search": {
        "armijo": "armijo",
        "wolfe": "wolfe",
        True: "armijo",
        None: "none",
        False: "none",
    },
    "reduction_method": {"restart": "restart", "simple": "simple", "svd": "svd"},
    "method": {name: name for name in ("lgmres", "gmres", "bicgstab", "cgs", "minres", "tfqmr")},
}
"""``nonlin_solve``'s options that take one of a few scipy values (``None`` among them), and how
the settings spell each."""

_KRYLOV_INNER_METHODS = "use method='lgmres' (scipy's default) or method='gmres'"
UNHONOURED_CHOICES: dict[str, str] = {
    "wolfe": "use line_search='armijo' (scipy's default) or None",
    **dict.fromkeys(("bicgstab", "cgs", "minres", "tfqmr"), _KRYLOV_INNER_METHODS),
}
"""Choices scipy has that no backend runs (``nonlin_solve``'s finite-difference Wolfe search,
krylov's other inner solvers), and what to use instead."""

UNHONOURED_NESTED_OPTIONS: dict[str, str] = {
    **dict.fromkeys(
        ("inner_outer_v", "inner_store_outer_Av", "inner_prepend_outer_v"),
        "krylov keeps scipy's defaults for lgmres's outer vectors; leave them unset",
    ),
    **dict.fromkeys(
        ("inner_x0", "inner_callback", "inner_callback_type"),
        "the inner solver starts from zero and reports to no callback; leave it unset",
    ),
}
"""Family options (``jac_options``) scipy takes that no backend honours, and the advice given
when one is set. An option whose default is ``None`` (krylov's preconditioner ``inner_M``) is
refused the same way unless it is ``None``."""

BFGS = LineSearchSettings()
CG = LineSearchSettings(c2=0.4)
BRENT = BracketMinimizeSettings(xtol=1.48e-8, maxiter=500)
GOLDEN = BracketMinimizeSettings(xtol=SQRT_EPS, maxiter=5000)
BRACKETING_ROOT = RootScalarSettings(xtol=2e-12, rtol=4 * _EPS, maxiter=100)
NEWTON_SCALAR = RootScalarSettings(xtol=1.48e-8, rtol=0.0, maxiter=50)
