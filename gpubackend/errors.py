"""The errors and warnings gpubackend's users catch or filter, importable without jax or numba.

The device errors live with device resolution (`gpubackend.devices`); all are
re-exported from ``gpubackend``.
"""

from __future__ import annotations


class DataDependentLengthError(NotImplementedError):
    """A while-Scan output whose length would depend on the number of steps taken, in a linker that cannot specialise on it."""


class ObjectModeFallbackWarning(UserWarning):
    """An optimize op runs scipy in Numba object mode: gpubackend has no native solver for its method and options."""
