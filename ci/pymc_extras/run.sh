#!/usr/bin/env bash
# The pymc-extras leg: pymc-extras' own tests as a check that importing gpubackend breaks nothing
# (README, "pymc-extras' tests as a check"). Run from anywhere; it works in the repository root.
#
#   ci/pymc_extras/run.sh               the CI selection (ci/pymc_extras/selection.txt)
#   ci/pymc_extras/run.sh --full        the full selection: tests/model/marginal, tests/inference,
#                                       and tests/statespace of pymc-extras' sdist (hours, 2 cores)
#   ci/pymc_extras/run.sh --workers N   pytest-xdist workers per run (default 2)
#   ci/pymc_extras/run.sh --update-fixes   rewrite plugin_fixes.txt from this run's results
#   ci/pymc_extras/run.sh --samplers    instead of the tests: pymc-extras' Laplace-marginalised and
#                                       convergent state-space models on every JAX sampler path,
#                                       against PyMC's NUTS on NUMBA (samplers.py; about 5 min)
#
# It builds its own virtualenv, $VENV (default .venv-pymc-extras), as an overlay on the main one,
# $MAIN_VENV (default .venv, which `make pymc-extras` builds first): its own site-packages hold only
# what differs, PyMC 6.3.2 (pymc-extras 0.15.1 requires pymc<6.4, so the main legs stay on 6.4),
# pymc-extras 0.15.1 and what it and its tests add, at the versions pinned in
# ci/pymc_extras/constraints.txt; a .pth file then adds the main virtualenv's site-packages (with its
# own .pth files: the editable gpubackend) after them, so the overlay's PyMC shadows the main one's
# and JAX, Numba, numpyro, blackjax and nutpie are the main legs' own. It is rebuilt when that file,
# pyproject.toml or the main virtualenv's path changes. The tests come from pymc-extras' sdist,
# unpacked under $VENV/src.
#
# The selection runs four ways, on two simulated host devices: stock and with the plugin (gpubackend
# imported before anything else, by the pytest plugin ci/pymc_extras/gpubackend_first.py), each in
# PyTensor's default mode and with PYTENSOR_FLAGS=mode=JAX. compare.py then reads the four JUnit
# reports: a test that passes stock and fails with the plugin fails the leg, and so does a fix
# recorded in plugin_fixes.txt that fails with the plugin again. Reports land in $REPORTS (default
# reports/pymc-extras, or reports/pymc-extras-full).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
leg=$repo/ci/pymc_extras

usage() {
  echo "usage: ci/pymc_extras/run.sh [--full | --samplers] [--workers N] [--update-fixes]" >&2
  exit 2
}

full=false
samplers=false
workers=2
compare_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --full) full=true ;;
    --samplers) samplers=true ;;
    --workers) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage; workers=$2; shift ;;
    --update-fixes) compare_flags+=(--update-fixes) ;;
    *) usage ;;
  esac
  shift
done

PYMC_EXTRAS_VERSION=0.15.1
venv=$(realpath -m "${VENV:-.venv-pymc-extras}")
py=$venv/bin/python
constraints=$leg/constraints.txt
stamp=$venv/.installed
sdist_dir=$venv/src
tests_root=$sdist_dir/pymc_extras-$PYMC_EXTRAS_VERSION
if $full; then
  reports=${REPORTS:-reports/pymc-extras-full}
else
  reports=${REPORTS:-reports/pymc-extras}
fi
mkdir -p "$reports"
reports=$(cd "$reports" && pwd)

main_venv=$(realpath -m "${MAIN_VENV:-.venv}")
[ -x "$main_venv/bin/python" ] || {
  echo "ci/pymc_extras: no main virtualenv at $main_venv (make venv builds it)" >&2
  exit 2
}
main_site=$("$main_venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")

# What the overlay is built from: rebuilt when the pins, the project's metadata or the main
# virtualenv's path changed.
overlay_recipe() { cat "$constraints" pyproject.toml; echo "$main_site"; }
if [ ! -f "$stamp" ] || ! overlay_recipe | cmp -s - "$stamp"; then
  rm -rf "$venv"
  "$main_venv/bin/python" -m venv "$venv"
  own_site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  # Processed after the overlay's own packages: site.addsitedir also runs the main virtualenv's .pth
  # files (the editable gpubackend).
  echo "import site; site.addsitedir('$main_site')" > "$own_site/zz_main_virtualenv.pth"
  mkdir -p "$sdist_dir"
  "$py" -m pip download -q --no-deps --no-binary pymc-extras -d "$sdist_dir" \
    "pymc-extras==$PYMC_EXTRAS_VERSION"
  tar -xzf "$sdist_dir/pymc_extras-$PYMC_EXTRAS_VERSION.tar.gz" -C "$sdist_dir"
  # pip sees the main virtualenv's packages as installed and adds only what is missing or pinned
  # otherwise (PyMC), into the overlay, leaving the main virtualenv as it is. pytest-timeout runs
  # the tests; statsmodels and patsy are imported by 8 statespace modules.
  "$py" -m pip install -q -c "$constraints" pymc \
    "$sdist_dir/pymc_extras-$PYMC_EXTRAS_VERSION.tar.gz" pytest-timeout statsmodels patsy
  # The overlay's PyMC is the pinned one, not the main virtualenv's.
  "$py" -c "import pymc, sys; sys.exit(pymc.__version__ != sys.argv[1] and pymc.__version__)" \
    "$(sed -n 's/^pymc==//p' "$constraints")"
  overlay_recipe > "$stamp"
fi

# Two simulated host devices, as the issue's run and the main legs have them.
export XLA_FLAGS="--xla_force_host_platform_device_count=2"

if $samplers; then
  "$py" "$leg/samplers.py" | tee "$reports/samplers.txt"
  exit "${PIPESTATUS[0]}"
fi

if $full; then
  selection=(tests/model/marginal tests/inference tests/statespace)
else
  mapfile -t selection < <(grep -v '^\s*\(#\|$\)' "$leg/selection.txt")
fi

export PYTHONPATH="$leg${PYTHONPATH:+:$PYTHONPATH}"
git rev-parse HEAD > "$reports/commit.txt"
: > "$reports/durations.txt"
leg_start=$(date +%s)
for way in stock-default plugin-default stock-jax plugin-jax; do
  case $way in plugin-*) plugin=gpubackend_first ;; *) plugin=stock_guard ;; esac
  case $way in *-jax) flags=mode=JAX ;; *) flags="" ;; esac
  echo "ci/pymc_extras: $way (${#selection[@]} selection entries, $workers workers)"
  start=$(date +%s)
  # -W default: pymc-extras' `filterwarnings = error` turns pandas' and better_optimize's
  # deprecation warnings into collection errors. Failing tests are the point, so no `set -e` here.
  (cd "$tests_root" && PYTENSOR_FLAGS=$flags "$py" -m pytest -n "$workers" -W default \
    -p no:cacheprovider -p "$plugin" --timeout 900 -q -rfE \
    --junitxml="$reports/$way.xml" "${selection[@]}") > "$reports/$way.log" 2>&1 || true
  seconds=$(($(date +%s) - start))
  echo "$way $seconds s" | tee -a "$reports/durations.txt"
  tail -n 1 "$reports/$way.log"
done
echo "all four ways: $(($(date +%s) - leg_start)) s" | tee -a "$reports/durations.txt"

"$py" "$leg/compare.py" "$reports" "${compare_flags[@]}" | tee "$reports/comparison.txt"
exit "${PIPESTATUS[0]}"
