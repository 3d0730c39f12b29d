"""IPW: the click loss with each click weighted by 1 / θ_position (Joachims et al. 2017; Wang et al. 2016).

Propensities θ_k/θ_1 come from `propensity.source` (see `propensity.resolve_propensities`):
a RandPair result-randomisation experiment (from logs with the randpair columns, or run on the
simulator), intervention harvesting from the logs, or a given table; they are clipped below at
`propensity.clip` so no weight exceeds 1 / clip.

Losses (`train.loss`):
* listwise: Σ_i (c_i / θ_i)(−log softmax(s)_i) over all clicks, divided by Σ c_i/θ_i (Ai et al. 2018's
  propensity-weighted softmax loss, as ULTRA's IPW): unbiased for the relevance-weighted softmax loss.
* pointwise: binary cross-entropy against the target c_i / θ_i, i.e. −[(c/θ) log σ(s) + (1 − c/θ) log(1 − σ(s))]
  (the unbiased pointwise estimator of Saito et al. 2020 / Bekker et al. 2019: its expectation over
  clicks is the cross-entropy against relevance, E[c/θ] = r). Weighting every row's BCE by 1/θ
  instead would up-weight non-clicks at low positions too and stay biased.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from .base import FitResult
from .losses import click_loss_named
from .propensities.position import as_table, propensity_array, resolve_propensities
from .training.distributed import SharedTrainerFit
from .training.trainer import ListBatch, SessionLists, build_ranker
from .training.warmup import warm_up

if TYPE_CHECKING:
    from ..config import RunConfig


def ipw_loss(kind: str, scores: torch.Tensor, batch: ListBatch, inverse: torch.Tensor) -> torch.Tensor:
    """The IPW click loss of a batch; `inverse` is 1/θ indexed by position (index 0: padding)."""
    # pointwise: target c/θ, E = r; listwise: Σ c/θ · CE (losses.CLICK_LOSSES, each click keeping its weight)
    return click_loss_named(kind).weighted(scores, batch.clicks, batch.mask, inverse[batch.positions])


class IPW(SharedTrainerFit):
    name = "ipw"

    def fit_with(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig, trainer_class: type,
                 ranker: Any = None) -> FitResult:
        """As DDP ranks (`training.distributed`): the same propensities as one process (every rank estimates
        them from the same table), the IPW epochs on this rank's shares."""
        table, info = resolve_propensities(train, config)
        clip = float(config.propensity.clip)         # in (0, 1]: checked when the config was loaded
        lists = SessionLists.from_frame(train)
        theta = propensity_array(table, int(lists.positions.max()), clip)
        trainer = trainer_class(ranker if ranker is not None else build_ranker(config, train), train, valid, config,
                                lists=lists)
        warm_up(trainer)
        inverse = torch.as_tensor(1.0 / theta, dtype=torch.float32, device=trainer.device)
        kind = config.train.loss
        step = click_loss_named(kind)
        # normaliser: what the loss divides by, for the DDP ranks' shares
        ranker = trainer.fit(lambda scores, batch: ipw_loss(kind, scores, batch, inverse),
                             normaliser=lambda b: step.weighted_normaliser(b.clicks, b.mask, inverse[b.positions]))
        return FitResult(ranker, trainer.history, {
            "method": self.name, "loss": kind, "best_epoch": trainer.best_epoch,
            "propensities": as_table(theta[1:]),          # as used: relative to position 1, clipped
            "estimated": table, "clip": clip, **info})

