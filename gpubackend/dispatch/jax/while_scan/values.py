"""The values a while-Scan graph carries while JAX traces it: lengths known only at run time, with
bounds.

A while-Scan's trace is as long as the steps its ``until`` condition allows,
which ``jax.jit`` cannot return as a shape. Inside one lowered graph it is
carried as `Bounded`: a buffer whose leading axis has room for ``capacity``
entries, of which the first ``length`` are meaningful. Every integer computed
from such a length is a `BoundedInt`: the traced value together with the
interval it lies in, known while tracing. The intervals prove checks at
compile time (``xs[-1]`` of a trace that has at least one entry), and size the
buffers that follow a trace (a gradient's backward Scan).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gpubackend.dispatch.jax.tracing import is_traced

Kind = Literal["array", "int"] | None
"""What a graph variable is while traced: `Bounded` ("array"), `BoundedInt` ("int") or an ordinary
value (None)."""


def kinds(kind: Kind, count: int) -> tuple[Kind, ...]:
    """The kinds of ``count`` outputs of one kind."""
    return (kind,) * count


class Table(NamedTuple):
    """A run-time integer as a function of one traced length (its atom), listed for every value the
    atom can take."""

    atom: Any
    """The traced length, a `BoundedInt`'s value, this integer is computed from."""
    first: int
    """The atom's smallest value: ``values[i]`` is this integer (scalar or vector) when the atom is
    ``first + i``."""
    values: np.ndarray

    def entry(self, index) -> Table:
        """The table of ``value[index]``."""
        return Table(self.atom, self.first, self.values[(slice(None), *np.atleast_1d(index))])


# Tabulating a length costs an array of its range while tracing: beyond this many values, bounds
# only.
TABLE_LIMIT = 1 << 16


class BoundedInt(NamedTuple):
    """An integer (or boolean) value, scalar or small vector, within ``[low, high]`` elementwise.

    The bounds are float64 arrays of the value's shape; an infinite bound means
    none is known (an integer input, or arithmetic the bounds cannot follow).
    A scalar computed from one length alone keeps its value for every length
    the bounds allow (`Table`): the case splits of PyTensor's slice arithmetic
    then stay exact, and two lengths computed apart (``len(xs[:-1])`` and
    ``xs.shape[0] - 1``) are known equal while tracing.
    """

    value: Any
    low: np.ndarray
    high: np.ndarray
    table: Table | None = None


class Bounded(NamedTuple):
    """An array whose leading axis holds ``length`` meaningful entries out of
    ``buffer.shape[0]``."""

    buffer: jax.Array
    length: BoundedInt

    @property
    def capacity(self) -> int:
        return self.buffer.shape[0]


def exactly(value) -> BoundedInt:
    """A concrete integer as a `BoundedInt` whose bounds are its value."""
    concrete = np.asarray(value, dtype=np.float64)
    return BoundedInt(value, concrete, concrete)


def bounds_of(value) -> tuple[np.ndarray, np.ndarray]:
    """The interval of an integer value: its bounds, itself when concrete, unbounded when traced."""
    if isinstance(value, BoundedInt):
        return value.low, value.high
    if is_traced(value):
        unknown = np.full(jnp.shape(value), np.inf)
        return -unknown, unknown
    concrete = np.asarray(value, dtype=np.float64)
    return concrete, concrete


def as_bounded_int(value) -> BoundedInt:
    return value if isinstance(value, BoundedInt) else BoundedInt(value, *bounds_of(value))


def value_of(value):
    """The plain JAX value inside a possibly bounded integer."""
    return value.value if isinstance(value, BoundedInt) else value


def known_array(value) -> np.ndarray | None:
    """The integer array ``value`` is known to be while tracing, if its bounds pin it down."""
    low, high = bounds_of(value)
    if np.array_equal(low, high) and np.isfinite(low).all():
        return low.astype(np.int64)
    return None


def entry_of(value: BoundedInt, index: int) -> BoundedInt:
    """One entry of a vector of integers, with its bounds and table."""
    table = None if value.table is None else value.table.entry(index)
    return BoundedInt(value.value[index], value.low[index], value.high[index], table)


def known_value(value) -> int | None:
    """The integer ``value`` is known to be while tracing, if its bounds pin it down."""
    known = known_array(value)
    return None if known is None or known.shape != () else int(known)


def length_between(value, low, high) -> BoundedInt:
    """A scalar in ``[low, high]``, traced by itself: a length of its own, tabulated where its range
    is small."""
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    if is_traced(value) and np.isfinite(low) and np.isfinite(high) and high - low < TABLE_LIMIT:
        return BoundedInt(
            value,
            low,
            high,
            Table(value, int(low), np.arange(int(low), int(high) + 1, dtype=np.float64)),
        )
    return BoundedInt(value, low, high)


def tabulated(value, table: Table) -> BoundedInt:
    """``value`` with the bounds its table gives it."""
    values = table.values.astype(np.float64)
    return BoundedInt(value, values.min(axis=0), values.max(axis=0), table)


def common_tables(values) -> tuple[Table, list] | None:
    """The values as arrays over one atom (a known value repeated), if each is known or tabulated on
    that atom."""
    tables = [
        value.table for value in values if isinstance(value, BoundedInt) and value.table is not None
    ]
    if not tables or any(table.atom is not tables[0].atom for table in tables):
        return None
    listed = []
    for value in values:
        if isinstance(value, BoundedInt) and value.table is not None:
            listed.append(value.table.values)
        elif (known := known_array(value)) is not None:
            listed.append(np.broadcast_to(known, (tables[0].values.shape[0], *known.shape)))
        else:
            return None
    return tables[0], listed


def known_equal(first, other) -> bool:
    """Whether two integers are equal on every run: the same known value, or the same table of one
    length."""
    first_value, other_value = known_value(first), known_value(other)
    if first_value is not None and first_value == other_value:
        return True
    common = common_tables([first, other])
    return common is not None and bool(np.array_equal(*common[1]))


def same_length(first: BoundedInt, other) -> Any:
    """True where ``other`` (a length, or a concrete size) is known equal to ``first`` while
    tracing, else the condition."""
    if (
        other is first
        or (isinstance(other, BoundedInt) and other.value is first.value)
        or known_equal(first, other)
    ):
        return True
    return value_of(first) == value_of(other)


def holds_always(condition) -> bool:
    """Whether a boolean (or integer) condition is true on every run, by its bounds or its table."""
    low, _ = bounds_of(condition)
    return bool(np.all(low >= 1)) or (
        isinstance(condition, BoundedInt)
        and condition.table is not None
        and bool(np.all(condition.table.values != 0))
    )


def as_bounded(value) -> Bounded:
    """``value`` as a `Bounded` array: a plain array is all meaningful entries."""
    if isinstance(value, Bounded):
        return value
    value = jnp.asarray(value_of(value))
    return Bounded(value, exactly(value.shape[0]))


def as_kind(value, kind: Kind):
    """``value`` in the form the plan declared: a length can turn out concrete while tracing."""
    if kind == "array":
        return as_bounded(value)
    if kind == "int":
        return as_bounded_int(value)
    return value


def valid_rows(value: Bounded) -> jax.Array:
    """True for the meaningful entries, shaped to broadcast against the buffer."""
    buffer = value.buffer
    return (jnp.arange(value.capacity) < value.length.value).reshape(
        (value.capacity,) + (1,) * (buffer.ndim - 1)
    )


def with_capacity(buffer: jax.Array, capacity: int) -> jax.Array:
    """``buffer`` padded with zeros, or cut, to ``capacity`` leading entries (callers check what a
    cut loses)."""
    extra = capacity - buffer.shape[0]
    if extra <= 0:
        return buffer[:capacity]
    return jnp.concatenate([buffer, jnp.zeros((extra, *buffer.shape[1:]), buffer.dtype)])
