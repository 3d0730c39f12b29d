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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from .base import FitResult
from .losses.lists import pair_terms
from .propensities.position import as_table
from .training.distributed import SharedTrainerFit
from .training.trainer import ListBatch, build_ranker
from .training.warmup import warm_up

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

    def update(self, pair_loss: torch.Tensor, pos_i: torch.Tensor, pos_j: torch.Tensor,
               all_sum: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> int:
        """One closed-form update from this batch's pair losses (detached), per the module docstring; the sums are
        the global batch's (`all_sum`: over the DDP ranks' shares, `Trainer.all_sum`). A batch without a pair changes
        nothing. Returns the batch's pairs."""
        n = self.t_plus.numel()
        plus = torch.zeros(n, device=pair_loss.device).index_add_(0, pos_i, pair_loss / self.t_minus[pos_j])
        minus = torch.zeros(n, device=pair_loss.device).index_add_(0, pos_j, pair_loss / self.t_plus[pos_i])
        summed = all_sum(torch.cat([plus, minus, torch.full((1,), float(pair_loss.numel()), device=plus.device)]))
        pairs = int(summed[-1])
        if pairs == 0:
            return 0
        plus, minus = summed[:n], summed[n: 2 * n]
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
        return pairs

    def state_dict(self) -> dict[str, torch.Tensor]:
        """t± and the moving sums (empty before the first batch with a pair), for the trainer's checkpoint."""
        empty = torch.zeros(0)
        return {"t_plus": self.t_plus.cpu().clone(), "t_minus": self.t_minus.cpu().clone(),
                "sum_plus": empty if self.sum_plus is None else self.sum_plus.cpu().clone(),
                "sum_minus": empty if self.sum_minus is None else self.sum_minus.cpu().clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        device = self.t_plus.device
        self.t_plus.copy_(state["t_plus"].to(device))
        self.t_minus.copy_(state["t_minus"].to(device))
        self.sum_plus = state["sum_plus"].to(device) if state["sum_plus"].numel() else None
        self.sum_minus = state["sum_minus"].to(device) if state["sum_minus"].numel() else None


class PairwiseDebias(SharedTrainerFit):
    name = "pairwise_debias"

    def fit_with(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig, trainer_class: type,
                 ranker: Any = None) -> FitResult:
        """As DDP ranks (`training.distributed`): the pair loss on this rank's share of each global batch, the
        t± updates from the batch's sums over the ranks (every rank holds one process's t±)."""
        trainer = trainer_class(ranker if ranker is not None else build_ranker(config, train), train, valid, config)
        warm_up(trainer)
        n_positions = int(trainer.lists.positions.max())
        p = float(config.pairwise_debias.regularization_p)   # > 0 and step in (0, 1]: checked when
        step = float(config.pairwise_debias.step_size)       # the config was loaded (PairwiseDebiasConfig)
        ratios = trainer.keep("pairwise_debias_ratios", PositionRatios(n_positions, p, step, trainer.device))

        def loss(scores: torch.Tensor, batch: ListBatch):
            pair_loss, pos_i, pos_j = pair_terms(scores, batch.clicks, batch.mask, batch.positions)
            if pair_loss.numel() == 0:
                out = scores.sum() * 0.0
            else:
                out = (pair_loss * ratios.weights(pos_i, pos_j)).sum() / len(batch.index)
            pairs = ratios.update(pair_loss.detach(), pos_i, pos_j, trainer.all_sum)
            return out, {"pairs": float(pairs)}

        for epoch in trainer.epoch_range(config.train.epochs):
            start = time.perf_counter()     # the loss divides by the batch's sessions
            stats = trainer.epoch(loss, normaliser=lambda b: float(len(b.index)))
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
