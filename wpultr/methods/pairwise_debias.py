"""Pairwise debiasing, the position-bias correction of Unbiased LambdaMART (Hu, Wang, Peng, Li, WWW 2019),
for the neural rankers.

Hu et al. model a click as P(c_i^+) = t_i^+ P(r_i^+) and a non-click as P(c_j^-) = t_j^- P(r_j^-), with
positional ratios t^+ (click over relevance) and t^- (non-click over irrelevance), and minimise

    L = Σ_q Σ_{(i,j): c_i=1, c_j=0} ℓ(s_i, s_j) / (t^+_{k(i)} t^-_{k(j)})  +  ||t^+||_p^p + ||t^-||_p^p,
    with t^+_1 = t^-_1 = 1,

alternately over the ranker and over (t^+, t^-). Setting the derivative in t to zero gives their
closed-form updates, relative to position 1:

    t^+_k = [ Σ_{pairs, k(i)=k} ℓ_ij / t^-_{k(j)}  /  Σ_{pairs, k(i)=1} ℓ_ij / t^-_{k(j)} ]^{1/(p+1)}
    t^-_k = [ Σ_{pairs, k(j)=k} ℓ_ij / t^+_{k(i)}  /  Σ_{pairs, k(j)=1} ℓ_ij / t^+_{k(i)} ]^{1/(p+1)}

Here ℓ is the pairwise logistic (RankNet) loss log(1 + exp(−(s_i − s_j))) — the loss whose gradient
LambdaMART re-weights by |ΔNDCG|; the neural rankers take it directly (no lambda weighting). The sums
in the updates are kept as exponential moving averages over batches (step `pairwise_debias.step_size`,
as ULTRA's EM_step_size), and t^± are recomputed from them after every batch with the ranker's loss
values of that batch — Hu et al.'s alternating optimisation, done per batch instead of per boosting
round. p is `pairwise_debias.regularization_p` (ULTRA's default regulation_p = 1).

`train.loss` is not used (the method is pairwise). t^+ relative to position 1 are reported as the
method's propensities.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from .base import FitResult
from .losses.lists import pair_terms
from .propensities.position import as_table
from .training.trainer import ListBatch
from .training.warmup import warmed_up_trainer

if TYPE_CHECKING:
    from ..config import RunConfig


class PositionRatios:
    """t^+ and t^- by position (index 0 unused) and the moving sums their closed-form updates read."""

    def __init__(self, n_positions: int, p: float, step: float, device: torch.device):
        self.p, self.step = p, step
        self.t_plus = torch.ones(n_positions + 1, device=device)
        self.t_minus = torch.ones(n_positions + 1, device=device)
        self.sum_plus: torch.Tensor | None = None
        self.sum_minus: torch.Tensor | None = None

    def weights(self, pos_i: torch.Tensor, pos_j: torch.Tensor) -> torch.Tensor:
        """1 / (t^+_{k(i)} t^-_{k(j)}) of each pair."""
        return 1.0 / (self.t_plus[pos_i] * self.t_minus[pos_j])

    def update(self, pair_loss: torch.Tensor, pos_i: torch.Tensor, pos_j: torch.Tensor) -> None:
        """One closed-form update from this batch's pair losses (detached), per the module docstring."""
        n = self.t_plus.numel()
        plus = torch.zeros(n, device=pair_loss.device).index_add_(0, pos_i, pair_loss / self.t_minus[pos_j])
        minus = torch.zeros(n, device=pair_loss.device).index_add_(0, pos_j, pair_loss / self.t_plus[pos_i])
        if self.sum_plus is None:
            self.sum_plus, self.sum_minus = plus, minus
        else:
            self.sum_plus = (1 - self.step) * self.sum_plus + self.step * plus
            self.sum_minus = (1 - self.step) * self.sum_minus + self.step * minus
        exponent = 1.0 / (self.p + 1.0)
        for t, sums in ((self.t_plus, self.sum_plus), (self.t_minus, self.sum_minus)):
            if float(sums[1]) > 0:
                seen = sums > 0
                seen[0] = False
                t[seen] = (sums[seen] / sums[1]) ** exponent          # t_1 = 1 by construction
                t[1] = 1.0


class PairwiseDebias:
    name = "pairwise_debias"

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: "RunConfig") -> FitResult:
        trainer = warmed_up_trainer(train, valid, config)
        n_positions = int(trainer.lists.positions.max())
        p = float(config.pairwise_debias.regularization_p)   # > 0 and step in (0, 1]: checked when
        step = float(config.pairwise_debias.step_size)       # the config was loaded (PairwiseDebiasConfig)
        ratios = PositionRatios(n_positions, p, step, trainer.device)

        def loss(scores: torch.Tensor, batch: ListBatch):
            pair_loss, pos_i, pos_j = pair_terms(scores, batch.clicks, batch.mask, batch.positions)
            if pair_loss.numel() == 0:
                return scores.sum() * 0.0
            out = (pair_loss * ratios.weights(pos_i, pos_j)).sum() / len(batch.index)
            ratios.update(pair_loss.detach(), pos_i, pos_j)
            return out, {"pairs": float(pair_loss.numel())}

        for epoch in range(len(trainer.history), len(trainer.history) + config.train.epochs):
            start = time.perf_counter()
            stats = trainer.epoch(loss)
            trainer.record(epoch, stats, time.perf_counter() - start,
                           t_plus=as_table(ratios.t_plus[1:].cpu().numpy()),
                           t_minus=as_table(ratios.t_minus[1:].cpu().numpy()))
        ranker = trainer.finish()
        t_plus = ratios.t_plus[1:].cpu().numpy().astype(np.float64)
        return FitResult(ranker, trainer.history, {
            "method": self.name, "loss": "pairwise", "best_epoch": trainer.best_epoch,
            "propensities": as_table(t_plus), "t_plus": as_table(t_plus),
            "t_minus": as_table(ratios.t_minus[1:].cpu().numpy()),
            "regularization_p": p, "step_size": step})
