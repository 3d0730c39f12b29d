"""The LightGBM ranker backbone: BAL end to end on a real LocalCluster, Naive with the same booster, export → score.

World: the simulator's whole-page clicks on 60 queries with 8 dense features, three quarters of them
noisy copies of the graded relevance, so a booster on clicks must rank far above chance; the test
asserts BAL closes at least half of the random → ideal DCG@10 gap on the test queries.
"""
import json

import numpy as np
import pandas as pd
import pytest

from wpultr.causal.graph import DiscoveredGraph, epoch_dir
from wpultr.config import ConfigError, RunConfig, config_from_dict
from wpultr.evaluation.metrics import evaluate
from wpultr.methods.training.gbdt import BoostingTrainer
from wpultr.pipeline.runner import run_pipeline
from wpultr.rankers.base import score_frame
from wpultr.rankers.lightgbm import LightGBMRanker
from wpultr.rundir import layout as L
from wpultr.schema import CLICK, RELEVANCE_SCORE
from wpultr.settings.methods import get_method
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate

ROUNDS = 15
WORLD = {"n_queries": 60, "docs_per_query": 12, "results_per_page": 8, "n_sessions": 1500,
         "n_annotated_queries": 40, "vocab_size": 300, "n_dense_features": 8}


def lightgbm_config(tmp_path, **train):
    return config_from_dict({
        "name": "bal-lightgbm", "seed": 3, "run_dir": str(tmp_path / "{name}"),
        "data": {"source": "simulate", "valid_fraction": 0.3, "simulate": WORLD},
        "ranker": {"backbone": "lightgbm",
                   "lightgbm": {"rounds_per_epoch": ROUNDS, "learning_rate": 0.1, "num_threads": 1}},
        "train": {"method": "bal", "epochs": 2, "warmup_epochs": 1, **train},
        "discovery": {"n_sessions": 150, "n_bootstrap": 0},
        "bal": {"estimator_rows": 1500, "influence": {"epochs": 5}, "click_model": {"epochs": 2}},
    })


def random_and_ideal_dcg(test: pd.DataFrame) -> tuple[float, float]:
    """Mean DCG@10 of 20 random orderings of the test documents, and DCG@10 of ordering them by label."""
    random = [evaluate(test.assign(score=np.random.default_rng(i).random(len(test))), "score")["all"]["DCG@10"]
              for i in range(20)]
    return float(np.mean(random)), evaluate(test.assign(score=test["label"].astype(float)), "score")["all"]["DCG@10"]


@pytest.fixture(scope="module")
def bal_run(tmp_path_factory, dask_client):
    tmp = tmp_path_factory.mktemp("bal_lightgbm")
    return tmp, run_pipeline(lightgbm_config(tmp), client=dask_client)


@pytest.mark.e2e
def test_bal_with_the_lightgbm_backbone_grows_the_booster_records_graphs_and_ranks(bal_run):
    _, result = bal_run
    run = result.run_dir
    history = json.loads((run / L.HISTORY).read_text())["epochs"]
    assert [e.get("phase") for e in history] == ["warmup", "bal", "bal"]
    assert [e["train"]["rounds"] for e in history] == [ROUNDS, 2 * ROUNDS, 3 * ROUNDS]   # each epoch adds its rounds
    assert all(e["train"]["rounds_added"] == ROUNDS for e in history)
    for k, entry in enumerate(history[1:]):
        graph = DiscoveredGraph.load(epoch_dir(run, k) / "graph.json")                     # discovered every epoch
        assert graph.meta["epoch"] == k and graph.edge(RELEVANCE_SCORE, CLICK) is not None
        assert entry["graph_edges"] == [f"{e.source} {e.arrow()} {e.target}" for e in graph.edges]
        assert list(entry["step_seconds"]) == ["score", "graph", "weights", "click_model", "ranker"]
        assert np.isfinite(entry["train"]["loss"]) and 0 < entry["weights"]["ess_fraction"] <= 1
    bias = json.loads((run / L.BIAS).read_text())
    assert bias["backbone"] == "lightgbm" and len(bias["epochs"]) == 2
    saved = json.loads((run / L.RANKER_DIR / "config.json").read_text())
    assert saved["kind"] == "lightgbm"
    random, ideal = random_and_ideal_dcg(pd.read_parquet(run / L.TEST_SCORES))
    dcg = result.metrics["all"]["DCG@10"]
    assert dcg >= random + 0.5 * (ideal - random), (dcg, random, ideal)


# --------------------------------------------------------------------------------------------- Naive
SIM = SimulateConfig(**WORLD)


@pytest.fixture(scope="module")
def logs():
    return simulate(SIM, seed=1)


def naive_config(loss: str) -> RunConfig:
    cfg = RunConfig()
    cfg.data.simulate = SIM
    cfg.train.method, cfg.train.loss, cfg.train.epochs, cfg.train.warmup_epochs = "naive", loss, 2, 1
    cfg.ranker.backbone = "lightgbm"
    cfg.ranker.lightgbm.rounds_per_epoch, cfg.ranker.lightgbm.learning_rate = ROUNDS, 0.1
    cfg.ranker.lightgbm.num_threads = 1
    return cfg


@pytest.mark.e2e
@pytest.mark.parametrize("loss", ["pointwise", "listwise", "lambdarank"])
def test_naive_with_the_lightgbm_backbone_boosts_its_click_loss_and_ranks(logs, loss):
    result = get_method("naive").fit(logs.sessions, logs.annotations, naive_config(loss))
    assert isinstance(result.ranker, LightGBMRanker) and result.bias["backbone"] == "lightgbm"
    assert [e["train"]["rounds"] for e in result.history] == [ROUNDS, 2 * ROUNDS, 3 * ROUNDS]
    losses = [e["train"]["loss"] for e in result.history]
    assert losses[0] > losses[1] > losses[2]                       # boosting descends its own loss
    best = result.bias["best_rounds"]
    assert result.ranker.booster.current_iteration() == best
    scored = logs.annotations.assign(score=score_frame(result.ranker, logs.annotations))
    random, ideal = random_and_ideal_dcg(logs.annotations)
    assert evaluate(scored, "score")["all"]["DCG@10"] >= random + 0.5 * (ideal - random)


def test_booster_training_scores_are_the_rankers_scores(logs):
    cfg = naive_config("pointwise")
    trainer = BoostingTrainer(logs.sessions, None, cfg)
    assert (trainer.train_scores() == 0).all()                    # an empty booster
    trainer.boost(*trainer.naive_objective("pointwise"), rounds=5)
    assert trainer.rounds == 5
    np.testing.assert_allclose(trainer.train_scores(), score_frame(trainer.finish(), logs.sessions), atol=1e-5)
    np.testing.assert_array_equal(trainer.clicks, logs.sessions[CLICK].to_numpy(float)[trainer.order])


# --------------------------------------------------------------------------------------------- config
def test_lightgbm_backbone_settings_are_validated_by_dotted_key(tmp_path):
    for key, bad in (("rounds_per_epoch", 0), ("learning_rate", 0.0), ("num_leaves", 1), ("min_data_in_leaf", 0),
                     ("num_threads", -1)):
        with pytest.raises(ConfigError, match=rf"^ranker\.lightgbm\.{key}: .*got"):
            config_from_dict({"ranker": {"backbone": "lightgbm", "lightgbm": {key: bad}}})
    with pytest.raises(ConfigError, match="ranker.backbone"):
        config_from_dict({"ranker": {"backbone": "xgboost"}})


def test_methods_without_a_boosting_path_refuse_the_lightgbm_backbone(logs):
    cfg = naive_config("pointwise")
    cfg.train.method = "ipw"
    with pytest.raises(ConfigError, match=r"ranker\.backbone: 'lightgbm' trains with train\.method 'bal' or 'naive'"):
        get_method("ipw").fit(logs.sessions, logs.annotations, cfg)


def test_bal_with_the_lightgbm_backbone_needs_a_warm_up(tmp_path, logs):
    cfg = lightgbm_config(tmp_path, warmup_epochs=0)
    with pytest.raises(ConfigError, match=r"train\.warmup_epochs: BAL with ranker\.backbone 'lightgbm' needs >= 1"):
        get_method("bal").fit(logs.sessions, logs.annotations, cfg)


def test_lambdarank_step_weights_each_pair_by_its_clicked_rows_weight(logs):
    """BAL's lambdarank step: a clicked-over-skipped pair counts its click's ω, so the gradient of a session whose
    clicks weigh 3 is 3x that of the same session at weight 1, and a row's gradient is the sum over its pairs."""
    trainer = BoostingTrainer(logs.sessions, None, naive_config("lambdarank"))
    f = np.random.default_rng(0).normal(size=len(trainer.order))
    g1, h1 = trainer.lambda_objective(np.ones(len(f)))[0](f)
    first = np.arange(trainer.group_sizes[0])                      # the first session's rows (dataset order)
    weights = np.ones(len(f))
    weights[first] = 3.0
    g3, h3 = trainer.lambda_objective(weights)[0](f)
    np.testing.assert_allclose(g3[first], 3 * g1[first])
    np.testing.assert_allclose(g3[len(first):], g1[len(first):])
    clicked = trainer.clicks[first] > 0
    if clicked.any() and (~clicked).any():                          # a clicked row is pushed up, a skipped one down
        assert (g1[first][clicked] < 0).all() and (g1[first][~clicked] > 0).all()
    weighted, plain = trainer.lambda_objective(weights)[1](f), trainer.lambda_objective(np.ones(len(f)))[1](f)
    assert weighted > plain


def test_lambdarank_skip_weights_scale_each_pair_by_its_skipped_row(logs):
    """`bal.pair_weights` skip/both: a pair's weight is its click's weight times its skipped row's; with skip weights
    of 1 the objective is the click-weighted one, and zeroing one skipped row removes exactly its pairs."""
    trainer = BoostingTrainer(logs.sessions, None, naive_config("lambdarank"))
    n = len(trainer.order)
    f = np.random.default_rng(1).normal(size=n)
    ones = np.ones(n)
    g, h = trainer.lambda_objective(ones)[0](f)
    g1, h1 = trainer.lambda_objective(ones, ones)[0](f)
    np.testing.assert_allclose(g1, g)
    np.testing.assert_allclose(h1, h)
    first = np.arange(trainer.group_sizes[0])
    skipped = first[trainer.clicks[first] == 0]
    clicked = first[trainer.clicks[first] > 0]
    if len(skipped) and len(clicked):
        skip = ones.copy()
        skip[skipped[0]] = 0.0                       # that row's pairs weigh nothing
        gz, _ = trainer.lambda_objective(ones, skip)[0](f)
        assert gz[skipped[0]] == 0.0 and g[skipped[0]] > 0.0
        np.testing.assert_allclose(gz[len(first):], g[len(first):])
    half = trainer.lambda_objective(ones, np.full(n, 0.5))
    np.testing.assert_allclose(half[0](f)[0], 0.5 * g)
    assert half[1](f) == pytest.approx(0.5 * trainer.lambda_objective(ones)[1](f))


@pytest.mark.e2e
@pytest.mark.parametrize("loss", ["listwise", "lambdarank"])
def test_click_reweighting_bal_with_the_lightgbm_backbone_ranks(tmp_path, dask_client, loss):
    """`train.loss: listwise` (the IPW softmax) or `lambdarank` (λ-pairs): each click divided by the page's σ(v)."""
    result = run_pipeline(lightgbm_config(tmp_path, loss=loss), client=dask_client)
    history = json.loads((result.run_dir / L.HISTORY).read_text())["epochs"]
    assert [e.get("phase") for e in history] == ["warmup", "bal", "bal"]
    assert all(np.isfinite(e["train"]["loss"]) and e["train"]["rounds_added"] == ROUNDS for e in history)
    random, ideal = random_and_ideal_dcg(pd.read_parquet(result.run_dir / L.TEST_SCORES))
    dcg = result.metrics["all"]["DCG@10"]
    assert dcg >= random + 0.5 * (ideal - random), (dcg, random, ideal)


@pytest.mark.e2e
def test_bal_with_the_lightgbm_backbone_is_the_same_booster_for_the_same_seed(tmp_path, logs, dask_client):
    """A fixed seed gives the same booster whatever the process did before: the click model's initial weights
    come from the epoch's seed, not from torch's global stream (which no booster run seeds)."""
    import torch
    cfg = lightgbm_config(tmp_path, loss="lambdarank")
    boosters = []
    for moved in (0, 1000):
        torch.rand(moved)                                   # whatever else ran in this process
        result = get_method("bal").fit(logs.sessions, None, cfg)
        boosters.append(result.ranker.booster.model_to_string())
    assert boosters[0] == boosters[1]
