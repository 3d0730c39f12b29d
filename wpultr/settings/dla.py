"""DLA's settings (run config key `dla`; the dual learning algorithm, Ai et al. 2018)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import require
from .checks import finite


@dataclass
class DLAConfig:
    KEY: ClassVar[str] = "dla"

    ranker_loss_weight: float = 1.0           # weight of the ranking loss against the propensity loss
    propensity_learning_rate: float = 0.02    # Adam step of the per-position logits
    max_weight: float = 20.0                  # clip of both inverse-ratio weights

    def __post_init__(self) -> None:
        k = self.KEY
        require(finite(self.ranker_loss_weight, 0.0), f"{k}.ranker_loss_weight", "a finite number >= 0",
                self.ranker_loss_weight)
        require(finite(self.propensity_learning_rate, 0.0, low_open=True), f"{k}.propensity_learning_rate",
                "a finite number > 0", self.propensity_learning_rate)
        require(finite(self.max_weight, 1.0, low_open=True), f"{k}.max_weight", "a finite number > 1",
                self.max_weight)
