"""pytest plugin of the "plugin" ways (`-p gpubackend_first`): imports gpubackend first.

pytest imports `-p` plugins before it reads any conftest or test module, and pytest-xdist's
workers load them the same way, so nothing has imported PyTensor yet; this module checks that
rather than assuming it, so a way that claims "with the plugin" really imported it first.
"""

import sys

if "pytensor" in sys.modules:
    raise RuntimeError("PyTensor was imported before gpubackend: the plugin way would not be one")

import gpubackend  # noqa: F401  (the import is the point: it registers the lowerings)
