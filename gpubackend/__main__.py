"""Command line: ``python -m gpubackend {run,conformance} ...``.

Both commands need the ``conformance`` extra (rich for their tables and
progress, hypothesis for generated graphs), which ``import gpubackend`` does
not. Without it they say how to install it and exit 2, before importing
anything that needs it.
"""

from __future__ import annotations

import argparse
import os
import sys

from gpubackend.extras import conformance_extra_message, missing_conformance_packages

EXTRA_MISSING_STATUS = 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Before anything starts JAX: conformance workers share the GPU with this
    # process, so none may reserve 75% of its memory up front (JAX's default).
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    parser = argparse.ArgumentParser(
        prog="gpubackend",
        description=__doc__.splitlines()[0],
        epilog="Both commands need the conformance extra: pip install 'gpubackend[conformance]'.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "run",
        help="the main job: compile and run on every usable backend and device",
        add_help=False,
    )
    commands.add_parser("conformance", help="run or merge the conformance suite", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if missing := missing_conformance_packages():
        print(conformance_extra_message(f"gpubackend {args.command}", missing), file=sys.stderr)
        return EXTRA_MISSING_STATUS
    if args.command == "run":
        from gpubackend.main_job import main as run_main

        return run_main(rest)
    from gpubackend.conformance.cli import main as conformance_main

    return conformance_main(rest)


if __name__ == "__main__":
    sys.exit(main())
