"""The errors and warnings gpubackend's users catch or filter, importable without jax or numba; all
are exported from ``gpubackend``.

One public error lives elsewhere: `BooleanMaskLengthError` is also JAX's own
``NonConcreteBooleanIndexError``, so it lives with the JAX lowering that raises
it (`gpubackend.dispatch.jax.subtensor`), and ``gpubackend`` imports it only
when it is asked for.
"""

from __future__ import annotations


class DataDependentLengthError(NotImplementedError):
    """A length that depends on the data (a while-Scan's trace, a boolean mask's selection) where
    JAX needs it while tracing."""


class ShapeMismatchError(AssertionError, ValueError):
    """An array's shape differs from the one ``specify_shape`` declares for it: the reference's
    ``AssertionError``, and the ``ValueError`` PyTensor's JAX lowering raises."""


class SliceBoundNotStaticError(DataDependentLengthError, IndexError):
    """A slice bound known only at run time (``v[3:k]`` with ``k`` computed from the data): the
    slice's length is then data-dependent, which JAX needs while tracing. Also the ``IndexError``
    stock JAX raises there."""


class ScanSequenceLengthError(ValueError):
    """A Scan asked for more steps than a sequence has entries: the reference's ``ValueError``,
    checked where PyTensor's rewrites would drop the Scan that checks it."""


class ObjectModeFallbackWarning(UserWarning):
    """An optimize op runs scipy in Numba object mode: gpubackend has no native solver for its
    method and options."""


class DeviceNotFoundError(RuntimeError):
    """The requested device does not exist; gpubackend never falls back silently."""


class InputDeviceError(ValueError):
    """An input array lives on a device other than the function's target device."""


class UnsupportedMethod(NotImplementedError):
    """An optimize op names a scipy method gpubackend has no lowering for."""


class UnsupportedOption(NotImplementedError):
    """An optimize op sets an option its method does not take (or a backend cannot honour)."""


class ForkAfterJAXWarning(RuntimeWarning):
    """The process forks after JAX started its threads (`gpubackend.fork_safety`): the child may
    hang; the message says how to spawn instead."""
