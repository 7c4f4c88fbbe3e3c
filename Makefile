# Two commands do all set-up on a fresh machine:
#   make serve   - venv + install + prepare models + start the server on 127.0.0.1:8000
#   make test    - the same set-up, then the whole test suite
# Both are idempotent: a second run re-installs nothing and re-exports nothing.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
EXTRAS ?= cpu,models,dev
# llama-cpp-python compiles from source; pip caches the built wheel (~/.cache/pip).
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: venv install models serve test test-fast lint format bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip wheel setuptools

venv: $(PY)

# torch first, pinned: the CPU wheel on disk (a loose torch requirement would pull a CUDA build).
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q torch==2.13.0
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(PIP) install -q -e '.[$(EXTRAS)]'
	touch $@

install: $(STAMP)

models: install
	$(PY) -m models.prepare

serve: models
	$(VENV)/bin/brief serve

test: models
	$(PY) -m pytest -q -rs $(PYTEST_ARGS) tests

# Unit tests only (fakes, no weights needed).
test-fast: install
	$(PY) -m pytest -q tests/unit

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: models
	$(PY) -m benchmarks.embed

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
