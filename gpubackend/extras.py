"""What the ``conformance`` extra holds, and the message when it is missing.

Read by the command line (before it imports anything that needs the extra)
and by `gpubackend.conformance` itself, so that importing the suite without
the extra says how to get it rather than failing on a bare ``import rich``.
"""

from __future__ import annotations

import importlib.util

CONFORMANCE_EXTRA = ("rich", "hypothesis")
"""The packages of ``gpubackend[conformance]`` (pyproject.toml's ``conformance`` extra)."""


def missing_conformance_packages() -> list[str]:
    """The packages of the conformance extra that cannot be imported here."""
    return [name for name in CONFORMANCE_EXTRA if importlib.util.find_spec(name) is None]


def conformance_extra_message(what: str, missing: list[str]) -> str:
    """One line: ``what`` needs the extra, which packages are missing, and the command that installs
    them."""
    return (
        f"{what}: needs the conformance extra, which is "
        f"not installed (missing: {', '.join(missing)}). "
        "Install it with: pip install 'gpubackend[conformance]'"
    )
