# compactsim — every target creates .venv and installs what it needs on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_FLAGS ?= -q

.PHONY: run test test-fast bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)  ## the default suite: every catalogue scenario, audited; writes compactsim-run/{summary.json,report.html}
	$(BIN)/compactsim run

test: $(STAMP)  ## the full test suite (what CI runs)
	$(BIN)/python -m pytest $(PYTEST_FLAGS)

test-fast: $(STAMP)  ## everything except tests marked slow
	$(BIN)/python -m pytest $(PYTEST_FLAGS) -m "not slow"

bench: $(STAMP)  ## every benchmark, ratios measured side by side
	for b in bench/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
