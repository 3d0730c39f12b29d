"""Settings of BAL's influence estimators and importance weights (run config keys `bal.influence`, `bal.weights`).

Kept free of torch so loading a run config (and the CLI) stays fast.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class InfluenceConfig:
    """Influence-estimator training (run config key `bal.influence`); defaults fit 10k–100k rows in seconds on CPU."""

    hidden: list[int] = field(default_factory=lambda: [64, 64])  # MLP hidden widths (Eq. 6: W^1 … W^L)
    epochs: int = 200                 # at most this many passes over the training rows
    patience: int = 8                 # stop after this many epochs without a better validation NLL
    min_delta: float = 1e-4           # an improvement smaller than this (nats per row) does not count
    learning_rate: float = 3e-3       # Adam
    weight_decay: float = 0.0         # Adam's L2 term
    lr_decay: float = 0.5             # learning rate × this after lr_patience epochs without improvement
    lr_patience: int = 2
    batch_size: int = 512
    valid_fraction: float = 0.1       # rows held out (drawn by the seed) for early stopping
    min_std: float = 1e-2             # floor of a Gaussian head's std, in standardised units
    # which numerator p(x | m) the weights use: "auto" = an unconditional model p(x) for case 1 and
    # the permutation average over r̂ for case 2 (BAL §3.2); "model" = a fitted p(x | parents \ r̂) for
    # both cases; "permutation" = the permutation average for both cases
    numerator: Literal["auto", "model", "permutation"] = "auto"
    device: str = "cpu"

    def __post_init__(self) -> None:
        self.hidden = [int(h) for h in self.hidden]
        checks = {"hidden": all(h > 0 for h in self.hidden), "epochs": self.epochs > 0,
                  "patience": self.patience > 0, "min_delta": self.min_delta >= 0,
                  "learning_rate": self.learning_rate > 0, "weight_decay": self.weight_decay >= 0,
                  "lr_decay": 0.0 < self.lr_decay <= 1.0, "lr_patience": self.lr_patience >= 0,
                  "batch_size": self.batch_size > 0, "valid_fraction": 0.0 <= self.valid_fraction < 1.0,
                  "min_std": self.min_std > 0,
                  "numerator": self.numerator in ("auto", "model", "permutation")}
        expected = {"hidden": "positive widths", "epochs": "> 0", "patience": "> 0", "min_delta": ">= 0",
                    "learning_rate": "> 0", "weight_decay": ">= 0", "lr_decay": "in (0, 1]", "lr_patience": ">= 0",
                    "batch_size": "> 0",
                    "valid_fraction": "in [0, 1)", "min_std": "> 0",
                    "numerator": "one of 'auto', 'model', 'permutation'"}
        for key, ok in checks.items():
            if not ok:
                raise ValueError(f"influence.{key}: expected {expected[key]}, got {getattr(self, key)!r}")


@dataclass
class WeightConfig:
    """Importance-weight settings (run config key `bal.weights`)."""

    n_permutations: int = 16              # K permutations of r̂ for a permutation-averaged numerator
    max_weight: float | None = 20.0       # cap on a self-normalised weight (mean 1); None: no fixed cap
    clip_quantile: float | None = None    # cap at this quantile of the self-normalised weights; None: none

    def __post_init__(self) -> None:
        if self.n_permutations < 1:
            raise ValueError(f"weights.n_permutations: expected >= 1, got {self.n_permutations!r}")
        if self.max_weight is not None and not self.max_weight >= 1.0:
            raise ValueError(f"weights.max_weight: expected >= 1 (weights have mean 1) or null, got {self.max_weight!r}")
        if self.clip_quantile is not None and not 0.0 < self.clip_quantile <= 1.0:
            raise ValueError(f"weights.clip_quantile: expected in (0, 1] or null, got {self.clip_quantile!r}")
