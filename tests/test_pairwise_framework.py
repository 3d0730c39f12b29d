"""The general pairwise framework (paper 004): the A matrix, joint examination, the swap estimate, the objectives.

Hand-computed cases use three documents at positions 1-3 with θ = (1, 1/2, 1/3) (Eq. 27) under continuous
browsing, where ψ(i, j) = min(θ_i, θ_j); the simulator checks set click_noise = 1, so every examined result
is clicked and co-clicks are co-examinations.
"""
import itertools

import numpy as np
import pytest
import torch

from ranking_bars import random_ranker_dcg10
from wpultr.config import ConfigError, RunConfig, config_from_dict
from wpultr.evaluation.metrics import evaluate
from wpultr.methods import lambda_pairs as lp
from wpultr.methods.pairwise_framework import RobustObjective, unbiased_pair_loss
from wpultr.methods.propensities.joint_examination import (
    a_matrix,
    expected_b,
    joint_examination,
    pair_type,
    unbiased_pairs,
)
from wpultr.methods.propensities.joint_swap import (
    estimate_joint_examination,
    joint_swap_estimate,
    simulate_pair_swaps,
    swap_pairs,
)
from wpultr.rankers.base import score_frame
from wpultr.rankers.lightgbm import LightGBMRanker
from wpultr.settings.methods import get_method
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate
from wpultr.simulate.user_models import row_skipping_reach  # θ(u) of Eq. 22 (the row-skipping user)

THETA3 = np.array([1.0, 1 / 2, 1 / 3])


def ranknet(si: float, sj: float) -> np.ndarray:
    """z of Eq. 6 with the RankNet terms of Eq. 5 (σ = 1)."""
    return np.array([0.0, np.log1p(np.exp(-(si - sj))), np.log1p(np.exp(-(sj - si))), 0.0])


# --------------------------------------------------------------------------------------------- A matrix
def test_a_matrix_of_positions_2_and_3_under_continuous_browsing_by_hand():
    psi = joint_examination(THETA3, "continuous")
    assert psi[1, 2] == pytest.approx(1 / 3) and psi[0, 1] == pytest.approx(1 / 2)
    # a_i = 2, a_j = 3, a_ij = 1/min(1/2, 1/3) = 3, written out from Eq. 9
    hand = np.array([[3, 0, 0, 0], [2 - 3, 2, 0, 0], [3 - 3, 0, 3, 0], [1 - 2 - 3 + 3, 1 - 2, 1 - 3, 1]], float)
    a = a_matrix(THETA3[1], THETA3[2], psi[1, 2])
    np.testing.assert_allclose(a, hand)
    np.testing.assert_allclose(a @ expected_b(THETA3[1], THETA3[2], psi[1, 2]), np.eye(4), atol=1e-12)   # Eq. 14


def test_unbiased_pairs_of_three_documents_by_hand_and_as_half_of_eq_10():
    clicks, positions, scores = np.array([1, 0, 1]), np.array([1, 2, 3]), np.array([0.3, -0.2, 0.5])
    psi = joint_examination(THETA3, "continuous")
    i, j, w = unbiased_pairs([3], clicks, positions, THETA3, psi)
    got = {(int(a), int(b)): float(c) for a, b, c in zip(i, j, w, strict=True)}
    # clicked 1 over unclicked 2: a_1 = 1; clicked 1 over clicked 3: a_1 - a_13 = 1 - 3; 3 over 1: a_3 - a_31 = 0;
    # clicked 3 over unclicked 2: a_3 = 3
    assert got == pytest.approx({(0, 1): 1.0, (0, 2): -2.0, (2, 0): 0.0, (2, 1): 3.0})
    eq10 = sum(ranknet(scores[a], scores[b]) @ a_matrix(THETA3[a], THETA3[b], psi[a, b])
               @ pair_type(clicks[a], clicks[b])
               for a, b in itertools.permutations(range(3), 2))
    assert eq10 == pytest.approx(2 * lp.pair_loss(scores, i, j, w))


@pytest.mark.parametrize("truth", ["continuous", "independent"])
def test_eq_10_is_unbiased_exactly_when_the_joint_model_matches_the_browsing(truth):
    """E over examinations of the click loss (Eq. 10) = the relevance loss (Theorem 3.1), enumerated exactly."""
    scores, relevant = np.array([0.1, 0.7, -0.4]), np.array([0, 1, 1])     # 2 and 3: ψ differs by model
    if truth == "continuous":      # last read position d: P(d = k) = 1/k - 1/(k + 1), P(d = 3) = 1/3
        patterns = [(np.array([1, 0, 0]), 1 / 2), (np.array([1, 1, 0]), 1 / 6), (np.array([1, 1, 1]), 1 / 3)]
    else:
        patterns = [(np.array(e), np.prod(np.where(e, THETA3, 1 - THETA3)))
                    for e in itertools.product([0, 1], repeat=3)]
    assert sum(p for _, p in patterns) == pytest.approx(1.0)
    target = 2 * lp.pair_loss(scores, *lp.session_pairs([3], relevant)[:2], 1.0)   # Σ_{ordered} zᵀ s(r)

    def expected(model: str) -> float:
        psi = joint_examination(THETA3, model)
        return sum(p * 2 * lp.pair_loss(scores, *unbiased_pairs([3], e * relevant, [1, 2, 3], THETA3, psi))
                   for e, p in patterns)

    other = "independent" if truth == "continuous" else "continuous"
    assert expected(truth) == pytest.approx(target, rel=1e-12)
    assert abs(expected(other) - target) > 0.05 * target


def test_row_skipping_joint_examination_follows_eqs_23_and_24_by_hand():
    cols, gamma, c = 2, 0.2, 0.9
    theta = row_skipping_reach(4, cols, gamma, c)
    np.testing.assert_allclose(theta, [0.8, 0.72, 0.8 * (0.2 * 0 + 0.8 * c * c + gamma), 0.8 * (0.8 * 0.81 + 0.2) * c])
    psi = joint_examination(theta, "row_skipping", cols, gamma, c)
    assert psi[0, 1] == pytest.approx(theta[0] * c)                                  # same row: Eq. 24
    assert psi[1, 2] == pytest.approx(theta[1] * c * (1 - gamma))                    # next row, first result
    assert psi[0, 3] == pytest.approx(theta[0] * c * c * (1 - gamma) * c)            # Eq. 23, no row between


def test_torch_loss_equals_the_numpy_pairs_and_weights():
    rng = np.random.default_rng(0)
    clicks = (rng.random((5, 6)) < 0.4).astype(np.float32)
    mask = np.ones((5, 6), bool)
    mask[2, 4:] = False
    clicks[~mask] = 0
    positions = np.where(mask, np.arange(1, 7), 0)
    scores = rng.normal(size=(5, 6)).astype(np.float32)
    theta = 1 / np.arange(1, 7)
    psi = joint_examination(theta, "independent")
    inverse_theta = torch.tensor(np.r_[0, 1 / theta], dtype=torch.float32)
    inverse_psi = torch.zeros((7, 7))
    inverse_psi[1:, 1:] = torch.tensor(1 / psi, dtype=torch.float32)
    got = unbiased_pair_loss(torch.tensor(scores), torch.tensor(clicks), torch.tensor(mask), torch.tensor(positions),
                             inverse_theta, inverse_psi, 1.5)
    sizes = mask.sum(axis=1)
    i, j, w = unbiased_pairs(sizes, clicks[mask], positions[mask], theta, psi)
    assert float(got) == pytest.approx(lp.pair_loss(scores[mask], i, j, w, 1.5), rel=1e-5)


# --------------------------------------------------------------------------------------------- objective
def _objective(lambda_weight: str, model: str = "continuous", seed: int = 0):
    rng = np.random.default_rng(seed)
    sizes = np.array([6, 4, 5, 6])
    positions = np.concatenate([np.arange(1, s + 1) for s in sizes])
    clicks = (rng.random(sizes.sum()) < 0.45).astype(float)
    theta = 1 / np.arange(1, 7)
    objective = RobustObjective(sizes, clicks, positions, theta, joint_examination(theta, model), 1.3, lambda_weight)
    return objective, rng.normal(size=sizes.sum())


@pytest.mark.parametrize("lambda_weight", ["ndcg", "none"])
def test_objective_gradient_and_hessian_against_finite_differences_of_its_loss(lambda_weight):
    objective, f = _objective(lambda_weight)
    grad, hess = objective.grad_hess(f)
    h = 1e-6
    eye = np.eye(len(f))
    fd_grad = np.array([(objective.loss(f + h * e) - objective.loss(f - h * e)) / (2 * h) for e in eye])
    np.testing.assert_allclose(grad, fd_grad, rtol=1e-5, atol=1e-7)
    fd_hess = np.array([(objective.grad_hess(f + h * e)[0][d] - objective.grad_hess(f - h * e)[0][d]) / (2 * h)
                        for d, e in enumerate(eye)])
    w = objective.weights(f)
    touched_by_negative = np.zeros(len(f), bool)
    touched_by_negative[objective.pair_i[w < 0]] = touched_by_negative[objective.pair_j[w < 0]] = True
    assert (lambda_weight == "none") == touched_by_negative.any()      # Eq. 26 leaves no negative weight
    exact = ~touched_by_negative & (hess > lp.MIN_HESS)
    np.testing.assert_allclose(hess[exact], fd_hess[exact], rtol=1e-4, atol=1e-7)
    assert (hess[touched_by_negative] >= np.abs(fd_hess[touched_by_negative]) - 1e-7).all()   # |w|: still a bound
    assert (hess > 0).all()


def test_robust_lambdamart_does_not_depend_on_the_joint_model_but_eq_10_does():
    """Eq. 26: the lambda-trick zeroes the clicked-clicked pairs, the only ones ψ enters (§5)."""
    runs = {(lw, m): _objective(lw, m)[0].grad_hess(_objective(lw, m)[1])
            for lw in ("ndcg", "none") for m in ("independent", "continuous", "row_skipping")}
    for m in ("continuous", "row_skipping"):
        np.testing.assert_array_equal(runs[("ndcg", m)][0], runs[("ndcg", "independent")][0])
        assert np.abs(runs[("none", m)][0] - runs[("none", "independent")][0]).max() > 1e-3


# --------------------------------------------------------------------------------------------- simulator
def _co_examination(model: str, params: dict, k: int = 6, n: int = 20000) -> tuple[np.ndarray, np.ndarray]:
    cfg = SimulateConfig(n_queries=30, docs_per_query=k, results_per_page=k, n_sessions=n, n_annotated_queries=10,
                         vocab_size=200, n_dense_features=4, user_model=model,
                         user_model_params={**params, "click_noise": 1.0})
    s = simulate(cfg, seed=2).sessions.sort_values(["session_id", "position"])
    e = s["click"].to_numpy().reshape(-1, k).astype(float)
    return e.T @ e / len(e), np.sqrt(np.maximum(e.T @ e / len(e) * (1 - e.T @ e / len(e)), 1e-6) / len(e))


@pytest.mark.parametrize("model,joint,params", [
    ("pbm", "independent", {"position_power": 1.0}),
    ("continuous", "continuous", {"position_power": 1.0}),
    ("row_skipping", "row_skipping", {"columns": 3, "skip_row": 0.3, "continue_prob": 0.85}),
])
def test_the_simulators_browsing_models_have_the_papers_joint_examination(model, joint, params):
    empirical, se = _co_examination(model, params)
    theta = row_skipping_reach(6, 3, 0.3, 0.85) if model == "row_skipping" else 1 / np.arange(1, 7)
    psi = joint_examination(theta, joint, 3, 0.3, 0.85)
    assert (np.abs(empirical - psi) <= 4 * se).all(), np.round(empirical - psi, 4)
    wrong = joint_examination(theta, "independent" if joint != "independent" else "continuous")
    assert (np.abs(empirical - wrong) > 4 * se).any()                     # the check can tell models apart


@pytest.mark.parametrize("model,params", [
    ("continuous", {"position_power": 1.0}),
    ("row_skipping", {"columns": 2, "skip_row": 0.2, "continue_prob": 0.9}),
])
def test_swap_experiment_recovers_the_simulators_joint_examination(model, params):
    k = 6
    cfg = SimulateConfig(n_queries=50, docs_per_query=8, results_per_page=k, n_sessions=100, n_annotated_queries=10,
                         vocab_size=200, n_dense_features=4, user_model=model,
                         user_model_params={**params, "click_noise": 0.5})
    theta = 1 / np.arange(1, k + 1) if model == "continuous" else row_skipping_reach(k, 2, 0.2, 0.9) / 0.8
    truth = joint_examination(theta, model, 2, 0.2, 0.9)
    frame = simulate_pair_swaps(cfg, 1, 60000)
    assert set(zip(frame["swap_k1"], frame["swap_k2"], strict=True)) == set(swap_pairs(k))
    with_true_theta2 = joint_swap_estimate(frame, theta[1])
    for key, value in with_true_theta2["joint"].items():
        a, b = map(int, key.split(","))
        assert (abs(value - truth[a - 1, b - 1])
                <= 4 * with_true_theta2["stderr"][key]), (key, value, truth[a - 1, b - 1])
    if model == "continuous":   # independence (θ_i θ_j) is rejected on these sessions
        assert any(abs(v - theta[int(key[0]) - 1] * theta[int(key[2]) - 1]) > 4 * with_true_theta2["stderr"][key]
                   for key, v in with_true_theta2["joint"].items())
    estimated = estimate_joint_examination(cfg, 1, 60000, randpair_sessions=40000)   # θ̂(2) from RandPair too
    assert estimated["theta"]["2"] == pytest.approx(theta[1], rel=0.08)
    for key, value in estimated["joint"].items():
        a, b = map(int, key.split(","))
        assert value == pytest.approx(truth[a - 1, b - 1], rel=0.15)


def test_pair_swap_needs_four_positions_and_valid_pairs():
    small = SimulateConfig(n_queries=20, docs_per_query=3, results_per_page=3, n_sessions=10, n_annotated_queries=5,
                           vocab_size=200, n_dense_features=4)
    with pytest.raises(ConfigError, match="results_per_page: a pair swap needs at least 4 positions"):
        simulate_pair_swaps(small, 0, 10)
    with pytest.raises(ValueError, match="3 <= k1 < k2"):
        simulate_pair_swaps(SimulateConfig(results_per_page=6), 0, 10, pairs=[(2, 5)])


# --------------------------------------------------------------------------------------------- methods
WORLD = {"n_queries": 60, "docs_per_query": 12, "results_per_page": 8, "n_sessions": 1500,
         "n_annotated_queries": 40, "vocab_size": 300, "n_dense_features": 8, "user_model": "continuous",
         "user_model_params": {"click_noise": 0.05}, "logging_media_boost": [0.0, 0.0, 0.0, 0.0]}


def method_config(method: str, **pairwise) -> RunConfig:
    return config_from_dict({
        "seed": 1, "data": {"simulate": WORLD},
        "ranker": {"head": [32], "lightgbm": {"rounds_per_epoch": 15, "learning_rate": 0.1, "num_threads": 1}},
        "train": {"method": method, "epochs": 2, "batch_size": 64, "learning_rate": 0.003, "device": "cpu"},
        "propensity": {"source": "table", "table": {str(k): 1 / k for k in range(1, 9)}, "clip": 0.1},
        "pairwise": pairwise})


@pytest.fixture(scope="module")
def logs():
    return simulate(SimulateConfig(**WORLD), seed=1)


@pytest.mark.e2e
@pytest.mark.parametrize("method,pairwise", [
    ("robust_lambdamart", {}), ("robust_lambdamart", {"lambda_weight": "none"}), ("unbiased_lambdamart", {}),
    ("pairwise_framework", {"joint_model": "continuous"}),
])
def test_short_fits_beat_a_random_ranker_by_a_margin(logs, one_torch_thread, method, pairwise):
    result = get_method(method).fit(logs.sessions, logs.annotations, method_config(method, **pairwise))
    scored = logs.annotations.assign(score=score_frame(result.ranker, logs.annotations))
    ideal = evaluate(logs.annotations.assign(score=logs.annotations["label"].astype(float)), "score")["all"]["DCG@10"]
    random = random_ranker_dcg10(logs.annotations)
    assert evaluate(scored, "score")["all"]["DCG@10"] >= random + 0.4 * (ideal - random)
    if method != "pairwise_framework":
        assert isinstance(result.ranker, LightGBMRanker) and result.bias["backbone"] == "lightgbm"
        losses = [e["train"]["loss"] for e in result.history]
        assert losses[-1] < losses[0]                                     # boosting descends its own loss
    if method == "unbiased_lambdamart":
        assert result.bias["t_minus"]["1"] == 1.0 and len(set(result.bias["t_minus"].values())) > 1
    else:
        assert result.bias["joint_model"] == pairwise.get("joint_model", "continuous")
        assert np.asarray(result.bias["joint"])[1, 2] == pytest.approx(1 / 3, rel=1e-4)   # min(θ_2, θ_3)
