"""The errors and warnings gpubackend's users catch or filter, importable without jax or numba.

The device errors live with device resolution (`gpubackend.devices`); all are
re-exported from ``gpubackend``.
"""

from __future__ import annotations


class DataDependentLengthError(NotImplementedError):
    """A length that depends on the data (a while-Scan's trace, a boolean mask's selection) where
    JAX needs it while tracing."""


class ObjectModeFallbackWarning(UserWarning):
    """An optimize op runs scipy in Numba object mode: gpubackend has no native solver for its
    method and options."""


class ForkAfterJAXWarning(RuntimeWarning):
    """The process forks after JAX started its threads (`gpubackend.fork_safety`): the child may
    hang; the message says how to spawn instead."""
