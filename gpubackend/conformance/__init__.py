"""The conformance suite: canonical graphs checked case by case, backend by backend, device by
device.

`run_suite` runs the catalogue and returns a `Report`; `write_reports` writes it
as JSON, JUnit XML, Markdown and HTML.
It needs the ``conformance`` extra (`gpubackend.extras`); without it, importing
the suite raises an ImportError that says how to install it.
"""

from gpubackend.extras import conformance_extra_message, missing_conformance_packages

if _missing := missing_conformance_packages():
    raise ImportError(conformance_extra_message("gpubackend.conformance", _missing), name=__name__)

# Registers the per-method optimize cases in the catalogue (they build on the generated graphs).
import gpubackend.conformance.method_cases  # noqa: F401
from gpubackend.conformance.reports import merge_reports, write_reports
from gpubackend.conformance.results import CaseResult, CheckResult, Report
from gpubackend.conformance.runner import run_suite

__all__ = ["CaseResult", "CheckResult", "Report", "merge_reports", "run_suite", "write_reports"]
