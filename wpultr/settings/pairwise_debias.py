"""Unbiased LambdaMART's settings (run config key `pairwise_debias`; Hu et al. 2019): read by pairwise_debias
(the neural form) and unbiased_lambdamart (the booster)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import require
from .checks import finite


@dataclass
class PairwiseDebiasConfig:
    KEY: ClassVar[str] = "pairwise_debias"

    regularization_p: float = 1.0       # p of the L_p regulariser of t+ and t-
    step_size: float = 0.1              # EMA step of the t+/t- statistics (pairwise_debias)

    def __post_init__(self) -> None:
        k = self.KEY
        require(finite(self.regularization_p, 0.0, low_open=True), f"{k}.regularization_p", "a finite number > 0",
                self.regularization_p)
        require(finite(self.step_size, 0.0, 1.0, low_open=True, high_open=False), f"{k}.step_size", "in (0, 1]",
                self.step_size)
