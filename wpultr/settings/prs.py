"""The pair weights of propensity_pairs and propensity_lambdamart (run config key `prs`; Wang et al. 2020)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ..errors import require
from .checks import finite

WEIGHTINGS = ("prs", "pns", "ips", "naive")


@dataclass
class PRSConfig:
    KEY: ClassVar[str] = "prs"

    weighting: Literal["prs", "pns", "ips", "naive"] = "prs"   # what weighs a clicked-over-skipped pair
    clip: float = 1.0                                           # PRS's γ: pair weights min(γ, θ_j/θ_i) (Eq. 11)

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.weighting in WEIGHTINGS, f"{k}.weighting", f"one of {', '.join(map(repr, WEIGHTINGS))}",
                self.weighting)
        require(finite(self.clip, 0.0, low_open=True), f"{k}.clip", "a finite number > 0", self.clip)
