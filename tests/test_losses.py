"""Every shared loss of wpultr/methods/losses/ against a value computed by hand (allRank's habit).

One batch of two lists of three slots; the last slot of the second list is padding:
  scores [[0, ln 2, 0], [ln 3, 0, 5]], clicks [[1, 0, 0], [0, 1, 1]], mask [[T, T, T], [T, T, F]].
"""
from __future__ import annotations

import math

import pytest
import torch

from wpultr.config import TRAIN_LOSSES
from wpultr.methods.losses import CLICK_LOSSES, boosted, click_loss, click_loss_named, lists
from wpultr.methods.losses.lists import (
    dla_losses,
    listwise_softmax_loss,
    pair_terms,
    pointwise_click_loss,
    regression_em_posteriors,
    weighted_softmax_loss,
)

LN2, LN3 = math.log(2.0), math.log(3.0)
SCORES = torch.tensor([[0.0, LN2, 0.0], [LN3, 0.0, 5.0]])
CLICKS = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
MASK = torch.tensor([[True, True, True], [True, True, False]])
POSITIONS = torch.tensor([[1, 2, 3], [1, 2, 3]])


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def test_pointwise_is_the_mean_cross_entropy_over_shown_slots():
    # BCE with logits: clicked -> softplus(-s), not clicked -> softplus(s); five shown slots
    by_hand = (softplus(-0.0) + softplus(LN2) + softplus(0.0) + softplus(LN3) + softplus(-0.0)) / 5
    assert pointwise_click_loss(SCORES, CLICKS, MASK).item() == pytest.approx(by_hand, rel=1e-6)
    weights = torch.tensor([[2.0, 1.0, 1.0], [1.0, 3.0, 9.0]])
    weighted = (2 * softplus(0.0) + softplus(LN2) + softplus(0.0) + softplus(LN3) + 3 * softplus(0.0)) / 5
    assert pointwise_click_loss(SCORES, CLICKS, MASK, weights).item() == pytest.approx(weighted, rel=1e-6)


def test_listwise_is_the_per_list_softmax_cross_entropy_padding_left_out():
    # list 1: softmax over (0, ln2, 0) = (1/4, 1/2, 1/4); the click at slot 1 -> -ln(1/4)
    # list 2: softmax over (ln3, 0) (slot 3 is padding) = (3/4, 1/4); the click at slot 2 -> -ln(1/4)
    by_hand = (math.log(4.0) + math.log(4.0)) / 2
    assert listwise_softmax_loss(SCORES, CLICKS, MASK).item() == pytest.approx(by_hand, rel=1e-6)
    assert click_loss("listwise", SCORES, CLICKS, MASK).item() == pytest.approx(by_hand, rel=1e-6)
    assert click_loss("pointwise", SCORES, CLICKS, MASK).item() == \
        pytest.approx(pointwise_click_loss(SCORES, CLICKS, MASK).item())
    no_clicks = torch.zeros_like(CLICKS)
    assert listwise_softmax_loss(SCORES, no_clicks, MASK).item() == 0.0
    with pytest.raises(ValueError, match="not one of 'pointwise', 'listwise', 'lambdarank'"):
        click_loss("pairwise", SCORES, CLICKS, MASK)


def test_weighted_softmax_keeps_each_clicks_weight_across_lists():
    # weights 1/θ: list 1's click weighs 1, list 2's weighs 3; the mean is over weight, not over lists
    weights = torch.tensor([[1.0, 2.0, 2.0], [1.0, 3.0, 7.0]])
    by_hand = (1 * math.log(4.0) + 3 * math.log(4.0)) / (1 + 3)
    assert weighted_softmax_loss(SCORES, CLICKS, MASK, weights).item() == pytest.approx(by_hand, rel=1e-6)
    # with unequal per-click losses the weighting shows: list 1's click at slot 2 (p = 1/2) instead
    clicks = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    by_hand = (2 * math.log(2.0) + 3 * math.log(4.0)) / (2 + 3)
    assert weighted_softmax_loss(SCORES, clicks, MASK, weights).item() == pytest.approx(by_hand, rel=1e-6)


def test_pair_terms_pair_each_click_with_each_shown_skip():
    loss, pos_i, pos_j = pair_terms(SCORES, CLICKS, MASK, POSITIONS)
    # list 1: click at 1 vs skips at 2, 3; list 2: click at 2 vs skip at 1 (slot 3 is padding, not a skip)
    assert list(zip(pos_i.tolist(), pos_j.tolist(), strict=True)) == [(1, 2), (1, 3), (2, 1)]
    by_hand = [softplus(-(0.0 - LN2)), softplus(-(0.0 - 0.0)), softplus(-(0.0 - LN3))]
    assert loss.tolist() == pytest.approx(by_hand, rel=1e-6)


def test_dla_losses_weigh_each_model_by_the_other_clipped():
    # g = ln(1, 1/2, 1/4): propensity weights P(o_1)/P(o_k) = (1, 2, 4), clipped at 3 -> (1, 2, 3)
    logits = torch.tensor([0.0, -LN2, -math.log(4.0)], requires_grad=True)
    scores = SCORES.clone().requires_grad_(True)
    clicks = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    rank_loss, exam_loss = dla_losses(scores, logits, POSITIONS, clicks, MASK, max_weight=3.0)
    # l_IRM: list 1 slot 2 (w 2, p 1/2), slot 3 (w 3, p 1/4); list 2 slot 2 (w 2, p 1/4)
    by_hand = (2 * LN2 + 3 * math.log(4.0) + 2 * math.log(4.0)) / (2 + 3 + 2)
    assert rank_loss.item() == pytest.approx(by_hand, rel=1e-6)
    # l_IPM: softmax(g) = (4/7, 2/7, 1/7) in list 1 and (2/3, 1/3) over list 2's two shown slots; relevance
    # weights exp(s_1 - s_i): list 1 (1, 1/2, 1), list 2 (1, 3, ·)
    by_hand = (0.5 * math.log(7 / 2) + 1 * math.log(7.0) + 3 * math.log(3.0)) / (0.5 + 1 + 3)
    assert exam_loss.item() == pytest.approx(by_hand, rel=1e-6)
    # each weight is a constant for the other model: l_IRM moves only the ranker, l_IPM only the logits
    assert torch.autograd.grad(rank_loss, logits, allow_unused=True, retain_graph=True)[0] is None
    assert torch.autograd.grad(exam_loss, scores, allow_unused=True, retain_graph=True)[0] is None
    assert torch.count_nonzero(torch.autograd.grad(exam_loss, logits)[0]) > 0


def test_regression_em_posteriors_by_hand():
    theta = torch.tensor([0.5, 0.8, 0.8])
    gamma = torch.tensor([0.5, 0.25, 0.25])
    clicks = torch.tensor([0.0, 0.0, 1.0])
    exam, rel = regression_em_posteriors(theta, gamma, clicks)
    # skip: P(E=1|c=0) = θ(1−γ)/(1−θγ), P(R=1|c=0) = (1−θ)γ/(1−θγ); a click: both 1
    assert exam.tolist() == pytest.approx([0.25 / 0.75, 0.6 / 0.8, 1.0], rel=1e-6)
    assert rel.tolist() == pytest.approx([0.25 / 0.75, 0.05 / 0.8, 1.0], rel=1e-6)


def test_every_train_loss_is_in_the_one_table_and_no_name_is_defined_twice():
    """`train.loss` is looked up in `losses.CLICK_LOSSES` alone; the torch and numpy modules share no function name
    (issue 33: listwise_softmax_loss and weighted_softmax_loss were defined in both)."""
    assert list(CLICK_LOSSES) == list(TRAIN_LOSSES)
    names = [{n for n, v in vars(m).items() if callable(v) and getattr(v, "__module__", None) == m.__name__}
             for m in (lists, boosted)]
    assert not names[0] & names[1]
    with pytest.raises(ValueError, match="is a booster's objective"):
        click_loss("lambdarank", SCORES, CLICKS, MASK)


def test_the_torch_free_loss_table_is_the_click_losses_table():
    """`train.loss` is validated without torch (settings.methods.LOSSES, config.TRAIN_LOSSES from it): the same names,
    in the same order, as the losses that implement them, and a booster-only loss is one with no form over list
    tensors."""
    from wpultr.settings.methods import LOSSES
    assert tuple(LOSSES) == TRAIN_LOSSES == tuple(CLICK_LOSSES)
    assert {n for n, spec in LOSSES.items() if spec.boosted_only} == {n for n, c in CLICK_LOSSES.items()
                                                                      if c.naive is None}


# pointwise weighted is IPW's target c·ω (lists only): a booster has no such form
@pytest.mark.parametrize("name, weighted", [("pointwise", False), ("listwise", False), ("listwise", True)])
def test_the_numpy_form_is_the_torch_form_summed(name, weighted):
    """Side by side: a booster's summed loss (numpy) is the torch mean times its normaliser, for the naive and the
    weighted form of each loss, so a booster and a network minimise one loss."""
    entry = click_loss_named(name)
    w = torch.tensor([[2.0, 1.0, 0.5], [1.0, 3.0, 1.0]])
    mean = (entry.weighted if weighted else entry.naive)(SCORES, CLICKS, MASK, w)
    flat = MASK.flatten()
    f, c, ww = (t.flatten()[flat].double().numpy() for t in (SCORES, CLICKS, w))
    sizes = MASK.sum(dim=1).numpy()
    total = entry.weighted_total if weighted else entry.total
    # the weighted softmax divides by Σ c·ω of the whole batch
    scale = float((CLICKS * w * MASK).sum()) if weighted else entry.normaliser(CLICKS, MASK)
    assert total(f, c, sizes, ww) == pytest.approx(float(mean) * scale, rel=1e-6)
