"""Every LightGBM knob in one place (run config key `ranker.lightgbm`): the booster backbone of bal and naive, the
methods that grow a booster on a custom objective, and the lambdarank methods (lightgbm_lambdarank,
lightgbm_position), which grow `rounds` trees in one fit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import require
from .checks import finite, int_at_least


@dataclass
class LightGBMConfig:
    KEY: ClassVar[str] = "ranker.lightgbm"

    rounds_per_epoch: int = 50            # boosting rounds each (warm-up, BAL or naive) epoch adds to the booster
    learning_rate: float = 0.05
    num_leaves: int = 31
    min_data_in_leaf: int = 20
    num_threads: int = 0                  # 0 = LightGBM's default (all cores)
    rounds: int = 200                     # lambdarank methods: boosting rounds of the one fit
    eval_points: int = 10                 # lambdarank methods: boosting checkpoints scored on validation
    position_bias_regularization: float = 0.0   # lightgbm_position: lambdarank_position_bias_regularization
    distributed: bool | str = "auto"      # lambdarank methods: lightgbm.dask on the run's cluster: auto | true | false

    def __post_init__(self) -> None:
        k = self.KEY
        for name in ("rounds_per_epoch", "min_data_in_leaf", "rounds", "eval_points"):
            require(int_at_least(getattr(self, name), 1), f"{k}.{name}", "an integer >= 1", getattr(self, name))
        require(finite(self.learning_rate, 0, 1, low_open=True, high_open=False), f"{k}.learning_rate",
                "a number in (0, 1]", self.learning_rate)
        require(int_at_least(self.num_leaves, 2), f"{k}.num_leaves", "an integer >= 2", self.num_leaves)
        require(int_at_least(self.num_threads, 0), f"{k}.num_threads", "an integer >= 0 (0 = all cores)",
                self.num_threads)
        require(finite(self.position_bias_regularization, 0.0), f"{k}.position_bias_regularization",
                "a finite number >= 0", self.position_bias_regularization)
        require(isinstance(self.distributed, bool) or self.distributed == "auto", f"{k}.distributed",
                "auto, true or false", self.distributed)
