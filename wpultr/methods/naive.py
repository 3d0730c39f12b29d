"""Naive: clicks taken as relevance labels (BAL Eq. 3), with a pointwise or a listwise (softmax) loss.

The reproducibility study of Baidu-ULTR found the listwise naive ranker hard to beat, so both are
offered (`train.loss`). Everything the page does to clicks is learned as if it were relevance.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from .base import FitResult
from .losses import click_loss
from .training import Trainer, build_ranker
from .warmup import warm_up

if TYPE_CHECKING:
    from ..config import RunConfig


class Naive:
    name = "naive"

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: "RunConfig") -> FitResult:
        trainer = Trainer(build_ranker(config, train), train, valid, config)
        warm_up(trainer)
        kind = config.train.loss
        ranker = trainer.fit(lambda scores, batch: click_loss(kind, scores, batch.clicks, batch.mask),
                             first_epoch=len(trainer.history))
        return FitResult(ranker, trainer.history, {"method": self.name, "loss": kind,
                                                    "best_epoch": trainer.best_epoch})
