"""Naive: clicks taken as relevance labels (BAL Eq. 3), with a pointwise or a listwise (softmax) loss.

The reproducibility study of Baidu-ULTR found the listwise naive ranker hard to beat, so both are
offered (`train.loss`). Everything the page does to clicks is learned as if it were relevance.
With `ranker.backbone: lightgbm` the same losses train a booster by custom objective
(`losses.boosted`): the like-for-like baseline of BAL with the LightGBM backbone.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from ..errors import ConfigError
from ..settings.methods import BACKBONES
from .base import FitResult
from .losses import click_loss
from .training.distributed import fit_data_parallel
from .training.gbdt import BoostingTrainer
from .training.warmup import warmed_up_trainer

if TYPE_CHECKING:
    from ..config import RunConfig
    from .training.trainer import Trainer


class Naive:
    name = "naive"

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> FitResult:
        boosts = BACKBONES[config.ranker.backbone].boosts
        if boosts and config.train.processes > 1:
            raise ConfigError("train.processes: DDP ranks train the neural backbones ('mlp', 'bert'); a LightGBM "
                              "booster trains with lightgbm.dask on the run's cluster instead: set it to 1")
        if boosts:
            return self.fit_booster(train, valid, config)
        if config.train.streaming:
            raise ConfigError("train.streaming: true streams the sessions' partitions (methods.training.distributed."
                              "fit_streamed), not an in-memory table; set train.streaming: false to fit this one")
        if config.train.processes > 1:   # DDP ranks on loopback, each on its shard of every batch
            return fit_data_parallel(train, valid, config)
        return self.fit_trainer(warmed_up_trainer(train, valid, config), config)

    def fit_trainer(self, trainer: Trainer, config: RunConfig) -> FitResult:
        """The naive epochs on a warmed-up trainer (in memory, streamed or one DDP rank's)."""
        kind = config.train.loss
        ranker = trainer.fit(lambda scores, batch: click_loss(kind, scores, batch.clicks, batch.mask))
        return FitResult(ranker, trainer.history, {"method": self.name, "loss": kind,
                                                    "best_epoch": trainer.best_epoch})

    def fit_booster(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> FitResult:
        """The naive click loss as a LightGBM custom objective, `ranker.lightgbm.rounds_per_epoch` trees per epoch."""
        trainer = BoostingTrainer(train, valid, config)
        trainer.warm_up()
        ranker = trainer.fit(*trainer.naive_objective(config.train.loss))
        return FitResult(ranker, trainer.history, {"method": self.name, "loss": config.train.loss,
                                                    "backbone": "lightgbm", "best_epoch": trainer.best_epoch,
                                                    "rounds": trainer.rounds,
                                                    "best_rounds": trainer.best[2] if trainer.best else trainer.rounds})
