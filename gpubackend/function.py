"""The compiled function that JAX_GPU's own modes make: PyTensor's ``Function`` with a lean call.

``Mode.function_maker`` is PyTensor's hook for the class that builds a
compiled function (``DebugMode`` uses it); the JAX_GPU modes name
`JAXGPUFunctionMaker`, whose functions are `JAXGPUFunction`s. A mode rebuilt
from the linker alone (PyMC's ``compile`` makes ``Mode(linker=mode.linker,
...)``) makes PyTensor's own ``Function``, which runs the same linker and checks.
"""

from __future__ import annotations

from typing import Any

from pytensor.compile.executor import Function, _pickle_Function
from pytensor.compile.maker import FunctionMaker


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
    """

    __slots__ = ("_direct",)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        containers = self.input_storage
        explicit = [container for container in containers if not container.implicit]
        direct = (
            not self._potential_aliased_input_groups
            and containers[: len(explicit)] == explicit
            and all(container.required for container in explicit)
        )
        self._direct: tuple | None = (
            tuple((container, container.storage, container.type.filter) for container in explicit)
            if direct
            else None
        )

    def __reduce__(self) -> tuple:
        # PyTensor registers its pickling of ``Function`` (the maker, which links anew when
        # loaded) for that class alone; a subclass would pickle its thunk.
        return _pickle_Function(self)

    def __call__(self, *args: Any, **kwargs: Any):
        direct = self._direct
        if direct is None or kwargs or len(args) != len(direct) or self.trust_input or self.profile:
            return super().__call__(*args, **kwargs)
        for (container, cell, filter_), arg in zip(direct, args):  # noqa: B905  (lengths checked)
            try:
                cell[0] = filter_(
                    arg, strict=container.strict, allow_downcast=container.allow_downcast
                )
            except Exception as error:
                self._add_note_to_invalid_argument_exception(error, container, arg)
                raise
        outputs = self.vm()
        if outputs is None:
            outputs = [container.storage[0] for container in self.output_storage]
        if self._has_updates:
            for position, container in self._update_input_storage:
                container.storage[0] = outputs[position]
            outputs = outputs[: self._n_returned_outputs]
        if self.vm.allow_gc:
            for cell in self._clear_input_storage_data:
                cell[0] = None
            for cell in self._clear_output_storage_data:
                cell[0] = None
        if self.unpack_single:
            return outputs[0]
        return None if self.return_none else outputs


class JAXGPUFunctionMaker(FunctionMaker):
    """PyTensor's ``FunctionMaker``, making `JAXGPUFunction`s unless told another class."""

    def __init__(self, *args: Any, function_class: type[Function] = JAXGPUFunction, **kwargs: Any):
        super().__init__(*args, function_class=function_class, **kwargs)
