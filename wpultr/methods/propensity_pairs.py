"""Pairwise logistic loss with propensity pair weights for the neural rankers: PRS, PNS, IPS-pairwise, naive pairs.

The loss of a batch of sessions (Wang, Wang, Wang, SIGIR 2020, Eq. 9 with the logistic δ of §5.1) is

    L = Σ_sessions Σ_{i clicked, j not clicked} w(k(i), k(j)) · log(1 + exp(−(s_i − s_j)))  /  #sessions

with w from `prs.weighting` (`pair_weights`): PRS min(γ, θ_j/θ_i) (Eq. 11), PNS θ_j (Eq. 8),
IPS 1/θ_i (Eq. 6) or 1 (naive), θ the position propensities IPW uses (`propensity.source`).
`train.loss` is not used (the method is pairwise); the warm-up (`train.warmup_epochs`) is the shared one.
PRS-LambdaMART, the same weights on a booster's λ-pairs, is `propensity_lambdamart`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from .base import FitResult
from .losses.lists import pair_terms
from .propensities.pair_weights import resolve_pair_weights
from .training.distributed import SharedTrainerFit
from .training.trainer import ListBatch, SessionLists, build_ranker
from .training.warmup import warm_up

if TYPE_CHECKING:
    from ..config import RunConfig


def weighted_pair_loss(scores: torch.Tensor, batch: ListBatch, table: torch.Tensor):
    """Σ w(k_i, k_j) ℓ(s_i, s_j) over the batch's clicked/non-clicked pairs, per session of the batch."""
    pair_loss, pos_i, pos_j = pair_terms(scores, batch.clicks, batch.mask, batch.positions)
    if pair_loss.numel() == 0:
        return scores.sum() * 0.0, {"pairs": 0.0}
    weights = table[pos_i, pos_j]
    return (pair_loss * weights).sum() / len(batch.index), {"pairs": float(pair_loss.numel()),
                                                           "mean_weight": float(weights.mean())}


class PropensityPairs(SharedTrainerFit):
    name = "propensity_pairs"

    def fit_with(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig, trainer_class: type,
                 ranker: Any = None) -> FitResult:
        """As DDP ranks (`training.distributed`): the same pair weights as one process, the epochs on this
        rank's shares (the loss divides by the global batch's sessions)."""
        lists = SessionLists.from_frame(train)
        weights, info = resolve_pair_weights(train, config, int(lists.positions.max()))
        trainer = trainer_class(ranker if ranker is not None else build_ranker(config, train), train, valid, config,
                                lists=lists)
        warm_up(trainer)
        table = torch.as_tensor(weights, dtype=torch.float32, device=trainer.device)
        ranker = trainer.fit(lambda scores, batch: weighted_pair_loss(scores, batch, table),
                             normaliser=lambda b: float(len(b.index)))
        return FitResult(ranker, trainer.history, {"method": self.name, "loss": "pairwise",
                                                   "best_epoch": trainer.best_epoch, **info})
