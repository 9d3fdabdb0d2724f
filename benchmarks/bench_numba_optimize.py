"""Benchmark: native Numba lowering of the optimize ops vs stock PyTensor, per op and method.

Every method the Numba side solves natively has a row, and each op has one
more with the gradient of its solution (implicit-function theorem). Per row,
medians of one call measured in this one run:

- ours: ``mode="NUMBA"`` with gpubackend, a PyTensor call (``trust_input``);
- stock: stock ``mode="NUMBA"`` (scipy in object mode), measured in a
  subprocess that never imports gpubackend;
- floor: the same native solver and settings on a hand-written objective,
  called from one ``@njit`` function (no PyTensor call, no inner graph);
  gradient rows have none;
- evaluations: ours, counted on the floor (same solver, same settings, same
  start), against scipy's on the same problem (scipy called directly); root
  methods count the equations and the Jacobian apart.

A second table puts the BFGS solver against a hand-written Numba BFGS (strong
Wolfe line search included, written here independently) on the same
hand-written Rosenbrock objective, and the PyTensor call against the same.
A third gives compile-plus-first-call latency in fresh processes (cold and warm
Numba cache).

Goals: stock / ours >= 20x per op and gradient; BFGS solver / hand-written
<= 1.2x; warm / cold <= 25%.

Every process of the benchmark runs OpenBLAS on one thread (unless
``OPENBLAS_NUM_THREADS`` is set). The gradient rows solve the implicit-function
system with PyTensor's Numba ``Solve``, whose LAPACK ``dgetrs`` OpenBLAS hands
to its thread pool whatever the size: while another process keeps the second
of two cores busy, each 3x3 solve then waits 4-20 ms for the helper thread to
be scheduled, for stock and gpubackend alike, and that wait is all such a row
measured (12-48 ms per call, ratio about 1x). One thread is what a sampler
running a chain per core gets anyway.

Usage: ``python benchmarks/bench_numba_optimize.py [--quick] [--methods SLSQP,BFGS]``
(``--methods``: only the rows of those methods, the tables without one left empty)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

# Before numpy loads OpenBLAS; the workers inherit it (see the module docstring).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# This checkout's gpubackend, not the one the environment installed (another worktree's).
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Case:
    op: str
    method: str
    problem: str
    kwargs: tuple = ()
    """Extra keyword arguments of the PyTensor function (``jac``, ``hess``, ``bracket``, ``bounds``,
    ...)."""
    options: tuple = ()
    """``optimizer_kwargs``."""
    grad: bool = False

    @property
    def name(self) -> str:
        flags = "".join(f"[{key}]" for key, value in self.kwargs if value is True)
        flags += "".join(f"[{key}]" for key, _ in self.options if key == "bounds")
        return f"{self.op} {self.method}{flags} {self.problem}" + (" +grad" if self.grad else "")


_ACTIVE_BOX = ((-2.0, 0.5), (-1.0, 3.0))
"""Bounds on rosenbrock2 with the first one active at the minimum (trust-constr's interior-point
method)."""

CASES: tuple[Case, ...] = (
    Case("minimize", "BFGS", "rosenbrock2"),
    Case("minimize", "BFGS", "rosenbrock10"),
    Case("minimize", "BFGS", "quartic3", options=(("tol", 1e-8),)),
    Case("minimize", "BFGS", "quartic3", options=(("tol", 1e-8),), grad=True),
    Case("minimize", "CG", "rosenbrock2"),
    Case("minimize", "L-BFGS-B", "rosenbrock2"),
    Case("minimize", "Newton-CG", "rosenbrock2", kwargs=(("hess", True),)),
    Case("minimize", "trust-exact", "rosenbrock2", kwargs=(("hess", True),)),
    Case("minimize", "trust-krylov", "rosenbrock2", kwargs=(("hess", True),)),
    Case("minimize", "trust-ncg", "rosenbrock2", kwargs=(("hess", True),)),
    Case("minimize", "dogleg", "rosenbrock2", kwargs=(("hess", True),)),
    Case("minimize", "SLSQP", "rosenbrock2"),
    Case("minimize", "SLSQP", "rosenbrock10"),
    Case("minimize", "trust-constr", "rosenbrock2"),
    Case("minimize", "trust-constr", "rosenbrock2", kwargs=(("hess", True),)),
    Case("minimize", "trust-constr", "rosenbrock2", options=(("bounds", _ACTIVE_BOX),)),
    Case(
        "minimize",
        "trust-constr",
        "rosenbrock2",
        kwargs=(("hess", True),),
        options=(("bounds", _ACTIVE_BOX),),
    ),
    Case("minimize", "Nelder-Mead", "rosenbrock2"),
    Case("minimize", "Powell", "rosenbrock2"),
    Case("minimize", "COBYQA", "rosenbrock2"),
    Case("minimize", "TNC", "rosenbrock2"),
    Case("minimize", "COBYLA", "rosenbrock2"),
    Case("minimize", "COBYLA", "rosenbrock2", options=(("bounds", ((-2.0, 0.8), (-1.0, 1.0))),)),
    Case("root", "hybr", "cubic3", options=(("tol", 1e-12),)),
    Case("root", "hybr", "cubic3", options=(("tol", 1e-12),), grad=True),
    Case("root", "hybr", "two_equations"),
    Case("root", "lm", "two_equations"),
    Case("root", "df-sane", "two_equations", kwargs=(("jac", False),)),
    Case("root", "df-sane", "two_equations", kwargs=(("jac", False),), grad=True),
    Case("root", "broyden1", "two_equations", kwargs=(("jac", False),)),
    Case("root", "broyden1", "two_equations", kwargs=(("jac", False),), grad=True),
    Case("root", "broyden2", "two_equations", kwargs=(("jac", False),)),
    Case("root", "diagbroyden", "two_equations", kwargs=(("jac", False),)),
    Case("root", "anderson", "two_equations", kwargs=(("jac", False),)),
    Case("root", "krylov", "two_equations", kwargs=(("jac", False),)),
    Case("root", "krylov", "two_equations", kwargs=(("jac", False),), grad=True),
    Case("root", "linearmixing", "negated_cubic3", kwargs=(("jac", False),)),
    Case("root", "excitingmixing", "negated_cubic3", kwargs=(("jac", False),)),
    Case("minimize_scalar", "brent", "quartic1", options=(("tol", 1e-12),)),
    Case("minimize_scalar", "brent", "quartic1", options=(("tol", 1e-12),), grad=True),
    Case("minimize_scalar", "golden", "quartic1"),
    Case("minimize_scalar", "bounded", "quartic1", kwargs=(("bounds", (-3.0, 3.0)),)),
    Case("root_scalar", "brentq", "cubic1", kwargs=(("bracket", (0.0, 3.0)),)),
    Case("root_scalar", "bisect", "cubic1", kwargs=(("bracket", (0.0, 3.0)),)),
    Case("root_scalar", "newton", "cubic1", kwargs=(("jac", True),)),
    Case("root_scalar", "newton", "cubic1"),
    Case("root_scalar", "newton", "cubic1", grad=True),
    Case("root_scalar", "secant", "cubic1"),
    Case("root_scalar", "brenth", "cubic1", kwargs=(("bracket", (0.0, 3.0)),)),
    Case("root_scalar", "ridder", "cubic1", kwargs=(("bracket", (0.0, 3.0)),)),
    Case("root_scalar", "toms748", "cubic1", kwargs=(("bracket", (0.0, 3.0)),)),
    Case("root_scalar", "halley", "cubic1", kwargs=(("jac", True), ("hess", True))),
)
LATENCY_CASES = ("minimize BFGS rosenbrock2", "root hybr cubic3")
QUICK_LATENCY_CASES = LATENCY_CASES[:1]

# (start, parameter) per problem; a parameter is a scalar or a vector.
PROBLEM_VALUES: dict[str, tuple[np.ndarray | float, np.ndarray | float]] = {
    "rosenbrock2": (np.array([-1.2, 1.0]), 1.0),
    "rosenbrock10": (np.tile([-1.2, 1.0], 5), 1.0),
    "quartic3": (np.zeros(3), np.array([0.5, -1.0, 2.0])),
    "cubic3": (np.zeros(3), np.array([0.5, -1.0, 2.0])),
    "negated_cubic3": (np.zeros(3), np.array([0.5, -1.0, 2.0])),
    "two_equations": (np.array([2.0, 0.5]), 2.0),
    "quartic1": (0.0, 1.5),
    "cubic1": (0.5, 2.0),
}


def build_case(case: Case):
    """``(inputs, outputs, values)`` of a case; imports only PyTensor."""
    import pytensor
    import pytensor.tensor as pt
    from pytensor.tensor import optimize

    start, parameter = PROBLEM_VALUES[case.problem]
    x = pt.vector("x", shape=np.shape(start)) if np.ndim(start) else pt.scalar("x")
    a = pt.vector("a", shape=np.shape(parameter)) if np.ndim(parameter) else pt.scalar("a")
    if case.problem.startswith("rosenbrock"):
        expression = pt.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (a - x[:-1]) ** 2)
    elif case.problem.startswith("quartic"):
        expression = ((x - a) ** 2).sum() + 0.1 * (x**4).sum()
    elif case.problem.startswith("cubic"):
        expression = x**3 + x - a
    elif case.problem.startswith("negated_cubic"):
        # The mixing methods start from J = -I / alpha: they need equations that recede.
        expression = a - x - x**3
    else:
        expression = pt.stack([x[0] ** 2 + x[1] ** 2 - a, x[0] - x[1] ** 3])
    solve = getattr(optimize, case.op)
    solution, success = solve(
        expression, x, method=case.method, optimizer_kwargs=dict(case.options), **dict(case.kwargs)
    )
    outputs = [solution, success]
    if case.grad:
        outputs.append(pytensor.grad(solution.sum(), a))
    return (
        [x, a],
        outputs,
        (np.asarray(start, dtype="float64"), np.asarray(parameter, dtype="float64")),
    )


def median_call_seconds(call: Callable[[], object], repeats: int, budget_s: float) -> float:
    """Median over ``repeats`` batches of the mean time of one call."""
    start = time.perf_counter()
    call()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(budget_s / repeats / once))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - start) / number)
    return float(np.median(samples))


def compiled_call(case: Case) -> Callable[[], object]:
    import pytensor

    inputs, outputs, values = build_case(case)
    fn = pytensor.function(inputs, outputs, mode="NUMBA")
    fn.trust_input = True
    return lambda: fn(*values)


def call_overhead_seconds(repeats: int, budget_s: float) -> float:
    """One call of a compiled NUMBA identity function: the floor of any PyTensor call."""
    import pytensor
    import pytensor.tensor as pt

    x = pt.vector("x")
    fn = pytensor.function([x], x + 1, mode="NUMBA")
    fn.trust_input = True
    value = np.zeros(2)
    return median_call_seconds(lambda: fn(value), repeats, budget_s)


def solve_times(repeats: int, budget_s: float) -> dict[str, float | None]:
    """Per case, the median call; None where the call fails."""
    import warnings

    times: dict[str, float | None] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in CASES:
            try:
                times[case.name] = median_call_seconds(compiled_call(case), repeats, budget_s)
            except ValueError:
                times[case.name] = None
    return times


def compile_latency(name: str) -> float:
    """Seconds to compile case ``name`` under NUMBA and make its first call (gpubackend
    imported)."""
    import warnings

    import pytensor

    import gpubackend  # noqa: F401

    [case] = [case for case in CASES if case.name == name]
    inputs, outputs, values = build_case(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        fn = pytensor.function(inputs, outputs, mode="NUMBA")
        fn(*values)
        return time.perf_counter() - start


def run_worker(argv: list[str]) -> dict:
    python = [sys.executable, __file__, *argv]
    env = os.environ | {"PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if argv[0] == "--latency-worker":
        env["PYTENSOR_FLAGS"] = f"base_compiledir={argv[2]}"
    out = subprocess.run(python, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# --- Hand-written problems: the objective written inline, counting its evaluations in args[1][0] --


def hand_written_problems() -> dict[tuple[str, str], tuple[Callable, ...]]:
    """``(problem, what) -> funs``, each ``fun(x, (a, counter))``; ``what`` names the functions a
    solver calls. A root problem's equations count in ``counter[0]``, its Jacobian in
    ``counter[1]``."""
    from numba import njit

    @njit
    def rosenbrock_value_grad(x, a):
        n = x.shape[0]
        f = 0.0
        g = np.zeros(n)
        for i in range(n - 1):
            t = x[i + 1] - x[i] ** 2
            u = a - x[i]
            f += 100.0 * t * t + u * u
            g[i] += -400.0 * t * x[i] - 2.0 * u
            g[i + 1] += 200.0 * t
        return f, g

    @njit
    def rosenbrock(x, args):
        args[1][0] += 1
        return rosenbrock_value_grad(x, args[0])

    @njit
    def rosenbrock_value(x, args):
        args[1][0] += 1
        return rosenbrock_value_grad(x, args[0])[0]

    @njit
    def rosenbrock_with_hessian(x, args):
        args[1][0] += 1
        a = args[0]
        f, g = rosenbrock_value_grad(x, a)
        n = x.shape[0]
        h = np.zeros((n, n))
        for i in range(n - 1):
            h[i, i] += 1200.0 * x[i] ** 2 - 400.0 * x[i + 1] + 2.0
            h[i, i + 1] -= 400.0 * x[i]
            h[i + 1, i] -= 400.0 * x[i]
            h[i + 1, i + 1] += 200.0
        return f, g, h

    @njit
    def quartic(x, args):
        args[1][0] += 1
        a = args[0]
        f = 0.0
        g = np.empty(x.shape[0])
        for i in range(x.shape[0]):
            f += (x[i] - a[i]) ** 2 + 0.1 * x[i] ** 4
            g[i] = 2.0 * (x[i] - a[i]) + 0.4 * x[i] ** 3
        return f, g

    @njit
    def cubic(x, args):
        args[1][0] += 1
        return x**3 + x - args[0]

    @njit
    def negated_cubic(x, args):
        args[1][0] += 1
        return args[0] - x - x**3

    @njit
    def cubic_jacobian(x, args):
        args[1][1] += 1
        return np.diag(3.0 * x**2 + 1.0)

    @njit
    def two_equations(x, args):
        args[1][0] += 1
        a = args[0]
        return np.array([x[0] ** 2 + x[1] ** 2 - a, x[0] - x[1] ** 3])

    @njit
    def two_equations_jacobian(x, args):
        args[1][1] += 1
        return np.array([[2.0 * x[0], 2.0 * x[1]], [1.0, -3.0 * x[1] ** 2]])

    @njit
    def scalar_quartic(z, args):
        args[1][0] += 1
        return (z - args[0]) ** 2 + 0.1 * z**4

    @njit
    def scalar_cubic(z, args):
        args[1][0] += 1
        return z**3 + z - args[0]

    @njit
    def scalar_cubic_with_derivative(z, args):
        args[1][0] += 1
        return z**3 + z - args[0], 3.0 * z**2 + 1.0

    @njit
    def scalar_cubic_with_two_derivatives(z, args):
        args[1][0] += 1
        return z**3 + z - args[0], 3.0 * z**2 + 1.0, 6.0 * z

    relative_step = float(np.sqrt(np.finfo(np.float64).eps))

    @njit
    def scalar_cubic_forward_difference(z, args):
        f = scalar_cubic(z, args)
        step = relative_step * (1.0 if z >= 0 else -1.0) * max(1.0, abs(z))
        step = (z + step) - z
        return f, (scalar_cubic(z + step, args) - f) / step

    return {
        ("rosenbrock", "value"): (rosenbrock_value,),
        ("rosenbrock", "gradient"): (rosenbrock,),
        ("rosenbrock", "hessian"): (rosenbrock_with_hessian,),
        ("quartic", "gradient"): (quartic,),
        ("cubic", "residual, jacobian"): (cubic, cubic_jacobian),
        ("two_equations", "residual, jacobian"): (two_equations, two_equations_jacobian),
        ("two_equations", "residual"): (two_equations,),
        ("negated_cubic", "residual"): (negated_cubic,),
        ("quartic", "value"): (scalar_quartic,),
        ("cubic", "value"): (scalar_cubic,),
        ("cubic", "derivative"): (scalar_cubic_with_derivative,),
        ("cubic", "forward_difference"): (scalar_cubic_forward_difference,),
        ("cubic", "two_derivatives"): (scalar_cubic_with_two_derivatives,),
    }


def _family(problem: str) -> str:
    return problem.rstrip("0123456789")


def _outputs_wanted(plan_solver: str, op) -> str:
    from gpubackend.dispatch.numba import optimize_problem as evaluations
    from gpubackend.dispatch.numba.optimize import (
        NATIVE_SOLVERS,  # first: it registers PyTensor's Numba dispatch
    )

    wanted, _ = NATIVE_SOLVERS[(type(op), plan_solver)]
    return {
        (evaluations.VALUE,): "value",
        (evaluations.VALUE_AND_GRADIENT,): "gradient",
        (evaluations.VALUE_GRADIENT_AND_HESSIAN,): "hessian",
        (evaluations.RESIDUAL, evaluations.JACOBIAN): "residual, jacobian",
        (evaluations.RESIDUAL,): "residual",
        (evaluations.SCALAR_VALUE,): "value",
        (evaluations.SCALAR_VALUE_AND_DERIVATIVE,): "derivative",
        (evaluations.SCALAR_VALUE_AND_FORWARD_DIFFERENCE,): "forward_difference",
        (evaluations.SCALAR_VALUE_AND_TWO_DERIVATIVES,): "two_derivatives",
    }[wanted]


def floor_calls() -> dict[str, tuple[Callable[[], object], Callable[[], str]]]:
    """Per non-gradient case: (one solve of the floor, its count of evaluations in one solve)."""
    from gpubackend.dispatch.numba.optimize import NATIVE_SOLVERS
    from gpubackend.dispatch.numba.optimize_plan import solver_plan

    problems = hand_written_problems()
    calls: dict[str, tuple[Callable[[], object], Callable[[], str]]] = {}
    for case in CASES:
        if case.grad:
            continue
        _, outputs, (x0, a) = build_case(case)
        op = outputs[0].owner.op
        plan = solver_plan(op)
        funs = problems[(_family(case.problem), _outputs_wanted(plan.solver, op))]
        solve = NATIVE_SOLVERS[(type(op), plan.solver)][1](*funs)
        settings = plan.settings
        parameter = a if a.ndim else float(a)
        counter = np.zeros(2, dtype=np.int64)
        call: Callable[[], object]
        if x0.ndim:
            call = partial(_vector_floor(solve, settings), x0, (parameter, counter))
        else:
            interval = dict(case.kwargs).get("bracket", dict(case.kwargs).get("bounds"))
            interval = np.asarray(interval if interval is not None else [], dtype=np.float64)
            call = partial(
                _scalar_floor(solve, settings), float(x0), (parameter, counter), interval
            )
        calls[case.name] = (call, partial(_count_one, call, counter))
    return calls


def _vector_floor(solve: Callable, settings) -> Callable:
    from numba import njit

    @njit
    def floor(x0, args):
        return solve(x0, args, settings)

    return floor


def _scalar_floor(solve: Callable, settings) -> Callable:
    from numba import njit

    @njit
    def floor(x0, args, interval):
        return solve(args, x0, interval, settings)

    return floor


def _count_one(call: Callable[[], object], counter: np.ndarray) -> str:
    """The evaluations of one call, the equations and Jacobian apart where they are counted apart
    (scipy's notation)."""
    counter[:] = 0
    call()
    functions, jacobians = counter
    return f"{functions}F {jacobians}J" if jacobians else f"{functions}"


# --- scipy's evaluation counts on the same problems ---


def scipy_evaluations(case: Case) -> str:
    """The number of calls scipy makes on ``case``, as PyTensor's object-mode ``perform`` calls
    it."""
    import scipy.optimize as so

    _, outputs, (x0, a) = build_case(case)
    op = outputs[0].owner.op
    counts = {"F": 0, "J": 0, "H": 0}
    family = _family(case.problem)

    def counted(key, function):
        def wrapper(*args):
            counts[key] += 1
            return function(*args)

        return wrapper

    value: Callable[[Any], Any]
    gradient: Callable[[Any], Any]
    if family == "rosenbrock":
        value = lambda x: float(np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (a - x[:-1]) ** 2))  # noqa: E731
        gradient = lambda x: so.rosen_der(x) + _rosenbrock_shift(x, a)  # noqa: E731
        hessian = lambda x: so.rosen_hess(x)  # noqa: E731
    elif family == "quartic":
        value = lambda x: float(np.sum((x - a) ** 2) + 0.1 * np.sum(np.asarray(x) ** 4))  # noqa: E731
        gradient = lambda x: 2 * (x - a) + 0.4 * np.asarray(x) ** 3  # noqa: E731
    elif family == "cubic":
        value = lambda x: x**3 + x - a  # noqa: E731
        gradient = lambda x: np.diag(np.atleast_1d(3 * x**2 + 1)) if np.ndim(x) else 3 * x**2 + 1  # noqa: E731
    elif family == "negated_cubic":
        value = lambda x: a - x - x**3  # noqa: E731
        gradient = lambda x: -np.diag(3 * x**2 + 1)  # noqa: E731
    else:
        value = lambda x: np.array([x[0] ** 2 + x[1] ** 2 - a, x[0] - x[1] ** 3])  # noqa: E731
        gradient = lambda x: np.array([[2 * x[0], 2 * x[1]], [1.0, -3 * x[1] ** 2]])  # noqa: E731
    bound = {name: dict(case.kwargs)[name] for name in op.bound_kwargs}
    if case.op == "minimize":
        both = counted("F", lambda x: (value(x), gradient(x)))
        hess = counted("H", hessian) if op.hess else None
        so.minimize(both, x0, jac=True, hess=hess, method=op.method, **op.optimizer_kwargs)
        return f"{counts['F']}" + (f" +{counts['H']}H" if op.hess else "")
    if case.op == "root":
        so.root(
            counted("F", value),
            x0,
            jac=counted("J", gradient),
            method=op.method,
            **op.optimizer_kwargs,
        )
        return f"{counts['F']}F {counts['J']}J"
    if case.op == "minimize_scalar":
        so.minimize_scalar(counted("F", value), method=op.method, **bound, **op.optimizer_kwargs)
        return f"{counts['F']}"
    fprime = counted("J", gradient) if op.jac else None
    fprime2 = counted("H", lambda x: 6 * x) if op.hess else None
    so.root_scalar(
        counted("F", value),
        x0=float(x0),
        fprime=fprime,
        fprime2=fprime2,
        method=op.method,
        **bound,
        **op.optimizer_kwargs,
    )
    return (
        f"{counts['F']}"
        + (f" +{counts['J']}J" if op.jac else "")
        + (f" +{counts['H']}H" if op.hess else "")
    )


def _rosenbrock_shift(x, a):
    """scipy's ``rosen_der`` has a = 1; the gradient's change for another ``a``."""
    shift = np.zeros_like(x)
    shift[:-1] = -2 * (a - 1.0)
    return shift


# --- a hand-written BFGS, the floor for the BFGS solver ---


def make_hand_written_bfgs(fun: Callable) -> Callable:
    """``bfgs(x0, args, gtol, maxiter) -> (x, converged)``, all in one function.

    Nocedal & Wright: BFGS (6.17) with a strong-Wolfe line search (3.5, 3.6),
    zoom steps by cubic interpolation (3.59) kept 10% inside the interval,
    else bisection; first trial step as scipy guesses it.
    """
    from numba import njit

    @njit
    def bfgs(x0, args, gtol, maxiter):
        c1, c2 = 1e-4, 0.9
        n = x0.shape[0]
        x = x0.copy()
        f, g = fun(x, args)
        h = np.eye(n)
        p, xt, s, y, hy = np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n)
        f_before = f + np.sqrt(np.sum(g * g)) / 2.0
        for _ in range(maxiter):
            if np.max(np.abs(g)) <= gtol:
                return x, True
            slope = 0.0
            for i in range(n):
                acc = 0.0
                for j in range(n):
                    acc -= h[i, j] * g[j]
                p[i] = acc
                slope += acc * g[i]
            step = 1.0
            if slope != 0.0:
                step = min(1.0, 2.02 * (f - f_before) / slope)
                if step <= 0.0:
                    step = 1.0
            prev_step, prev_f, prev_slope = 0.0, f, slope
            lo_step = lo_f = lo_slope = hi_step = hi_f = hi_slope = 0.0
            zooming = found = False
            for trial in range(30):
                for i in range(n):
                    xt[i] = x[i] + step * p[i]
                ft, gt = fun(xt, args)
                st = 0.0
                for i in range(n):
                    st += gt[i] * p[i]
                sufficient = ft <= f + c1 * step * slope
                if abs(st) <= -c2 * slope and sufficient and (not zooming or ft < lo_f):
                    found = True
                    break
                if not zooming:
                    if not sufficient or (trial > 0 and ft >= prev_f):
                        lo_step, lo_f, lo_slope, hi_step, hi_f, hi_slope = (
                            prev_step,
                            prev_f,
                            prev_slope,
                            step,
                            ft,
                            st,
                        )
                        zooming = True
                    elif st >= 0.0:
                        lo_step, lo_f, lo_slope, hi_step, hi_f, hi_slope = (
                            step,
                            ft,
                            st,
                            prev_step,
                            prev_f,
                            prev_slope,
                        )
                        zooming = True
                    else:
                        prev_step, prev_f, prev_slope = step, ft, st
                        step *= 2.0
                        continue
                elif not sufficient or ft >= lo_f:
                    hi_step, hi_f, hi_slope = step, ft, st
                else:
                    if st * (hi_step - lo_step) >= 0.0:
                        hi_step, hi_f, hi_slope = lo_step, lo_f, lo_slope
                    lo_step, lo_f, lo_slope = step, ft, st
                d1 = lo_slope + hi_slope - 3.0 * (lo_f - hi_f) / (lo_step - hi_step)
                radical = d1 * d1 - lo_slope * hi_slope
                step = 0.5 * (lo_step + hi_step)
                if radical >= 0.0:
                    d2 = np.sign(hi_step - lo_step) * np.sqrt(radical)
                    guess = hi_step - (hi_step - lo_step) * (hi_slope + d2 - d1) / (
                        hi_slope - lo_slope + 2.0 * d2
                    )
                    margin = 0.1 * abs(hi_step - lo_step)
                    if min(lo_step, hi_step) + margin <= guess <= max(lo_step, hi_step) - margin:
                        step = guess
            if not found:
                return x, False
            for i in range(n):
                s[i] = step * p[i]
                x[i] += s[i]
                y[i] = gt[i] - g[i]
            f_before, f, g = f, ft, gt
            ys = 0.0
            for i in range(n):
                ys += y[i] * s[i]
            rho = 1000.0 if ys == 0.0 else 1.0 / ys
            yhy = 0.0
            for i in range(n):
                acc = 0.0
                for j in range(n):
                    acc += h[i, j] * y[j]
                hy[i] = acc
                yhy += y[i] * acc
            for i in range(n):
                for j in range(n):
                    h[i, j] += (rho * rho * yhy + rho) * s[i] * s[j] - rho * (
                        hy[i] * s[j] + s[i] * hy[j]
                    )
        return x, np.max(np.abs(g)) <= gtol

    return bfgs


def bfgs_floor_rows(repeats: int, budget_s: float, ours: dict[str, float]) -> list[tuple]:
    """(case, our solver, hand-written, counts, PyTensor call) on the hand-written Rosenbrock
    objective."""
    from gpubackend.dispatch.numba.optimize_plan import solver_plan
    from gpubackend.scipy_options.settings import LineSearchSettings
    from gpubackend.solvers.bfgs import make_bfgs

    [fun] = hand_written_problems()[("rosenbrock", "gradient")]
    hand_written = make_hand_written_bfgs(fun)
    solver = make_bfgs(fun)
    rows = []
    for case in CASES:
        if case.method != "BFGS" or not case.problem.startswith("rosenbrock"):
            continue
        _, outputs, (x0, a) = build_case(case)
        settings = solver_plan(outputs[0].owner.op).settings
        assert isinstance(settings, LineSearchSettings), settings
        maxiter = 200 * x0.shape[0]
        counter = np.zeros(2, dtype=np.int64)
        args = (float(a), counter)
        ours_call = partial(_vector_floor(solver, settings), x0, args)
        hand_call = partial(hand_written, x0, args, settings.gtol, maxiter)
        for call in (ours_call, hand_call):
            assert call()[1], f"{case.name}: a floor did not converge"
        ours_s = median_call_seconds(ours_call, repeats, budget_s)
        hand_s = median_call_seconds(hand_call, repeats, budget_s)
        counts = f"{_count_one(ours_call, counter)} / {_count_one(hand_call, counter)}"
        rows.append((case.name, ours_s, hand_s, counts, ours[case.name]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer repeats and a shorter time budget"
    )
    parser.add_argument(
        "--methods", help="comma-separated methods: only their rows (default: every method)"
    )
    parser.add_argument("--stock-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--latency-worker", nargs=2, metavar=("CASE", "COMPILEDIR"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    repeats, budget_s = (5, 0.3) if args.quick else (9, 1.5)
    selection = ["--methods", args.methods] if args.methods else []
    if args.methods:
        global CASES
        CASES = tuple(case for case in CASES if case.method in args.methods.split(","))

    if args.stock_worker:
        print(json.dumps(solve_times(repeats, budget_s)))
        return
    if args.latency_worker:
        print(json.dumps({"seconds": compile_latency(args.latency_worker[0])}))
        return

    stock = run_worker(["--stock-worker", *(["--quick"] if args.quick else []), *selection])
    import gpubackend  # noqa: F401  (only now: the stock worker must not see it)

    ours_or_failed = solve_times(repeats, budget_s)
    ours = {name: seconds for name, seconds in ours_or_failed.items() if seconds is not None}
    assert len(ours) == len(ours_or_failed), "gpubackend's NUMBA solves every case"
    floors = floor_calls()
    floor_seconds = {
        name: median_call_seconds(call, repeats, budget_s) for name, (call, _) in floors.items()
    }
    bfgs_rows = bfgs_floor_rows(repeats, budget_s, ours)
    latency = {}
    selected = {case.name for case in CASES}
    for name in QUICK_LATENCY_CASES if args.quick else LATENCY_CASES:
        if name not in selected:
            continue
        with tempfile.TemporaryDirectory(prefix="bench_numba_optimize_") as compiledir:
            cold = run_worker(["--latency-worker", name, compiledir])["seconds"]
            warm = run_worker(["--latency-worker", name, compiledir])["seconds"]
        latency[name] = (cold, warm)

    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    table = Table(
        title="Numba optimize ops: median per call (one "
        "run); evaluations: ours (on the floor) vs scipy"
    )
    columns = (
        "op method problem",
        "ours",
        "stock NUMBA",
        "stock / ours",
        "floor",
        "ours / floor",
        "evals ours",
        "evals scipy",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for case in CASES:
        name = case.name
        floor = floor_seconds.get(name)
        stock_s = stock[name]
        table.add_row(
            name,
            f"{ours[name] * 1e6:.1f} us",
            "fails" if stock_s is None else f"{stock_s * 1e6:.1f} us",
            "—" if stock_s is None else f"{stock_s / ours[name]:.1f}x",
            "—" if floor is None else f"{floor * 1e6:.2f} us",
            "—" if floor is None else f"{ours[name] / floor:.2f}x",
            "—" if floor is None else str(floors[name][1]()),
            "—" if case.grad else scipy_evaluations(case),
        )
    console.print(table)
    overhead = call_overhead_seconds(repeats, budget_s)
    console.print(
        "A PyTensor call of a trivial NUMBA function costs "
        f"{overhead * 1e6:.1f} us; the floor pays none of it, "
        "nor the inner graph's cost per evaluation. Root "
        "methods evaluate the equations alone at a trial point "
        "(scipy's counts add its checks at the start: 2F 1J). "
        f"OpenBLAS threads: {os.environ['OPENBLAS_NUM_THREADS']} (see the module docstring)."
    )

    bfgs_table = Table(
        title="BFGS on a hand-written Rosenbrock objective: our solver vs a hand-written Numba BFGS"
    )
    for column in (
        "case",
        "our solver",
        "hand-written",
        "ours / hand-written (goal <= 1.2x)",
        "evals ours / hand-written",
        "PyTensor call / hand-written",
    ):
        bfgs_table.add_column(column, justify="right")
    for name, ours_s, hand_s, counts, pytensor_s in bfgs_rows:
        bfgs_table.add_row(
            name,
            f"{ours_s * 1e6:.2f} us",
            f"{hand_s * 1e6:.2f} us",
            f"{ours_s / hand_s:.2f}x",
            counts,
            f"{pytensor_s / hand_s:.2f}x",
        )
    console.print(bfgs_table)

    latency_table = Table(title="Compile + first call, fresh process (gpubackend)")
    for column in ("case", "cold cache", "warm cache", "warm / cold"):
        latency_table.add_column(column, justify="right")
    for name, (cold, warm) in latency.items():
        latency_table.add_row(name, f"{cold:.2f} s", f"{warm:.2f} s", f"{warm / cold:.0%}")
    console.print(latency_table)


if __name__ == "__main__":
    main()
