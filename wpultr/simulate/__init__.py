"""Whole-page click simulator with known truth: corpus, logging policy, page features, user models, true graph.

`simulate(cfg, seed)` returns SimulatedLogs; `python -m wpultr.simulate.bundled_sample` writes the bundled sample.
Attributes load on first use; the `data.simulate` section itself is `wpultr.settings.simulate`.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "simulate": ".generate",
    "SimulatedLogs": ".generate",
    "USER_MODELS": ".user_models",
    "TRUE_RELEVANCE": ".truth",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name], __name__), name)
