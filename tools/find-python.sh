#!/usr/bin/env bash
# Print the path of a Python >= 3.12 that actually runs.
#
# Candidates are probed by running them, because pyenv shims for versions that
# are installed but not selected exist on PATH and exit 127. A PYTHON=...
# override is honoured first and is an error if it does not qualify.
set -u

qualifies() {
  "$1" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1
}

if [ -n "${PYTHON:-}" ]; then
  if qualifies "$PYTHON"; then
    command -v "$PYTHON" || echo "$PYTHON"
    exit 0
  fi
  echo "find-python: PYTHON=$PYTHON does not run as a Python >= 3.12 with venv" >&2
  exit 1
fi

candidates=(python3.12 python3.13 python3)
pyenv_root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
for dir in $(ls -d "$pyenv_root"/versions/3.1[2-9]* 2>/dev/null | sort -V); do
  candidates+=("$dir/bin/python3")
done
candidates+=(/usr/local/bin/python3.12 /usr/local/bin/python3.13 /usr/bin/python3.12 /usr/bin/python3.13)

for candidate in "${candidates[@]}"; do
  if qualifies "$candidate"; then
    command -v "$candidate" || echo "$candidate"
    exit 0
  fi
done

echo "find-python: no Python >= 3.12 found. Tried: ${candidates[*]}." >&2
echo "Install one (e.g. 'pyenv install 3.12') or point PYTHON= at it." >&2
exit 1
