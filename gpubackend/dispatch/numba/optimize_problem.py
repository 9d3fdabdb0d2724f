"""Adapters between a lowered optimize-op inner graph and the Numba solvers.

The solvers work in float64 on a vector (or a float for scalar problems), as
scipy does. The inner graph takes ``x`` with the op's dtype and rank (a 0-d
``x`` is allowed by `MinimizeOp`/`RootOp`). Each factory below is called once
at lowering time and returns a jitted ``fun(x, args)`` that casts only where
the dtype or rank differ, so a float64 vector problem is called as is.

An `Evaluation` pairs a factory with the inner-graph outputs it reads: the
lowering compiles the inner graph restricted to those, so a solver that asks
for the equations alone (a root finder's trial point) does not pay for the
Jacobian.
"""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numba.core import types
from numba.extending import overload
from pytensor.link.numba.dispatch.basic import numba_njit


def _identity(x):
    return x


def vector_to_inner(ndim: int, dtype: str) -> Callable:
    """float64 solver vector -> inner-graph ``x`` of rank ``ndim`` and ``dtype``."""
    scalar_type = np.dtype(dtype).type
    if ndim == 0:
        return numba_njit(lambda x: np.asarray(scalar_type(x[0])))
    if np.dtype(dtype) == np.float64:
        return numba_njit(_identity)
    return numba_njit(lambda x: x.astype(scalar_type))


def scalar_to_inner(dtype: str) -> Callable:
    """float solver value -> 0-d inner-graph ``x`` of ``dtype``."""
    scalar_type = np.dtype(dtype).type
    return numba_njit(lambda x: np.asarray(scalar_type(x)))


def scalar_to_float(dtype: str) -> Callable:
    """float solver value -> the scalar ``x`` of ``dtype`` of an inner graph lowered on floats
    (`scalar_core`)."""
    scalar_type = np.dtype(dtype).type
    return numba_njit(lambda x: scalar_type(x))


@numba_njit
def as_float64_vector(value):
    # ravel copies only when ``value`` is 0-d or not contiguous.
    return np.asarray(value, dtype=np.float64).ravel()


@numba_njit
def as_float64_matrix(value):
    return np.asarray(value, dtype=np.float64)


def _float_of(value) -> float:
    """Typed in Numba only (below): an inner output, a 0-d array or a scalar, as a float."""
    raise NotImplementedError


@overload(_float_of)
def _float_of_overload(value):
    if isinstance(value, types.Array):
        return lambda value: float(value.item())
    # Not through a 0-d array: np.asarray of a scalar allocates one in Numba.
    return lambda value: float(value)


@numba_njit
def as_float(value) -> float:
    return _float_of(value)


def _first_output(inner: Callable, to_inner: Callable, first: Callable) -> Callable:
    """``fun(x, args) -> first(output 0)`` of the inner function."""

    @numba_njit
    def fun(x, args):
        return first(inner(to_inner(x), *args)[0])

    return fun


def _first_two_outputs(
    inner: Callable, to_inner: Callable, first: Callable, second: Callable
) -> Callable:
    """``fun(x, args) -> (first(output 0), second(output 1))`` of the inner function."""

    @numba_njit
    def fun(x, args):
        outputs = inner(to_inner(x), *args)
        return first(outputs[0]), second(outputs[1])

    return fun


def value_and_gradient(inner: Callable, to_inner: Callable) -> Callable:
    """``fun(x, args) -> (f, grad)`` from an inner graph returning (objective, grad, ...)."""
    return _first_two_outputs(inner, to_inner, as_float, as_float64_vector)


def value(inner: Callable, to_inner: Callable) -> Callable:
    """``fun(x, args) -> f`` from an inner graph returning the objective first (derivative-free
    minimisers)."""
    return _first_output(inner, to_inner, as_float)


def residual(inner: Callable, to_inner: Callable) -> Callable:
    """``fun(x, args) -> F`` from an inner function returning the equations."""
    return _first_output(inner, to_inner, as_float64_vector)


def jacobian(inner: Callable, to_inner: Callable) -> Callable:
    """``fun(x, args) -> J`` from an inner function returning the equations' Jacobian."""
    return _first_output(inner, to_inner, as_float64_matrix)


def scalar_value(inner: Callable, to_inner: Callable) -> Callable:
    """``fun(x, args) -> f`` for a scalar problem (first inner output)."""
    return _first_output(inner, to_inner, as_float)


def scalar_value_and_derivative(inner: Callable, to_inner: Callable) -> Callable:
    """``fun(x, args) -> (f, f')`` for a scalar problem with a derivative output."""
    return _first_two_outputs(inner, to_inner, as_float, as_float)


def scalar_value_and_forward_difference(inner: Callable, to_inner: Callable) -> Callable:
    """``fun(x, args) -> (f, f')`` with f' a two-point forward difference.

    The step is scipy's ``approx_derivative(method="2-point")``, which scipy's
    ``root_scalar(method="newton")`` uses when no derivative is given.
    """
    value = scalar_value(inner, to_inner)
    relative_step = float(np.sqrt(np.finfo(np.float64).eps))

    @numba_njit
    def fun(x, args):
        f = value(x, args)
        step = relative_step * (1.0 if x >= 0 else -1.0) * max(1.0, abs(x))
        step = (x + step) - x
        return f, (value(x + step, args) - f) / step

    return fun


def scalar_value_and_two_derivatives(inner: Callable, to_inner: Callable) -> Callable:
    """``fun(x, args) -> (f, f', f'')`` for a scalar problem with both derivative outputs."""

    @numba_njit
    def fun(x, args):
        outputs = inner(to_inner(x), *args)
        return as_float(outputs[0]), as_float(outputs[1]), as_float(outputs[2])

    return fun


def value_gradient_and_hessian(inner: Callable, to_inner: Callable) -> Callable:
    """``fun(x, args) -> (f, grad, hess)`` from an inner graph returning those three."""

    @numba_njit
    def fun(x, args):
        outputs = inner(to_inner(x), *args)
        return as_float(outputs[0]), as_float64_vector(outputs[1]), as_float64_matrix(outputs[2])

    return fun


class Evaluation(NamedTuple):
    """One function a solver calls: the inner-graph outputs it reads (only they are computed, in
    this order) and the factory above that hands them over (``adapter(inner, to_inner)``)."""

    outputs: tuple[int, ...]
    adapter: Callable[[Callable, Callable], Callable]


# The inner graphs' outputs: MinimizeOp (objective, gradient, Hessian), RootOp
# (equations, Jacobian), the scalar ops (value, derivative); each op holds the
# first and those its flags ask for.
VALUE = Evaluation((0,), value)
VALUE_AND_GRADIENT = Evaluation((0, 1), value_and_gradient)
VALUE_GRADIENT_AND_HESSIAN = Evaluation((0, 1, 2), value_gradient_and_hessian)
RESIDUAL = Evaluation((0,), residual)
JACOBIAN = Evaluation((1,), jacobian)
SCALAR_VALUE = Evaluation((0,), scalar_value)
SCALAR_VALUE_AND_DERIVATIVE = Evaluation((0, 1), scalar_value_and_derivative)
SCALAR_VALUE_AND_FORWARD_DIFFERENCE = Evaluation((0,), scalar_value_and_forward_difference)
SCALAR_VALUE_AND_TWO_DERIVATIVES = Evaluation((0, 1, 2), scalar_value_and_two_derivatives)
