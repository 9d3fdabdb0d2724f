"""The compiled function that JAX_GPU's own modes make: PyTensor's ``Function`` with a lean call.

``Mode.function_maker`` is PyTensor's hook for the class that builds a
compiled function (``DebugMode`` uses it); the JAX_GPU modes name
`JAXGPUFunctionMaker`, whose functions are `JAXGPUFunction`s. A mode rebuilt
from the linker alone (PyMC's ``compile`` makes ``Mode(linker=mode.linker,
...)``) makes PyTensor's own ``Function``, which runs the same linker and checks.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from pytensor.compile.executor import Function, _pickle_Function
from pytensor.compile.maker import FunctionMaker
from pytensor.link.basic import Container

_update_locks: weakref.WeakKeyDictionary[Container, threading.Lock] = weakref.WeakKeyDictionary()
"""One lock per shared variable (its own ``Container``), held by every JAX_GPU call that updates it:
the functions compiled with the variable, and their copies, update its storage cell."""
_update_locks_guard = threading.Lock()


def _update_lock(container: Container) -> threading.Lock:
    with _update_locks_guard:
        return _update_locks.setdefault(container, threading.Lock())


class _AllLocks:
    """Several update locks held together, taken in one global order (their ids) so that two
    functions updating the same variables never wait on each other's."""

    __slots__ = ("locks",)

    def __init__(self, locks: list[threading.Lock]):
        self.locks = sorted(locks, key=id)

    def __enter__(self) -> None:
        for lock in self.locks:
            lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        for lock in reversed(self.locks):
            lock.release()


class JAXGPUFunction(Function):
    """A ``Function`` whose positional call does only what a JAX_GPU call needs.

    A call with exactly the function's explicit inputs, positionally, passes each
    through its container's filter (the JAX_GPU checks, with the note PyTensor
    adds naming the argument) and runs the linker's thunk, as ``Function``
    does, without its bookkeeping for keyword arguments, defaults, aliasing and
    counting: every explicit input is required and comes before the shared
    variables, and no two may alias (decided when the function is made). Any
    other call (keyword arguments, a missing or extra argument, ``trust_input``,
    profiling, inputs with defaults or borrowed inputs that may alias) is
    ``Function.__call__``'s.

    Threads: the positional call passes the inputs to the computation as values,
    not through the input containers that every call of the function shares, so
    calls from several threads at once each get their own inputs' results. A
    function that updates shared variables holds, for the whole call (any
    call), the lock of each variable it updates (`_update_lock`): calls that
    update the same variable, of this function, its copies or any other
    JAX_GPU function, run one at a time, so every update lands, as in a
    sequence of calls. A function without updates takes no lock.
    """

    __slots__ = ("_direct", "_serialised")

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        containers = self.input_storage
        explicit = [container for container in containers if not container.implicit]
        direct = (
            not self._potential_aliased_input_groups
            and containers[: len(explicit)] == explicit
            and all(container.required for container in explicit)
        )
        # The explicit inputs' filters, and the linker's thunk run on their values
        # (`JAXGPULinker.create_jitable_thunk`).
        run_on = getattr(self.vm, "run_on_leading_inputs", None)
        self._direct: tuple[tuple, Callable[[list], list]] | None = (
            (
                tuple((container, container.type.filter) for container in explicit),
                run_on(len(explicit)),
            )
            if direct and run_on is not None
            else None
        )
        # A shared variable's input holds the variable's own container; the function's container
        # is another object around the same storage cell, one per function and copy.
        locks = [
            _update_lock(inp.value if isinstance(inp.value, Container) else container)
            for inp, container in zip(self.maker.expanded_inputs, containers, strict=True)
            if inp.update is not None
        ]
        self._serialised: threading.Lock | _AllLocks | None = (
            None if not locks else locks[0] if len(locks) == 1 else _AllLocks(locks)
        )

    def __reduce__(self) -> tuple:
        # PyTensor registers its pickling of ``Function`` (the maker, which links anew when
        # loaded) for that class alone; a subclass would pickle its thunk.
        return _pickle_Function(self)

    def __call__(self, *args: Any, **kwargs: Any):
        serialised = self._serialised
        if serialised is None:
            return self._call(args, kwargs)
        with serialised:
            return self._call(args, kwargs)

    def _call(self, args: tuple, kwargs: dict):
        direct = self._direct
        if (
            direct is None
            or kwargs
            or len(args) != len(direct[0])
            or self.trust_input
            or self.profile
        ):
            return super().__call__(*args, **kwargs)
        inputs, run = direct
        values = []
        for (container, filter_), arg in zip(inputs, args):  # noqa: B905  (lengths checked)
            try:
                values.append(
                    filter_(arg, strict=container.strict, allow_downcast=container.allow_downcast)
                )
            except Exception as error:
                self._add_note_to_invalid_argument_exception(error, container, arg)
                raise
        outputs = run(values)
        if self._has_updates:
            for position, container in self._update_input_storage:
                container.storage[0] = outputs[position]
            outputs = outputs[: self._n_returned_outputs]
        if self.vm.allow_gc:
            for cell in self._clear_output_storage_data:
                cell[0] = None
        if self.unpack_single:
            return outputs[0]
        return None if self.return_none else outputs


class JAXGPUFunctionMaker(FunctionMaker):
    """PyTensor's ``FunctionMaker``, making `JAXGPUFunction`s unless told another class."""

    def __init__(self, *args: Any, function_class: type[Function] = JAXGPUFunction, **kwargs: Any):
        super().__init__(*args, function_class=function_class, **kwargs)
