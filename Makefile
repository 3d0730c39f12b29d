# The two README commands: `make demo` and `make test`. Each installs what it needs on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test sample bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# the CPU build that lies on disk: a plain `torch` request would pull a multi-GB CUDA build
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/wpultr run pipelines/demo.yaml --fresh
	$(BIN)/wpultr run pipelines/demo.yaml --fresh --set name=demo-bert --set ranker.backbone=bert

test: $(STAMP)
	$(BIN)/python -m pytest -q

sample: $(STAMP)
	$(BIN)/python -m wpultr.simulate.sample --out data/sample
