"""The JAX_GPU linker: PyTensor's JAX linker, pinned to a device or a mesh, with data kept there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytensor.compile.sharedvalue import SharedVariable
from pytensor.link.basic import Container
from pytensor.link.jax.linker import JAXLinker

from gpubackend.devices import DeviceSpec, check_device_spec, resolve_device
from gpubackend.dispatch.jax.lowering_context import CONTEXT_KEYWORD, LoweringContext
from gpubackend.registration import DispatchName

if TYPE_CHECKING:
    from gpubackend.placement import DevicesSpec, ShardSpec

# jax and the modules built on it (placement, device_inputs) are imported when a
# function is first linked, as PyTensor's own JAXLinker does: `import gpubackend`
# must not load JAX (README, "Importing gpubackend").


class DispatchingJAXLinker(JAXLinker):
    """PyTensor's JAX linker, lowering through one of gpubackend's `JAXDispatch`es instead of the global ``jax_funcify``.

    The dispatcher is named ("gpubackend" or "stock"), not held: it is built on
    PyTensor's JAX dispatch, which loads with the first compile, not with
    ``import gpubackend``.
    """

    def __init__(self, dispatch: DispatchName, **kwargs: Any):
        self.dispatch_name = dispatch
        super().__init__(**kwargs)

    def lowering_context(self) -> LoweringContext:
        """What every lowering of one function is told (a new one per function: it holds that lowering's cache)."""
        return LoweringContext()

    def fgraph_convert(self, fgraph, order, input_storage, storage_map, **kwargs):
        from gpubackend.dispatch.jax.replacements import DISPATCHERS

        # JAXLinker.fgraph_convert copies shared RNG inputs and finds the scalar
        # shape inputs, then lowers with the global registry. Given no node to
        # lower (order=()) it does only the former; the nodes are lowered here.
        super().fgraph_convert(fgraph, order=(), input_storage=input_storage, storage_map=storage_map)
        return DISPATCHERS[self.dispatch_name](
            fgraph,
            order=order,
            input_storage=input_storage,
            storage_map=storage_map,
            **{CONTEXT_KEYWORD: self.lowering_context()},
            **kwargs,
        )


class JAXGPULinker(DispatchingJAXLinker):
    """Link a graph into one ``jax.jit`` computation committed to a device or a mesh.

    As a `JAXLinker` subclass it inherits PyTensor's JAX baking rules for inner
    graphs (the ``rewrite_*_inner_graph`` functions dispatch on the linker
    class). It lowers through `jax_gpu_funcify`: gpubackend's lowerings, and
    the registry's for every other op, whether or not gpubackend's are
    registered globally. What it adds:

    - the device is resolved when a function is linked (``device`` argument,
      else ``$GPUBACKEND_DEVICE``, else ``"gpu"``), with no silent fallback;
      with ``devices``, the function runs over a mesh of those devices, the
      inputs named in ``shard`` split along the given axis and the rest
      replicated (see `gpubackend.placement`);
    - inputs are validated without leaving the device (`DeviceResidentInput`);
    - shared variables are uploaded once and stay resident in the function's
      own copy (`ResidentSharedCell`): their containers keep the host values
      that every other function compiled with them reads;
    - buffers of updated shared variables are donated, so XLA updates in place;
    - outputs are committed to the device;
    - an output whose length is a while-Scan's step count gets it, and a
      run-time check raises the reference's error: the call reads what only
      the data settle in one explicit read (`HostReadingFunction`); a
      while-Scan graph with nothing to read makes none.
    """

    def __init__(
        self,
        device: DeviceSpec | None = None,
        *,
        devices: DevicesSpec | None = None,
        shard: ShardSpec | None = None,
        **kwargs: Any,
    ):
        if device is not None and devices is not None:
            raise ValueError("Pass either device= (one device) or devices= (a mesh), not both.")
        if shard and devices is None:
            raise ValueError("shard= splits inputs over several devices: pass devices= as well.")
        check_device_spec(device)
        self.device_spec = device
        self.devices_spec = devices
        self.shard = dict(shard or {})
        super().__init__("gpubackend", **kwargs)

    def make_all(self, input_storage=None, output_storage=None, storage_map=None):
        from gpubackend.placement import Placement, resolve_devices

        inputs = self.fgraph.inputs
        if self.devices_spec is None:
            self.placement = Placement.on_device(resolve_device(self.device_spec), len(inputs))
        else:
            self.placement = Placement.on_mesh(resolve_devices(self.devices_spec), self.shard, inputs)
        fn, input_containers, output_containers, thunks, nodes = super().make_all(
            input_storage, output_storage, storage_map
        )
        input_containers = [
            self._input_container(position, container) for position, container in enumerate(input_containers)
        ]
        return fn, input_containers, output_containers, thunks, nodes

    def _input_container(self, position: int, container: Container) -> Container:
        from gpubackend.device_inputs import DeviceResidentInput, StaticShapeInput

        variable = self.fgraph.inputs[position]
        if position in self.scalar_shape_inputs:
            container_type = StaticShapeInput(variable.type)
        elif hasattr(variable.type, "dtype") and not isinstance(variable, SharedVariable):
            container_type = DeviceResidentInput(
                variable.type,
                variable.name,
                position,
                self.placement.input_shardings[position],
                self.placement.split_axes[position],
                self.placement.description,
            )
        else:
            return container
        return Container(container_type, container.storage, name=variable.name)

    def lowering_context(self) -> LoweringContext:
        # The jitted graph serves PyTensor's calls only: JAX never differentiates it.
        return LoweringContext(reads_on_host=True, jax_differentiable=False, split_ladder=self.placement.platform == "cpu")

    def create_thunk_inputs(self, storage_map):
        from gpubackend.device_inputs import ResidentSharedCell
        from gpubackend.placement import input_label

        thunk_inputs = super().create_thunk_inputs(storage_map)
        placement = self.placement
        return [
            ResidentSharedCell(
                cell,
                placement.input_shardings[position],
                placement.split_axes[position],
                input_label(variable.name, position),
            )
            if self._is_shared_array(variable)
            else cell
            for position, (variable, cell) in enumerate(zip(self.fgraph.inputs, thunk_inputs, strict=True))
        ]

    @staticmethod
    def _is_shared_array(variable) -> bool:
        return isinstance(variable, SharedVariable) and hasattr(variable.type, "dtype")

    def jit_compile(self, fn):
        import jax

        from gpubackend.dispatch.jax.while_scan.host import HostReadingFunction, SplitLadder

        # The top graph is a `HostReadingGraph`: ``fn(step_counts, *inputs)``, step counts static.
        # A graph specialised on step counts may run twice on the same inputs: it donates nothing.
        updated = set(self.fgraph.update_mapping.values()) - set(self.scalar_shape_inputs)
        static = tuple(position + 1 for position in self.scalar_shape_inputs)
        donated = () if fn.n_specialised else tuple(sorted(position + 1 for position in updated))

        def jitted(graph_fn, donate_argnums=()):
            return jax.jit(graph_fn, static_argnums=(0, *static), donate_argnums=donate_argnums, out_shardings=self.placement.output_sharding)

        if fn.continuation is None:
            return HostReadingFunction(jitted(fn.fn, donated), fn)
        # The continuation takes (outputs, reads, overflow, *inputs) and donates what the graph would.
        higher = jax.jit(
            fn.continuation,
            static_argnums=tuple(position + 2 for position in static),
            donate_argnums=tuple(position + 2 for position in donated),
            out_shardings=self.placement.output_sharding,
        )
        return HostReadingFunction(SplitLadder(jitted(fn.fn), jitted(fn.fn, donated), higher), fn)

    def __repr__(self) -> str:
        if self.devices_spec is not None:
            return f"{type(self).__name__}(devices={self.devices_spec!r}, shard={self.shard!r})"
        return f"{type(self).__name__}(device={self.device_spec!r})"
