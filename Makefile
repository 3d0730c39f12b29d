# The two README commands: `make demo` and `make test`. Each installs what it needs on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# the versions the suite last passed with (tools/constraints.py; regenerate deliberately: docs/development.md)
CONSTRAINTS := constraints.txt
LATEST := .venv-latest
FROM   ?= $(VENV)

.PHONY: install demo test test-unit test-latest constraints lint sample bench

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# the CPU build that lies on disk: a plain `torch` request would pull a multi-GB CUDA build
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) torch==2.13.0
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[test]'
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

# the suite on the newest releases pyproject.toml's ranges allow: a venv of its own (.venv-latest), built afresh
# without constraints.txt (torch stays the CPU build 2.13.0); if it passes, `make constraints FROM=.venv-latest`
# records those versions (docs/development.md)
test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --upgrade pip
	$(LATEST)/bin/python -m pip install --quiet torch==2.13.0
	$(LATEST)/bin/python -m pip install --quiet -e '.[test]'
	$(LATEST)/bin/python -m pip list --format=freeze | grep -iE '^(numpy|pandas|pyarrow|dask|torch|transformers)=='
	$(LATEST)/bin/ruff check
	$(LATEST)/bin/python -m pytest -q

# constraints.txt from the versions installed in $(FROM) (.venv, or .venv-latest after `make test-latest`)
constraints:
	$(FROM)/bin/python tools/constraints.py --extras test > $(CONSTRAINTS).tmp
	mv $(CONSTRAINTS).tmp $(CONSTRAINTS)

# the unit tests alone, while working (docs/development.md)
test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -m "not e2e"

# ruff over the paths pyproject.toml's [tool.ruff] includes
lint: $(STAMP)
	$(BIN)/ruff check

sample: $(STAMP)
	$(BIN)/python -m wpultr.simulate.bundled_sample --out data/sample
