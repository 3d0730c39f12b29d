"""Naive: clicks taken as relevance labels (BAL Eq. 3), with a pointwise or a listwise (softmax) loss.

The reproducibility study of Baidu-ULTR found the listwise naive ranker hard to beat, so both are
offered (`train.loss`). Everything the page does to clicks is learned as if it were relevance.
With `ranker.backbone: lightgbm` the same losses train a booster by custom objective
(`gbdt_objectives`): the like-for-like baseline of BAL with the LightGBM backbone.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from .base import FitResult
from .losses import click_loss

if TYPE_CHECKING:
    from ..config import RunConfig


class Naive:
    name = "naive"

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: "RunConfig") -> FitResult:
        kind = config.train.loss
        if config.ranker.backbone == "lightgbm":
            return self.fit_booster(train, valid, config)
        from .warmup import warmed_up_trainer   # here: it imports transformers, which a booster never needs
        trainer = warmed_up_trainer(train, valid, config)
        ranker = trainer.fit(lambda scores, batch: click_loss(kind, scores, batch.clicks, batch.mask),
                             first_epoch=len(trainer.history))
        return FitResult(ranker, trainer.history, {"method": self.name, "loss": kind,
                                                    "best_epoch": trainer.best_epoch})

    def fit_booster(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: "RunConfig") -> FitResult:
        """The naive click loss as a LightGBM custom objective, `ranker.lightgbm.rounds_per_epoch` trees per epoch."""
        from .gbdt_training import BoostingTrainer
        trainer = BoostingTrainer(train, valid, config)
        trainer.warm_up()
        ranker = trainer.fit(*trainer.naive_objective(config.train.loss))
        return FitResult(ranker, trainer.history, {"method": self.name, "loss": config.train.loss,
                                                    "backbone": "lightgbm", "best_epoch": trainer.best_epoch,
                                                    "rounds": trainer.rounds,
                                                    "best_rounds": trainer.best[2] if trainer.best else trainer.rounds})
