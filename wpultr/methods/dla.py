"""DLA, the dual learning algorithm (Ai, Bi, Luo, Guo, Croft, SIGIR 2018, "Unbiased learning to rank with
unbiased propensity estimation"), in the form of ULTRA's DLA.

Two models are learned together from the same clicks:
* the ranker f (scores s_i), trained with the inverse-propensity-weighted softmax loss
      l_IRM = Σ_i c_i · (P(o_1)/P(o_i)) · (−log softmax(s)_i)
* the propensity model g — one logit per position (ULTRA's propensity network on a one-hot position
  is exactly that) — trained with the inverse-relevance-weighted softmax loss, the dual problem
      l_IPM = Σ_i c_i · (P(r_1)/P(r_i)) · (−log softmax(g)_i)
where P(o_1)/P(o_i) = softmax(g)_1/softmax(g)_i = exp(g_1 − g_i) and P(r_1)/P(r_i) = exp(s_1 − s_i) with
s_1 the score of the result shown at the top of the same list (the paper's ratio to position 1).
Each weight is a constant for the other model's loss (ULTRA takes each loss's gradient with respect to
its own model only), and both are clipped at `dla.max_weight` (both losses: `losses.dla_losses`).
Both are summed over clicks, not normalised per list (`losses.weighted_softmax_loss`); the minimiser over g
of the summed l_IPM is softmax(g)_k ∝ Σ c_k r_1/r_k, whose expectation is θ_k r_1, i.e. softmax(g)_k ∝ θ_k.
Loss = l_IPM + `dla.ranker_loss_weight` · l_IRM, one Adam with two parameter groups: the
ranker at `train.learning_rate`, the logits at `dla.propensity_learning_rate` (ULTRA's
propensity_learning_rate).

The propensities reported are exp(g_k − g_1), i.e. normalised to position 1. DLA is listwise by
construction; `train.loss` is not used.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from ..rankers.base import resolve_device
from .base import FitResult
from .losses.lists import dla_losses
from .propensities.position import as_table
from .training.trainer import ListBatch, SessionLists, Trainer, build_ranker
from .training.warmup import warm_up

if TYPE_CHECKING:
    from ..config import RunConfig


def relative_propensities(logits: torch.Tensor) -> np.ndarray:
    """exp(g_k − g_1): the propensity of each position over position 1's."""
    values = logits.detach().cpu().double()
    return torch.exp(values - values[0]).numpy()


class DLA:
    name = "dla"

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: "RunConfig") -> FitResult:
        lists = SessionLists.from_frame(train)
        n_positions = int(lists.positions.max())
        logits = torch.nn.Parameter(torch.zeros(n_positions, device=resolve_device(config.train.device)))
        trainer = Trainer(build_ranker(config, train), train, valid, config, lists=lists)
        # the propensity logits get their own learning rate (ULTRA's propensity_learning_rate): a handful
        # of parameters that must move by ~log(θ_1/θ_K) need larger steps than the ranker's weights
        propensity_lr = float(config.dla.propensity_learning_rate)   # > 0: checked at config load
        trainer.optimizer.add_param_group({"params": [logits], "lr": propensity_lr, "weight_decay": 0.0})
        warm_up(trainer)
        weight = float(config.dla.ranker_loss_weight)
        max_weight = float(config.dla.max_weight)                   # > 1: checked at config load

        def loss(scores: torch.Tensor, batch: ListBatch):
            rank_loss, exam_loss = dla_losses(scores, logits, batch.positions, batch.clicks, batch.mask,
                                              max_weight)
            return exam_loss + weight * rank_loss, {"rank_loss": float(rank_loss.detach()),
                                                    "exam_loss": float(exam_loss.detach())}

        for epoch in range(len(trainer.history), len(trainer.history) + config.train.epochs):
            start = time.perf_counter()
            stats = trainer.epoch(loss)
            trainer.record(epoch, stats, time.perf_counter() - start,
                           propensities=as_table(relative_propensities(logits)))
        ranker = trainer.finish()
        return FitResult(ranker, trainer.history, {
            "method": self.name, "loss": "listwise", "best_epoch": trainer.best_epoch,
            "propensities": as_table(relative_propensities(logits)),
            "logits": as_table(logits.detach().cpu().numpy()),
            "ranker_loss_weight": weight, "max_weight": max_weight, "propensity_learning_rate": propensity_lr})
