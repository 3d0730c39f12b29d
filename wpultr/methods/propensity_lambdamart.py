"""PRS-LambdaMART (Wang, Wang, Wang, SIGIR 2020, §5.1): LambdaMART's λ-gradients on clicked/non-clicked pairs,
each pair re-weighted by its propensity weight, as a LightGBM custom objective on the boosted ranker.

Per session, for every clicked i and non-clicked j (the set I_q of §5.1),

    λ̃_ij = −σ |ΔNDCG_ij| / (1 + e^{σ(s_i − s_j)}) · w(k(i), k(j))

with |ΔNDCG_ij| the change of the session's NDCG (clicks as gains) when i and j swap places in the current
ranking, and w from `prs.weighting` (`pair_weights`; PRS: min(γ, θ_j/θ_i), Eq. 9/11 — the
default, hence the name; IPS, PNS and naive weights give the comparisons). Each round the booster gets the
gradient and Newton diagonal of Σ w |ΔNDCG| log(1 + e^{−σ(s_i − s_j)}) with |ΔNDCG| held at the round's
ranking (`lambda_pairs`), σ = 1. Trees and epochs follow `ranker.lightgbm` and `train.epochs` as for the
booster-backed Naive (`training.gbdt.BoostingTrainer`); the result is a `LightGBMRanker`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..schema import POSITION
from . import lambda_pairs as lp
from .base import FitResult
from .lambda_pairs import lambda_objective
from .propensities.pair_weights import resolve_pair_weights
from .training.gbdt import BoostingTrainer

if TYPE_CHECKING:
    from ..config import RunConfig



class PropensityLambdaMART:
    name = "propensity_lambdamart"

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> FitResult:
        trainer = BoostingTrainer(train, valid, config)
        positions = trainer.in_dataset_order(train[POSITION].to_numpy()).astype(np.int64)
        table, info = resolve_pair_weights(train, config, int(positions.max()))
        pair_i, pair_j, _, _ = lp.session_pairs(trainer.group_sizes, trainer.clicks)
        base = table[positions[pair_i], positions[pair_j]]
        trainer.warm_up()
        ranker = trainer.fit(*lambda_objective(trainer.group_sizes, trainer.clicks, base, pair_i, pair_j))
        return FitResult(ranker, trainer.history, {
            "method": self.name, "loss": "lambdamart", "backbone": "lightgbm", "best_epoch": trainer.best_epoch,
            "rounds": trainer.rounds, "best_rounds": trainer.best[2] if trainer.best else trainer.rounds,
            "pairs": int(len(pair_i)), "mean_pair_weight": float(base.mean()) if len(base) else 0.0, **info})
