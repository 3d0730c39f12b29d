"""The position-based baselines on tiny simulated logs where their assumptions hold.

Data: the position-based user model (PBM, examination 1/k), 8 results per page, dense features,
and a logging ranker whose noise swamps relevance (logging_noise 50), so that where a document is
shown does not depend on its relevance given its features — the setting in which Regression-EM's
γ(x) and DLA's/pairwise debiasing's position-only propensities are the true model. Each method is
fitted once (module fixture) with the MLP ranker and a [32, 16] head; the BERT backbone is smoke-tested
on a smaller log.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import spearmanr

from ranking_bars import random_ranker_dcg10
from wpultr.config import ConfigError, RunConfig
from wpultr.evaluation.metrics import evaluate
from wpultr.methods.base import FitResult
from wpultr.methods.losses.lists import weighted_softmax_loss
from wpultr.methods.propensities.position import (
    harvest_propensities,
    propensity_array,
    randpair_estimate,
    resolve_propensities,
    simulate_randpair,
    true_position_examination,
)
from wpultr.rankers import registry as rankers_registry
from wpultr.rankers.base import score_frame
from wpultr.rankers.lightgbm import LightGBMRanker
from wpultr.rankers.registry import load_ranker
from wpultr.settings.lightgbm import LightGBMConfig
from wpultr.settings.methods import get_method
from wpultr.settings.propensity import PropensityConfig
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate

SIM = SimulateConfig(n_queries=60, docs_per_query=12, n_sessions=3000, n_annotated_queries=30,
                     results_per_page=8, vocab_size=300, n_dense_features=8, user_model="pbm",
                     logging_noise=50.0)
EPOCHS = {"ipw": 2, "regression_em": 5, "dla": 5, "pairwise_debias": 3}
NEURAL = tuple(EPOCHS)
ALL = NEURAL + ("lightgbm_lambdarank", "lightgbm_position")
MARGIN = 2.5     # over a random ranking's DCG@10, whose SD over the 30 annotated queries is about 1


def run_config(method: str, **propensity) -> RunConfig:
    cfg = RunConfig()
    cfg.data.simulate = SIM
    cfg.ranker.head = [32, 16]
    cfg.ranker.dropout = 0.0
    cfg.train.method = method
    cfg.train.epochs = EPOCHS.get(method, 1)
    cfg.train.batch_size = 64
    cfg.train.device = "cpu"
    cfg.propensity = PropensityConfig(**{"randomisation_sessions": 20_000, **propensity})
    cfg.ranker.lightgbm = LightGBMConfig(rounds=60, eval_points=3, num_threads=1)
    return cfg


@pytest.fixture(scope="module")
def logs():
    torch.set_num_threads(1)
    return simulate(SIM, seed=0)


@pytest.fixture(scope="module")
def truth(logs) -> np.ndarray:
    table = true_position_examination(logs.truth_sessions)
    return np.array([table[str(k)] for k in range(1, SIM.results_per_page + 1)])


@pytest.fixture(scope="module")
def fits(logs) -> dict[str, FitResult]:
    return {m: get_method(m).fit(logs.sessions, logs.annotations, run_config(m)) for m in ALL}


def dcg10(ranker, annotations: pd.DataFrame) -> float:
    return evaluate(annotations.assign(score=score_frame(ranker, annotations)), "score", ks=(10,))["all"]["DCG@10"]


def values(table: dict[str, float]) -> np.ndarray:
    return np.array([table[str(k)] for k in range(1, len(table) + 1)])


# --------------------------------------------------------------------------------------------- helpers
def test_truth_is_the_configured_pbm(truth):
    np.testing.assert_allclose(truth, 1.0 / np.arange(1, 9), rtol=1e-9)


def test_randpair_experiment_recovers_pbm_propensities(truth):
    experiment = simulate_randpair(SIM, seed=0, n_sessions=20_000)
    assert set(experiment["randpair"].unique()) == set(range(2, 9))
    estimate = randpair_estimate(experiment)
    np.testing.assert_allclose(values(estimate["propensities"]), truth, atol=0.04)


def test_harvesting_recovers_pbm_propensities(logs, truth):
    np.testing.assert_allclose(values(harvest_propensities(logs.sessions)["propensities"]), truth, atol=0.05)


def test_propensity_table_is_relative_clipped_and_extended():
    theta = propensity_array({"1": 0.8, "2": 0.4, "4": 0.02}, max_position=6, clip=0.05)
    np.testing.assert_allclose(theta[1:], [1.0, 0.5, 0.5, 0.05, 0.05, 0.05])
    with pytest.raises(ConfigError, match="propensity.table.2"):
        propensity_array({"1": 1.0, "2": -1}, 3, 0.05)


def test_weighted_softmax_loss_sums_over_clicks_not_lists():
    scores = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    mask = torch.ones(2, 2, dtype=torch.bool)
    clicks = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    weights = torch.tensor([[1.0, 1.0], [1.0, 3.0]])
    # three clicks' worth of weight in the second list, one in the first: mean CE = log 2 for all
    assert float(weighted_softmax_loss(scores, clicks, mask, weights)) == pytest.approx(np.log(2.0))
    assert float(weighted_softmax_loss(scores, clicks * 0, mask, weights)) == 0.0


def test_unknown_propensity_source_names_the_key(logs):
    with pytest.raises(ConfigError, match="propensity.source"):
        resolve_propensities(logs.sessions, run_config("ipw", source="oracle"))


# --------------------------------------------------------------------------------------------- methods
def test_ipw_estimates_propensities_by_randomisation(fits, truth):
    bias = fits["ipw"].bias
    assert bias["source"] == "randomisation" and "RandPair" in bias["experiment"]
    np.testing.assert_allclose(values(bias["propensities"]), truth, atol=0.04)


def test_ipw_with_a_given_table_and_listwise_loss(logs, truth):
    table = {str(k): float(v) for k, v in enumerate(truth, start=1)}
    cfg = run_config("ipw", source="table", table=table, clip=0.2)
    cfg.train.loss = "listwise"
    cfg.train.epochs = 1
    result = get_method("ipw").fit(logs.sessions, logs.annotations, cfg)
    assert result.bias["source"] == "table"
    np.testing.assert_allclose(values(result.bias["propensities"]), np.maximum(truth, 0.2))
    assert np.isfinite(result.history[-1]["train"]["loss"])


def test_regression_em_recovers_pbm_propensities(fits, truth):
    learned = values(fits["regression_em"].bias["propensities"])
    np.testing.assert_allclose(learned, truth, atol=0.06)


def test_dla_recovers_pbm_propensities(fits, truth):
    # within 30% of the true examination curve 1/k at every position (the largest error over run seeds
    # 0–3 is 23%); a flat curve, 1/sqrt(k) or 1/k² all fail
    learned = values(fits["dla"].bias["propensities"])
    assert learned[0] == pytest.approx(1.0)
    np.testing.assert_allclose(learned, truth, rtol=0.3)


def test_pairwise_debias_t_plus_decreases_with_position(fits):
    t_plus = values(fits["pairwise_debias"].bias["t_plus"])
    assert t_plus[0] == pytest.approx(1.0)
    assert spearmanr(t_plus, -np.arange(8)).statistic >= 0.95
    assert t_plus[-1] < 0.6
    assert len(fits["pairwise_debias"].bias["t_minus"]) == 8


def test_lightgbm_anchors_train_and_score(fits, logs):
    for name in ("lightgbm_lambdarank", "lightgbm_position"):
        result = fits[name]
        assert isinstance(result.ranker, LightGBMRanker)
        assert [h["rounds"] for h in result.history] == [20, 40, 60]
        scores = score_frame(result.ranker, logs.annotations)
        assert scores.shape == (len(logs.annotations),) and np.isfinite(scores).all()
        assert result.history[-1]["valid"]["DCG@10"] > random_ranker_dcg10(logs.annotations) + MARGIN
    assert fits["lightgbm_position"].ranker.position_aware
    factors = fits["lightgbm_position"].bias["position_bias_factors"]
    assert sorted(map(int, factors)) == list(range(1, 9))       # one learned factor per logged position
    assert factors["1"] > factors["8"]


@pytest.mark.parametrize("method", ALL)
def test_every_method_beats_a_random_ranker(method, fits, logs):
    # dense features carry relevance and the PBM holds: each method ranks the 30 annotated queries far
    # better than chance (random ≈ 11.1, trained ≈ 17.6–19.0, ideal ≈ 19.9 DCG@10)
    assert dcg10(fits[method].ranker, logs.annotations) > random_ranker_dcg10(logs.annotations) + MARGIN


@pytest.mark.parametrize("method", ALL)
def test_fit_result_ranker_saves_and_loads_identically(method, fits, logs, tmp_path):
    assert rankers_registry.ranker_classes()[LightGBMRanker.kind] is LightGBMRanker
    result = fits[method]
    assert isinstance(result, FitResult) and result.history and result.bias["method"] == method
    result.ranker.save(tmp_path / "ranker")
    loaded = load_ranker(tmp_path / "ranker")
    np.testing.assert_array_equal(score_frame(loaded, logs.annotations), score_frame(result.ranker, logs.annotations))
    if isinstance(loaded, LightGBMRanker):
        assert (tmp_path / "ranker" / "model.txt").read_text().startswith("tree")
        again = LightGBMRanker.load(tmp_path / "ranker")
        np.testing.assert_array_equal(score_frame(again, logs.annotations), score_frame(loaded, logs.annotations))


def test_neural_baselines_run_with_the_bert_ranker():
    small = SimulateConfig(n_queries=20, docs_per_query=6, n_sessions=120, n_annotated_queries=10,
                           results_per_page=5, vocab_size=150, n_dense_features=4, user_model="pbm")
    tiny = simulate(small, seed=1)
    for method in NEURAL:
        cfg = run_config(method, randomisation_sessions=2000)
        cfg.data.simulate = small
        cfg.ranker.backbone = "bert"
        cfg.ranker.head = [16]
        cfg.ranker.bert.max_length = 24
        cfg.ranker.bert.hidden_size, cfg.ranker.bert.intermediate_size = 16, 32
        cfg.ranker.bert.num_hidden_layers, cfg.ranker.bert.num_attention_heads = 1, 2
        cfg.train.epochs, cfg.train.batch_size = 1, 32
        result = get_method(method).fit(tiny.sessions, tiny.annotations, cfg)
        scores = score_frame(result.ranker, tiny.annotations)
        assert np.isfinite(scores).all() and len(result.bias["propensities"]) == 5, method


def test_sessions_frame_order_does_not_matter_for_ipw_inputs(logs):
    shuffled = logs.sessions.sample(frac=1.0, random_state=0)
    a, _ = resolve_propensities(logs.sessions, run_config("ipw", source="harvest"))
    b, _ = resolve_propensities(shuffled, run_config("ipw", source="harvest"))
    np.testing.assert_allclose(values(a), values(b), atol=1e-6)
