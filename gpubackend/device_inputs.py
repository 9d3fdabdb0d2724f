"""Input validation that leaves data on the target device.

PyTensor's ``Function`` passes every argument through its container's
``type.filter``. ``TensorType.filter`` turns a ``jax.Array`` into numpy, which
costs a device→host→device round trip per call. The JAX_GPU linker gives its
input containers the filters below instead: they check what PyTensor checks,
take a ``jax.Array`` on the target device as it is, and leave host data on the
host, checked: the function's ``jax.jit`` commits it to its device(s) through
its ``in_shardings``, in jit's own C++ dispatch, which is far cheaper than a
Python ``device_put`` per input (README, "Where data lives under JAX_GPU").
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Sharding, SingleDeviceSharding
from pytensor.graph.type import Type

from gpubackend.errors import InputDeviceError
from gpubackend.placement import check_divisible, input_label, place

_DLPACK_CPU = 1
_DLPACK_CUDA = 2


def _as_variable_type(variable_type: Type) -> Type:
    """What a pickled `DeviceResidentInput` loads as: its variable's type."""
    return variable_type


class DeviceResidentInput:
    """A container type that filters one input onto its device, or onto its devices' mesh.

    Policy for arrays already on a device: a ``jax.Array`` (or a DLPack
    producer such as CuPy or torch) on the target device is used as is, with no
    copy. One on any other device is rejected with `InputDeviceError`, because
    moving it would be exactly the hidden transfer this backend exists to
    avoid; ``jax.device_put(x, fn_device)`` moves it on purpose. Host data
    (numpy, Python scalars, CPU DLPack producers) is validated by PyTensor's own
    type and returned as numpy: the function's ``jax.jit`` uploads it, committed
    through its ``in_shardings``. A numpy array that already has the input's
    dtype, number of dimensions and static shape is returned after those three
    checks alone (the call's hot path); anything else goes through
    ``TensorType.filter``, with its casting rules and messages. Only where the
    sharding spans devices of other processes, which jit cannot fill from a
    global numpy array, is host data uploaded here (`place`), shard by shard.
    """

    def __init__(
        self,
        variable_type: Type,
        name: str | None,
        position: int,
        sharding: Sharding,
        split_axis: int | None,
        placement_description: str,
    ):
        self.variable_type = variable_type
        self.label = input_label(name, position)
        self.sharding = sharding
        self.split_axis = split_axis
        self.placement_description = placement_description
        self.single_device = (
            next(iter(sharding.device_set)) if isinstance(sharding, SingleDeviceSharding) else None
        )
        self.dtype = np.dtype(variable_type.dtype)
        self.ndim = getattr(variable_type, "ndim", 0)
        self.static_shape = tuple(getattr(variable_type, "shape", ()))
        self.static_dims = tuple(
            (axis, length) for axis, length in enumerate(self.static_shape) if length is not None
        )
        # Whether jit can upload this input's host data itself (see `filter`).
        self.jit_uploads = sharding.is_fully_addressable
        # Whether a numpy array of the right dtype, ndim and static shape is the final value.
        self.host_as_is = self.jit_uploads and split_axis is None

    def __reduce__(self) -> tuple:
        # A sharding names devices, which do not pickle. A loaded function links anew and places
        # its inputs again (PyTensor keeps only the pickled containers' cells): the variable's own
        # type stands in.
        return _as_variable_type, (self.variable_type,)

    def filter(
        self, data: Any, strict: bool = False, allow_downcast: bool | None = None
    ) -> jax.Array | np.ndarray:
        if (
            type(data) is np.ndarray
            and data.dtype == self.dtype
            and data.ndim == self.ndim
            and self.host_as_is
        ):
            shape = data.shape
            for axis, length in self.static_dims:
                if shape[axis] != length:
                    break
            else:
                return data
        if isinstance(data, jax.Array):
            return self._checked_resident(data)
        if not isinstance(data, np.ndarray) and hasattr(data, "__dlpack_device__"):
            return self._from_dlpack(data, strict, allow_downcast)
        host = self.variable_type.filter(data, strict=strict, allow_downcast=allow_downcast)
        check_divisible(np.shape(host), self.split_axis, self.sharding, self.label)
        if self.jit_uploads:
            return host
        return place(host, self.sharding)

    def is_valid_value(self, data: Any) -> bool:
        try:
            self._checked_resident(data)
        except (TypeError, InputDeviceError):
            return False
        return True

    def _checked_resident(self, data: jax.Array) -> jax.Array:
        if data.sharding != self.sharding and not data.sharding.is_equivalent_to(
            self.sharding, data.ndim
        ):
            raise InputDeviceError(
                f"JAX_GPU {self.label} is on {_where(data)} "
                f"({data.sharding}), but the function expects "
                f"it on {self.placement_description} ({self.sharding}). Move it on purpose with "
                "jax.device_put(x, sharding) or pass host (numpy) data; gpubackend does not copy "
                "between devices implicitly."
            )
        if data.dtype != self.dtype:
            raise TypeError(
                f"JAX_GPU {self.label} expected dtype {self.dtype}, got a jax.Array of dtype "
                f"{data.dtype}. Cast it on the device with x.astype({str(self.dtype)!r})."
            )
        if data.ndim != self.ndim:
            raise TypeError(
                f"JAX_GPU {self.label} expected {self.ndim} dimensions, got shape {data.shape}."
            )
        for axis, length in self.static_dims:
            if data.shape[axis] != length:
                raise TypeError(
                    f"JAX_GPU {self.label} expected static shape "
                    f"{self.static_shape}, got {data.shape}."
                )
        return data

    def _from_dlpack(
        self, data: Any, strict: bool, allow_downcast: bool | None
    ) -> jax.Array | np.ndarray:
        device_type, device_ordinal = data.__dlpack_device__()
        if device_type == _DLPACK_CPU:
            return self.filter(np.from_dlpack(data), strict, allow_downcast)
        device = self.single_device
        if (
            device_type == _DLPACK_CUDA
            and device is not None
            and device.platform == "gpu"
            and device_ordinal == device.local_hardware_id
        ):
            return self._checked_resident(jax.dlpack.from_dlpack(data))
        raise InputDeviceError(
            f"JAX_GPU {self.label} is a {type(data).__name__} on DLPack device "
            f"(type {device_type}, ordinal {device_ordinal}), but the function expects it on "
            f"{self.placement_description}. Move it there first."
        )

    def __str__(self) -> str:
        return f"{self.variable_type} on {self.placement_description}"


class StaticShapeInput:
    """A container type for inputs JAX needs as Python ints (static shape arguments)."""

    def __init__(self, variable_type: Type):
        self.variable_type = variable_type

    def filter(self, data: Any, strict: bool = False, allow_downcast: bool | None = None) -> int:
        return int(self.variable_type.filter(data, strict=strict, allow_downcast=allow_downcast))

    def is_valid_value(self, data: Any) -> bool:
        return isinstance(data, int)

    def __str__(self) -> str:
        return f"{self.variable_type} (static)"


class GeneratorInput:
    """A container type for a random generator given as an explicit input: a numpy ``Generator``
    is converted to JAX's state on every call (``jax_typify``, as PyTensor's JAX linker converts a
    shared generator once), which leaves the caller's generator as it was, as the reference does.
    ``jax.jit`` cannot take the ``Generator`` itself."""

    def __init__(self, variable_type: Type):
        self.variable_type = variable_type

    def filter(self, data: Any, strict: bool = False, allow_downcast: bool | None = None) -> dict:
        from pytensor.link.jax.dispatch import jax_typify

        return jax_typify(
            self.variable_type.filter(data, strict=strict, allow_downcast=allow_downcast)
        )

    def is_valid_value(self, data: Any) -> bool:
        return isinstance(data, dict) and "jax_state" in data

    def __str__(self) -> str:
        return f"{self.variable_type} (converted to JAX's state)"


class StaticSharedCell:
    """A shared integer that JAX needs as a Python int (a length, such as a PyMC dim's), read
    through the variable's own storage cell on every call: ``jax.jit`` keys its cache on it."""

    __slots__ = ("cell",)

    def __init__(self, cell: list):
        self.cell = cell

    def __getitem__(self, index: int) -> int:
        return int(self.cell[index])


_NO_VALUE = object()


class ResidentSharedCell:
    """One JAX_GPU function's device copy of a shared variable, read through that variable's own
    storage cell.

    The shared variable's container belongs to the user and to every function
    compiled with it (NUMBA, C, FAST_COMPILE, stock JAX, JAX_GPU on another
    device), so the upload is kept here, not written back there: the container
    keeps the host value everyone can read.

    What stays resident is what cannot change behind this function's back: a
    ``jax.Array`` (immutable; what a JAX update leaves) or a read-only host
    array is used as it is, or copied once to this function's devices, keyed
    on its identity. A writeable host array is uploaded on every call: NUMBA
    and C updates, and a user's ``v += 5`` on the array ``get_value(borrow=True)``
    gave, write it in place, keeping its identity, and nothing tells this
    function. Uploads are of copies, never of the array itself: on the CPU JAX
    could otherwise share the buffer, which JAX assumes immutable and others
    write. Where this process addresses the whole sharding, the copy is a
    private numpy one that jit uploads with the call's other host inputs.

    An updated shared variable gets the function's output, a ``jax.Array`` on
    this function's device(s), written into its container by ``Function``, as
    stock ``mode="JAX"`` leaves it: the next call passes it through without a
    copy and donates it, and ``get_value()`` returns it. Writing a host copy
    back instead would let NUMBA and C functions read an updated value, but at
    the price of a device-to-host copy and a host sync on every call, which
    this backend exists to avoid; the device array defers that copy to whoever
    reads it (``np.asarray``, Python ``perform`` ops, JAX functions, NUMBA
    through a host copy); C code fails on it exactly as after a stock JAX
    update (``shared.set_value(np.asarray(shared.get_value()))`` brings it back
    on purpose).
    """

    __slots__ = ("cell", "device_copy", "jit_uploads", "label", "sharding", "split_axis")

    def __init__(self, cell: list, sharding: Sharding, split_axis: int | None, label: str):
        self.cell = cell
        self.sharding = sharding
        self.split_axis = split_axis
        self.label = label
        # jit fills a sharding this process addresses whole from a host array, in its C++ dispatch.
        self.jit_uploads = sharding.is_fully_addressable
        # (source, device copy), replaced as one object so that concurrent calls
        # never pair a value with another's copy. Holding the source keeps its
        # identity from being reused by a new value.
        self.device_copy: tuple[Any, jax.Array | None] = (_NO_VALUE, None)

    def __getitem__(self, index: int) -> jax.Array | np.ndarray:
        value = self.cell[index]
        if isinstance(value, np.ndarray) and value.flags.writeable:
            check_divisible(np.shape(value), self.split_axis, self.sharding, self.label)
            if self.jit_uploads:
                # A private copy, uploaded by jit with the call's other host inputs, not by a Python
                # device_put (about 25 µs each): no one else holds it, so a buffer JAX shares with
                # it on the CPU is never written.
                return value.copy()
            return place(value, self.sharding, may_alias=False)
        source, resident = self.device_copy
        # A copy this function donated in a call that failed before its update
        # was written back is uploaded again.
        if value is not source or resident is None or resident.is_deleted():
            resident = self._on_device(value)
            self.device_copy = (value, resident)
        return resident

    def _on_device(self, value: Any) -> jax.Array:
        if isinstance(value, jax.Array) and value.sharding == self.sharding:
            return value
        check_divisible(np.shape(value), self.split_axis, self.sharding, self.label)
        if isinstance(value, jax.Array):
            return jax.device_put(value, self.sharding)
        return place(np.asarray(value), self.sharding, may_alias=False)


class FollowedGeneratorCell:
    """One JAX_GPU function's generator state, following the shared generator's own cell.

    PyTensor's JAX linker gives each function a copy of a shared numpy
    ``Generator``, converted once to JAX's state (``jax_typify``), so that its
    draws never write a JAX state into a container that NUMBA and C functions
    read. The copy alone would never see a ``set_value`` on the shared variable:
    the function would go on drawing from where it was, where NUMBA, C and
    FAST_COMPILE restart from the new generator. This cell reads the shared
    variable's own cell on every call and, when it holds another ``Generator``
    than the one last converted, converts that one; the function's updates
    advance its own state (``cell``) in between.
    """

    __slots__ = ("cell", "converted", "shared_cell")

    def __init__(self, cell: list, shared_cell: list):
        self.cell = cell
        self.shared_cell = shared_cell
        # The Generator the function's state was converted from, at link time.
        self.converted = shared_cell[0]

    def __getitem__(self, index: int) -> Any:
        shared = self.shared_cell[index]
        if shared is not self.converted and isinstance(shared, np.random.Generator):
            from pytensor.link.jax.dispatch import jax_typify

            self.cell[index] = jax_typify(shared)
            self.converted = shared
        return self.cell[index]


def _where(data: jax.Array) -> str:
    return ", ".join(sorted(str(d) for d in data.devices()))
