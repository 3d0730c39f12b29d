"""Pairwise unbiased LTR by Propensity Ratio Scoring (Wang et al., SIGIR 2020): the λ-pair objective's and
PRS-LambdaMART's gradients and Hessians against finite differences of their losses, the pair enumeration and
|ΔNDCG| on hand-worked sessions, PRS/PNS/IPS weights on hand-computed pairs, short fits against a random ranking,
and PRS-LambdaMART's export → score round trip."""
import numpy as np
import pandas as pd
import pytest
import torch

from finite_differences import central_grad, central_hess_diag
from ranking_bars import random_ranker_dcg10
from wpultr.config import ConfigError, RunConfig, config_from_dict
from wpultr.evaluation.metrics import evaluate
from wpultr.methods import lambda_pairs as lp
from wpultr.methods.lambda_pairs import lambda_objective
from wpultr.methods.losses.lists import pair_terms
from wpultr.methods.propensities.pair_weights import pair_weights, resolve_pair_weights, weight_table
from wpultr.methods.propensities.position import propensity_array
from wpultr.methods.propensity_pairs import weighted_pair_loss
from wpultr.methods.training.trainer import SessionLists, batches
from wpultr.rankers.base import score_frame
from wpultr.rankers.lightgbm import LightGBMRanker
from wpultr.settings.methods import get_method
from wpultr.settings.propensity import PropensityConfig
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate


def random_sessions(seed, n_sessions=6):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 7, n_sessions)
    n = int(sizes.sum())
    clicks = (rng.random(n) < 0.35).astype(float)
    return rng, sizes, clicks, rng.normal(0, 1.5, n)


# --------------------------------------------------------------------------------------------- lambda_pairs
def test_session_pairs_enumerates_clicked_over_skipped_within_each_session():
    sizes = np.array([3, 0, 4, 2, 1])
    clicks = np.array([1, 0, 1, 0, 1, 0, 0, 0, 0, 1])
    i, j, pos_i, pos_j = lp.session_pairs(sizes, clicks)
    # session 3 (no click), 4 (no skip): none
    assert list(zip(i, j, strict=True)) == [(0, 1), (2, 1), (4, 3), (4, 5), (4, 6)]
    np.testing.assert_array_equal(pos_i, [1, 3, 2, 2, 2])
    np.testing.assert_array_equal(pos_j, [2, 2, 1, 3, 4])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("sigma", [1.0, 2.5])
def test_pair_gradient_and_hessian_match_finite_differences_of_the_pair_loss(seed, sigma):
    rng, sizes, clicks, scores = random_sessions(seed)
    i, j, _, _ = lp.session_pairs(sizes, clicks)
    assert len(i) > 3
    w = rng.uniform(0.1, 3.0, len(i))
    loss = lambda f: lp.pair_loss(f, i, j, w, sigma)                       # noqa: E731
    grad, hess = lp.pair_grad_hess(scores, i, j, w, sigma)
    np.testing.assert_allclose(grad, central_grad(loss, scores, eps=1e-6), rtol=1e-6, atol=1e-7)
    in_pair = np.isin(np.arange(len(scores)), np.r_[i, j])
    np.testing.assert_allclose(hess[in_pair], central_hess_diag(loss, scores)[in_pair], rtol=1e-4, atol=1e-5)
    assert (hess[~in_pair] == lp.MIN_HESS).all() and (grad[~in_pair] == 0).all()


def test_pair_loss_and_gradient_are_finite_for_extreme_score_gaps():
    s = np.array([800.0, -800.0, 0.0])
    i, j, w = np.array([0, 1]), np.array([1, 2]), np.ones(2)
    assert lp.pair_loss(s, i, j, w) == pytest.approx(800.0)                 # log(1 + e^800) ≈ 800, second pair
    grad, hess = lp.pair_grad_hess(s, i, j, w)
    assert np.isfinite(grad).all() and np.isfinite(hess).all()
    np.testing.assert_allclose(grad, [0.0, -1.0, 1.0], atol=1e-12)


def test_delta_ndcg_of_a_hand_worked_session():
    # scores rank the rows 2, 1, 3; clicks on rows 0 and 2 -> IDCG = 1 + 1/log2(3)
    sizes, clicks, scores = np.array([3]), np.array([1.0, 0.0, 1.0]), np.array([0.1, 0.5, -0.2])
    i, j, _, _ = lp.session_pairs(sizes, clicks)
    idcg = 1 + 1 / np.log2(3)
    expected = [(1 - 1 / np.log2(3)) / idcg, (1 - 1 / np.log2(4)) / idcg]   # swap ranks (2, 1) and (3, 1)
    np.testing.assert_allclose(lp.delta_ndcg(scores, sizes, clicks, i, j), expected)
    # truncated at 2: rank 3 has no discount, IDCG = 1 + 1/log2(3)
    np.testing.assert_allclose(lp.delta_ndcg(scores, sizes, clicks, i, j, truncation=2),
                               [(1 - 1 / np.log2(3)) / idcg, 1 / idcg])


# --------------------------------------------------------------------------------------------- PRS-LambdaMART
@pytest.mark.parametrize("seed", [3, 4])
def test_prs_lambdamart_gradient_and_hessian_match_finite_differences_of_its_loss(seed):
    # |ΔNDCG| is held at the round's ranking (LambdaMART): away from score ties a small step keeps the ranking,
    # so the objective is the exact gradient / Newton diagonal of the loss LightGBM is told it descends
    rng, sizes, clicks, scores = random_sessions(seed, n_sessions=8)
    i, j, _, _ = lp.session_pairs(sizes, clicks)
    theta = np.r_[1.0, 1.0 / np.arange(1, 8)]
    ranks = np.concatenate([np.arange(1, s + 1) for s in sizes])
    base = pair_weights("prs", theta[ranks[i]], theta[ranks[j]], gamma=1.0)
    grad_hess, loss = lambda_objective(sizes, clicks, base, i, j)
    grad, hess = grad_hess(scores)
    np.testing.assert_allclose(grad, central_grad(loss, scores, eps=1e-6), rtol=1e-6, atol=1e-8)
    in_pair = np.isin(np.arange(len(scores)), np.r_[i, j])
    np.testing.assert_allclose(hess[in_pair], central_hess_diag(loss, scores)[in_pair], rtol=1e-4, atol=1e-6)
    # and the λ of one pair is −|ΔNDCG| w / (1 + e^{s_i − s_j}) (PRS §5.1)
    k = 0
    one = lambda_objective(sizes, clicks, base[k:k + 1], i[k:k + 1], j[k:k + 1])[0](scores)[0]
    delta = lp.delta_ndcg(scores, sizes, clicks, i[k:k + 1], j[k:k + 1])[0]
    assert one[i[k]] == pytest.approx(-delta * base[k] / (1 + np.exp(scores[i[k]] - scores[j[k]])))


# --------------------------------------------------------------------------------------------- pair weights
THETA = np.array([1.0, 1.0, 0.5, 0.25, 0.1])          # index 0 unused; positions 1..4


@pytest.mark.parametrize("clicked, skipped, prs, prs_gamma_2, pns, ips", [
    (1, 4, 0.1, 0.1, 0.1, 1.0),        # clicked on top, skip at 4: θ_4/θ_1 = 0.1 (below γ)
    (2, 3, 0.5, 0.5, 0.25, 2.0),       # θ_3/θ_2 = 0.25/0.5
    (3, 1, 1.0, 2.0, 1.0, 4.0),        # θ_1/θ_3 = 4: clipped at γ = 1 (Eq. 11), at 2 with γ = 2
    (4, 2, 1.0, 2.0, 0.5, 10.0),       # θ_2/θ_4 = 5
])
def test_prs_pns_ips_weights_of_hand_computed_pairs(clicked, skipped, prs, prs_gamma_2, pns, ips):
    ti, tj = THETA[clicked], THETA[skipped]
    assert pair_weights("prs", ti, tj, 1.0) == pytest.approx(prs)
    assert pair_weights("prs", ti, tj, 2.0) == pytest.approx(prs_gamma_2)
    assert pair_weights("pns", ti, tj, 1.0) == pytest.approx(pns)
    assert pair_weights("ips", ti, tj, 1.0) == pytest.approx(ips)
    assert pair_weights("naive", ti, tj, 1.0) == 1.0
    table = weight_table("prs", THETA, 1.0)
    assert table.shape == (5, 5) and table[clicked, skipped] == pytest.approx(prs)
    assert weight_table("ips", THETA, 1.0)[clicked, skipped] == pytest.approx(ips)
    assert weight_table("pns", THETA, 1.0)[clicked, skipped] == pytest.approx(pns)


def test_pair_weights_come_from_the_configured_propensities_clipped_as_ipw():
    cfg = RunConfig()
    cfg.propensity = PropensityConfig(source="table", table={"1": 0.8, "2": 0.4, "3": 0.016}, clip=0.05)
    cfg.prs.weighting = "ips"
    table, info = resolve_pair_weights(None, cfg, n_positions=4)
    # θ relative to position 1 = [1, 0.5, 0.02 -> clipped 0.05, 0.05 (the last listed value)]
    assert info["propensities"] == pytest.approx({"1": 1.0, "2": 0.5, "3": 0.05, "4": 0.05})
    assert table[3, 1] == pytest.approx(20.0) and table[2, 4] == pytest.approx(2.0)
    cfg.prs.weighting = "prs"
    table, _ = resolve_pair_weights(None, cfg, n_positions=4)
    assert table[3, 2] == pytest.approx(1.0) and table[2, 3] == pytest.approx(0.1)   # min(1, 10), 0.05/0.5
    with pytest.raises(ConfigError, match=r"^prs\.weighting: .*'prs', 'pns', 'ips', 'naive'"):
        config_from_dict({"prs": {"weighting": "ratio"}})


def test_neural_pair_loss_weights_each_pair_by_its_positions():
    frame = pd.DataFrame({"session_id": [0, 0, 0, 1, 1], "position": [1, 2, 3, 1, 2],
                                            "click": [0, 0, 1, 1, 0]})
    lists = SessionLists.from_frame(frame)
    batch = next(batches(lists, 2, np.random.default_rng(0), torch.device("cpu"), shuffle=False))
    scores = torch.tensor([[0.3, -0.2, 0.5], [1.0, 0.0, 0.0]])
    table = torch.as_tensor(weight_table("prs", THETA, 1.0), dtype=torch.float32)
    loss, stats = weighted_pair_loss(scores, batch, table)
    logistic = lambda d: float(np.log1p(np.exp(-d)))                      # noqa: E731
    # pairs: (3 over 1) weight min(1, 1/0.25) = 1, (3 over 2) weight 0.5/0.25 -> 1, (1 over 2) weight 0.5
    expected = (logistic(0.5 - 0.3) + logistic(0.5 + 0.2) + 0.5 * logistic(1.0)) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6) and stats["pairs"] == 3.0
    assert len(pair_terms(scores, batch.clicks, batch.mask, batch.positions)[0]) == 3


# --------------------------------------------------------------------------------------------- fits
SIM = SimulateConfig(n_queries=60, docs_per_query=12, n_sessions=2000, n_annotated_queries=30, results_per_page=8,
                     vocab_size=300, n_dense_features=8, user_model="pbm", logging_noise=1.0)
TRUE_TABLE = {str(k): 1.0 / k for k in range(1, 9)}
MARGIN = 2.5     # over a random ranking's DCG@10 (≈ 11.1; SD over the 30 annotated queries about 1)


def fit_config(method: str, weighting: str) -> RunConfig:
    cfg = RunConfig()
    cfg.data.simulate = SIM
    cfg.ranker.head, cfg.ranker.dropout = [32, 16], 0.0
    cfg.train.method, cfg.train.epochs, cfg.train.batch_size, cfg.train.device = method, 2, 64, "cpu"
    cfg.ranker.lightgbm.rounds_per_epoch, cfg.ranker.lightgbm.learning_rate = 15, 0.1
    cfg.ranker.lightgbm.num_threads = 1
    cfg.propensity = PropensityConfig(source="table", table=TRUE_TABLE)
    cfg.prs.weighting = weighting
    return cfg


@pytest.fixture(scope="module")
def logs():
    return simulate(SIM, seed=2)


@pytest.mark.parametrize("method, weighting", [("propensity_pairs", "prs"), ("propensity_pairs", "ips"),
                                               ("propensity_pairs", "pns"), ("propensity_lambdamart", "prs")])
def test_short_fits_beat_a_random_ranker(logs, method, weighting, one_torch_thread):
    result = get_method(method).fit(logs.sessions, logs.annotations, fit_config(method, weighting))
    scored = logs.annotations.assign(score=score_frame(result.ranker, logs.annotations))
    assert evaluate(scored, "score", ks=(10,))["all"]["DCG@10"] > random_ranker_dcg10(logs.annotations) + MARGIN
    assert result.bias["pair_weighting"] == weighting
    assert result.bias["propensities"]["8"] == pytest.approx(1 / 8)
    if method == "propensity_lambdamart":
        assert isinstance(result.ranker, LightGBMRanker)
        losses = [e["train"]["loss"] for e in result.history]
        assert losses[1] < losses[0]                     # boosting descends the λ-pair loss


def test_reproduce_config_is_the_papers_setup():
    """prs.yaml: the paper's click model and true propensities (1/k)^η in every setting, both learners with the
    four weightings, n_sessions giving about 128 K clicks (1.36 clicks a session measured at η = 1)."""
    from pathlib import Path

    from wpultr.experiment.spec import load_experiment
    exp = load_experiment(Path(__file__).parents[1] / "pipelines" / "reproduce" / "prs.yaml")
    assert all(r.config for r in exp.runs) and len(exp.spec.seeds) >= 5
    run = {(r.setting, r.label): r.config for r in exp.runs if r.seed == exp.spec.seeds[0]}
    for (_setting, label), c in run.items():
        sim, base = c["data"]["simulate"], c["propensity"]
        assert sim["user_model"] == "prs" and base["source"] == "table"
        eta = sim["user_model_params"]["eta"]
        theta = propensity_array(base["table"], sim["results_per_page"], base["clip"])
        np.testing.assert_allclose(theta[1:], np.maximum(np.arange(1.0, 11.0) ** -eta, base["clip"]),
                                   rtol=1e-5)
        assert base["clip"] == (0.05 if label.startswith("IPS") else 0.01)
        learner = "propensity_lambdamart" if label.endswith("LambdaMART") else "propensity_pairs"
        assert (c["train"]["method"], c["prs"]["weighting"]) == (learner, label.split("-")[0].lower())
    for group in exp.spec.tables.sweep.groups.values():
        assert set(group) <= set(exp.settings)


def test_lambdarank_normalisation_matches_a_per_session_loop():
    """`normalised_pair_weights` = LightGBM's lambdarank_norm, restated session by session: |ΔNDCG| / (0.01 + |Δs|)
    where the session's scores differ, then × log2(1 + Λ) / Λ with Λ = Σ 2σρ × factor over the session's pairs."""
    rng = np.random.default_rng(3)
    sizes = np.array([4, 3, 5, 2])
    clicks = np.array([1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0], dtype=float)
    scores = rng.normal(size=sizes.sum())
    scores[4:7] = 0.7                                                   # session 1: every score equal
    i, j, _, _ = lp.session_pairs(sizes, clicks)
    swap = lp.delta_ndcg(scores, sizes, clicks, i, j)
    got = lp.normalised_pair_weights(scores, sizes, i, j, swap, sigma=1.0)
    session = np.repeat(np.arange(len(sizes)), sizes)
    expected = np.empty(len(i))
    for q in range(len(sizes)):
        rows = np.flatnonzero(session[i] == q)
        own = scores[session == q]
        factor = [swap[k] / (0.01 + abs(scores[i[k]] - scores[j[k]])) if own.max() > own.min() else swap[k]
                  for k in rows]
        total = sum(2.0 * f / (1.0 + np.exp(scores[i[k]] - scores[j[k]])) for f, k in zip(factor, rows, strict=True))
        for f, k in zip(factor, rows, strict=True):
            expected[k] = f * (np.log2(1.0 + total) / total if total > 0 else 1.0)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    grad = lambda_objective(sizes, clicks, np.ones(len(i)), i, j, normalise=True)[0](scores)[0]
    np.testing.assert_allclose(grad, lp.pair_grad_hess(scores, i, j, expected)[0], rtol=1e-12)


def skipped_relevant_share(clicks: np.ndarray, relevant: np.ndarray, table: np.ndarray) -> float:
    """Share of the total weight of the (clicked i, skipped j) pairs of (sessions, positions) arrays whose j is
    relevant; table[k_i, k_j] as `weight_table` gives it."""
    total = on_relevant = 0.0
    k = clicks.shape[1]
    for a in range(k):
        for b in range(k):
            pairs = clicks[:, a] & ~clicks[:, b]
            total += table[a + 1, b + 1] * pairs.sum()
            on_relevant += table[a + 1, b + 1] * (pairs & relevant[:, b]).sum()
    return on_relevant / total


def test_prs_and_pns_keep_skipped_relevant_documents_among_the_negatives():
    """The measured reason in docs/reproduction/prs.md: in expectation PNS weights a skipped document at position k
    by θ_k (1 − θ_k ε(r)) and Naive by (1 − θ_k ε(r)), the same factor θ_k whether it is relevant or not, so on
    noise-free PRS-model clicks the share of pair weight on skipped relevant documents barely moves (Eq. 7's
    second step would make it 0)."""
    sim = SimulateConfig(n_queries=200, docs_per_query=20, n_sessions=6000, n_annotated_queries=20, vocab_size=300,
                         n_dense_features=4, zipf_exponent=0.0, logging_noise=1.0, user_model="prs",
                         user_model_params={"eta": 1.0, "mu": 0.0})
    logs = simulate(sim, seed=0)
    clicks = logs.sessions["click"].to_numpy().reshape(-1, 10).astype(bool)
    relevant = logs.truth_sessions["true_label"].to_numpy().reshape(-1, 10) >= 3
    theta = np.r_[1.0, 1.0 / np.arange(1, 11)]
    share = {w: skipped_relevant_share(clicks, relevant, weight_table(w, theta, 1.0))
             for w in ("naive", "ips", "pns", "prs")}
    assert share["naive"] > 0.1                               # relevant documents below the fold go unclicked
    assert share["pns"] > 0.8 * share["naive"] and share["prs"] > 0.8 * share["ips"]
