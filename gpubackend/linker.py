"""The JAX_GPU linker: PyTensor's JAX linker, pinned to a device or a mesh, with data kept there."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal, get_args

from pytensor.compile.sharedvalue import SharedVariable
from pytensor.link.basic import Container
from pytensor.link.jax.linker import JAXLinker
from pytensor.tensor.random.type import RandomType

from gpubackend.devices import DeviceSpec, check_device_spec, device_name, resolve_device
from gpubackend.dispatch.jax.lowering_context import CONTEXT_KEYWORD, LoweringContext
from gpubackend.registration import Lowerings, using_lowerings

if TYPE_CHECKING:
    from gpubackend.host_reads import LoweredGraph
    from gpubackend.placement import DevicesSpec, Placement, ShardSpec

OutputKind = Literal["device", "numpy"]
"""What a JAX_GPU call returns: ``jax.Array``s on the device, or numpy (README, "Where data lives
under JAX_GPU")."""
OUTPUT_KINDS: tuple[str, ...] = get_args(OutputKind)
MatmulPrecision = Literal["highest", "high", "default"]
"""JAX's matrix-product precisions (``jax.default_matmul_precision``): "highest" computes float32
products in float32, as the reference does; "default" lets XLA use TensorFloat-32 on GPUs that
have it (about 3e-4 relative error in a float32 product of 256 terms on an H200)."""
MATMUL_PRECISIONS: tuple[str, ...] = get_args(MatmulPrecision)

# jax and the modules built on it (placement, device_inputs) are imported when a
# function is first linked, as PyTensor's own JAXLinker does: `import gpubackend`
# must not load JAX (README, "Importing gpubackend").


class DispatchingJAXLinker(JAXLinker):
    """PyTensor's JAX linker, lowering the op types gpubackend replaces with the lowerings it names.

    ``lowerings`` is "gpubackend" (JAX_GPU) or "stock" (the conformance suite's
    stock baseline), selected for the whole of a function's lowering, inner
    graphs included, whatever ``$GPUBACKEND_REGISTER`` makes the default.
    """

    def __init__(self, lowerings: Lowerings, **kwargs: Any):
        self.lowerings = lowerings
        super().__init__(**kwargs)

    def lowering_context(self) -> LoweringContext:
        """What every lowering of one function is told (one per function: it holds its cache)."""
        return LoweringContext()

    def fgraph_convert(self, fgraph, **kwargs):
        """PyTensor's conversion, with this linker's lowerings selected and its context passed down.

        ``JAXLinker.fgraph_convert`` copies shared RNG inputs, finds the scalar
        shape inputs, then calls the global ``jax_funcify`` with the keyword
        arguments it was given: the context travels as one of them, and the
        selection holds while it runs (the registered lowerings choose when they
        are called, which is then). The override would go if PyTensor's
        ``JAXLinker`` let a subclass name the keyword arguments of its lowering
        and wrap it (for example a ``funcify_kwargs()`` method and a
        ``lowering_scope()`` context manager that ``fgraph_convert`` enters).
        """
        context = self.lowering_context()
        with using_lowerings(self.lowerings):
            return super().fgraph_convert(fgraph, **kwargs, **{CONTEXT_KEYWORD: context})


_LINK_STATE = ("placement", "shared_generator_cells", "inner_index_checks")
"""What `JAXGPULinker` makes when it links a graph (`make_all`, `fgraph_convert`), None until then
and reset to None when it is pickled: linking again makes it anew."""


def _linked[T](value: T | None) -> T:
    """A member of `_LINK_STATE`, which linking sets before anything reads it."""
    if value is None:
        raise RuntimeError("JAXGPULinker's link state was read before make_all linked a graph.")
    return value


class JAXGPULinker(DispatchingJAXLinker):
    """Link a graph into one ``jax.jit`` computation committed to a device or a mesh.

    As a `JAXLinker` subclass it inherits PyTensor's JAX baking rules for inner
    graphs (the ``rewrite_*_inner_graph`` functions dispatch on the linker
    class). It lowers with gpubackend's lowerings, and the registry's for every
    other op, whatever ``$GPUBACKEND_REGISTER`` says. What it adds:

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
    - outputs are committed to the device, and with ``outputs="numpy"`` returned
      as numpy, copied to the host once per call (updates stay on the device);
    - an output whose length is a while-Scan's step count gets it, and a
      run-time check raises the reference's error: the call reads what only
      the data settle in one explicit read (`gpubackend.host_reads`); a
      while-Scan graph with nothing to read makes none. Its lowering says how:
      the graph lowers to a `LoweredGraph` (`fgraph_convert`), which
      `jit_compile` compiles.
    """

    def __init__(
        self,
        device: DeviceSpec | None = None,
        *,
        devices: DevicesSpec | None = None,
        shard: ShardSpec | None = None,
        outputs: OutputKind = "device",
        matmul_precision: MatmulPrecision = "highest",
        **kwargs: Any,
    ):
        if outputs not in OUTPUT_KINDS:
            raise ValueError(
                f"outputs={outputs!r}: expected one of {', '.join(map(repr, OUTPUT_KINDS))}."
            )
        if matmul_precision not in MATMUL_PRECISIONS:
            raise ValueError(
                f"matmul_precision={matmul_precision!r}: expected one of "
                f"{', '.join(map(repr, MATMUL_PRECISIONS))}."
            )
        if device is not None and devices is not None:
            raise ValueError("Pass either device= (one device) or devices= (a mesh), not both.")
        if shard and devices is None:
            raise ValueError("shard= splits inputs over several devices: pass devices= as well.")
        check_device_spec(device)
        self.device_spec = device
        self.devices_spec = devices
        self.shard = dict(shard or {})
        self.outputs = outputs
        self.matmul_precision = matmul_precision
        # Made when a graph is linked (`_LINK_STATE`).
        self.placement: Placement | None = None
        """The device or mesh the graph runs on, resolved by `make_all`."""
        self.shared_generator_cells: dict[int, list] | None = None
        """The storage cell of each shared random generator input, by position
        (`fgraph_convert`)."""
        self.inner_index_checks: bool | None = None
        """Whether inner graphs check run-time indices (`fgraph_convert`): their lowering emits the
        checks, and `jit_compile` reads them back."""
        super().__init__("gpubackend", **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        """What a pickled function needs to link again (PyTensor pickles a ``Function`` with its
        maker and links anew when it is loaded, as PyMC's multiprocess sampling does): devices
        by name, since a ``jax.Device`` does not pickle, and none of what linking made."""
        state = self.__dict__ | dict.fromkeys(_LINK_STATE)
        if self.device_spec is not None:
            state["device_spec"] = device_name(self.device_spec)
        if self.devices_spec is not None and not isinstance(self.devices_spec, str):
            state["devices_spec"] = [device_name(device) for device in self.devices_spec]
        return state

    def make_all(self, input_storage=None, output_storage=None, storage_map=None):
        from gpubackend.placement import Placement, resolve_devices

        inputs = self.fgraph.inputs
        if self.devices_spec is None:
            self.placement = Placement.on_device(resolve_device(self.device_spec), len(inputs))
        else:
            self.placement = Placement.on_mesh(
                resolve_devices(self.devices_spec), self.shard, inputs
            )
        fn, input_containers, output_containers, thunks, nodes = super().make_all(
            input_storage, output_storage, storage_map
        )
        input_containers = [
            self._input_container(position, container)
            for position, container in enumerate(input_containers)
        ]
        return fn, input_containers, output_containers, thunks, nodes

    def create_jitable_thunk(self, compute_map, order, input_storage, output_storage, storage_map):
        """PyTensor's one thunk for the whole graph, doing only what a call needs.

        As ``JITLinker.create_jitable_thunk``, but the thunk passes the input cells'
        values as a list (no generator) and returns the outputs as a list, which
        ``Function`` takes as they are instead of reading them back from the
        output storage (still written, for whoever reads it); its
        ``run_on_leading_inputs`` runs it on values given for the explicit
        inputs. A graph without outputs keeps PyTensor's thunk.
        """
        if not self.fgraph.outputs:
            return super().create_jitable_thunk(
                compute_map, order, input_storage, output_storage, storage_map
            )
        from pytensor.link.utils import raise_with_op

        fgraph = self.fgraph
        output_nodes = [o.owner for o in fgraph.outputs if o.owner is not None][:1]
        converted = self.fgraph_convert(
            fgraph,
            order=order,
            input_storage=input_storage,
            output_storage=output_storage,
            storage_map=storage_map,
        )
        thunk_inputs = self.create_thunk_inputs(storage_map)
        thunk_outputs = [storage_map[variable] for variable in fgraph.outputs]
        fgraph_jit = self.jit_compile(converted)

        def run(values: list) -> list:
            try:
                outputs = list(fgraph_jit(*values))
            except Exception:  # re-raised with the node's notes, as PyTensor's thunk does
                if not output_nodes:
                    raise
                raise_with_op(fgraph, output_nodes[0], thunk)
            for cell, value in zip(thunk_outputs, outputs):  # noqa: B905  (the hot path)
                cell[0] = value
            return outputs

        def thunk():
            return run([cell[0] for cell in thunk_inputs])

        def run_on_leading_inputs(n_leading: int):
            """The thunk, given the values of the first ``n_leading`` inputs instead of reading
            their cells, which every call shares: `JAXGPUFunction`'s calls from several threads
            each run on their own inputs."""
            cells = thunk_inputs[n_leading:]

            def run_on(leading: list) -> list:
                return run(leading + [cell[0] for cell in cells])

            return run_on

        thunk.run_on_leading_inputs = run_on_leading_inputs  # type: ignore[attr-defined]
        thunk.inputs = thunk_inputs  # type: ignore[attr-defined]
        thunk.outputs = thunk_outputs  # type: ignore[attr-defined]
        thunk.lazy = False  # type: ignore[attr-defined]
        return [thunk], output_nodes, fgraph_jit

    def _input_container(self, position: int, container: Container) -> Container:
        from gpubackend.device_inputs import DeviceResidentInput, GeneratorInput, StaticShapeInput

        variable = self.fgraph.inputs[position]
        is_shared = isinstance(variable, SharedVariable)
        container_type: StaticShapeInput | DeviceResidentInput | GeneratorInput
        if position in self.scalar_shape_inputs and not is_shared:
            container_type = StaticShapeInput(variable.type)
        elif isinstance(variable.type, RandomType) and not is_shared:
            container_type = GeneratorInput(variable.type)
        elif hasattr(variable.type, "dtype") and not is_shared:
            placement = _linked(self.placement)
            container_type = DeviceResidentInput(
                variable.type,
                variable.name,
                position,
                placement.input_shardings[position],
                placement.split_axes[position],
                placement.description,
            )
        else:
            return container
        return Container(container_type, container.storage, name=variable.name)

    def lowering_context(self) -> LoweringContext:
        # The graph lowers to its function and how the call reads back (`fgraph_convert`). The
        # jitted graph serves PyTensor's calls only: JAX never differentiates it.
        return LoweringContext(
            reads_back=True,
            jax_differentiable=False,
            inner_index_checks=_linked(self.inner_index_checks),
        )

    def fgraph_convert(self, fgraph, **kwargs) -> LoweredGraph:
        """The graph's `LoweredGraph`: PyTensor's conversion returns what ``jax_funcify`` gives the
        graph, which under this linker's context (`LoweringContext.reads_back`) is the graph's
        function with how to call it (`dispatch.jax.fgraph.lowered_graph`)."""
        from gpubackend.dispatch.jax.index_checks import inner_graphs_index

        self.inner_index_checks = inner_graphs_index(fgraph.toposort())
        # PyTensor's conversion swaps each shared generator for a copy, dropping the shared
        # variable's own storage cell: kept here, by position, for `FollowedGeneratorCell`.
        storage_map = kwargs["storage_map"]
        self.shared_generator_cells = {
            position: storage_map[variable]
            for position, variable in enumerate(fgraph.inputs)
            if isinstance(variable, SharedVariable) and isinstance(variable.type, RandomType)
        }
        return super().fgraph_convert(fgraph, **kwargs)

    def create_thunk_inputs(self, storage_map):
        from gpubackend.device_inputs import (
            FollowedGeneratorCell,
            ResidentSharedCell,
            StaticSharedCell,
        )
        from gpubackend.placement import input_label

        thunk_inputs = super().create_thunk_inputs(storage_map)
        placement = _linked(self.placement)
        generator_cells = _linked(self.shared_generator_cells)

        def cell_for(position: int, variable, cell: list):
            if position in generator_cells:
                return FollowedGeneratorCell(cell, generator_cells[position])
            if not self._is_shared_array(variable):
                return cell
            if position in self.scalar_shape_inputs:
                return StaticSharedCell(cell)
            return ResidentSharedCell(
                cell,
                placement.input_shardings[position],
                placement.split_axes[position],
                input_label(variable.name, position),
            )

        return [
            cell_for(position, variable, cell)
            for position, (variable, cell) in enumerate(
                zip(self.fgraph.inputs, thunk_inputs, strict=True)
            )
        ]

    @staticmethod
    def _is_shared_array(variable) -> bool:
        return isinstance(variable, SharedVariable) and hasattr(variable.type, "dtype")

    def jit_compile(self, lowered: LoweredGraph):
        import jax

        from gpubackend.dispatch.jax.index_checks import checkified
        from gpubackend.host_reads import raise_checked

        placement = _linked(self.placement)
        input_shardings = placement.input_shardings
        inner_index_checks = _linked(self.inner_index_checks)
        # One wrapper per graph function: jit caches compiled code per function object, and the
        # two first rungs of a while-Scan ladder jit the same graph (see `_jit_graph`).
        at_precision = functools.cache(self._at_matmul_precision)
        functionalized = functools.cache(checkified)

        def jitted(
            graph_fn,
            static_argnums: tuple[int, ...],
            donate_argnums: tuple[int, ...] = (),
            *,
            leading: int = 0,
        ):
            # Host (numpy) inputs reach the executable through jit's own dispatch, committed to
            # the inputs' shardings (`DeviceResidentInput` leaves them on the host). ``leading``
            # counts the (static) arguments before the graph's inputs.
            in_shardings = tuple(
                sharding
                for position, sharding in enumerate(input_shardings)
                if position + leading not in static_argnums
            )
            prepared = at_precision(graph_fn)
            if not inner_index_checks:
                return jax.jit(
                    prepared,
                    static_argnums=static_argnums,
                    donate_argnums=donate_argnums,
                    out_shardings=placement.output_sharding,
                    in_shardings=in_shardings,
                )
            # Nothing donated: where a check fails the reference applies no update, so the shared
            # variables keep their buffers.
            return raise_checked(
                jax.jit(
                    functionalized(prepared, static_argnums),
                    static_argnums=static_argnums,
                    out_shardings=(None, placement.output_sharding),
                    in_shardings=in_shardings,
                ),
                on_host_platform=placement.on_host_platform,
            )

        return self._outputs_to_host(self._jit_graph(lowered, jitted))

    def _at_matmul_precision(self, graph_fn):
        """``graph_fn`` traced at this linker's matrix-product precision, whatever the caller's
        context (jit reads JAX's default when it traces, at the first call)."""
        import jax

        precision = self.matmul_precision
        if precision == "default":
            return graph_fn

        def traced_at_precision(*args):
            with jax.default_matmul_precision(precision):
                return graph_fn(*args)

        return traced_at_precision

    def _jit_graph(self, lowered: LoweredGraph, jitted):
        from gpubackend.host_reads import (
            HostReadingFunction,
            SplitLadder,
            fits_budget,
            memory_budget,
        )

        shared_updates = set(self.fgraph.update_mapping.values())
        updated = tuple(sorted(shared_updates - set(self.scalar_shape_inputs)))
        fn, plan = lowered
        if plan is None:
            # The graph's plain function: nothing to read back.
            return jitted(fn, self.scalar_shape_inputs, updated)
        # ``fn(step_counts, *inputs)``, step counts (or the rung, `HostReadPlan.climbs`) static.
        # It donates nothing where a call may need its inputs after the computation ran: a graph
        # specialised on step counts, or one that climbs rungs, may run twice on them, and where
        # a check read back fails the reference applies no update, so the shared variables must
        # keep their buffers.
        static = (0, *_shifted(self.scalar_shape_inputs, 1))
        donated = () if plan.n_specialised or plan.checks or plan.climbs else _shifted(updated, 1)
        on_host_platform = _linked(self.placement).on_host_platform
        if plan.continuation is None:
            return HostReadingFunction(
                jitted(fn, static, donated, leading=1), plan, on_host_platform=on_host_platform
            )
        # The continuation's rung is static as the step counts are; a rung may be followed by
        # another, so it donates nothing.
        higher = jitted(plan.continuation, static, leading=1)
        lower = jitted(fn, static, leading=1)
        if on_host_platform:
            # XLA maps large temporaries afresh on every call, and the flag is host memory: always
            # split.
            ladder = SplitLadder(
                lower, jitted(fn, static, donated, leading=1), higher, on_host_platform=True
            )
        else:
            # Reading the flag is a sync: split only where one computation's temporaries, which
            # XLA sizes for the bound, exceed the budget.
            whole = jitted(plan.whole, static, donated, leading=1)
            budget = memory_budget(_linked(self.placement).devices)
            ladder = SplitLadder(
                lower, whole, higher, on_host_platform=False, fits=fits_budget(whole, budget)
            )
        return HostReadingFunction(ladder, plan, on_host_platform=on_host_platform)

    def _outputs_to_host(self, call):
        """With ``outputs="numpy"``, the call returns numpy: one device-to-host copy per output.

        The outputs that update shared variables stay on the device (they are the
        variables' next values, donated by the next call). On a GPU every copy is
        started before the first is waited for, so the outputs travel together.
        """
        if self.outputs == "device":
            return call
        import numpy as np

        updates = frozenset(self.fgraph.update_mapping)
        returned = tuple(
            position for position in range(len(self.fgraph.outputs)) if position not in updates
        )
        if not returned:
            return call
        # On the host platform np.asarray is a view of the buffer: nothing to start early.
        start_copies = _linked(self.placement).platform != "cpu" and len(returned) > 1

        if not updates and not start_copies:

            def to_host(*args):
                return [np.asarray(output) for output in call(*args)]

            to_host.__wrapped__ = call  # type: ignore[attr-defined]
            return to_host

        def to_host_keeping_updates(*args):
            outputs = list(call(*args))
            if start_copies:
                for position in returned:
                    outputs[position].copy_to_host_async()
            for position in returned:
                outputs[position] = np.asarray(outputs[position])
            return outputs

        to_host_keeping_updates.__wrapped__ = call  # type: ignore[attr-defined]
        return to_host_keeping_updates

    def __repr__(self) -> str:
        outputs = "" if self.outputs == "device" else f", outputs={self.outputs!r}"
        if self.devices_spec is not None:
            return (
                f"{type(self).__name__}(devices={self.devices_spec!r}, "
                f"shard={self.shard!r}{outputs})"
            )
        return f"{type(self).__name__}(device={self.device_spec!r}{outputs})"


def _shifted(positions: tuple[int, ...], by: int) -> tuple[int, ...]:
    return tuple(position + by for position in positions)
