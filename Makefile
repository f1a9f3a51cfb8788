# compactsim — every target creates .venv and installs what it needs on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# two pytest-xdist workers; one file's tests run on one worker, so a module fixture is built once
# (the e2e default-suite run, a session fixture, is read by one file only: tests/e2e/conftest.py);
# files are handed out in collection order, which tests/conftest.py starts with the slow files
PYTEST_FLAGS ?= -q --durations=15 --numprocesses=2 --dist=loadfile --no-loadscope-reorder
# Python's bytecode cache (__pycache__, git-ignored) stays on even where the environment turns it off:
# the tests start many CLI, server and worker processes, and without the cache each one
# compiles compactsim again (about half a second of each `compactsim list`)
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-fast fuzz bench clean

# --no-compile: pip would byte-compile every installed module (torch's thousands among them), about
# 20 s of a fresh install; Python compiles the modules actually imported on first use instead (a few
# seconds, cached in __pycache__ as above)
$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-compile -e '.[test]'
	touch $(STAMP)

run: $(STAMP)  ## the default suite: every catalogue scenario, audited; writes compactsim-run/{summary.json,report.html}
	$(BIN)/compactsim run

test: $(STAMP)  ## the full test suite (what CI runs); installs headless Chromium for the report's browser test when it can
	scripts/ensure-chromium.sh
	$(BIN)/python -m pytest $(PYTEST_FLAGS)

test-fast: $(STAMP)  ## everything except tests marked slow
	$(BIN)/python -m pytest $(PYTEST_FLAGS) -m "not slow"

FUZZ_CASES ?= 100000
FUZZ_SEED ?= 0
fuzz: $(STAMP)  ## long evidence fuzz (FUZZ_CASES=100000, FUZZ_SEED=0): prints "N cases, K untyped", fails when K > 0
	$(BIN)/python -m tests.property.fuzz_driver --cases $(FUZZ_CASES) --seed $(FUZZ_SEED)

bench: $(STAMP)  ## every benchmark, ratios measured side by side; figures in bench/results/*.json, one summary table at the end
	status=0; for b in bench/bench_*.py; do $(BIN)/python $$b || { echo "FAILED: $$b"; status=1; }; done; \
	$(BIN)/python bench/summarize.py; exit $$status

clean:
	rm -rf $(VENV) build *.egg-info
