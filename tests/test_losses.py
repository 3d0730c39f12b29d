"""Every shared loss of wpultr/methods/losses.py against a value computed by hand (allRank's habit).

One batch of two lists of three slots; the last slot of the second list is padding:
  scores [[0, ln 2, 0], [ln 3, 0, 5]], clicks [[1, 0, 0], [0, 1, 1]], mask [[T, T, T], [T, T, F]].
"""
from __future__ import annotations

import math

import pytest
import torch

from wpultr.methods.losses import (click_loss, listwise_softmax_loss, pair_terms, pointwise_click_loss,
                                   weighted_softmax_loss)

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
    with pytest.raises(ValueError, match="not one of 'pointwise', 'listwise'"):
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
    assert list(zip(pos_i.tolist(), pos_j.tolist())) == [(1, 2), (1, 3), (2, 1)]
    by_hand = [softplus(-(0.0 - LN2)), softplus(-(0.0 - 0.0)), softplus(-(0.0 - LN3))]
    assert loss.tolist() == pytest.approx(by_hand, rel=1e-6)
