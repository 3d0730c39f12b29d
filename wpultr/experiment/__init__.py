"""Experiments over methods × seeds (× settings): run on Dask, gathered into the paper's tables and figures."""
from __future__ import annotations

import importlib
from typing import Any

# name -> submodule; imported on first use (PEP 562) so that `wpultr --help` does not start Dask
_EXPORTS = {"read_records": "harness", "run_experiment": "harness", "Experiment": "spec", "ExperimentSpec": "spec",
            "RunRecord": "spec", "RunSpec": "spec", "experiment_from_dict": "spec", "load_experiment": "spec"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
