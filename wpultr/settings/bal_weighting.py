"""Settings of BAL's influence estimators and importance weights (run config keys `bal.influence`, `bal.weights`).

Kept free of torch so loading a run config (and the CLI) stays fast; each section checks itself when built
(ConfigError naming its dotted key).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ..errors import require

DEVICE = re.compile(r"train|cpu|auto|cuda(:\d+)?")   # "train": the training device; "auto": cuda if any


@dataclass
class InfluenceConfig:
    """Influence-estimator training (run config key `bal.influence`); defaults fit 10k–100k rows in seconds on CPU."""

    KEY: ClassVar[str] = "bal.influence"     # dotted key of this section in a run config (names its errors)

    hidden: list[int] = field(default_factory=lambda: [64, 64])  # MLP hidden widths (Eq. 6: W^1 … W^L)
    epochs: int = 200                 # at most this many passes over the training rows
    patience: int = 8                 # stop after this many epochs without a better validation NLL
    min_delta: float = 1e-4           # an improvement smaller than this (nats per row) does not count
    # Adam at 1e-2 over batches of 2048 rows: within 0.003 nats of the held-out NLL of 3e-3 over 512 on the
    # production world's 20 000 fitting rows (log-weights correlated 0.995) in about a tenth of the time,
    # warm-started fits included
    learning_rate: float = 1e-2       # Adam
    weight_decay: float = 0.0         # Adam's L2 term
    lr_decay: float = 0.5             # learning rate × this after lr_patience epochs without improvement
    lr_patience: int = 2
    batch_size: int = 2048
    valid_fraction: float = 0.1       # rows held out (drawn by the seed) for early stopping
    min_std: float = 1e-2             # floor of a Gaussian head's std, in standardised units
    # which numerator p(x | m) the weights use: "auto" = an unconditional model p(x) for case 1 and
    # the permutation average over r̂ for case 2 (BAL §3.2); "model" = a fitted p(x | parents \ r̂) for
    # both cases; "permutation" = the permutation average for both cases
    numerator: Literal["auto", "model", "permutation"] = "auto"
    device: str = "train"             # where the networks fit and run: "train" = the training device (train.device as
    #                                   resolved; the CPU when fitted outside a run), or a torch device name
    warm_start: bool = True           # start each epoch's networks from the last epoch's (same feature and parents)

    def __post_init__(self) -> None:
        self.hidden = [int(h) for h in self.hidden]
        k = self.KEY
        require(all(h > 0 for h in self.hidden), f"{k}.hidden", "a list of positive widths", self.hidden)
        require(self.epochs > 0, f"{k}.epochs", "> 0", self.epochs)
        require(self.patience > 0, f"{k}.patience", "> 0", self.patience)
        require(0.0 <= self.min_delta < float("inf"), f"{k}.min_delta", "a finite number >= 0", self.min_delta)
        require(0.0 < self.learning_rate < float("inf"), f"{k}.learning_rate", "a finite number > 0",
                self.learning_rate)
        require(0.0 <= self.weight_decay < float("inf"), f"{k}.weight_decay", "a finite number >= 0",
                self.weight_decay)
        require(0.0 < self.lr_decay <= 1.0, f"{k}.lr_decay", "in (0, 1]", self.lr_decay)
        require(self.lr_patience >= 0, f"{k}.lr_patience", ">= 0", self.lr_patience)
        require(self.batch_size > 0, f"{k}.batch_size", "> 0", self.batch_size)
        require(0.0 <= self.valid_fraction < 1.0, f"{k}.valid_fraction", "in [0, 1)", self.valid_fraction)
        require(0.0 < self.min_std < float("inf"), f"{k}.min_std", "a finite number > 0", self.min_std)
        require(self.numerator in ("auto", "model", "permutation"), f"{k}.numerator",
                "one of 'auto', 'model', 'permutation'", self.numerator)
        require(bool(DEVICE.fullmatch(str(self.device))), f"{k}.device", "'train', 'cpu', 'auto', 'cuda' or 'cuda:N'",
                self.device)
        require(isinstance(self.warm_start, bool), f"{k}.warm_start", "true or false", self.warm_start)


@dataclass
class WeightConfig:
    """Importance-weight settings (run config key `bal.weights`)."""

    KEY: ClassVar[str] = "bal.weights"

    n_permutations: int = 16              # K permutations of r̂ for a permutation-averaged numerator (at most)
    # at most this many rows × permutations per feature: K = min(n_permutations, max(1, this // rows)).
    # The average over permutations is unbiased for the numerator at any K, and its noise averages out over
    # the rows of the ranker step, so large logs need fewer; None: always n_permutations
    max_permuted_rows: int | None = 2_000_000
    max_weight: float | None = 20.0       # cap on a self-normalised weight (mean 1); None: no fixed cap
    clip_quantile: float | None = None    # cap at this quantile of the self-normalised weights; None: none

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.n_permutations >= 1, f"{k}.n_permutations", ">= 1", self.n_permutations)
        require(self.max_permuted_rows is None or self.max_permuted_rows >= 1, f"{k}.max_permuted_rows",
                "an integer >= 1 or null", self.max_permuted_rows)
        require(self.max_weight is None or 1.0 <= self.max_weight < float("inf"), f"{k}.max_weight",
                "a finite number >= 1 (weights have mean 1) or null", self.max_weight)
        require(self.clip_quantile is None or 0.0 < self.clip_quantile <= 1.0, f"{k}.clip_quantile",
                "in (0, 1] or null", self.clip_quantile)

    def permutations_for(self, rows: int) -> int:
        """K for a numerator over `rows` rows: n_permutations, fewer when rows × K would pass max_permuted_rows."""
        if self.max_permuted_rows is None:
            return self.n_permutations
        return max(1, min(self.n_permutations, self.max_permuted_rows // max(rows, 1)))
