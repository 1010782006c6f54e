# One command to set everything up and run the main job (`make demo`), one to set everything up
# and run the tests (`make test`). Both work on a fresh machine with only Python 3.11 and pip.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.petlab-installed

.PHONY: demo test lint install clean

# concrete-python depends on torch (only for a convolution helper we never use). Asking for the
# CPU build first keeps pip from pulling a multi-gigabyte CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet 'torch==2.13.0'
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/petlab-experiments all --quick

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/typecheck.py

test: lint
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .petlab-cache
