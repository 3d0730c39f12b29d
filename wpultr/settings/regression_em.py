"""Regression-EM's settings (run config key `regression_em`; Wang et al. 2018)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import require
from .checks import finite


@dataclass
class RegressionEMConfig:
    KEY: ClassVar[str] = "regression_em"

    step_size: float = 0.1              # step of θ towards each batch's M-step estimate
    sample_labels: bool = False         # sample binary labels (the paper), not posteriors

    def __post_init__(self) -> None:
        require(finite(self.step_size, 0.0, 1.0, low_open=True, high_open=False), f"{self.KEY}.step_size",
                "in (0, 1]", self.step_size)
