#!/usr/bin/env bash
# The GPU leg of the CI matrix. Run from anywhere; it works in the repository root.
#
#   ci/gpu/run.sh                on a self-hosted runner with an NVIDIA GPU: builds .venv with
#                                the conformance, test and cuda13 (jax[cuda13], cupy-cuda13x) extras
#   ci/gpu/run.sh --cuda 12      the same with the cuda12 extra, for CUDA 12 drivers
#   ci/gpu/run.sh --python PATH  use an already-provisioned Python (a path or a command name) (JAX with CUDA, PyTensor, ...
#                                installed; e.g. a container with no package index) instead of
#                                building .venv; gpubackend is taken from this checkout
#   ci/gpu/run.sh --simulate     the same steps on two simulated host devices (no CUDA install),
#                                so the leg is rehearsed on machines without a GPU
#   ci/gpu/run.sh --no-pytest    skip the test session (for .ci/run, whose `make test` has just run
#                                the very same session: the same simulated devices and target)
#
# The conformance run includes the while-Scan differential run of the JAX paths on the leg's device:
# $WHILE_GRAPHS generated graphs (default 18), whose failing verdicts fail the leg unless $WHILE_FLAGS holds
# --while-report-only; the index differential run of the JAX paths: $INDEX_GRAPHS generated plain
# graphs indexing at literal positions (default 24), whose failing verdicts fail the leg. It also runs
# the stock-superset differential: $SUPERSET_GRAPHS generated graphs (default 200) with PyTensor's JAX
# lowerings and gpubackend's, on JAX's default device (the GPU); a violation fails the leg.
#
# Then it times whole sampling runs of large models on every sampler path against NUMBA
# (benchmarks/bench_models.py): the full sizes within $BENCH_MODELS_BUDGET seconds (default 240) on
# a GPU, --quick when simulated; a path whose posterior means differ from NUMBA's fails the leg.
#
# Reports land in $REPORTS (default reports/gpu, or reports/gpu-simulated).
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
  echo "usage: ci/gpu/run.sh [--simulate] [--python PATH] [--cuda 12|13] [--no-pytest]" >&2
  exit 2
}

simulate=false
pytest=true
python=""
cuda=13
while [ $# -gt 0 ]; do
  case "$1" in
    --simulate) simulate=true ;;
    --no-pytest) pytest=false ;;
    --python) [ $# -ge 2 ] || usage; python=$2; shift ;;
    --cuda) [ $# -ge 2 ] && [[ "$2" =~ ^(12|13)$ ]] || usage; cuda=$2; shift ;;
    *) usage ;;
  esac
  shift
done

no_gpu() {
  echo "ci/gpu: no CUDA GPU is visible ($1)." >&2
  echo "ci/gpu: this leg must run on a GPU runner; it never falls back to the CPU." >&2
  echo "ci/gpu: to rehearse it without a GPU, run: ci/gpu/run.sh --simulate" >&2
  exit 1
}

if $simulate; then
  export XLA_FLAGS="--xla_force_host_platform_device_count=2"
  export GPUBACKEND_DEVICE="cpu:1"
  label="gpu leg (simulated: 2 host devices)"
  extras="conformance,test"
  reports="${REPORTS:-reports/gpu-simulated}"
else
  command -v nvidia-smi >/dev/null 2>&1 || no_gpu "nvidia-smi is not installed"
  nvidia-smi -L >/dev/null 2>&1 || no_gpu "nvidia-smi lists no device"
  export GPUBACKEND_DEVICE="gpu"
  label="gpu leg"
  extras="conformance,test,cuda$cuda"
  reports="${REPORTS:-reports/gpu}"
fi
# Parallel test workers must not each grab 75% of the GPU's memory.
export XLA_PYTHON_CLIENT_PREALLOCATE=false

if [ -n "$python" ]; then
  py=$(command -v "$python") || { echo "ci/gpu: --python $python is not an executable" >&2; exit 2; }
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  # Nothing is installed into a provisioned Python: say what it lacks, all at once.
  "$py" - <<'PY' || exit 1
import importlib.util, sys
needed = ("pytensor", "jax", "numba", "optimistix", "equinox", "lineax", "rich", "hypothesis", "pytest", "xdist")
missing = [name for name in needed if importlib.util.find_spec(name) is None]
if missing:
    sys.exit(f"ci/gpu: the Python given with --python ({sys.executable}) lacks: {', '.join(missing)}")
PY
else
  make --no-print-directory venv EXTRAS="$extras"
  py=.venv/bin/python
fi

if $simulate; then
  "$py" -c 'import jax, sys; n = len(jax.devices("cpu")); sys.exit(0 if n >= 2 else f"ci/gpu: expected 2 simulated devices, JAX sees {n}")'
else
  "$py" -c 'import jax, sys
try:
    gpus = jax.devices("gpu")
except RuntimeError as error:
    sys.exit(f"ci/gpu: no CUDA GPU is visible to JAX ({error})")
print("ci/gpu: JAX sees", ", ".join(map(str, gpus)))' || no_gpu "jax.devices('gpu') failed"
fi

mkdir -p "$reports"
if $pytest; then
  "$py" -m pytest -n auto -p no:cacheprovider --junitxml="$reports/pytest.xml"
fi
device="$GPUBACKEND_DEVICE"
# shellcheck disable=SC2086  # WHILE_FLAGS holds zero or more flags
"$py" -m gpubackend conformance --backend jax --device "$device" --label "$label" --out "$reports" \
  --generated-while "${WHILE_GRAPHS:-18}" --while-modes jax jax-registered jaxified ${WHILE_FLAGS:-} \
  --generated-index "${INDEX_GRAPHS:-24}" --index-modes jax jax-registered jaxified \
  --stock-superset "${SUPERSET_GRAPHS:-200}"

# The sampler paths' packages are the test extra's; a provisioned Python may lack them.
if "$py" -c 'import pymc, arviz, numpyro' 2>/dev/null; then
  if $simulate; then bench_size=(--quick); else bench_size=(--full --budget-seconds "${BENCH_MODELS_BUDGET:-240}"); fi
  "$py" benchmarks/bench_models.py "${bench_size[@]}" --out "$reports/bench_models"
else
  echo "ci/gpu: benchmarks/bench_models.py skipped: the Python lacks pymc, arviz or numpyro (the test extra)"
fi

gpu_count=$("$py" -c 'import jax
try:
    print(len(jax.devices("gpu")))
except RuntimeError:
    print(0)')
if [ "$gpu_count" -gt 1 ]; then
  for script in benchmarks/bench_sharded_*.py; do
    [ -e "$script" ] && "$py" "$script" | tee -a "$reports/benchmarks.txt"
  done
fi
echo "ci/gpu: reports in $reports"
