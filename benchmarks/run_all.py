"""Run every benchmark script in this folder, one process each, and let each print its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).parent
    failed = []
    for script in sorted(here.glob("bench_*.py")):
        print(f"\n=== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script), *sys.argv[1:]], cwd=here).returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
