"""gpubackend: a GPU-aware compilation backend for PyTensor.

Importing it registers ``mode="JAX_GPU"`` (and ``"JAX_GPU_NUMPY"``, numpy outputs), makes the
one ``$GPUBACKEND_MODE`` names PyTensor's default mode where it is set, and registers
gpubackend's compile-time baking rules on PyTensor's registries, and its lowerings
for when PyTensor loads its JAX or Numba dispatch. It imports neither jax nor numba, so it
starts no XLA backend and allocates no device memory. When jax is loaded, its
``jax_enable_x64`` is set from ``floatX`` (`gpubackend.precision`).

The public API is what ``__all__`` lists; everything else is internal.
"""

from gpubackend import dispatch, precision, rewrites  # noqa: F401  (importing them registers the lowerings and rewrites)
from gpubackend.devices import resolve_device
from gpubackend.errors import (
    DataDependentLengthError,
    DeviceNotFoundError,
    ForkAfterJAXWarning,
    InputDeviceError,
    ObjectModeFallbackWarning,
    ScanSequenceLengthError,
    ShapeMismatchError,
    SliceBoundNotStaticError,
    UnsupportedMethod,
    UnsupportedOption,
)
from gpubackend.linker import JAXGPULinker
from gpubackend.mode import jax_gpu_mode, register, set_default_mode_from_env, stock_jax_mode

register()
set_default_mode_from_env()
precision.follow_floatx()

__all__ = [
    "BooleanMaskLengthError",
    "DataDependentLengthError",
    "DeviceNotFoundError",
    "ForkAfterJAXWarning",
    "InputDeviceError",
    "JAXGPULinker",
    "ObjectModeFallbackWarning",
    "ScanSequenceLengthError",
    "ShapeMismatchError",
    "SliceBoundNotStaticError",
    "UnsupportedMethod",
    "UnsupportedOption",
    "jax_gpu_mode",
    "resolve_device",
    "stock_jax_mode",
]


def __getattr__(name: str):
    # BooleanMaskLengthError is also JAX's own error class: importing it loads jax, which importing
    # gpubackend must not (`gpubackend.errors`).
    if name == "BooleanMaskLengthError":
        from gpubackend.dispatch.jax.subtensor import BooleanMaskLengthError

        return BooleanMaskLengthError
    raise AttributeError(f"module 'gpubackend' has no attribute {name!r}")
