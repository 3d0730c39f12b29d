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
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from ..rankers.base import resolve_device
from .base import FitResult
from .losses.lists import dla_sums
from .propensities.position import as_table
from .training.distributed import SharedTrainerFit
from .training.trainer import ListBatch, SessionLists, build_ranker
from .training.warmup import warm_up

if TYPE_CHECKING:
    from ..config import RunConfig


def relative_propensities(logits: torch.Tensor) -> np.ndarray:
    """exp(g_k − g_1): the propensity of each position over position 1's."""
    values = logits.detach().cpu().double()
    return torch.exp(values - values[0]).numpy()


class DLA(SharedTrainerFit):
    name = "dla"

    def fit_with(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig, trainer_class: type,
                 ranker: Any = None) -> FitResult:
        """As DDP ranks (`training.distributed`): both losses' sums on this rank's share of each global batch,
        divided by the global batch's total weights (summed over the ranks); the ranker's gradient averaged by DDP,
        the propensity logits' by the trainer (`sync_gradients`), so every rank holds one process's logits."""
        lists = SessionLists.from_frame(train)
        n_positions = int(lists.positions.max())
        logits = torch.nn.Parameter(torch.zeros(n_positions, device=resolve_device(config.train.device)))
        trainer = trainer_class(ranker if ranker is not None else build_ranker(config, train), train, valid, config,
                                lists=lists)
        # the propensity logits get their own learning rate (ULTRA's propensity_learning_rate): a handful
        # of parameters that must move by ~log(θ_1/θ_K) need larger steps than the ranker's weights
        propensity_lr = float(config.dla.propensity_learning_rate)   # > 0: checked at config load
        trainer.optimizer.add_param_group({"params": [logits], "lr": propensity_lr, "weight_decay": 0.0})
        trainer.keep("dla_logits", logits)
        warm_up(trainer)
        weight = float(config.dla.ranker_loss_weight)
        max_weight = float(config.dla.max_weight)                   # > 1: checked at config load

        def loss(scores: torch.Tensor, batch: ListBatch):
            rank_sum, rank_total, exam_sum, exam_total = dla_sums(scores, logits, batch.positions, batch.clicks,
                                                                  batch.mask, max_weight)
            totals = trainer.all_sum(torch.stack([rank_total, exam_total]))     # the global batch's
            rank_loss = rank_sum / totals[0] if bool(totals[0] > 0) else rank_sum * 0.0   # no click: no step
            exam_loss = exam_sum / totals[1] if bool(totals[1] > 0) else exam_sum * 0.0
            parts = trainer.all_sum(torch.stack([rank_loss.detach(), exam_loss.detach()]))
            return exam_loss + weight * rank_loss, {"rank_loss": float(parts[0]), "exam_loss": float(parts[1])}

        for epoch in trainer.epoch_range(config.train.epochs):
            start = time.perf_counter()     # the loss is already the global batch's share (normaliser 1)
            stats = trainer.epoch(loss, normaliser=lambda b: 1.0)
            trainer.record(epoch, stats, time.perf_counter() - start,
                           propensities=as_table(relative_propensities(logits)))
        ranker = trainer.finish()
        return FitResult(ranker, trainer.history, {
            "method": self.name, "loss": "listwise", "best_epoch": trainer.best_epoch,
            "propensities": as_table(relative_propensities(logits)),
            "logits": as_table(logits.detach().cpu().numpy()),
            "ranker_loss_weight": weight, "max_weight": max_weight, "propensity_learning_rate": propensity_lr})
