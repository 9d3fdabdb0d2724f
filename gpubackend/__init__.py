"""gpubackend: a GPU-aware compilation backend for PyTensor.

Importing it registers ``mode="JAX_GPU"`` and gpubackend's compile-time
baking rules on PyTensor's registries, and its lowerings for when PyTensor
loads its JAX or Numba dispatch. It imports neither jax nor numba, so it starts
no XLA backend and allocates no device memory. When jax is loaded, its
``jax_enable_x64`` is set from ``floatX`` (`gpubackend.precision`).
"""

from gpubackend import dispatch, precision, rewrites
from gpubackend.devices import DeviceNotFoundError, InputDeviceError, resolve_device
from gpubackend.linker import JAXGPULinker
from gpubackend.mode import jax_gpu_mode, register

register()
precision.follow_floatx()

__all__ = [
    "DeviceNotFoundError",
    "InputDeviceError",
    "JAXGPULinker",
    "jax_gpu_mode",
    "resolve_device",
    "dispatch",
    "rewrites",
]
