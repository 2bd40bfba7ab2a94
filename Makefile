# The two commands of the README: `make demo` (set up, then train the embedded default)
# and `make test` (set up, then lint and run every test). Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test setup bench clean

$(STAMP): pyproject.toml extensions/platoon-textcraft/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[live,hf,ray,vllm,dev]' -e extensions/platoon-textcraft
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/platoon train --out runs/demo

test: $(STAMP)
	$(BIN)/ruff check platoon tests benchmarks experiments extensions
	$(BIN)/python -m pytest

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
