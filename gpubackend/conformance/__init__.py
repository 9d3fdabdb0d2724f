"""The conformance suite: canonical graphs checked case by case, backend by backend, device by device.

`run_suite` runs the catalogue and returns a `Report`; `write_reports` writes it
as JSON, JUnit XML, Markdown and HTML.
"""

from gpubackend.conformance.reports import merge_reports, write_reports
from gpubackend.conformance.results import CaseResult, CheckResult, Report
from gpubackend.conformance.runner import run_suite

__all__ = ["CaseResult", "CheckResult", "Report", "merge_reports", "run_suite", "write_reports"]
