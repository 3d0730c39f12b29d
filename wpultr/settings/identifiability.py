"""Settings of the identifiability pre-flight (run config key `identifiability`).

Before a bias-modelling method trains, the train stage checks the identifiability graph of the bias
factors the method models (wpultr/identifiability/preflight.py). `on_disconnected` says what a
disconnected graph does: `warn` (record it in summary.json and the report), `merge` (node merging:
rewrite the bias-factor columns through the merged mapping before training), `fail` (stop with the
components), or `intervene` (node intervention, simulated logs only: the simulator plays the online
experiment, showing each prescribed swap in `intervention_sessions` extra sessions).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from ..errors import require

ON_DISCONNECTED = ("warn", "merge", "fail", "intervene")


@dataclass
class IdentifiabilityConfig:
    """What the train stage's identifiability check looks at and does when the graph is disconnected."""

    KEY: ClassVar[str] = "identifiability"

    on_disconnected: Literal["warn", "merge", "fail", "intervene"] = "warn"
    factors: list[str] | None = None        # bias factor columns; None: what the method models (position;
    #                                         BAL: position + its categorical page features)
    position_weight: float = 10.0           # merging cost (Eq. 7): position's scale in the bias feature
    intervention_sessions: int = 200        # `intervene`: simulated sessions that show each swap

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.on_disconnected in ON_DISCONNECTED, f"{k}.on_disconnected",
                f"one of {', '.join(map(repr, ON_DISCONNECTED))}", self.on_disconnected)
        require(self.factors is None or (len(self.factors) > 0 and len(set(self.factors)) == len(self.factors)
                                         and all(isinstance(f, str) and f.strip() for f in self.factors)),
                f"{k}.factors", "null (the method's own bias factors) or a non-empty list of distinct column names",
                self.factors)
        require(isinstance(self.position_weight, (int, float)) and math.isfinite(self.position_weight)
                and self.position_weight > 0, f"{k}.position_weight", "a finite number > 0", self.position_weight)
        require(isinstance(self.intervention_sessions, int) and not isinstance(self.intervention_sessions, bool)
                and self.intervention_sessions >= 1, f"{k}.intervention_sessions", "an integer >= 1",
                self.intervention_sessions)
