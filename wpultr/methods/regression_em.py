"""Regression-EM (Wang, Golbandi, Bendersky, Metzler, Najork, WSDM 2018, "Position bias estimation for
unbiased learning to rank in personal search").

Click model (position-based, the examination hypothesis): P(c = 1 | q, d, k) = θ_k · γ_{q,d}, with θ_k the
examination probability of position k and γ_{q,d} = σ(f(x_{q,d})) the relevance the ranker f regresses.

EM, run online over the trainer's session batches (one EM iteration per batch):
* E-step (the paper's posteriors of the hidden E, R given the click, with the current θ and γ;
  `losses.regression_em_posteriors`):
      c = 1:  P(E=1 | c) = P(R=1 | c) = 1
      c = 0:  P(E=1, R=0 | c=0) = θ(1−γ)/(1−θγ),  P(E=0, R=1 | c=0) = (1−θ)γ/(1−θγ)
* M-step for θ (closed form): θ_k = mean over results shown at k of P(E=1 | c). Here each batch's
  estimate moves θ by `regression_em.step_size` (a stochastic-EM step, as ULTRA's EM_step_size),
  because a pass over the data holds many batches and one full M-step per epoch converges slowly.
* M-step for γ (the paper's regression step): the ranker is fitted to relevance labels drawn from the
  posterior P(R=1 | c) — sampled binary labels as in the paper with `regression_em.sample_labels`,
  or by default the posterior itself as a soft label, which gives the same expected cross-entropy
  gradient with less variance. One gradient step per batch stands in for the paper's full GBDT fit.

The method is pointwise by construction (γ is a probability), so `train.loss` is not used for the
M-step. The learned θ, relative to position 1, are the method's propensities.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from .base import FitResult
from .losses.lists import pointwise_click_loss, regression_em_posteriors
from .propensities.position import as_table, relative_to_first
from .training.distributed import SharedTrainerFit
from .training.trainer import ListBatch, build_ranker
from .training.warmup import warm_up

if TYPE_CHECKING:
    from ..config import RunConfig

INITIAL_THETA = 0.5


class RegressionEM(SharedTrainerFit):
    name = "regression_em"

    def fit_with(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig, trainer_class: type,
                 ranker: Any = None) -> FitResult:
        """As DDP ranks (`training.distributed`): the E-step on this rank's share of each global batch, the
        M-step for θ from the batch's counts and posteriors summed over the ranks (every rank holds the same θ), the
        ranker's step as DDP. With `regression_em.sample_labels` the sampled labels are drawn for the whole global
        batch, as one process draws them."""
        trainer = trainer_class(ranker if ranker is not None else build_ranker(config, train), train, valid, config)
        warm_up(trainer)
        n_positions = int(trainer.lists.positions.max())
        step = float(config.regression_em.step_size)          # in (0, 1]: checked when the config was loaded
        sample = bool(config.regression_em.sample_labels)
        # θ starts flat: no position is favoured until the E-steps say so (θ = 1 would be a fixed point
        # of the θ update, and starting from click-through ratios would start from the naive answer)
        theta = trainer.keep("regression_em_theta", torch.full((n_positions + 1,), INITIAL_THETA,
                                                               dtype=torch.float32, device=trainer.device))
        generator = trainer.keep("regression_em_labels",
                                 torch.Generator(device=trainer.device).manual_seed(config.seed))

        def loss(scores: torch.Tensor, batch: ListBatch):
            mask, clicks, positions = batch.mask, batch.clicks, batch.positions
            gamma = torch.sigmoid(scores.detach())
            exam, rel = regression_em_posteriors(theta[positions], gamma, clicks)      # E-step
            # M-step for θ on this batch (θ_k = mean P(E=1|c) at k), taken as a step of size `step`; the counts and
            # sums are the global batch's (`Trainer.all_sum`: over the DDP ranks' shares)
            flat_pos, flat_exam = positions[mask], exam[mask]
            count = torch.bincount(flat_pos, minlength=n_positions + 1).to(theta.dtype)
            total = torch.zeros_like(theta).index_add_(0, flat_pos, flat_exam)
            count, total = trainer.all_sum(torch.stack([count, total])).unbind()
            seen = count > 0
            seen[0] = False
            theta[seen] = ((1 - step) * theta[seen] + step * (total[seen] / count[seen])).clamp(1e-4, 1.0)
            # M-step for γ: regress the ranker on the posterior relevance (sampled or soft labels)
            if sample:   # uniforms drawn for the global batch (a DDP rank keeps its shard's): torch.bernoulli's draw
                u = trainer.draw_for_batch(batch, lambda n: torch.rand((n, rel.shape[1]), generator=generator,
                                                                       device=rel.device))
                target = (u < rel).to(rel.dtype)
            else:
                target = rel
            out = pointwise_click_loss(scores, target, mask)
            return out, {"theta_last_over_first": float(theta[n_positions] / theta[1])}

        for epoch in trainer.epoch_range(config.train.epochs):
            start = time.perf_counter()     # the loss divides by the batch's shown results
            stats = trainer.epoch(loss, normaliser=lambda b: float(b.mask.sum()))
            trainer.record(epoch, stats, time.perf_counter() - start,
                           propensities=as_table(relative_to_first(theta[1:].cpu().numpy())))
        ranker = trainer.finish()
        values = theta[1:].cpu().numpy().astype(np.float64)
        return FitResult(ranker, trainer.history, {
            "method": self.name, "loss": "pointwise", "best_epoch": trainer.best_epoch,
            "propensities": as_table(relative_to_first(values)),     # θ_k / θ_1
            "theta": as_table(values),                               # θ_k as fitted (scale shared with γ)
            "step_size": step, "sampled_labels": sample})
