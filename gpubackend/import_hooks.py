"""Run a registration right after a module finishes importing, without importing it.

PyTensor loads its JAX and Numba dispatch (and with them jax, numpyro and numba)
only when a function is first compiled for that backend, so ``import pytensor``
stays cheap and starts no XLA backend. gpubackend keeps that promise: its
lowerings must be on ``jax_funcify`` and ``numba_funcify`` before anyone calls
them, yet importing those registries up front would cost seconds and start
nothing useful. `when_imported` bridges the two with the standard import
system: a one-shot meta-path finder that lets the real finders locate the
module, and a loader wrapper that runs the registration once the module's own
code has run (so our registrations come after PyTensor's and take precedence).

It is the one place gpubackend reaches into the import system, and only because
PyTensor offers no seam for it. It would go if PyTensor's dispatch packages
loaded plugins when they load: for example, the last lines of
``pytensor/link/jax/dispatch/__init__.py`` (and of the Numba one) calling each
entry point of an ``importlib.metadata`` group such as
``pytensor.link.jax.dispatch``, where gpubackend would declare
`gpubackend.dispatch.jax.register_lowerings`.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from types import ModuleType


def when_imported(module_name: str, register: Callable[[], None]) -> None:
    """Call ``register()`` once ``module_name`` has been imported: now if it already is, else right
    after."""
    if module_name in sys.modules:
        register()
    else:
        sys.meta_path.insert(0, _RegisterAfterImport(module_name, register))


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, module_name: str, register: Callable[[], None]):
        self.module_name = module_name
        self.register = register

    def find_spec(self, fullname, path, target=None):
        if fullname != self.module_name:
            return None
        # One-shot: leave the path before asking the other finders, so they never see us again.
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            spec = find_spec(fullname, path, target) if find_spec is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenRegister(spec.loader, self.register)
                return spec
        return None


class _ThenRegister(importlib.abc.Loader):
    """Delegates to the real loader; after the module's code ran, calls ``register``."""

    def __init__(self, loader: importlib.abc.Loader, register: Callable[[], None]):
        self.loader = loader
        self.register = register

    def create_module(self, spec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.register()

    def __getattr__(self, name: str):
        # get_source, get_resource_reader, ...: whatever tools ask of the real loader.
        return getattr(self.loader, name)
