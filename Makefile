# Every target creates the virtualenv itself when it is missing or stale.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# conformance: rich and hypothesis, for `run` and `conformance`; test: the test and benchmark tools.
EXTRAS ?= conformance,test
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
# The versions CI tested: every install takes them, so two runs test the same stack while
# pyproject.toml keeps ranges. `make constraints` refreshes them (README, "Pinned versions").
CONSTRAINTS := ci/constraints.txt
# Two simulated host devices, so that JAX paths run on a non-default device
# (cpu:1) and transfer guards can catch hidden copies without a GPU.
export XLA_FLAGS ?= --xla_force_host_platform_device_count=2
WORKERS ?= auto
REPORTS ?= reports
# The while-Scan differential run of each CI leg (README, "While-Scan differential fuzzer"): how many
# generated graphs; a failing verdict fails the leg (WHILE_FLAGS=--while-report-only only reports it).
WHILE_GRAPHS ?= 18
WHILE_FLAGS ?=
# The stock-superset differential run of each CI leg (README, "Stock supersets"): how many generated
# graphs run with PyTensor's JAX lowerings and with gpubackend's; a violation fails the leg.
SUPERSET_GRAPHS ?= 100
# The index differential run of each CI leg (README, "Index differential"): how many generated plain
# graphs indexing at literal positions; a failing verdict fails the leg.
INDEX_GRAPHS ?= 24

.PHONY: venv run test lint bench conformance ci-legs pymc-extras constraints clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(PY) || "$$(tools/find-python.sh)" -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]" -c $(CONSTRAINTS)
	@touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(PY) -m gpubackend run --out $(REPORTS)

test: $(STAMP)
	$(PY) -m pytest -n $(WORKERS) $(PYTEST_ARGS)

# ruff (lint and format) and mypy, configured in pyproject.toml, and no import cycle in the package.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) tools/import_cycles.py

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

# The CPU leg's conformance run: NUMBA on the host, JAX on simulated device cpu:1, the while-Scan
# differential run of every JAX path and NUMBA, the index differential's and the stock-superset
# differential.
conformance: $(STAMP)
	$(PY) -m gpubackend conformance --backend numba jax --device cpu cpu:1 --label "cpu leg" --out $(REPORTS)/cpu \
		--generated-while $(WHILE_GRAPHS) $(WHILE_FLAGS) --generated-index $(INDEX_GRAPHS) \
		--stock-superset $(SUPERSET_GRAPHS)

# After `make test`, .ci/run runs this: the CPU leg's conformance run, the rehearsed
# GPU leg, and the matrix that merges both, as the workflow's legs do. The rehearsed
# leg's test session would repeat `make test` exactly (same simulated devices and
# target), so it is skipped there.
ci-legs: conformance
	WHILE_GRAPHS=$(WHILE_GRAPHS) WHILE_FLAGS="$(WHILE_FLAGS)" SUPERSET_GRAPHS=$(SUPERSET_GRAPHS) \
		INDEX_GRAPHS=$(INDEX_GRAPHS) ci/gpu/run.sh --simulate --no-pytest
	$(PY) -m gpubackend conformance merge $(REPORTS)/cpu/conformance.json $(REPORTS)/gpu-simulated/conformance.json --out $(REPORTS)/matrix

# pymc-extras' own tests, without and with gpubackend imported first, in the default mode and with
# mode=JAX: a test that passes stock and fails with the plugin fails it (README, "pymc-extras' tests
# as a check"). Its own virtualenv (.venv-pymc-extras, PyMC 6.3.2, an overlay on $(VENV));
# PYMC_EXTRAS_FLAGS=--full runs the whole selection (marginal, inference, statespace) instead of the
# CI one, and --samplers pymc-extras' models on every JAX sampler path (.ci/run runs it).
PYMC_EXTRAS_FLAGS ?=
pymc-extras: $(STAMP)
	MAIN_VENV=$(VENV) ci/pymc_extras/run.sh $(PYMC_EXTRAS_FLAGS)

# Resolve pyproject.toml's ranges afresh, with no constraints, in a throw-away virtualenv, and pin
# what they resolve to. The cuda extras are left out: jax[cuda13|cuda12] pins its plugin to the
# pinned jaxlib, and their NVIDIA wheels are gigabytes.
constraints:
	@scratch=$$(mktemp -d) && trap 'rm -rf "$$scratch"' EXIT && \
	"$$(tools/find-python.sh)" -m venv "$$scratch/venv" && \
	"$$scratch/venv/bin/python" -m pip install -q --upgrade pip && \
	"$$scratch/venv/bin/python" -m pip install -q ".[conformance,test]" && \
	{ echo "# The versions CI tested: written by \`make constraints\` with Python" \
	    "$$("$$scratch/venv/bin/python" -c 'import platform; print(platform.python_version())')."; \
	  echo "# Edit pyproject.toml's ranges, not this file."; \
	  "$$scratch/venv/bin/python" -m pip freeze --exclude gpubackend; } > $(CONSTRAINTS)
	@echo "wrote $(CONSTRAINTS)"

clean:
	rm -rf $(VENV) $(REPORTS) .pytest_cache .hypothesis
