"""Every click loss by name in one table (allRank's habit): `train.loss` → its torch form on list tensors
(`lists.py`) and its numpy gradient/Hessian form for a booster (`boosted.py`), side by side.

Each name has two meanings of a click's weight: `naive` (clicks as labels, a weight scales the click inside its
list, as the naive listwise loss normalises per list) and `weighted` (each click keeps its own weight ω across
lists: IPW's and BAL's reweighted clicks, unbiased for Σ c/θ). `lambdarank` has no closed form here: a booster
grows it from its clicked-over-skipped pairs (`training.gbdt.BoostingTrainer.lambda_objective`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from . import boosted, lists

TorchLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]
# (scores, clicks, group_sizes, weights or None) of session-grouped rows -> (g, h) or the summed loss
NumpyGradHess = Callable[[np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"], tuple[np.ndarray, np.ndarray]]
NumpyLoss = Callable[[np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"], float]


@dataclass(frozen=True)
class ClickLoss:
    """One `train.loss`: its torch forms (means over the batch) and numpy forms (sums over rows) side by side."""

    name: str
    naive: TorchLoss | None = None             # (scores, clicks, mask, weights) of (B, K) lists, clicks as labels
    weighted: TorchLoss | None = None          # the same, each click keeping its own weight ω (IPW, BAL)
    grad_hess: NumpyGradHess | None = None     # `naive` for a booster: per-row gradient and Hessian
    total: NumpyLoss | None = None             # `naive` for a booster: the summed loss
    weighted_grad_hess: NumpyGradHess | None = None
    weighted_total: NumpyLoss | None = None
    per_list: bool = False                     # the torch mean is over lists with a click (else over shown results)
    pairs: bool = False                        # a booster's λ-gradients over pairs: no closed form here

    def normaliser(self, clicks: torch.Tensor, mask: torch.Tensor) -> float:
        """What the torch `naive` form divides its sum by: lists with a click, or shown results."""
        if self.per_list:
            return float(((clicks * mask).sum(dim=1) > 0).sum())
        return float(mask.sum())

    def weighted_normaliser(self, clicks: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor) -> float:
        """What the torch `weighted` form divides its sum by: the weighted clicks Σ c·ω (listwise), or shown
        results (pointwise). A data-parallel step scales each shard's loss by its share of it."""
        if self.per_list:
            return float((clicks * weights * mask.float()).sum())
        return float(mask.sum())


CLICK_LOSSES: dict[str, ClickLoss] = {loss.name: loss for loss in (
    ClickLoss("pointwise",
              naive=lists.pointwise_click_loss,
              # target c·ω (IPW's ω = 1/θ: E[c/θ] = r), not a weighted BCE, which would up-weight skips too (ipw.py)
              weighted=lambda s, c, m, w: lists.pointwise_click_loss(s, c * w, m),
              grad_hess=lambda f, c, sizes, w: boosted.pointwise_logistic_grad_hess(f, c, w),
              total=lambda f, c, sizes, w: boosted.pointwise_logistic_loss(f, c, w)),
    ClickLoss("listwise",
              naive=lists.listwise_softmax_loss,
              weighted=lists.weighted_softmax_loss,
              grad_hess=boosted.listwise_softmax_grad_hess,
              total=boosted.listwise_softmax_sum,
              weighted_grad_hess=boosted.weighted_softmax_grad_hess,
              weighted_total=boosted.weighted_softmax_sum,
              per_list=True),
    ClickLoss("lambdarank", pairs=True),
)}


def click_loss_named(name: str) -> ClickLoss:
    """The entry of `train.loss` `name` (the config has checked it: an unknown name is a bug)."""
    try:
        return CLICK_LOSSES[name]
    except KeyError:
        raise ValueError(f"train.loss: {name!r} is not one of {', '.join(map(repr, CLICK_LOSSES))}") from None


def click_loss(kind: str, scores: torch.Tensor, clicks: torch.Tensor, mask: torch.Tensor,
               weights: torch.Tensor | None = None) -> torch.Tensor:
    """`train.loss` `kind`'s naive click loss of a batch of lists (clicks as labels)."""
    loss = click_loss_named(kind).naive
    if loss is None:
        raise ValueError(f"train.loss: {kind!r} is a booster's objective, not a loss of list tensors")
    return loss(scores, clicks, mask, weights)
