"""Where a JAX_GPU function's data lives: one device, or a mesh with some inputs split.

A sharded function names its devices and, for some inputs, the axis to split
along. Everything else is replicated. The function lowers to one ``jax.jit``
with ``NamedSharding`` shardings over a one-axis ``Mesh``, and XLA (GSPMD)
inserts the collectives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding
from pytensor.graph.basic import Variable

from gpubackend.devices import DEVICES_ARGUMENT, DeviceSpec, platform_devices, resolve_device

MESH_AXIS = "devices"

ShardSpec = Mapping[Variable | str, int]
DevicesSpec = str | Sequence[DeviceSpec]


def resolve_devices(devices: DevicesSpec) -> list[jax.Device]:
    """``"gpu"`` or ``"cpu"`` for every device of that platform, or a list of device specs."""
    if isinstance(devices, str) and devices in ("gpu", "cpu"):
        found = platform_devices(devices)
        if not found:
            # Raises DeviceNotFoundError with the full message.
            resolve_device(devices, source=DEVICES_ARGUMENT)
        return found
    if isinstance(devices, str) or not isinstance(devices, Sequence):
        raise ValueError(
            f"devices={devices!r}: expected 'gpu', 'cpu' or a list of device names or jax.Devices."
        )
    if not devices:
        raise ValueError(
            "devices=[] names no device: expected 'gpu', 'cpu' or a non-empty list of device "
            "names or jax.Devices (for one device, pass device= instead)."
        )
    resolved = [resolve_device(device, source=DEVICES_ARGUMENT) for device in devices]
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"devices={list(devices)!r} names the same device twice.")
    return resolved


@dataclass(frozen=True)
class Placement:
    """The sharding of every input of one linked function, and of its outputs."""

    input_shardings: tuple[Sharding, ...]
    split_axes: tuple[int | None, ...]
    output_sharding: Sharding | None
    description: str
    platform: str
    """The devices' platform ("cpu", "gpu")."""
    devices: tuple[jax.Device, ...]

    @property
    def on_host_platform(self) -> bool:
        """The devices are the host's: a read back copies nothing, and XLA maps large temporaries
        afresh on every call."""
        return self.platform == "cpu"

    @classmethod
    def on_device(cls, device: jax.Device, n_inputs: int) -> Placement:
        sharding = SingleDeviceSharding(device)
        return cls(
            (sharding,) * n_inputs,
            (None,) * n_inputs,
            sharding,
            str(device),
            device.platform,
            (device,),
        )

    @classmethod
    def on_mesh(
        cls, devices: Sequence[jax.Device], shard: ShardSpec, inputs: Sequence[Variable]
    ) -> Placement:
        axis_by_input = _split_axis_by_input(shard, inputs)
        mesh = Mesh(np.asarray(devices), (MESH_AXIS,))

        def sharding(axis: int | None) -> NamedSharding:
            spec = PartitionSpec() if axis is None else PartitionSpec(*([None] * axis), MESH_AXIS)
            return NamedSharding(mesh, spec)

        split_axes = tuple(axis_by_input.get(position) for position in range(len(inputs)))
        for position, axis in axis_by_input.items():
            static_shape = inputs[position].type.shape
            if static_shape[axis] is not None:
                check_divisible(
                    static_shape,
                    axis,
                    sharding(axis),
                    f"{input_label(inputs[position].name, position)} (static shape)",
                )
        description = f"a mesh of {len(devices)} devices ({', '.join(str(d) for d in devices)})"
        # Outputs keep whatever sharding XLA propagates to them.
        return cls(
            tuple(sharding(axis) for axis in split_axes),
            split_axes,
            None,
            description,
            devices[0].platform,
            tuple(devices),
        )


def _split_axis_by_input(shard: ShardSpec, inputs: Sequence[Variable]) -> dict[int, int]:
    names = [variable.name for variable in inputs]
    axis_by_input = {}
    for key, axis in shard.items():
        positions = [
            i
            for i, variable in enumerate(inputs)
            if variable is key or (isinstance(key, str) and variable.name == key)
        ]
        if not positions:
            known = ", ".join(repr(name) for name in names if name) or "no named inputs"
            raise ValueError(
                f"shard names input {key!r}, but the function "
                f"has no such input (its inputs: {known})."
            )
        if len(positions) > 1:
            raise ValueError(
                f"shard names input {key!r}, which matches "
                "several inputs; pass the variable instead."
            )
        [position] = positions
        axis_by_input[position] = _split_axis(key, axis, getattr(inputs[position].type, "ndim", 0))
    return axis_by_input


def _split_axis(key: object, axis: object, ndim: int) -> int:
    """``shard[key]``, checked: an integer axis of an input with ``ndim`` dimensions."""
    if isinstance(axis, bool) or not isinstance(axis, Integral):
        raise ValueError(
            f"shard[{key!r}] = {axis!r}: expected an integer axis to split the input along, "
            f"got a {type(axis).__name__}."
        )
    if ndim == 0:
        raise ValueError(
            f"shard[{key!r}] = {axis!r}: the input is a scalar (0 dimensions), so it has no axis "
            "to split; leave it out of shard to replicate it."
        )
    if not 0 <= int(axis) < ndim:
        raise ValueError(
            f"shard[{key!r}] = {axis!r}: the input has {ndim} "
            f"dimensions, so the axis must be in 0..{ndim - 1}."
        )
    return int(axis)


def input_label(name: str | None, position: int) -> str:
    return f"input {name!r} (position {position})" if name else f"input at position {position}"


def check_divisible(
    shape: tuple[int, ...], axis: int | None, sharding: Sharding, label: str
) -> None:
    if axis is None:
        return
    n_devices = len(sharding.device_set)
    if shape[axis] % n_devices:
        raise ValueError(
            f"JAX_GPU {label} is split along axis {axis} over {n_devices} devices, "
            f"but that axis has length {shape[axis]}, which {n_devices} does not divide."
        )


def place(host: np.ndarray, sharding: Sharding, may_alias: bool | None = None) -> jax.Array:
    """Upload host data explicitly. Each process fills only the shards it addresses (multi-host
    safe). ``may_alias=False`` copies where JAX could share the host buffer (the CPU)."""
    if sharding.is_fully_addressable:
        return jax.device_put(host, sharding, may_alias=may_alias)
    if may_alias is False:
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index].copy())
    return jax.make_array_from_callback(host.shape, sharding, host.__getitem__)
