# The two set-up commands: `make demo` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch==2.13.0 resolves to the local CPU wheel on these machines (never CUDA wheels in CI).
$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[torch]"
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[torch,ray,slurm,tt,dev]"
	touch $@ $(STAMP_RUN)

demo: $(STAMP_RUN)
	$(BIN)/opatlas demo

test: $(STAMP_DEV)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

bench: $(STAMP_DEV)
	$(BIN)/python -m pytest benchmarks -q -p no:cacheprovider --benchmark-only

clean:
	rm -rf $(VENV) build dist src/*.egg-info opatlas.duckdb opatlas-demo
