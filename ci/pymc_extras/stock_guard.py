"""pytest plugin of the "stock" ways (`-p stock_guard`): a test that imported gpubackend errors.

A stock way must run PyTensor and PyMC exactly as they are; if anything imported gpubackend
(a dependency, a stray sitecustomize), the comparison would compare the plugin with itself.
The check runs in every test's teardown, so it holds in pytest-xdist's workers too.
"""

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _gpubackend_is_not_imported() -> Iterator[None]:
    yield
    if "gpubackend" in sys.modules:
        raise RuntimeError("gpubackend was imported in a stock way")
