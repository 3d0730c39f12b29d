"""LBD, Lipschitz and Bernoulli Decoupling (Chen, Liu, Liu, Sun, NeurIPS 2022, "LBD: Decouple Relevance and
Observation for Individual-Level Unbiased Learning to Rank"): individual-level observation learned beside the
ranker, kept from absorbing relevance.

Two models learn from the same clicks (LBD §5):
* the ranker r̂(x): the configured ranker (MLP or BERT); its score s(x) is log r̂(x) up to a constant per list,
  which the listwise softmax ignores. It is the only model exported and scored.
* the observation model ô_p(x) = σ(g_p(x)): an MLP over the document's dense feature vector (standardised
  with the training rows' statistics) with one output per position p (the paper's "features and position as
  inputs"; §C.2 gives ô n outputs, one per position). σ keeps 0 ≤ ô ≤ 1, which Theorems 3–4 assume.

Per list of shown results x_1..x_n with clicks c_1..c_n:
    γ_i ~ Bernoulli(1 − t) per shown result                           (§5, Bernoulli decoupling)
    log ĉ_i = log r̂(x_i) + γ_i · log ô_{p_i}(x_i)                       (§5: log ô' = γ log ô)
    L_sv(q) = − Σ_i c_i · log softmax(log ĉ)_i                          (Eq. 2, see below)
    L_gp(x) = λ Σ_{p=1}^{n} ‖∇ₓ ô_p(x)‖₂                                 (§5, Lipschitz decoupling)
    L(q)    = L_sv(q) + Σ_i L_gp(x_i)                                   (§5), averaged over the lists of a batch
Both models are updated with the derivatives of L(q) (one Adam, two parameter groups). The gradient is taken
with respect to the standardised features, the scale on which the observation model reads them.

Eq. 2 as printed in the paper lacks the log (−Σ c_i softmax(log ĉ)_i); the text calls it "a list-wise loss
based on softmax cross entropy" following DLA [4], and the authors' code uses ULTRA's softmax cross entropy,
so the cross entropy is what is implemented here.

Ablations (§6.1) are `lbd.variant`: `lips` (t = 0), `ber` (λ = 0), `unlimited` (λ = t = 0); see settings/lbd.py.
The observation model reads the sessions' dense `features` column whatever the ranker's backbone.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ..rankers.mlp import feature_matrix, mlp
from ..schema import FEATURES, SchemaError
from .base import FitResult
from .training.distributed import SharedTrainerFit
from .training.trainer import ListBatch, SessionLists, build_ranker
from .training.warmup import warm_up

if TYPE_CHECKING:
    from ..config import RunConfig


class ObservationModel(torch.nn.Module):
    """ô_p(x) = σ(g_p(standardise(x))) for positions p = 1..n_positions (LBD §5, Figure 2)."""

    def __init__(self, n_features: int, n_positions: int, hidden: Sequence[int], mean: np.ndarray,
                 scale: np.ndarray):
        super().__init__()
        self.n_positions = int(n_positions)
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
        self.register_buffer("scale", torch.as_tensor(scale, dtype=torch.float32))
        self.net = mlp(n_features, list(hidden), self.n_positions)

    @classmethod
    def for_matrix(cls, matrix: np.ndarray, n_positions: int, hidden: Sequence[int]) -> ObservationModel:
        """A model sized for `matrix`'s rows, standardised with their mean and std (a constant column: scale 1)."""
        std = matrix.std(axis=0)
        return cls(matrix.shape[1], n_positions, hidden, matrix.mean(axis=0),
                   np.where(std > 1e-8, std, 1.0).astype(np.float32))

    def standardise(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.scale

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        """g(z): (N, n_positions) logits of standardised features z; ô = σ(g)."""
        return self.net(z)


def gradient_penalty(model: ObservationModel, z: torch.Tensor) -> torch.Tensor:
    """Σ_{p=1}^{n} ‖∇_z ô_p(z)‖₂ for each row of z, shape (N,): L_gp / λ of LBD §5.

    ô_p of row j depends on row j only, so the gradient of Σ_j ô_p(z_j) with respect to z holds every row's
    ∇ô_p in that row. `create_graph=True` keeps the penalty differentiable in the model's parameters.
    """
    z = z if z.requires_grad else z.detach().requires_grad_(True)
    observation = torch.sigmoid(model.logits(z))                             # ô_p(z), (N, n)
    total = z.new_zeros(z.shape[0])
    for p in range(observation.shape[1]):
        (grad,) = torch.autograd.grad(observation[:, p].sum(), z, create_graph=True)
        total = total + torch.linalg.vector_norm(grad, ord=2, dim=1)        # ‖∇_z ô_p(z)‖₂
    return total


def bernoulli_mask(shape: tuple[int, ...], t: float, generator: torch.Generator) -> torch.Tensor:
    """γ ~ Bernoulli(1 − t), one per entry (LBD §4.3/§5); t = 0 keeps every observation term."""
    if t <= 0.0:
        return torch.ones(shape)
    return (torch.rand(shape, generator=generator) >= t).float()


def click_logits(log_relevance: torch.Tensor, log_observation: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """log ĉ = log r̂ + γ · log ô (LBD §5)."""
    return log_relevance + gamma * log_observation


def softmax_click_loss(logits: torch.Tensor, clicks: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L_sv(q) = −Σ_i c_i log softmax(log ĉ)_i over each list's shown results, shape (B,) (LBD Eq. 2)."""
    log_p = torch.log_softmax(logits.masked_fill(~mask, float("-inf")), dim=1).masked_fill(~mask, 0.0)
    return -(clicks * mask.float() * log_p).sum(dim=1)


def lbd_loss(scores: torch.Tensor, model: ObservationModel, z: torch.Tensor, batch: ListBatch, lam: float,
             gamma: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """L = mean over the batch's lists of L_sv(q) + Σ_{x in q} L_gp(x) (LBD §5), and its parts for the history.

    `z` holds the standardised features of the shown results in the order of `batch.mask` (row-major).
    """
    mask = batch.mask
    lists = max(mask.shape[0], 1)      # a DDP rank's share may hold no list
    need_grad = lam > 0
    z = z.detach().requires_grad_(need_grad)
    logits = model.logits(z)                                                  # g(x), (N, n)
    index = (batch.positions[mask] - 1).clamp(0, model.n_positions - 1)
    log_o_flat = F.logsigmoid(logits.gather(1, index[:, None]).squeeze(1))  # log ô_{p_i}(x_i)
    log_o = log_o_flat.new_zeros(mask.shape).masked_scatter(mask, log_o_flat)
    per_list = softmax_click_loss(click_logits(scores, log_o, gamma), batch.clicks, mask)     # Eq. 2
    gp = torch.zeros((), device=scores.device)
    if need_grad:
        per_row = gradient_penalty(model, z)
        gp = per_row.new_zeros(mask.shape).masked_scatter(mask, per_row).sum(dim=1).sum() / lists
    click = per_list.sum() / lists
    loss = click + lam * gp
    return loss, {"click_loss": float(click.detach()), "grad_norm": float(gp.detach()),
                  "kept": float((gamma * mask.float()).sum().detach() / mask.float().sum().clamp_min(1.0))}


def observation_by_position(model: ObservationModel, z: torch.Tensor, batch_rows: int = 8192) -> list[float]:
    """Mean ô_p(x) over the given rows for each position p: what the model learned about examination."""
    total = torch.zeros(model.n_positions, dtype=torch.float64)
    with torch.no_grad():
        for start in range(0, len(z), batch_rows):
            total += torch.sigmoid(model.logits(z[start: start + batch_rows])).double().sum(dim=0).cpu()
    return (total / max(len(z), 1)).tolist()


class LBD(SharedTrainerFit):
    name = "lbd"

    def fit_with(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig, trainer_class: type,
                 ranker: Any = None) -> FitResult:
        """As DDP ranks (`training.distributed`): the loss on this rank's share of each global batch (the
        Bernoulli mask γ drawn for the whole global batch, as one process draws it), the ranker's gradient averaged
        by DDP and the observation model's by the trainer (`sync_gradients`)."""
        settings = config.lbd
        lam, t = settings.effective()
        lists = SessionLists.from_frame(train)
        if FEATURES not in train.columns:
            raise SchemaError(f"sessions: train.method 'lbd' reads each result's dense {FEATURES!r} column for its "
                              f"observation model (ranker.backbone 'mlp' computes lexical ones from token ids); "
                              f"present: {list(train.columns)}")
        matrix = feature_matrix(train, "sessions")
        trainer = trainer_class(ranker if ranker is not None else build_ranker(config, train), train, valid, config,
                                lists=lists)
        torch.manual_seed(config.seed)
        model = ObservationModel.for_matrix(matrix, int(lists.positions.max()), settings.observation_hidden)
        model = trainer.keep("lbd_observation", model.to(trainer.device))
        z_all = model.standardise(torch.from_numpy(matrix).to(trainer.device))
        lr = settings.observation_learning_rate
        trainer.optimizer.add_param_group({"params": list(model.parameters()), "lr": lr, "weight_decay": 0.0})
        warm_up(trainer)

        def loss(scores: torch.Tensor, batch: ListBatch):
            z = z_all[torch.as_tensor(batch.rows[batch.rows >= 0], device=z_all.device)]
            slots = batch.mask.shape[1]
            gamma = trainer.draw_for_batch(batch, lambda n: bernoulli_mask((n, slots), t, trainer.generator))
            return lbd_loss(scores, model, z, batch, lam, gamma.to(scores.device))

        for epoch in trainer.epoch_range(config.train.epochs):
            start = time.perf_counter()
            model.train()
            stats = trainer.epoch(loss, normaliser=lambda b: float(len(b.index)))   # the loss: a mean over lists
            model.eval()
            trainer.record(epoch, stats, time.perf_counter() - start,
                           observation=observation_by_position(model, z_all))
        ranker = trainer.finish()
        return FitResult(ranker, trainer.history, {
            "method": self.name, "loss": "listwise", "best_epoch": trainer.best_epoch,
            "variant": settings.variant, "gradient_penalty": lam, "drop_probability": t,
            "observation_hidden": list(settings.observation_hidden), "observation_learning_rate": lr,
            "observation_by_position": observation_by_position(model, z_all)})
