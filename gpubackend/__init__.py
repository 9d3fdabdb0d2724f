"""gpubackend: a GPU-aware compilation backend for PyTensor.

Importing it registers ``mode="JAX_GPU"`` and gpubackend's lowerings and
compile-time baking rules on PyTensor's registries.
"""

from gpubackend import dispatch, rewrites
from gpubackend.device_inputs import InputDeviceError
from gpubackend.devices import DeviceNotFoundError, resolve_device
from gpubackend.linker import JAXGPULinker
from gpubackend.mode import jax_gpu_mode, register

register()

__all__ = [
    "DeviceNotFoundError",
    "InputDeviceError",
    "JAXGPULinker",
    "jax_gpu_mode",
    "resolve_device",
    "dispatch",
    "rewrites",
]
