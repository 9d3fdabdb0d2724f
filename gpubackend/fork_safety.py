"""A warning, with advice a PyMC user can follow, when a process forks after JAX started.

XLA runs thread pools; a child forked after they started inherits their locks
but not the threads, and may hang or abort. JAX itself warns ("os.fork() was
called ..."), but that names no fix. The usual way in is PyMC's or
pymc-extras' multiprocessing (pathfinder's paths, ``pm.sample``'s chains):
they choose a safe start method only when the JAX mode comes through
``compile_kwargs``, not when it is global (``PYTENSOR_FLAGS=mode=JAX``), and
then fork. Registered when PyTensor loads its JAX dispatch; it warns only
once XLA's backends exist, so a fork before any JAX work stays silent.
"""

from __future__ import annotations

import os
import sys
import warnings

from gpubackend.errors import ForkAfterJAXWarning

FORK_ADVICE = (
    "This process forks after JAX started its threads: the child may hang or abort. "
    "PyMC and pymc-extras fork their workers unless told otherwise; with a JAX mode set "
    "globally (PYTENSOR_FLAGS=mode=JAX or JAX_GPU) they cannot see it. Pass "
    "mp_ctx='spawn' (pm.sample(..., mp_ctx='spawn'), "
    "pmx.fit(method='pathfinder', ..., mp_ctx='spawn')), or give the mode through "
    "compile_kwargs={'mode': ...}, from which they choose a safe start method."
)

_installed = False


def warn_on_fork_after_jax() -> None:
    """Install the fork hook once (``os.register_at_fork`` cannot remove one)."""
    global _installed
    if not _installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_warn_if_jax_started)
        _installed = True


def _warn_if_jax_started() -> None:
    xla_bridge = sys.modules.get("jax._src.xla_bridge")
    if xla_bridge is not None and xla_bridge.backends_are_initialized():
        # stacklevel 2: the line that forked (multiprocessing's Popen, or the user's os.fork).
        warnings.warn(FORK_ADVICE, ForkAfterJAXWarning, stacklevel=2)
