# The two README commands: `make demo` and `make test`. Each installs what it needs on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test test-unit lint sample bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# the CPU build that lies on disk: a plain `torch` request would pull a multi-GB CUDA build
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	# Graphviz renders `wpultr graph show --format svg|png`; best effort (needs apt and root), never fatal
	command -v dot >/dev/null || (apt-get install -y -q graphviz >/dev/null 2>&1 || \
	  (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q graphviz >/dev/null 2>&1)) || \
	  echo "graphviz not installed: svg/png graph rendering (and its test) will be skipped"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/wpultr run pipelines/demo.yaml --fresh
	$(BIN)/wpultr run pipelines/demo.yaml --fresh --set name=demo-bert --set ranker.backbone=bert --set data.max_sessions=2000

# CI's command: the linter first (ruff, configured in pyproject.toml: a lint error fails CI), then every test
test: lint
	$(BIN)/python -m pytest -q

# the unit tests alone, while working (docs/development.md)
test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -m "not e2e"

# ruff over the paths pyproject.toml's [tool.ruff] includes
lint: $(STAMP)
	$(BIN)/ruff check

sample: $(STAMP)
	$(BIN)/python -m wpultr.simulate.bundled_sample --out data/sample
