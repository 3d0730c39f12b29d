"""The general pairwise framework (Kurennoy et al., ICTIR 2022, paper 004) and the LambdaMARTs it compares.

* `pairwise_framework` — the unbiased pairwise loss (Eq. 10) for the neural rankers (MLP, BERT): RankNet
  terms (Eq. 5) weighted through the A matrix (Eq. 9), so a clicked i over an unclicked j weighs
  a_i = 1/θ_i and a clicked i over a clicked j weighs a_i − a_ij = 1/θ_i − 1/ψ_ij (joint_examination.py).
  Its expectation is the same loss on relevance (Theorem 3.1) when ψ matches how users browse.
* `unbiased_lambdamart` — Unbiased LambdaMART (Hu et al. 2019) as the same kind of LightGBM objective, with t⁺
  fixed at θ and t⁻ estimated, as §6.2 compares them (the neural counterpart is `pairwise_debias`).
* `robust_lambdamart` — Robust Unbiased LambdaMART (Eq. 26) as a LightGBM custom objective: the same
  pairs with the lambda-trick's |ΔNDCG| (clicks as gains) on each, which is 0 for two clicked results,
  so only clicked-over-unclicked pairs remain, weighted |ΔNDCG|/θ_i whatever the joint model (§5).
  `pairwise.lambda_weight: none` drops the |ΔNDCG| factor: the booster then minimises Eq. 10 itself,
  joint model included (its Hessian uses |w|, so LightGBM's Newton steps stay defined where w < 0).

θ_k (relative to position 1, clipped at `propensity.clip`) comes from `propensity.source`
as for IPW (a simulated RandPair experiment by default on simulated logs); ψ from `pairwise.joint_model`.
`train.loss` is not used. Each reports θ (and ψ and the joint model, or t⁻) as what it learned about bias.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ..schema import POSITION
from . import lambda_pairs as lp
from .base import FitResult
from .propensities.joint_examination import joint_examination, unbiased_pairs
from .propensities.position import as_table, propensity_array, resolve_propensities
from .training.distributed import SharedTrainerFit
from .training.gbdt import BoostingTrainer
from .training.trainer import ListBatch, build_ranker
from .training.warmup import warm_up

if TYPE_CHECKING:
    from ..config import RunConfig


def examination(train: pd.DataFrame, config: RunConfig, n_positions: int) -> tuple[np.ndarray, np.ndarray,
                                                                                     dict[str, Any]]:
    """(θ by position − 1, ψ (n, n) from `pairwise.joint_model`, a JSON-able record of both and their source)."""
    table, info = resolve_propensities(train, config)
    clip = float(config.propensity.clip)
    theta = propensity_array(table, n_positions, clip)[1:]
    p = config.pairwise
    psi = joint_examination(theta, p.joint_model, p.grid_columns, p.skip_row, p.continue_prob)
    record = {"joint_model": p.joint_model, "propensities": as_table(theta), "estimated": table, "clip": clip,
              "joint": np.round(psi, 6).tolist(), "sigma": p.sigma, **info}
    if p.joint_model == "row_skipping":
        record.update(grid_columns=p.grid_columns, skip_row=p.skip_row, continue_prob=p.continue_prob)
    return theta, psi, record


def unbiased_pair_loss(scores: torch.Tensor, clicks: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                       inverse_theta: torch.Tensor, inverse_psi: torch.Tensor, sigma: float) -> torch.Tensor:
    """Σ over ordered pairs (i clicked, j ≠ i shown) of w_ij log(1 + e^{−σ(s_i − s_j)}) in a (B, K) batch (Eq. 10).

    w_ij = 1/θ_i when j was not clicked, 1/θ_i − 1/ψ_ij when it was; `inverse_theta` (K+1,) and
    `inverse_psi` (K+1, K+1) are indexed by the logged position (index 0 unused). The same pairs and
    weights as `joint_examination.unbiased_pairs`.
    """
    clicked = (clicks > 0) & mask
    k = mask.shape[1]
    pairs = clicked[:, :, None] & mask[:, None, :] & ~torch.eye(k, dtype=torch.bool, device=mask.device)[None]
    b, i, j = pairs.nonzero(as_tuple=True)
    if b.numel() == 0:
        return scores.sum() * 0.0
    pi, pj = positions[b, i], positions[b, j]
    weight = inverse_theta[pi] - clicked[b, j].to(scores.dtype) * inverse_psi[pi, pj]
    return (weight * F.softplus(-sigma * (scores[b, i] - scores[b, j]))).sum()


class RobustObjective:
    """The booster objective of `robust_lambdamart` over fixed pairs: `grad_hess(f)` and `loss(f)` in the raw scores.

    Pairs and base weights are `unbiased_pairs` (Eq. 10's A-matrix weights); `lambda_weight` "ndcg" multiplies
    each by |ΔNDCG_ij| under the current scores with clicks as gains (Eq. 26: 0 for two clicked results),
    held constant within a round as LambdaMART does; "none" keeps Eq. 10. The Hessian is the exact diagonal
    σ² w ρ(1 − ρ) where every weight is ≥ 0, and uses |w| otherwise (a Newton step needs positive curvature).
    """

    def __init__(self, group_sizes: np.ndarray, clicks: np.ndarray, positions: np.ndarray, theta: np.ndarray,
                 psi: np.ndarray, sigma: float = 1.0, lambda_weight: str = "ndcg"):
        if lambda_weight not in ("ndcg", "none"):
            raise ValueError(f"lambda_weight {lambda_weight!r} is not one of 'ndcg', 'none'")
        self.sizes, self.clicks = np.asarray(group_sizes), np.asarray(clicks, dtype=np.float64)
        self.sigma, self.lambda_weight = sigma, lambda_weight
        self.pair_i, self.pair_j, self.base = unbiased_pairs(group_sizes, clicks, positions, theta, psi)

    def weights(self, f: np.ndarray) -> np.ndarray:
        if self.lambda_weight == "ndcg":                      # Eq. (26): |ΔZ_ij| on each pair of Eq. (25)
            return self.base * lp.delta_ndcg(f, self.sizes, self.clicks, self.pair_i, self.pair_j)
        return self.base                                      # Eq. (10) as the objective

    def grad_hess(self, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = self.weights(f)
        grad, hess = lp.pair_grad_hess(f, self.pair_i, self.pair_j, w, self.sigma)
        if (w < 0).any():
            hess = lp.pair_grad_hess(f, self.pair_i, self.pair_j, np.abs(w), self.sigma)[1]
        return grad, hess

    def loss(self, f: np.ndarray) -> float:
        return lp.pair_loss(f, self.pair_i, self.pair_j, self.weights(f), self.sigma)


class PairwiseFramework(SharedTrainerFit):
    """The unbiased pairwise loss (Eq. 10) on the shared trainer: MLP or BERT ranker, after the warm-up."""

    name = "pairwise_framework"

    def fit_with(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig, trainer_class: type,
                 ranker: Any = None) -> FitResult:
        """As DDP ranks (`training.distributed`): the same examination estimates as one process, the epochs
        on this rank's shares (the loss divides by the global batch's sessions)."""
        trainer = trainer_class(ranker if ranker is not None else build_ranker(config, train), train, valid, config)
        warm_up(trainer)
        n_positions = int(trainer.lists.positions.max())
        theta, psi, record = examination(train, config, n_positions)
        device = trainer.device
        inverse_theta = torch.as_tensor(np.r_[0.0, 1.0 / theta], dtype=torch.float32, device=device)
        inverse_psi = torch.zeros((n_positions + 1, n_positions + 1), dtype=torch.float32, device=device)
        inverse_psi[1:, 1:] = torch.as_tensor(1.0 / psi, dtype=torch.float32)
        sigma = float(config.pairwise.sigma)

        def loss(scores: torch.Tensor, batch: ListBatch) -> torch.Tensor:
            return unbiased_pair_loss(scores, batch.clicks, batch.mask, batch.positions, inverse_theta,
                                      inverse_psi, sigma) / len(batch.index)

        ranker = trainer.fit(loss, normaliser=lambda b: float(len(b.index)))
        return FitResult(ranker, trainer.history, {"method": self.name, "loss": "unbiased_pairwise",
                                                    "best_epoch": trainer.best_epoch, **record})


class RobustUnbiasedLambdaMART:
    """Robust Unbiased LambdaMART (Eq. 26) grown by BoostingTrainer, `ranker.lightgbm.*` trees per epoch."""

    name = "robust_lambdamart"

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> FitResult:
        trainer = BoostingTrainer(train, valid, config)
        positions = trainer.in_dataset_order(train[POSITION].to_numpy()).astype(np.int64)
        start = time.perf_counter()
        theta, psi, record = examination(train, config, int(positions.max()))
        objective = RobustObjective(trainer.group_sizes, trainer.clicks, positions, theta, psi,
                                    float(config.pairwise.sigma), config.pairwise.lambda_weight)
        setup = time.perf_counter() - start
        trainer.warm_up()
        ranker = trainer.fit(objective.grad_hess, objective.loss)
        weighting = objective.lambda_weight
        return FitResult(ranker, trainer.history, {
            "method": self.name, "loss": f"pairwise, lambda weight {weighting}", "backbone": "lightgbm",
            "best_epoch": trainer.best_epoch, "rounds": trainer.rounds,
            "best_rounds": trainer.best[2] if trainer.best else trainer.rounds, "pairs": int(len(objective.pair_i)),
            "lambda_weight": weighting, "setup_seconds": round(setup, 3), **record})


class UnbiasedLambdaMART:
    """Unbiased LambdaMART (Hu et al. 2019) as a LightGBM objective, as 004 §6.2 runs it: t⁺ fixed at θ, t⁻ estimated.

    Each round the clicked-over-unclicked pairs get |ΔNDCG_ij| / (t⁺_{k(i)} t⁻_{k(j)}) (Table 1), then t⁻ is
    re-estimated from that round's weighted pair losses by Hu et al.'s closed form relative to position 1,
    t⁻_k = [Σ_{k(j)=k} |ΔZ| ℓ_ij / t⁺_{k(i)} / Σ_{k(j)=1} |ΔZ| ℓ_ij / t⁺_{k(i)}]^{1/(p+1)} with
    p = `pairwise_debias.regularization_p`. The neural counterpart is `pairwise_debias`.
    """

    name = "unbiased_lambdamart"

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> FitResult:
        trainer = BoostingTrainer(train, valid, config)
        positions = trainer.in_dataset_order(train[POSITION].to_numpy()).astype(np.int64)
        n_positions = int(positions.max())
        table, info = resolve_propensities(train, config)
        clip = float(config.propensity.clip)
        t_plus = propensity_array(table, n_positions, clip)                 # index 0 unused
        t_minus = np.ones(n_positions + 1)
        exponent = 1.0 / (float(config.pairwise_debias.regularization_p) + 1.0)
        sizes, clicks, sigma = trainer.group_sizes, trainer.clicks, float(config.pairwise.sigma)
        pair_i, pair_j, _, _ = lp.session_pairs(sizes, clicks)
        k_i, k_j = positions[pair_i], positions[pair_j]

        def weights(f: np.ndarray) -> np.ndarray:
            return lp.delta_ndcg(f, sizes, clicks, pair_i, pair_j) / (t_plus[k_i] * t_minus[k_j])

        def grad_hess(f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            w = weights(f)
            out = lp.pair_grad_hess(f, pair_i, pair_j, w, sigma)
            cost = w * t_minus[k_j] * np.logaddexp(0.0, -sigma * (f[pair_i] - f[pair_j]))   # |ΔZ| ℓ / t⁺
            sums = np.bincount(k_j, cost, minlength=n_positions + 1)
            if sums[1] > 0:                                                 # t⁻_1 = 1 by construction
                seen = sums > 0
                seen[0] = False
                t_minus[seen] = (sums[seen] / sums[1]) ** exponent
            return out

        def loss(f: np.ndarray) -> float:
            return lp.pair_loss(f, pair_i, pair_j, weights(f), sigma)

        trainer.warm_up()
        ranker = trainer.fit(grad_hess, loss)
        return FitResult(ranker, trainer.history, {
            "method": self.name, "loss": "lambdarank, t+ fixed, t- estimated", "backbone": "lightgbm",
            "best_epoch": trainer.best_epoch, "rounds": trainer.rounds,
            "best_rounds": trainer.best[2] if trainer.best else trainer.rounds, "pairs": int(len(pair_i)),
            "propensities": as_table(t_plus[1:]), "t_plus": as_table(t_plus[1:]), "t_minus": as_table(t_minus[1:]),
            "estimated": table, "clip": clip, **info})
