"""A ``jax.Array`` handed to a NUMBA function: read as a host copy, as the reference reads it.

A JAX update (JAX_GPU's or stock ``mode="JAX"``'s) leaves the shared
variable's new value in its container as a ``jax.Array``: copying each update
back to the host would cost a host sync per call. PyTensor's NUMBA (and
``FAST_RUN``) functions hand a container's value to Numba as it is, and Numba
cannot type a ``jax.Array``: it failed with ``TypingError: Unknown attribute
'shape' of type readonly buffer``, on a GPU's arrays too.

Here Numba types a ``jax.Array`` as an array (`HostCopyOfJaxArray`) and
unboxes it through ``np.array``: one device-to-host copy per call that meets
one, into a fresh host array, so that a NUMBA function that updates the
variable in place writes its own copy and never the buffer JAX assumes
immutable. The function's update then leaves a numpy value, and later calls
read it with no copy. FAST_COMPILE's Python ops read a ``jax.Array`` through
numpy already; PyTensor's C code has no such seam (README, "Where data lives
under JAX_GPU").
"""

from __future__ import annotations

import numba
import numpy as np
from numba.core import cgutils, types
from numba.core.datamodel.models import ArrayModel
from numba.extending import NativeValue, register_model, typeof_impl, unbox


class HostCopyOfJaxArray(types.Array):
    """A ``jax.Array`` argument, passed to the compiled code as a C-contiguous host copy."""

    def __init__(self, dtype, ndim: int):
        super().__init__(dtype, ndim, "C", name=f"host copy of jax.Array({dtype}, {ndim}d)")

    @property
    def key(self):
        return self.dtype, self.ndim

    def __reduce__(self):
        # PyTensor's Numba cache is shared by every process of the machine, and an index that
        # pickled this class would import gpubackend wherever it is read, also in a process that
        # never imported it (or cannot). Inside compiled code this type is a plain C-contiguous
        # array (same data model): PyTensor's inner functions, which have no Python wrapper, compile
        # to the same code for either, so their cache entries are filed under the plain type. The
        # final function, whose wrapper copies (`_unbox_host_copy`), is never cached.
        return types.Array, (self.dtype, self.ndim, "C")


register_model(HostCopyOfJaxArray)(ArrayModel)


@unbox(HostCopyOfJaxArray)
def _unbox_host_copy(typ: HostCopyOfJaxArray, obj, c) -> NativeValue:
    # np.array by its address, a dynamic global: Numba never caches a function whose Python
    # wrapper copies, which a plain array's signature would otherwise find in the cache.
    copy = c.builder.bitcast(
        c.context.add_dynamic_addr(c.builder, id(np.array), info="numpy.array"),
        c.pyapi.pyobj,
    )
    host = c.pyapi.call_function_objargs(copy, [obj])
    plain = types.Array(typ.dtype, typ.ndim, "C")
    native = cgutils.alloca_once(c.builder, c.context.get_value_type(plain))
    is_error = cgutils.alloca_once_value(c.builder, cgutils.true_bit)
    # np.array's own exception stays set where the copy failed (a deleted or donated buffer).
    with c.builder.if_then(cgutils.is_not_null(c.builder, host)):
        unboxed = c.unbox(plain, host)
        c.builder.store(unboxed.value, native)
        c.builder.store(unboxed.is_error, is_error)
        # The unboxed array's meminfo holds its own reference to the copy.
        c.pyapi.decref(host)
    return NativeValue(c.builder.load(native), is_error=c.builder.load(is_error))


def register_jax_array_typing() -> None:
    """Type ``jax.Array`` for Numba (called once jax is imported: `import_hooks`)."""
    import jax

    @typeof_impl.register(jax.Array)
    def _typeof_jax_array(value, context) -> HostCopyOfJaxArray:
        return HostCopyOfJaxArray(numba.from_dtype(value.dtype), value.ndim)
