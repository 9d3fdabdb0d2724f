"""``numba_njit`` with IEEE arithmetic, for the solvers that reproduce scipy's points bit for bit.

PyTensor compiles with fastmath flags: contracting ``a * b + c`` into one
rounding or reassociating a sum moves the last bits of a trial point, and the
ports of ``tnc.c``, PRIMA's COBYLA and COBYQA carry such a difference into a
different sequence of points (and evaluation counts) within a few iterations.
"""

from collections.abc import Callable

from pytensor.link.numba.dispatch.basic import numba_njit


def ieee_njit(*args, **kwargs) -> Callable:
    """PyTensor's ``numba_njit`` with IEEE arithmetic (no fastmath)."""
    return numba_njit(*args, fastmath=False, **kwargs)
