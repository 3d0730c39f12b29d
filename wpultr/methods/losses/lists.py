"""Click losses over sessions laid out as lists: tensors (B, K) of scores, clicks and a validity mask.

Pure functions of the list tensors. Padded slots (mask False) never contribute. Shared by every method
so that "pointwise" and "listwise" mean one thing everywhere (looked up by name in `losses.CLICK_LOSSES`); the
IPW/DLA softmax loss, DLA's two dual losses, Regression-EM's E-step targets and the pairwise debiasing pair terms
live here too (BAL's click-model loss is `bal.click_model.ranker_loss`: it needs the click model).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def pointwise_click_loss(scores: torch.Tensor, clicks: torch.Tensor, mask: torch.Tensor,
                         weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean (weighted) binary cross-entropy of sigmoid(score) against the click (BAL Eq. 3, naive)."""
    per_item = F.binary_cross_entropy_with_logits(scores, clicks, reduction="none")
    w = mask.float() if weights is None else weights * mask.float()
    return (per_item * w).sum() / mask.float().sum().clamp_min(1.0)


def listwise_softmax_loss(scores: torch.Tensor, clicks: torch.Tensor, mask: torch.Tensor,
                          weights: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax cross-entropy of each list against its (weighted) clicks, normalised per list.

    Lists without a click carry no signal and are skipped (Ai et al.'s attention-rank / ULTRA's softmax loss).
    """
    target = clicks * mask.float()
    if weights is not None:
        target = target * weights
    totals = target.sum(dim=1, keepdim=True)
    has_click = totals.squeeze(1) > 0
    if not bool(has_click.any()):
        return scores.sum() * 0.0
    log_p = torch.log_softmax(scores.masked_fill(~mask, float("-inf")), dim=1)
    log_p = log_p.masked_fill(~mask, 0.0)
    per_list = -(target / totals.clamp_min(1e-12) * log_p).sum(dim=1)
    return per_list[has_click].mean()


def weighted_softmax_loss(scores: torch.Tensor, clicks: torch.Tensor, mask: torch.Tensor,
                          weights: torch.Tensor) -> torch.Tensor:
    """Σ_lists Σ_i c_i w_i (−log softmax(s)_i) / Σ c_i w_i: the IPW softmax loss (Ai et al. 2018 §4.2, ULTRA's
    softmax_loss). Each click keeps its own weight across lists — normalising per list, as the naive
    listwise loss does, would re-weight lists and lose the unbiasedness of Σ c_i/θ_i."""
    summed, total = weighted_softmax_parts(scores, clicks, mask, weights)
    if not bool(total > 0):
        return scores.sum() * 0.0
    return summed / total


def weighted_softmax_parts(scores: torch.Tensor, clicks: torch.Tensor, mask: torch.Tensor,
                         weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ_lists Σ_i c_i w_i (−log softmax(s)_i), Σ c_i w_i): `weighted_softmax_loss`'s sum and what it divides by,
    apart (a DDP rank divides its share's sum by the global batch's total)."""
    target = clicks * weights * mask.float()
    log_p = torch.log_softmax(scores.masked_fill(~mask, float("-inf")), dim=1).masked_fill(~mask, 0.0)
    return -(target * log_p).sum(), target.sum().detach()


def dla_losses(scores: torch.Tensor, logits: torch.Tensor, positions: torch.Tensor, clicks: torch.Tensor,
               mask: torch.Tensor, max_weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(l_IRM for the ranker, l_IPM for the propensity logits g, one per position) of DLA (Ai et al. 2018, §4):
    l_IRM = weighted softmax of s with weights P(o_1)/P(o_i) = exp(g_1 − g_{k(i)}), l_IPM = weighted softmax
    of g_{k(i)} with weights P(r_1)/P(r_i) = exp(s_1 − s_i), s_1 the list's top result. Each weight is a
    constant for the other model's loss and clipped at `max_weight` (see methods/dla.py)."""
    rank_sum, rank_total, exam_sum, exam_total = dla_sums(scores, logits, positions, clicks, mask, max_weight)
    return (rank_sum / rank_total if bool(rank_total > 0) else rank_sum * 0.0,
            exam_sum / exam_total if bool(exam_total > 0) else exam_sum * 0.0)


def dla_sums(scores: torch.Tensor, logits: torch.Tensor, positions: torch.Tensor, clicks: torch.Tensor,
             mask: torch.Tensor, max_weight: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`dla_losses` apart: (l_IRM's sum, its total weight, l_IPM's sum, its total weight); each loss is its sum over
    its total (0 where the total is 0). A DDP rank divides its share's sums by the global batch's totals."""
    g = logits[(positions - 1).clamp_min(0)]                              # (B, K) logit of each shown position
    propensity_weight = torch.exp(logits[0] - g).detach().clamp(max=max_weight)          # P(o_1)/P(o_i)
    relevance_weight = torch.exp(scores[:, :1] - scores).detach().clamp(max=max_weight)  # P(r_1)/P(r_i)
    rank_sum, rank_total = weighted_softmax_parts(scores, clicks, mask, propensity_weight)
    exam_sum, exam_total = weighted_softmax_parts(g, clicks, mask, relevance_weight)
    return rank_sum, rank_total, exam_sum, exam_total


def regression_em_posteriors(theta: torch.Tensor, gamma: torch.Tensor, clicks: torch.Tensor
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(P(E=1 | c), P(R=1 | c)) of each result under P(c) = θγ (Wang et al. 2018, E-step): 1 for a click;
    for a skip θ(1−γ)/(1−θγ) and (1−θ)γ/(1−θγ). P(R=1 | c) is Regression-EM's pointwise target."""
    denom = (1.0 - theta * gamma).clamp_min(1e-6)
    exam = clicks + (1.0 - clicks) * theta * (1.0 - gamma) / denom      # c + (1-c) P(E=1,R=0 | c=0)
    rel = clicks + (1.0 - clicks) * (1.0 - theta) * gamma / denom       # c + (1-c) P(E=0,R=1 | c=0)
    return exam, rel


def pair_terms(scores: torch.Tensor, clicks: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ℓ(s_i, s_j), k(i), k(j)) of every pair of a clicked i and an unclicked j shown in the same list;
    ℓ is the logistic pair loss log(1 + e^{-(s_i - s_j)}) (Hu et al. 2019, Unbiased LambdaMART)."""
    shown = mask
    clicked = (clicks > 0) & shown
    unclicked = (clicks <= 0) & shown
    pairs = clicked[:, :, None] & unclicked[:, None, :]                           # (B, K, K)
    b, i, j = pairs.nonzero(as_tuple=True)
    loss = F.softplus(-(scores[b, i] - scores[b, j]))                            # log(1 + e^{-(s_i - s_j)})
    return loss, positions[b, i], positions[b, j]
