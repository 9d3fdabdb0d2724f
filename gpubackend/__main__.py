"""Command line: ``python -m gpubackend {run,conformance} ...``."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Before anything starts JAX: conformance workers share the GPU with this
    # process, so none may reserve 75% of its memory up front (JAX's default).
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    parser = argparse.ArgumentParser(prog="gpubackend", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="the main job: compile and run on every usable backend and device", add_help=False)
    commands.add_parser("conformance", help="run or merge the conformance suite", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "run":
        from gpubackend.main_job import main as run_main

        return run_main(rest)
    from gpubackend.conformance.cli import main as conformance_main

    return conformance_main(rest)


if __name__ == "__main__":
    sys.exit(main())
