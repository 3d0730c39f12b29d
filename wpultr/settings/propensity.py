"""Where the position-based methods get their examination propensities θ_k/θ_1 (run config key `propensity`).

Read by ipw, regression_em's and dla's reports, pairwise_framework, unbiased_lambdamart and the PRS methods
(`methods.propensities.position.resolve_propensities`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ..errors import require
from .checks import finite, int_at_least

SOURCES = ("auto", "randomisation", "harvest", "table")


@dataclass
class PropensityConfig:
    KEY: ClassVar[str] = "propensity"

    source: Literal["auto", "randomisation", "harvest", "table"] = "auto"
    table: dict[str, float] | None = None      # position -> propensity (relative to position 1); used by source
    #                                            'table' (and 'auto' when set)
    clip: float = 0.05                         # propensities raised to at least this: IPW weights <= 1 / clip
    randomisation_sessions: int = 20000        # RandPair sessions simulated for IPW's propensities
    harvest_iterations: int = 200              # EM iterations of the harvesting estimator

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.source in SOURCES, f"{k}.source", f"one of {', '.join(map(repr, SOURCES))}", self.source)
        require(self.table is None or _propensity_table(self.table), f"{k}.table",
                "null or a non-empty mapping {position >= 1: propensity > 0}", self.table)
        require(self.source != "table" or bool(self.table), f"{k}.table",
                "a mapping {position: propensity} for propensity.source 'table'", self.table)
        require(finite(self.clip, 0.0, 1.0, low_open=True, high_open=False), f"{k}.clip", "in (0, 1]", self.clip)
        for name in ("randomisation_sessions", "harvest_iterations"):
            require(int_at_least(getattr(self, name), 1), f"{k}.{name}", "an integer >= 1", getattr(self, name))


def _propensity_table(table: Mapping[Any, Any]) -> bool:
    try:
        return bool(table) and all(int(p) >= 1 and finite(float(v), 0.0, low_open=True) for p, v in table.items())
    except (TypeError, ValueError):
        return False
