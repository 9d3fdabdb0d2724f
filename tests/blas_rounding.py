"""Where the host's BLAS kernel parts a ported solver's path from scipy's.

scipy's COBYQA and our ports of it follow each other point for point only while
numpy's BLAS rounds as the port does. OpenBLAS's Haswell kernels on an AMD EPYC
(``OPENBLAS_CORETYPE=Haswell``, which this workplace sets on such processors)
round otherwise: the trial points part after a few steps, and an evaluation
budget then ends elsewhere. The tests that assert scipy's very points are
strict xfails there, naming this, and pass everywhere else.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _haswell_kernels_on_amd() -> bool:
    if os.environ.get("OPENBLAS_CORETYPE", "").lower() != "haswell":
        return False
    try:
        return "AMD" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


BLAS_PARTS_COBYQA_PATHS = _haswell_kernels_on_amd()


def expect_parted_paths(request: pytest.FixtureRequest) -> None:
    """Mark the running test a strict xfail where this host's BLAS parts COBYQA's paths."""
    request.applymarker(
        pytest.mark.xfail(
            BLAS_PARTS_COBYQA_PATHS,
            reason="OpenBLAS's Haswell kernels on an AMD CPU round numpy's products otherwise "
            "than the port: scipy's COBYQA takes other points (tests/blas_rounding.py)",
            strict=True,
        )
    )
