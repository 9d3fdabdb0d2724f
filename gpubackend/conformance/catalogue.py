"""The catalogue of canonical graphs: data, kept apart from the checks.

Each entry is a builder returning a `CaseGraph`: symbolic inputs and outputs,
test values, and optionally a closed-form reference. Where no closed form is
given, the runner computes the reference with PyTensor's Python backend
(``FAST_COMPILE``). Problems are tiny on purpose: Numba compile time dominates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypedDict

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.conditional.op import ifelse
from pytensor.graph.basic import Variable
from pytensor.graph.replace import vectorize_graph
from pytensor.scalar.loop import ScalarLoop
from pytensor.scan import until
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.optimize import minimize, minimize_scalar, root, root_scalar


@dataclass(frozen=True)
class CaseGraph:
    inputs: list[Variable]
    outputs: list[Variable]
    values: list[np.ndarray]
    reference: list[np.ndarray] | None = None
    rtol: float = 1e-6
    atol: float = 1e-8


@dataclass(frozen=True)
class Case:
    """A named canonical graph and its metadata.

    ``batch_axes`` gives, per input, the axis along which the case stacks
    independent problems (``None``: the input is shared by all of them); it is
    metadata for sharding, set where a case naturally has a batch axis.
    ``inplace_opportunity`` marks inner graphs with internal buffers that a
    backend baking inplace (Numba) should destroy. ``host_reads`` is the number
    of explicit device-to-host reads a warm call may make on a device-resident
    backend (the step counts of a while-Scan whose trace is an output).
    """

    name: str
    family: str
    build: Callable[[], CaseGraph] = field(repr=False, compare=False)
    batch_axes: tuple[int | None, ...] | None = None
    inplace_opportunity: bool = False
    host_reads: int = 0


CATALOGUE: dict[str, Case] = {}


def register_case(
    family: str,
    *,
    batch_axes: tuple[int | None, ...] | None = None,
    inplace_opportunity: bool = False,
    host_reads: int = 0,
    name: str | None = None,
) -> Callable[[Callable[[], CaseGraph]], Callable[[], CaseGraph]]:
    """Add a builder to `CATALOGUE` under ``name``, by default its function name (without a leading
    ``case_``)."""

    def decorator(build: Callable[[], CaseGraph]) -> Callable[[], CaseGraph]:
        case_name = name or build.__name__.removeprefix("case_")
        if case_name in CATALOGUE:
            raise ValueError(f"Conformance case {case_name!r} is registered twice")
        CATALOGUE[case_name] = Case(
            case_name, family, build, batch_axes, inplace_opportunity, host_reads
        )
        return build

    return decorator


def select_cases(pattern: str | None = None) -> list[Case]:
    """Cases whose name or family contains ``pattern`` (all when None); comma-separated patterns OR
    together."""
    if not pattern:
        return list(CATALOGUE.values())
    needles = [needle.strip() for needle in pattern.split(",") if needle.strip()]
    return [
        case
        for case in CATALOGUE.values()
        if any(n in case.name or n == case.family for n in needles)
    ]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _floats(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.normal(size=shape).astype(pytensor.config.floatX)


def _scan(*args, **kwargs):
    return pytensor.scan(*args, return_updates=False, **kwargs)


# --- Scan -----------------------------------------------------------------------


def _tanh_recurrence() -> tuple[list[Variable], Variable]:
    """``h_t = tanh(h_{t-1} * w + x_t)``: the inputs ``[xs, h0, w]`` and every state."""
    xs, h0, w = pt.matrix("xs"), pt.vector("h0"), pt.scalar("w")
    states = _scan(
        lambda x_t, h, w: pt.tanh(h * w + x_t), sequences=[xs], outputs_info=[h0], non_sequences=[w]
    )
    return [xs, h0, w], states


def _tanh_recurrence_values(seed: int, w: float) -> list[np.ndarray]:
    rng = _rng(seed)
    return [_floats(rng, 5, 3), _floats(rng, 3), np.asarray(w)]


def _tanh_recurrence_states(xs: np.ndarray, h0: np.ndarray, w: np.ndarray) -> np.ndarray:
    states, h = [], h0
    for x_t in xs:
        h = np.tanh(h * w + x_t)
        states.append(h)
    return np.stack(states)


@register_case("scan", batch_axes=(1, 0, None))
def case_scan_sit_sot() -> CaseGraph:
    inputs, states = _tanh_recurrence()
    values = _tanh_recurrence_values(0, 0.7)
    return CaseGraph(inputs, [states], values, [_tanh_recurrence_states(*values)])


def _two_tap_recurrence() -> tuple[Variable, Variable, Variable]:
    """``x_t = a * x_{t-1} + x_{t-2}`` for 6 steps: the inputs ``init`` (2 rows) and ``a``, and
    every state."""
    init, a = pt.matrix("init"), pt.scalar("a")
    seq = _scan(
        lambda x_tm2, x_tm1, a: a * x_tm1 + x_tm2,
        outputs_info=[{"initial": init, "taps": [-2, -1]}],
        non_sequences=[a],
        n_steps=6,
    )
    return init, a, seq


@register_case("scan", batch_axes=(1, None))
def case_scan_mit_sot_taps() -> CaseGraph:
    init, a, seq = _two_tap_recurrence()
    rng = _rng(1)
    init_v, a_v = _floats(rng, 2, 3), np.asarray(0.5)
    history = list(init_v)
    for _ in range(6):
        history.append(a_v * history[-1] + history[-2])
    return CaseGraph([init, a], [seq], [init_v, a_v], [np.stack(history[2:])])


@register_case("scan", batch_axes=(0,))
def case_scan_nit_sot_map() -> CaseGraph:
    xs = pt.matrix("xs")
    mapped = pytensor.map(lambda row: pt.sin(row) * row.sum(), sequences=[xs], return_updates=False)
    xs_v = _floats(_rng(2), 4, 3)
    return CaseGraph([xs], [mapped], [xs_v], [np.sin(xs_v) * xs_v.sum(axis=1, keepdims=True)])


@register_case("scan")
def case_scan_grad_mit_mot() -> CaseGraph:
    inputs, states = _tanh_recurrence()
    grads = pytensor.grad((states**2).sum(), inputs)
    return CaseGraph(inputs, grads, _tanh_recurrence_values(3, 0.7))


def _second_order_grads(
    cost: Variable, first: list[Variable], second: list[Variable]
) -> list[Variable]:
    """Gradients of the summed first-order gradients: they differentiate the gradient Scan (mit-mot)
    again."""
    summed = pt.add(*(grad.sum() for grad in pytensor.grad(cost, first)))
    return pytensor.grad(summed, second)


@register_case("scan")
def case_scan_sit_sot_second_order_grad() -> CaseGraph:
    inputs, states = _tanh_recurrence()
    xs, h0, w = inputs
    return CaseGraph(
        inputs,
        _second_order_grads((states**2).sum(), [w, xs], [w, h0]),
        _tanh_recurrence_values(7, 0.7),
    )


@register_case("scan")
def case_scan_mit_sot_second_order_grad() -> CaseGraph:
    init, a, seq = _two_tap_recurrence()
    grads = _second_order_grads((seq**2).sum(), [a, init], [a, init])
    return CaseGraph([init, a], grads, [_floats(_rng(8), 2, 3), np.asarray(0.5)])


def _doubling_until(x0: Variable, limit: Variable) -> Variable:
    def double_until(x, limit):
        doubled = x * 2
        return doubled, until(doubled > limit)

    return _scan(double_until, outputs_info=[x0], non_sequences=[limit], n_steps=50)


def _doubling_reference(x0: float, limit: float) -> np.ndarray:
    trace = [x0 * 2]
    while trace[-1] <= limit:
        trace.append(trace[-1] * 2)
    return np.asarray(trace)


@register_case("scan", host_reads=1)
def case_scan_while_until() -> CaseGraph:
    x0, limit = pt.scalar("x0"), pt.scalar("limit")
    x0_v, limit_v = np.asarray(0.3), np.asarray(10.0)
    return CaseGraph(
        [x0, limit], [_doubling_until(x0, limit)], [x0_v, limit_v], [_doubling_reference(0.3, 10.0)]
    )


@register_case("scan")
def case_scan_while_last_value() -> CaseGraph:
    # Only the final state leaves the loop, so its shape does not depend on the step count.
    x0, limit = pt.scalar("x0"), pt.scalar("limit")
    x0_v, limit_v = np.asarray(0.3), np.asarray(10.0)
    return CaseGraph(
        [x0, limit],
        [_doubling_until(x0, limit)[-1]],
        [x0_v, limit_v],
        [_doubling_reference(0.3, 10.0)[-1]],
    )


@register_case("scan", batch_axes=(0,), inplace_opportunity=True)
def case_scan_nested() -> CaseGraph:
    xs = pt.matrix("xs")

    def row_cumsum(row):
        return _scan(
            lambda x_t, acc: acc + x_t,
            sequences=[row],
            outputs_info=[pt.zeros((), dtype=row.dtype)],
        )

    cumsums = _scan(row_cumsum, sequences=[xs])
    xs_v = _floats(_rng(4), 3, 4)
    return CaseGraph([xs], [cumsums], [xs_v], [np.cumsum(xs_v, axis=1)])


@register_case("scan")
def case_scan_length_from_shape() -> CaseGraph:
    x = pt.vector("x")
    # n_steps is a symbolic function of the input's shape
    powers = _scan(
        lambda acc, x: acc * x,
        outputs_info=[pt.ones_like(x)],
        non_sequences=[x],
        n_steps=x.shape[0] // 2,
    )
    x_v = _floats(_rng(5), 6)
    return CaseGraph([x], [powers], [x_v], [np.stack([x_v ** (k + 1) for k in range(3)])])


@register_case("scan", batch_axes=(1, 0, None))
def case_scan_last_value() -> CaseGraph:
    inputs, states = _tanh_recurrence()
    values = _tanh_recurrence_values(6, -0.4)
    return CaseGraph(inputs, [states[-1]], values, [_tanh_recurrence_states(*values)[-1]])


# --- OpFromGraph ----------------------------------------------------------------


def _affine_ofg(name: str = "affine") -> OpFromGraph:
    x, y = pt.vector("x"), pt.vector("y")
    return OpFromGraph([x, y], [x * y + pt.exp(x)], inline=False, name=name)


@register_case("ofg", batch_axes=(0, 0))
def case_ofg_basic() -> CaseGraph:
    x, y = pt.vector("x"), pt.vector("y")
    out = _affine_ofg()(x, y)
    rng = _rng(10)
    x_v, y_v = _floats(rng, 4), _floats(rng, 4)
    return CaseGraph([x, y], [out], [x_v, y_v], [x_v * y_v + np.exp(x_v)])


@register_case("ofg", batch_axes=(0, 0), inplace_opportunity=True)
def case_ofg_nested() -> CaseGraph:
    a, b = pt.vector("a"), pt.vector("b")
    inner = _affine_ofg("inner")
    outer = OpFromGraph([a, b], [inner(a, b) * 2 - b], inline=False, name="outer")
    x, y = pt.vector("x"), pt.vector("y")
    rng = _rng(11)
    x_v, y_v = _floats(rng, 4), _floats(rng, 4)
    return CaseGraph([x, y], [outer(x, y)], [x_v, y_v], [(x_v * y_v + np.exp(x_v)) * 2 - y_v])


@register_case("ofg")
def case_ofg_grad() -> CaseGraph:
    x, y = pt.vector("x"), pt.vector("y")
    loss = _affine_ofg()(x, y).sum()
    grads = pytensor.grad(loss, [x, y])
    rng = _rng(12)
    x_v, y_v = _floats(rng, 4), _floats(rng, 4)
    return CaseGraph([x, y], grads, [x_v, y_v], [y_v + np.exp(x_v), x_v])


@register_case("ofg", batch_axes=(0, 0))
def case_ofg_blockwise() -> CaseGraph:
    x, y = pt.vector("x"), pt.vector("y")
    core = _affine_ofg()(x, y)
    xb, yb = pt.matrix("xb"), pt.matrix("yb")
    batched = vectorize_graph(core, {x: xb, y: yb})
    rng = _rng(13)
    x_v, y_v = _floats(rng, 3, 4), _floats(rng, 3, 4)
    return CaseGraph([xb, yb], [batched], [x_v, y_v], [x_v * y_v + np.exp(x_v)])


@register_case("ofg", batch_axes=(0,))
def case_ofg_chained_50() -> CaseGraph:
    a = pt.vector("a")
    step = OpFromGraph([a], [pt.sin(a) + 0.5 * a], inline=False, name="step")
    x = pt.vector("x")
    out = x
    for _ in range(50):
        out = step(out)
    x_v = _floats(_rng(14), 4)
    expected = x_v
    for _ in range(50):
        expected = np.sin(expected) + 0.5 * expected
    return CaseGraph([x], [out], [x_v], [expected])


@register_case("ofg")
def case_ofg_constant_output() -> CaseGraph:
    # One inner output folds to a constant (float32: PyTensor types 0.5 as the narrowest exact
    # float); the lowering must still return an array of the graph's type for it.
    a = pt.vector("a")
    op = OpFromGraph(
        [a], [pt.tanh(pt.constant(0.5)), a + 1.0], inline=False, name="constant_output"
    )
    x = pt.vector("x")
    x_v = _floats(_rng(16), 4)
    return CaseGraph([x], list(op(x)), [x_v], [np.tanh(np.float32(0.5)), x_v + 1.0])


@register_case("ofg", inplace_opportunity=True)
def case_ofg_inplace_buffers() -> CaseGraph:
    a, v = pt.matrix("a"), pt.vector("v")
    # dot's output is a buffer internal to the inner graph: the elementwise ops
    # after it may overwrite it in place.
    hidden = pt.dot(a, v)
    op = OpFromGraph(
        [a, v], [pt.exp(hidden) + 1.0, pt.cumsum(hidden) * 2.0], inline=False, name="buffers"
    )
    A, x = pt.matrix("A"), pt.vector("x")
    rng = _rng(15)
    a_v, x_v = _floats(rng, 3, 4), _floats(rng, 4)
    hidden_v = a_v @ x_v
    return CaseGraph(
        [A, x], list(op(A, x)), [a_v, x_v], [np.exp(hidden_v) + 1.0, np.cumsum(hidden_v) * 2.0]
    )


# --- Composite ------------------------------------------------------------------


@register_case("composite", batch_axes=(0, 0))
def case_composite_explicit() -> CaseGraph:
    xs, ys = ps.float64("xs"), ps.float64("ys")
    composite = ps.Composite([xs, ys], [xs * ys + ps.sin(xs), ps.exp(ys)])
    x, y = pt.vector("x"), pt.vector("y")
    rng = _rng(20)
    x_v, y_v = _floats(rng, 5), _floats(rng, 5)
    return CaseGraph(
        [x, y], list(Elemwise(composite)(x, y)), [x_v, y_v], [x_v * y_v + np.sin(x_v), np.exp(y_v)]
    )


@register_case("composite", batch_axes=(0, 0))
def case_composite_fused() -> CaseGraph:
    x, y = pt.vector("x"), pt.vector("y")
    out = pt.exp(x) * y + pt.sin(x) / (1 + y**2)
    rng = _rng(21)
    x_v, y_v = _floats(rng, 5), _floats(rng, 5)
    return CaseGraph([x, y], [out], [x_v, y_v], [np.exp(x_v) * y_v + np.sin(x_v) / (1 + y_v**2)])


# --- ScalarLoop -----------------------------------------------------------------


@register_case("scalar_loop", batch_axes=(None, 0, 0))
def case_scalar_loop_for() -> CaseGraph:
    state, rate = ps.float64("state"), ps.float64("rate")
    loop = ScalarLoop(init=[state], update=[state * rate + 1.0], constant=[rate])
    n_steps, x0, r = pt.lscalar("n_steps"), pt.vector("x0"), pt.vector("r")
    rng = _rng(30)
    x0_v, r_v = _floats(rng, 4), np.abs(_floats(rng, 4)) * 0.5
    expected = x0_v.copy()
    for _ in range(7):
        expected = expected * r_v + 1.0
    values = [np.asarray(7, dtype="int64"), x0_v, r_v]
    return CaseGraph([n_steps, x0, r], [Elemwise(loop)(n_steps, x0, r)], values, [expected])


@register_case("scalar_loop", batch_axes=(None, 0))
def case_scalar_loop_while() -> CaseGraph:
    state = ps.float64("state")
    doubled = state * 2.0
    loop = ScalarLoop(init=[state], update=[doubled], until=doubled > 10.0)
    n_steps, x0 = pt.lscalar("n_steps"), pt.vector("x0")
    final, done = Elemwise(loop)(n_steps, x0)
    x0_v = np.array([0.3, 1.0, 4.0, 20.0])
    expected_final = []
    for value in x0_v:
        for _ in range(50):
            value = value * 2
            if value > 10.0:
                break
        expected_final.append(value)
    values = [np.asarray(50, dtype="int64"), x0_v]
    return CaseGraph(
        [n_steps, x0], [final, done], values, [np.asarray(expected_final), np.ones(4, bool)]
    )


@register_case("scalar_loop", batch_axes=(0, 0))
def case_gammainc_grad_k() -> CaseGraph:
    k, x = pt.vector("k"), pt.vector("x")
    grad_k = pytensor.grad(pt.gammainc(k, x).sum(), k)
    return CaseGraph(
        [k, x], [grad_k], [np.array([0.5, 1.5, 3.0]), np.array([0.7, 2.0, 1.2])], rtol=1e-5
    )


# --- Optimize ops ---------------------------------------------------------------


class Tolerance(TypedDict):
    rtol: float
    atol: float


SOLVER_TOLERANCE = Tolerance(rtol=1e-4, atol=1e-6)


def _quartic_objective(x: Variable, a: Variable) -> Variable:
    """Smooth, strictly convex, minimum near ``a``; no closed form, so scipy is the reference."""
    return ((x - a) ** 2).sum() + 0.1 * (x**4).sum()


def _solver_case(
    x: Variable, a: Variable, solved: tuple[Variable, Variable], values: list
) -> CaseGraph:
    """Outputs: the solution, its success flag, and the solution's gradient with respect to
    ``a``."""
    solution, success = solved
    outputs = [solution, success, pytensor.grad(solution.sum(), a)]
    return CaseGraph(
        [x, a], outputs, [np.asarray(v, dtype=float) for v in values], **SOLVER_TOLERANCE
    )


@register_case("optimize")
def case_minimize_grad() -> CaseGraph:
    x, a = pt.vector("x"), pt.vector("a")
    solved = minimize(_quartic_objective(x, a), x, method="BFGS", optimizer_kwargs={"tol": 1e-8})
    return _solver_case(x, a, solved, [np.zeros(3), [0.5, -1.0, 2.0]])


def _second_order_case(method: str) -> CaseGraph:
    """``minimize(method=...)`` with the op's Hessian output (``hess=True``), which the method
    needs."""
    x, a = pt.vector("x"), pt.vector("a")
    solved = minimize(
        _quartic_objective(x, a), x, method=method, hess=True, optimizer_kwargs={"tol": 1e-8}
    )
    return _solver_case(x, a, solved, [np.zeros(3), [0.5, -1.0, 2.0]])


# A partial of a module-level function, not a closure: the conformance workers get cases pickled.
for _method in ("trust-exact", "trust-krylov", "trust-ncg", "dogleg"):
    register_case("optimize", name=f"minimize_{_method.replace('-', '_')}_grad")(
        partial(_second_order_case, _method)
    )


def _first_order_case(method: str) -> CaseGraph:
    """``minimize(method=...)`` on the op's gradient alone, for scipy's constrained methods run
    without constraints."""
    x, a = pt.vector("x"), pt.vector("a")
    solved = minimize(_quartic_objective(x, a), x, method=method, optimizer_kwargs={"tol": 1e-10})
    return _solver_case(x, a, solved, [np.zeros(3), [0.5, -1.0, 2.0]])


for _method in ("SLSQP", "trust-constr"):
    register_case("optimize", name=f"minimize_{_method.lower().replace('-', '_')}_grad")(
        partial(_first_order_case, _method)
    )


@register_case("optimize")
def case_root_grad() -> CaseGraph:
    x, a = pt.vector("x"), pt.vector("a")
    solved = root(x**3 + x - a, x, method="hybr", optimizer_kwargs={"tol": 1e-12})
    return _solver_case(x, a, solved, [np.zeros(3), [0.5, -1.0, 2.0]])


@register_case("optimize")
def case_minimize_scalar_grad() -> CaseGraph:
    x, a = pt.scalar("x"), pt.scalar("a")
    solved = minimize_scalar(
        _quartic_objective(x, a), x, method="brent", optimizer_kwargs={"tol": 1e-12}
    )
    return _solver_case(x, a, solved, [0.0, 1.5])


@register_case("optimize")
def case_root_scalar_grad() -> CaseGraph:
    x, a = pt.scalar("x"), pt.scalar("a")
    return _solver_case(x, a, root_scalar(x**3 + x - a, x, method="newton"), [0.5, 2.0])


@register_case("optimize", batch_axes=(0, 0))
def case_minimize_blockwise() -> CaseGraph:
    x, a = pt.vector("x"), pt.vector("a")
    solution, success = minimize(_quartic_objective(x, a), x, method="BFGS")
    xb, ab = pt.matrix("xb"), pt.matrix("ab")
    batched = vectorize_graph([solution, success], {x: xb, a: ab})
    a_v = np.array([[0.5, -1.0], [2.0, 0.1], [-0.3, 1.2]])
    return CaseGraph([xb, ab], batched, [np.zeros((3, 2)), a_v], **SOLVER_TOLERANCE)


def _constant_start_case(a: Variable, solved: tuple[Variable, Variable], a_value) -> CaseGraph:
    """A solve whose start value is a constant, so the only input is ``a``.

    Outputs as in `_solver_case`. A 0-d constant reaches a JAX lowering as a
    Python scalar (jax_typify unwraps it), a vector one as an array.
    """
    solution, success = solved
    outputs = [solution, success, pytensor.grad(solution.sum(), a)]
    return CaseGraph([a], outputs, [np.asarray(a_value, dtype=float)], **SOLVER_TOLERANCE)


@register_case("optimize")
def case_root_constant_vector_start() -> CaseGraph:
    x, a = pt.constant(np.zeros(3)), pt.vector("a")
    solved = root(x**3 + x - a, x, method="hybr", optimizer_kwargs={"tol": 1e-12})
    return _constant_start_case(a, solved, [0.5, -1.0, 2.0])


@register_case("optimize")
def case_root_constant_scalar_start() -> CaseGraph:
    x, a = pt.constant(0.5, dtype="float64"), pt.scalar("a")
    solved = root(x**3 + a * x - 1.0, x, method="hybr", optimizer_kwargs={"tol": 1e-12})
    return _constant_start_case(a, solved, 1.5)


@register_case("optimize")
def case_minimize_constant_scalar_start() -> CaseGraph:
    x, a = pt.constant(0.0, dtype="float64"), pt.scalar("a")
    solved = minimize(_quartic_objective(x, a), x, method="BFGS", optimizer_kwargs={"tol": 1e-8})
    return _constant_start_case(a, solved, 1.5)


@register_case("optimize")
def case_minimize_scalar_constant_start() -> CaseGraph:
    x, a = pt.constant(0.0, dtype="float64"), pt.scalar("a")
    solved = minimize_scalar(
        _quartic_objective(x, a), x, method="brent", optimizer_kwargs={"tol": 1e-12}
    )
    return _constant_start_case(a, solved, 1.5)


@register_case("optimize")
def case_root_scalar_constant_start() -> CaseGraph:
    x, a = pt.constant(0.5, dtype="float64"), pt.scalar("a")
    return _constant_start_case(a, root_scalar(x**3 + x - a, x, method="newton"), 2.0)


# --- Mixtures -------------------------------------------------------------------


@register_case("mixture", batch_axes=(1, 0), inplace_opportunity=True)
def case_scan_in_ofg() -> CaseGraph:
    seq, start = pt.matrix("seq"), pt.vector("start")
    running = _scan(lambda x_t, acc: acc + pt.sin(x_t), sequences=[seq], outputs_info=[start])
    op = OpFromGraph([seq, start], [running[-1]], inline=False, name="scan_inside")
    xs, h0 = pt.matrix("xs"), pt.vector("h0")
    rng = _rng(40)
    xs_v, h0_v = _floats(rng, 4, 3), _floats(rng, 3)
    return CaseGraph([xs, h0], [op(xs, h0)], [xs_v, h0_v], [h0_v + np.sin(xs_v).sum(axis=0)])


@register_case("mixture", batch_axes=(0, None))
def case_ofg_in_scan() -> CaseGraph:
    op = _affine_ofg()
    xs, y = pt.matrix("xs"), pt.vector("y")
    rows = _scan(lambda row, y: op(row, y), sequences=[xs], non_sequences=[y])
    rng = _rng(41)
    xs_v, y_v = _floats(rng, 3, 4), _floats(rng, 4)
    return CaseGraph([xs, y], [rows], [xs_v, y_v], [xs_v * y_v + np.exp(xs_v)])


@register_case("mixture", batch_axes=(0, None))
def case_minimize_in_scan() -> CaseGraph:
    targets, x0 = pt.vector("targets"), pt.scalar("x0")

    def argmin_for(target, x):
        solution, success = minimize_scalar(_quartic_objective(x, target), x, method="brent")
        # `success` is a ScalarType; a Scan output must be a tensor.
        return solution, pt.as_tensor_variable(success)

    solutions, successes = _scan(argmin_for, sequences=[targets], non_sequences=[x0])
    values = [np.array([0.5, -1.0, 2.0]), np.asarray(0.0)]
    return CaseGraph([targets, x0], [solutions, successes], values, **SOLVER_TOLERANCE)


@register_case("mixture")
def case_lazy_ifelse() -> CaseGraph:
    flag, x = pt.scalar("flag"), pt.vector("x")
    out = ifelse(flag > 0, pt.exp(x).cumsum(), pt.sin(x) * 2)
    x_v = _floats(_rng(42), 4)
    return CaseGraph([flag, x], [out], [np.asarray(1.0), x_v], [np.cumsum(np.exp(x_v))])
