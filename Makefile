# One command to set everything up and run the main job (`make demo`), one to set everything up
# and run the tests (`make test`). Both work on a fresh machine with only Python 3.11 and pip.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.petlab-installed

.PHONY: demo test lint docs docs-screenshots install clean torch

# concrete-python depends on torch (only for a convolution helper we never use). On a machine
# without an NVIDIA GPU we want the CPU-only build: torch from the public index is the CUDA build on
# Linux (several GB of nvidia-* wheels). So: no GPU and PyTorch's CPU index reachable (probed with a
# 5 s timeout) -> torch from that index; otherwise, or if that install fails, the default index.
TORCH := torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
PROBE := import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)
# pip compiles every installed .py file to bytecode by default, most of them never imported (torch's
# 2,285, which petlab never imports: petlab/deferred_torch.py): about 75 s of a fresh install on 2
# cores. Without it, Python compiles what it imports on first use and caches it; so the demo and the
# tests run with bytecode caching on even where the environment turns it off
# (PYTHONDONTWRITEBYTECODE=1, as on this project's machines): otherwise every server, client and
# Dask worker process compiled every module it imports from source, each time (measured: pytest
# 12 min against 9.6 with pip's bytecode).
WRITE_BYTECODE := env -u PYTHONDONTWRITEBYTECODE
PIP_INSTALL := $(BIN)/python -m pip install --quiet --no-compile

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	$(MAKE) --no-print-directory torch
	$(PIP_INSTALL) -e '.[dev,cluster,docs]'
	touch $(STAMP)

torch:
	@if nvidia-smi -L >/dev/null 2>&1; then \
		echo "torch: NVIDIA GPU found, $(TORCH) from the default index"; \
		$(PIP_INSTALL) '$(TORCH)'; \
	elif $(BIN)/python -c '$(PROBE)' '$(TORCH_CPU_INDEX)/torch/' 2>/dev/null; then \
		echo "torch: no GPU, CPU-only $(TORCH) from $(TORCH_CPU_INDEX)"; \
		$(PIP_INSTALL) --timeout 5 --retries 0 --index-url '$(TORCH_CPU_INDEX)' '$(TORCH)' \
		|| $(PIP_INSTALL) '$(TORCH)'; \
	else \
		echo "torch: $(TORCH_CPU_INDEX) not reachable, $(TORCH) from the default index" \
			"(on Linux that is the CUDA build unless a local wheel is found)"; \
		$(PIP_INSTALL) '$(TORCH)'; \
	fi
	@$(BIN)/python -c 'import importlib.metadata as m; print("torch:", m.version("torch"), "installed")'

install: $(STAMP)

demo: $(STAMP)
	$(WRITE_BYTECODE) $(BIN)/petlab-experiments all --quick

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site, into site/; --strict fails on a broken link or a page missing from the nav.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict  # not --quiet: it hides the warnings --strict counts

# Screenshots of every page of the built site in headless Chromium, into screenshots/ (checked by
# eye: figures, wide tables and code blocks). Needs chromium; not part of `make test`.
docs-screenshots: docs
	PYTHON=$(BIN)/python scripts/docs_screenshots.sh screenshots

# The suite on PYTEST_WORKERS processes (pytest-xdist): most tests are single-threaded (concrete's
# compiler, key generation and evaluation, server processes), so 2 workers on 2 cores cut the wall
# time; worksteal hands a long test's neighbours to the idle worker. Tests are deterministic per
# worker (hypothesis's `ci` profile in tests/conftest.py, fixed seeds, port 0, per-test temp dirs).
# The static checks (lint, docs: about 30 s of CPU, mostly mypy) run beside the suite at a lower
# priority, in the gaps its server and process tests leave, and their output is printed after it;
# `make test` fails if either fails.
# One OpenMP thread per process (concrete's runtime, scikit-learn's k-means): the workers already
# fill the cores, and OpenMP threads beside them only wait for a core or spin on tiny loops.
PYTEST_WORKERS ?= 2
PYTEST_OMP_THREADS ?= 1
# Coverage ([tool.coverage] in pyproject.toml: the test processes): the total is printed at the end and below `fail_under` fails the suite; the table per
# file: `.venv/bin/coverage report` afterwards. `PYTEST_COVERAGE= make test` runs without it.
PYTEST_COVERAGE ?= --cov --cov-report=
CHECKS_LOG := $(VENV)/checks.log
test: $(STAMP)
	@nice -n 10 $(MAKE) --no-print-directory lint docs >$(CHECKS_LOG) 2>&1 & checks=$$!; \
	$(WRITE_BYTECODE) OMP_NUM_THREADS=$(PYTEST_OMP_THREADS) \
		$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal --durations=40 $(PYTEST_COVERAGE); \
	suite=$$?; wait $$checks; lint=$$?; \
	echo "--- make lint docs (run beside the suite) ---"; cat $(CHECKS_LOG); \
	echo "make test: suite exit $$suite, lint and docs exit $$lint"; \
	test $$suite -eq 0 && test $$lint -eq 0

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .petlab-cache site .coverage .coverage.*
