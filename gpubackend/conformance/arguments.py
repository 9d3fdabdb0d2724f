"""The conformance commands' arguments, checked before anything runs.

Each check is an argparse ``type=``: a bad value is a usage error that names the
argument and says what was expected, before any case, worker or Hypothesis
draw starts. `OneLineParser` prints it as one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import difflib
import tempfile
from pathlib import Path
from typing import NoReturn

from gpubackend.conformance.catalogue import CATALOGUE, select_cases
from gpubackend.conformance.reports import load_report
from gpubackend.conformance.results import Report
from gpubackend.devices import DeviceSource, resolve_device
from gpubackend.errors import DeviceNotFoundError

USAGE_ERROR_STATUS = 2

CLI_DEVICE = DeviceSource("", "'gpu', 'gpu:N', 'cpu' or 'cpu:N'", "pass --device cpu")
"""``--device``: argparse names the flag, and its advice is the flag's, not the Python API's."""


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line, exit status 2 and no usage block, which would bury the message."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR_STATUS, f"{self.prog}: error: {message} (see --help)\n")


def count(text: str) -> int:
    """How many graphs to generate: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number, 0 or more, got {text!r}")
    return value


def output_dir(text: str) -> Path:
    """A directory the reports can be written to: one that exists, or one that can be made.

    Checked by making, and removing at once, a file in the directory or a
    directory in its nearest existing parent: nothing is left behind.
    """
    path = Path(text)
    expected = "expected a directory to write the reports to"
    try:
        if path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} is a file; {expected}")
        existing = path
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir():
            raise argparse.ArgumentTypeError(
                f"{text!r} cannot be made: {str(existing)!r} is a file; {expected}"
            )
        if existing == path:
            with tempfile.NamedTemporaryFile(dir=path):
                pass
        else:
            Path(tempfile.mkdtemp(dir=existing)).rmdir()
    except OSError as error:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not writable ({error.strerror or error}); {expected}"
        ) from error
    return path


def case_pattern(text: str) -> str:
    """``--cases``: comma-separated name fragments or families, each matching some case."""
    needles = [needle.strip() for needle in text.split(",") if needle.strip()]
    if not needles:
        raise argparse.ArgumentTypeError(
            f"{text!r} names no case; expected comma-separated case name fragments or families"
        )
    unmatched = [needle for needle in needles if not select_cases(needle)]
    if not unmatched:
        return text
    families = sorted({case.family for case in CATALOGUE.values()})
    known = [*CATALOGUE, *families]
    close = [match for n in unmatched for match in difflib.get_close_matches(n, known, n=3)]
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    raise argparse.ArgumentTypeError(
        f"{', '.join(map(repr, unmatched))} matches no case name or family "
        f"(families: {', '.join(families)}){hint}"
    )


def device(text: str) -> str:
    """A device that exists: ``cpu``, ``cpu:N``, ``gpu`` or ``gpu:N``."""
    try:
        resolve_device(text, source=CLI_DEVICE)
    except (DeviceNotFoundError, ValueError) as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("gpubackend: ")) from error
    return text


def report_file(text: str) -> Report:
    """A conformance.json that a run wrote, loaded."""
    try:
        return load_report(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
