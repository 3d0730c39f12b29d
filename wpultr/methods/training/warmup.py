"""The warm-up every method gives its ranker before its own loss (BAL §4.1): masked-LM on the result texts
plus the naive click loss (Eq. 3); it runs on the shared trainer (trainer.py).

For the BERT backbone each step adds the masked-LM loss of the batch's texts (weight
`train.mlm_weight`); the dense MLP has no text, so its warm-up is the naive click loss alone.
Warm-up epochs are recorded in the trainer's history with `"phase": "warmup"`.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pandas as pd
import torch

from ...rankers.base import CLS_VECTORS, Inputs, Ranker, take
from ..losses import click_loss
from .trainer import ListBatch, Trainer, build_ranker

if TYPE_CHECKING:
    from ...config import RunConfig


def trains_masked_lm(ranker: Ranker, inputs: Inputs) -> bool:
    """A BERT ranker whose encoder trains on its texts (not frozen, no cached [CLS] vectors) adds the masked LM.
    Any other ranker never imports the BERT module (transformers: seconds in every fresh DDP rank)."""
    if type(ranker).__module__ != "wpultr.rankers.bert":
        return False
    return not getattr(ranker, "freeze_encoder", True) and CLS_VECTORS not in inputs


def warm_up(trainer: Trainer, epochs: int | None = None) -> None:
    """Run `train.warmup_epochs` (or `epochs`) warm-up epochs on `trainer`."""
    cfg = trainer.cfg.train
    n = cfg.warmup_epochs if epochs is None else epochs
    ranker = trainer.ranker
    with_mlm = trains_masked_lm(ranker, trainer.inputs)

    def loss(scores: torch.Tensor, batch: ListBatch):
        naive = click_loss(cfg.loss, scores, batch.clicks, batch.mask)
        if not with_mlm:
            return naive, {"click": float(naive.detach())}
        rows = batch.rows[batch.rows >= 0]
        with trainer.autocast():     # the masked LM's encoder pass in the run's precision, as the scores'
            mlm = ranker.mlm_loss(take(trainer.inputs, rows, trainer.device), cfg.mlm_probability, trainer.generator)
        return naive + cfg.mlm_weight * mlm, {"click": float(naive.detach()), "mlm": float(mlm.detach())}

    for epoch in trainer.epoch_range(n):       # on a resume, only the warm-up epochs not yet finished
        start = time.perf_counter()
        stats = trainer.warmup_epoch(loss, with_mlm)
        trainer.record(epoch, stats, time.perf_counter() - start, phase="warmup")


def warmed_up_trainer(train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> Trainer:
    """Every neural method's opening: a new ranker for `config` on the shared trainer, warmed up (§4.1)."""
    trainer = Trainer(build_ranker(config, train), train, valid, config)
    warm_up(trainer)
    return trainer
