# Every target creates the virtualenv itself when it is missing or stale.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS ?= test
# Two simulated host devices, so that JAX paths run on a non-default device
# (cpu:1) and transfer guards can catch hidden copies without a GPU.
export XLA_FLAGS ?= --xla_force_host_platform_device_count=2
WORKERS ?= auto
REPORTS ?= reports

.PHONY: run test bench conformance clean

$(STAMP): pyproject.toml
	@test -x $(PY) || "$$(tools/find-python.sh)" -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@touch $(STAMP)

run: $(STAMP)
	$(PY) -m gpubackend run --out $(REPORTS)

test: $(STAMP)
	$(PY) -m pytest -n $(WORKERS) $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(REPORTS) .pytest_cache .hypothesis
