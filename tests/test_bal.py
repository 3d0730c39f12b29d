"""BAL: the click model's gradient blocking, variant graphs, and short runs on a real LocalCluster (MLP, tiny BERT)."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from ranking_bars import random_ranker_dcg10
from wpultr.bal.click_model import (
    ClickModel,
    PageInputs,
    document_offsets,
    log_click_likelihood,
    ranker_loss,
    skipped_irrelevance,
)
from wpultr.bal.method import BAL, click_model_rows, click_side_weights, fixed_graph, listwise_click_weights
from wpultr.bal.rows import document_pairs
from wpultr.causal.biases import identify_biases
from wpultr.causal.discovery import prior_violations
from wpultr.causal.graph import DiscoveredGraph, epoch_dir
from wpultr.config import ConfigError, RunConfig, config_from_dict
from wpultr.evaluation.metrics import evaluate
from wpultr.pipeline.runner import run_pipeline
from wpultr.rankers.base import score_frame
from wpultr.rankers.mlp import MLPRanker
from wpultr.rundir import layout as L
from wpultr.schema import BAIDU_PAGE_FEATURES, CLICK, POSITION, RELEVANCE_SCORE
from wpultr.settings.bal import VARIANTS, ClickModelConfig
from wpultr.settings.lightgbm import LightGBMConfig
from wpultr.settings.methods import get_method
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate


def _frame(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"features": list(rng.normal(size=(n, 5)).astype(np.float32)),
                         "position": rng.integers(1, 11, n).astype(float), "media_type": rng.integers(0, 4, n),
                         CLICK: rng.integers(0, 2, n).astype(np.float32)})

MARGIN = 2.5     # over a random ranking's DCG@10 (SD ≈ 1 over the ~14 test queries of `_bal_config`)


@pytest.mark.parametrize("form", ["multiplicative", "additive"])
def test_click_likelihood_matches_the_direct_formula(form):
    u, v = torch.linspace(-4, 4, 9), torch.linspace(3, -3, 9)
    p = torch.sigmoid(u) * torch.sigmoid(v) if form == "multiplicative" else torch.sigmoid(u + v)
    for c in (0.0, 1.0):
        expected = torch.log(p) if c else torch.log1p(-p)
        got = log_click_likelihood(u, v, torch.full_like(u, c), form)
        assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("form", ["multiplicative", "additive"])
def test_ranker_loss_is_the_masked_weighted_click_likelihood_in_value_and_gradient(form):
    """`ranker_loss` (a shortened formula for a constant v) = −Σ w·m·log p(c | u, v) / Σ m, far into the tails too."""
    g = torch.Generator().manual_seed(0)
    scores, v = torch.randn(40, 10, generator=g, dtype=torch.float64) * 8, torch.randn(40, 10, generator=g,
                                                                                        dtype=torch.float64) * 8
    clicks = (torch.rand(40, 10, generator=g) < 0.3).double()
    weights, mask = torch.rand(40, 10, generator=g, dtype=torch.float64), torch.rand(40, 10, generator=g) < 0.9
    model = ClickModel(PageInputs(("position",), (), ()), ClickModelConfig(form=form, hidden=[4])).double()
    with torch.no_grad():
        model.scale.fill_(0.3)
        model.bias.fill_(-0.2)
    fast, direct = scores.clone().requires_grad_(), scores.clone().requires_grad_()
    got = ranker_loss(model, fast, v, clicks, weights, mask)
    ll = log_click_likelihood(model.relevance_term(direct, detached=True), v, clicks, form)
    expected = -(weights * ll * mask.double()).sum() / mask.sum()
    got.backward()
    expected.backward()
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(fast.grad, direct.grad, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("form", ["multiplicative", "additive"])
def test_ranker_gradient_flows_only_through_the_relevance_score(form):
    frame = _frame()
    torch.manual_seed(0)
    ranker = MLPRanker.for_table(frame, [8], 0.0)
    model = ClickModel(PageInputs(("position",), ("media_type",), (5,)), ClickModelConfig(form=form, hidden=[4]))
    numeric, codes = model.page.tensors(frame)
    numeric.requires_grad_(True)
    page_logits = model.page_term(numeric, codes)                # built with a graph to φ_c and to x
    scores = ranker(ranker.prepare(frame))
    clicks = torch.as_tensor(frame[CLICK].to_numpy().copy())
    loss = ranker_loss(model, scores, page_logits, clicks, torch.ones(len(frame)),
                       torch.ones(len(frame), dtype=torch.bool))
    loss.backward()
    assert numeric.grad is None or torch.count_nonzero(numeric.grad) == 0           # nothing to the page features
    for name, p in model.named_parameters():                                         # nor to φ_c
        assert p.grad is None or torch.count_nonzero(p.grad) == 0, name
    assert any(p.grad is not None and torch.count_nonzero(p.grad) > 0 for p in ranker.parameters())


PAGE_COLUMNS = ("position", "media_type", "serp_height", "serp_max_show_height")   # how a result was presented


@pytest.fixture(scope="module")
def typed_logs():
    """Simulated sessions whose dense features end in a one-hot of the document's own media type
    (`data.simulate.media_type_features`): a document feature the ranker may read, unlike the type it was shown as."""
    cfg = SimulateConfig(n_queries=20, docs_per_query=6, n_sessions=300, n_annotated_queries=10, results_per_page=5,
                         n_dense_features=4, media_type_features=True)
    return cfg, simulate(cfg, seed=1)


def _page_changed(frame: pd.DataFrame) -> pd.DataFrame:
    """The same documents presented differently: positions, presented media types and heights all changed."""
    rng = np.random.default_rng(7)
    return frame.assign(position=rng.permutation(frame["position"].to_numpy()),
                        media_type=(frame["media_type"] + 1) % 4,
                        serp_height=frame["serp_height"] * 3 + 50,
                        serp_max_show_height=rng.permutation(frame["serp_max_show_height"].to_numpy()))


def _mlp(cfg, logs):
    torch.manual_seed(0)
    return MLPRanker.for_table(logs.sessions, [8], 0.0)


def _position_aware_lightgbm(cfg, logs):
    """LightGBM's position-debiasing objective reads the position while training; its scores must not."""
    run = RunConfig()
    run.data.simulate, run.train.method, run.train.device = cfg, "lightgbm_position", "cpu"
    run.ranker.lightgbm = LightGBMConfig(rounds=20, eval_points=1, num_threads=1)
    ranker = get_method("lightgbm_position").fit(logs.sessions, logs.annotations, run).ranker
    assert ranker.position_aware
    return ranker


@pytest.mark.parametrize("build", [_mlp, _position_aware_lightgbm], ids=["mlp", "lightgbm_position"])
def test_ranker_scores_depend_on_document_features_not_page_features(typed_logs, build):
    cfg, logs = typed_logs
    frame = logs.sessions
    assert set(PAGE_COLUMNS) <= set(frame.columns)
    ranker = build(cfg, logs)
    scores = score_frame(ranker, frame)
    assert np.array_equal(scores, score_frame(ranker, _page_changed(frame)))        # page features: not read
    # the document's own media type (last 4 feature values) is a document feature: it is read
    retyped = frame.assign(features=[np.concatenate([f[:-4], np.roll(f[-4:], 1)]) for f in frame["features"]])
    other_docs = frame.assign(features=list(np.roll(np.stack(frame["features"].to_numpy()), 1, axis=0)))
    assert not np.array_equal(scores, score_frame(ranker, other_docs))
    if build is _mlp:   # the fitted trees may not split on the type; the MLP's random weights read every input
        assert not np.array_equal(scores, score_frame(ranker, retyped))


@pytest.mark.e2e
def test_click_model_learns_the_page_effect():
    rng = np.random.default_rng(0)
    n = 20000
    r = rng.normal(size=n)
    top = rng.integers(0, 2, n)
    exam = np.where(top == 1, 0.9, 0.2)
    clicks = (rng.random(n) < exam / (1 + np.exp(-2 * r))).astype(np.float32)
    nodes = pd.DataFrame({"top": top.astype(float)})
    model = ClickModel(PageInputs(("top",), (), ()), ClickModelConfig(epochs=20, hidden=[8]))
    model.fit(r, nodes, clicks, np.ones(n), torch.Generator().manual_seed(0))
    v = model.page_logits(pd.DataFrame({"top": [0.0, 1.0]}))
    ratio = (1 / (1 + np.exp(-v[0]))) / (1 / (1 + np.exp(-v[1])))
    assert abs(ratio - 0.2 / 0.9) < 0.08          # examination ratio of the two page states
    assert abs(float(torch.nn.functional.softplus(model.scale.detach())) - 2.0) < 0.4


@pytest.mark.parametrize("form", ["multiplicative", "additive"])
def test_document_offsets_maximise_the_ridge_penalised_likelihood(form):
    """Fisher scoring lands where an independent optimiser (torch L-BFGS on log_click_likelihood) does."""
    rng = np.random.default_rng(1)
    n, n_pairs, ridge = 600, 40, 0.5
    pairs = rng.integers(0, n_pairs, n)
    u, v = rng.normal(size=n), rng.normal(size=n)
    clicks, weights = (rng.random(n) < 0.35).astype(float), rng.uniform(0.5, 2.0, n)
    delta = np.zeros(0)
    for _ in range(30):
        delta = document_offsets(u, v, clicks, weights, pairs, form, ridge, delta)
    reference = torch.zeros(n_pairs, dtype=torch.float64, requires_grad=True)
    args = [torch.as_tensor(a, dtype=torch.float64) for a in (u, v, clicks, weights)]
    optimiser = torch.optim.LBFGS([reference], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14)

    def objective():
        optimiser.zero_grad()
        ll = log_click_likelihood(args[0] + reference[torch.as_tensor(pairs)], args[1], args[2], form)
        loss = -(args[3] * ll).sum() + ridge / 2 * (reference ** 2).sum()
        loss.backward()
        return loss
    optimiser.step(objective)
    np.testing.assert_allclose(delta, reference.detach().numpy(), atol=1e-6)


def _harvestable_logs(n_pairs=300, shows=30, seed=0):
    """PBM logs (examination 1/p over 5 positions) where the logging ranker shows relevant documents higher but
    noisily, so each document appears at several positions; r̂ carries none of the relevance."""
    rng = np.random.default_rng(seed)
    relevance = rng.uniform(0.05, 0.95, n_pairs)
    pairs = np.repeat(np.arange(n_pairs), shows)
    logit = np.log(relevance / (1 - relevance))[pairs] + rng.normal(scale=1.5, size=len(pairs))
    position = np.clip(5 - np.digitize(logit, np.quantile(logit, [0.2, 0.4, 0.6, 0.8])), 1, 5)
    clicks = (rng.random(len(pairs)) < relevance[pairs] / position).astype(np.float32)
    return pairs, position.astype(float), clicks


@pytest.mark.e2e
def test_document_effects_recover_examination_that_relevance_confounds():
    """Without δ the page term takes the relevance the logging ranker put on top (examination falls too
    steeply with position); with it, the same documents at other positions give examination back."""
    pairs, position, clicks = _harvestable_logs()
    nodes, r, ones = pd.DataFrame({"position": position}), np.zeros(len(pairs)), np.ones(len(pairs))

    def exam_ratio(with_pairs):
        torch.manual_seed(0)                        # the page branch's initial weights
        model = ClickModel(PageInputs(("position",), (), ()), ClickModelConfig(epochs=30, hidden=[8],
                                                                                learning_rate=0.03, batch_size=512))
        model.fit(r, nodes, clicks, ones, torch.Generator().manual_seed(0), pairs if with_pairs else None)
        exam = 1 / (1 + np.exp(-model.page_logits(pd.DataFrame({"position": [1.0, 5.0]}))))
        return exam[1] / exam[0]

    plain, harvested = exam_ratio(False), exam_ratio(True)
    assert plain < 0.12                             # truth 0.2: confounded by relevance
    assert abs(harvested - 0.2) < 0.04


def test_skipped_irrelevance_is_the_posterior_of_an_irrelevant_skip():
    """P(not relevant | not clicked) under p(c) = σ(u)σ(v), by Bayes on a direct (float64) computation, tails too."""
    u = np.array([-3.0, -0.5, 0.0, 1.2, 4.0, 30.0, -30.0])
    v = np.array([2.0, -1.0, 0.3, -4.0, 0.0, -30.0, 30.0])
    q, e = 1 / (1 + np.exp(-u)), 1 / (1 + np.exp(-v))
    direct = (1 / (1 + np.exp(u))) / (1 - q * e)    # 1 − σ(u) written as σ(−u): no cancellation at u = 30
    np.testing.assert_allclose(skipped_irrelevance(u, v), direct, rtol=1e-9)
    # a result surely seen: its skip means irrelevant
    assert skipped_irrelevance(np.array([0.0]), np.array([40.0]))[0] == pytest.approx(1.0)
    # a result nobody saw: the skip says nothing, the prior 1 − σ(u) stays
    assert skipped_irrelevance(np.array([1.0]), np.array([-40.0]))[0] == pytest.approx(1 - 1 / (1 + np.exp(-1.0)))


def test_relevance_logits_add_the_documents_offsets_over_all_rows():
    pairs, position, clicks = _harvestable_logs(n_pairs=50, shows=10)
    nodes, ones = pd.DataFrame({"position": position}), np.ones(len(pairs))
    r = np.random.default_rng(2).normal(size=len(pairs))
    torch.manual_seed(0)
    model = ClickModel(PageInputs(("position",), (), ()), ClickModelConfig(epochs=2, hidden=[4]))
    model.fit(r, nodes, clicks, ones, torch.Generator().manual_seed(0), pairs)
    alpha, beta = model.relevance_affine()
    v = model.page_logits(nodes)
    np.testing.assert_allclose(model.relevance_logits(r, v, clicks, ones), alpha * r + beta)
    with_docs = model.relevance_logits(r, v, clicks, ones, pairs + 7)        # any codes: only equality matters
    delta = document_offsets(alpha * r + beta, v.astype(float), clicks, ones, pairs, "multiplicative",
                             model.config.document_ridge, np.zeros(0), steps=4)
    np.testing.assert_allclose(with_docs, alpha * r + beta + delta[pairs], rtol=1e-9)
    # one offset per document: rows of the same pair move together
    shift = with_docs - (alpha * r + beta)
    assert all(np.ptp(shift[pairs == k]) < 1e-9 for k in range(5))


def test_page_logits_in_chunks_equal_one_pass():
    torch.manual_seed(0)
    model = ClickModel(PageInputs(("position",), ("media_type",), (5,)), ClickModelConfig(hidden=[8]))
    nodes = _frame(n=1000)
    np.testing.assert_allclose(model.page_logits(nodes, chunk_rows=64), model.page_logits(nodes, chunk_rows=10**6),
                               rtol=1e-6, atol=1e-6)


def test_document_pairs_follow_the_config_and_the_logs():
    frame = pd.DataFrame({"query_id": ["a"] * 4 + ["b"] * 2, "doc_id": ["x", "x", "y", "y", "x", "z"],
                          "position": [1, 2, 1, 1, 3, 4]})
    cfg = RunConfig()
    pairs, info = document_pairs(frame, cfg)          # auto: 2 of 6 rows are a pair at two positions
    assert pairs is None and info["rows_in_pairs_at_two_positions"] == pytest.approx(2 / 6, abs=1e-4)
    cfg.bal.click_model.document_effects = True
    pairs, info = document_pairs(frame, cfg)
    assert info["used"] and pairs.tolist() == [0, 0, 1, 1, 2, 3]   # (b, x) is not (a, x)
    cfg.bal.click_model.document_effects = False
    assert document_pairs(frame, cfg)[0] is None
    cfg.bal.click_model.document_effects = True
    with pytest.raises(ConfigError, match="bal.click_model.document_effects: true needs"):
        document_pairs(frame.drop(columns="doc_id"), cfg)


def test_listwise_click_weights_divide_out_the_page_examination():
    w = np.array([1.0, 1.0, 2.0, 1.0])
    exam = np.array([0.8, 0.4, 0.4, 0.1])
    v = np.log(exam / (1 - exam))                                       # σ(v) = exam
    omega = listwise_click_weights(w, v, None)
    expected = w / exam
    np.testing.assert_allclose(omega, expected / expected.mean(), rtol=1e-12)
    capped = listwise_click_weights(w, v, 1.5)                          # mean 1, none above the cap, order kept
    assert capped.mean() == pytest.approx(1.0) and capped.max() <= 1.5 + 1e-12
    assert capped[0] < capped[1] < capped[2]
    # no page parent of click: the click model's page term is a constant, so ω is the importance weight alone
    np.testing.assert_allclose(listwise_click_weights(w, np.full(4, 20.0), None), w / w.mean(), rtol=1e-12)


def test_click_side_weights_follow_the_loss_and_bal_pair_weights():
    """listwise and lambdarank click/both: ω = w/σ(v); lambdarank skip: w; posterior: 1 (the skipped side's posterior
    carries the whole page bias, as in bench/bal.py's Oracle-skip-GBDT)."""
    rng = np.random.default_rng(4)
    w, v = rng.lognormal(0, 0.5, 200), rng.normal(0, 1.5, 200)
    omega = listwise_click_weights(w, v, 20.0)
    for loss, pair_weights in (("listwise", "skip"), ("lambdarank", "click"), ("lambdarank", "both")):
        np.testing.assert_array_equal(click_side_weights(loss, pair_weights, w, v, 20.0), omega)
    np.testing.assert_array_equal(click_side_weights("lambdarank", "skip", w, v, 20.0), w)
    np.testing.assert_array_equal(click_side_weights("lambdarank", "posterior", w, v, 20.0), np.ones(200))


def test_click_model_rows_are_all_rows_or_a_seeded_subsample():
    assert click_model_rows(50, None, 0).tolist() == list(range(50))
    assert click_model_rows(50, 80, 0).tolist() == list(range(50))
    rows = click_model_rows(1000, 100, 3)
    assert len(rows) == 100 and len(set(rows.tolist())) == 100 and (np.diff(rows) > 0).all()
    assert rows.tolist() == click_model_rows(1000, 100, 3).tolist() != click_model_rows(1000, 100, 4).tolist()


def test_variant_graphs():
    features = BAIDU_PAGE_FEATURES
    names = [f.name for f in features]
    pb = identify_biases(fixed_graph("position", features))
    assert pb.confounded == () and pb.page_feature_biases == ("position",)
    fb = fixed_graph("all_features", features)
    report = identify_biases(fb)
    assert [c.feature for c in report.confounded] == names and all(c.case == 1 for c in report.confounded)
    assert prior_violations(fb, names) == []
    for name, preset in VARIANTS.items():
        cfg = config_from_dict({"train": {"method": "bal"}, "bal": preset})
        assert cfg.bal.graph == preset["graph"], name
    with pytest.raises(ConfigError, match="bal.features"):
        config_from_dict({"bal": {"features": ["no_such_feature"]}})


def _bal_config(tmp_path, backbone, **bal):
    ranker = {"backbone": backbone, "head": [16]}
    if backbone == "bert":
        ranker["bert"] = {"max_length": 24}
    return config_from_dict({
        "name": f"bal-{backbone}", "seed": 2, "run_dir": str(tmp_path / "{name}"),
        "data": {"source": "simulate", "valid_fraction": 0.3,
                 "simulate": {"n_queries": 40, "n_sessions": 400, "n_annotated_queries": 20}},
        "ranker": ranker,
        "train": {"method": "bal", "epochs": 2, "warmup_epochs": 1, "batch_size": 64},
        "discovery": {"n_sessions": 150, "n_bootstrap": 0},
        "bal": {"estimator_rows": 1500, "influence": {"epochs": 15}, **bal},
    })


@pytest.mark.e2e
@pytest.mark.parametrize("backbone", ["mlp", "bert"])
def test_short_bal_run_on_a_local_cluster(tmp_path, dask_client, backbone):
    cfg = _bal_config(tmp_path, backbone)
    result = run_pipeline(cfg, client=dask_client)
    run = result.run_dir
    saved = json.loads((run / L.HISTORY).read_text())
    history = saved["epochs"]
    assert [e.get("phase") for e in history] == ["warmup", "bal", "bal"]
    assert saved["precision"] == "fp32" and {e["precision"] for e in history} == {"fp32"}   # auto on a CPU
    assert json.loads((run / "summary.json").read_text())["stages"]["train"]["info"]["precision"] == "fp32"
    features = [f.name for f in BAIDU_PAGE_FEATURES]
    for k in range(2):
        graph = DiscoveredGraph.load(epoch_dir(run, k) / "graph.json")
        assert graph.meta["epoch"] == k and prior_violations(graph, features) == []
        # the data must decide this one (the priors force only r̂ → click): whole-page users examine by position
        found = graph.edge(POSITION, CLICK)
        assert found is not None and found.source == POSITION and not found.enforced
        # r̂ — click is kept by prior 1 untested; every node's evidence carries its effect sizes
        evidence = {e["node"]: e for e in graph.meta["click_evidence"]}
        assert all("effect" in e for n, e in evidence.items() if n in graph.nodes)
        assert evidence[POSITION]["within_document"] and evidence[POSITION]["effect"]["rows"] > 0
        assert evidence[RELEVANCE_SCORE]["by_prior"] and evidence[RELEVANCE_SCORE]["pc_tests"] == 0
        assert graph.meta["pc"]["kept_by_prior_untested"] > 0
    # epoch 1 samples the same sessions: it re-runs only the tests involving r̂ and warm-starts its estimators
    later = DiscoveredGraph.load(epoch_dir(run, 1) / "graph.json").meta
    assert later["sample"]["same_rows_every_epoch"] and later["pc"]["tests_reused"] > 0
    for name, est in history[2]["weights"].get("estimators", {}).items():
        if name in history[1]["weights"].get("estimators", {}) and not est["denominator_history"]["closed_form"]:
            assert est["denominator_history"]["warm_start"], name
    for entry in history[1:]:
        assert 0 < entry["weights"]["ess_fraction"] <= 1 and np.isfinite(entry["train"]["loss"])
        steps = entry["step_seconds"]
        assert list(steps) == ["score", "graph", "weights", "click_model", "ranker"]
        assert all(v >= 0 for v in steps.values()) and sum(steps.values()) <= entry["seconds"] + 1e-2
        # the click model's position bias, relative to position 1, recorded and shown with the graph
        profile = entry["train"]["examination_by_position"]
        assert profile["1"] == 1.0 and len(profile) >= 5 and all(v > 0 for v in profile.values())
    bias = json.loads((run / L.BIAS).read_text())
    assert bias["epochs"][-1]["examination_by_position"] == history[-1]["train"]["examination_by_position"]
    assert "rows_in_pairs_at_two_positions" in bias["document_effects"]
    from typer.testing import CliRunner

    from wpultr.causal.cli import graph_app
    shown = CliRunner().invoke(graph_app, ["show", str(run)])
    assert shown.exit_code == 0 and "'s click model, relative to the first): 1: 1.000" in shown.output
    # the simulator's default fixes the media type per document: kept in the graph, not corrected, and said so
    assert bias["separability"]["set_aside"] == ["media_type"]
    assert "not corrected (fixed for the same document" in shown.output and "media_type (within-document share 0.000" \
        in shown.output
    test = pd.read_parquet(run / L.TEST_SCORES)
    if backbone == "mlp":   # the tiny BERT learns next to nothing in two epochs on 400 sessions: a smoke run only
        assert result.metrics["all"]["DCG@10"] > random_ranker_dcg10(test) + MARGIN


@pytest.mark.e2e
def test_fixed_graph_variant_skips_discovery(tmp_path, dask_client):
    cfg = _bal_config(tmp_path, "mlp", graph="position")
    result = run_pipeline(cfg, client=dask_client)
    graph = DiscoveredGraph.load(epoch_dir(result.run_dir, 0) / "graph.json")
    assert set(graph.nodes) == {RELEVANCE_SCORE, "position", CLICK} and graph.meta["fixed"] == "position"
    bias = json.loads((result.run_dir / L.BIAS).read_text())
    assert bias["graph_mode"] == "position" and bias["epochs"][0]["weights"]["confounded"] == []


@pytest.mark.e2e
def test_listwise_bal_with_the_mlp_trains_on_the_ipw_softmax_and_ranks(typed_logs):
    cfg, logs = typed_logs
    run = RunConfig()
    run.data.simulate, run.train.method, run.train.device, run.train.loss = cfg, "bal", "cpu", "listwise"
    run.train.epochs, run.train.warmup_epochs, run.train.batch_size = 2, 1, 32
    run.bal.graph = "all_features"                           # fixed graph: every feature confounded, no discovery
    run.bal.estimator_rows, run.bal.influence.epochs, run.bal.click_model.epochs = 1000, 5, 2
    torch.manual_seed(0)
    result = BAL().fit(logs.sessions, logs.annotations, run)
    phases = [e.get("phase") for e in result.history]
    assert phases == ["warmup", "bal", "bal"] and all(np.isfinite(e["train"]["loss"]) for e in result.history)
    annotated = logs.annotations.assign(score=score_frame(result.ranker, logs.annotations))
    random = random_ranker_dcg10(annotated)
    ideal = evaluate(annotated.assign(score=annotated["label"].astype(float)), "score")["all"]["DCG@10"]
    dcg = evaluate(annotated, "score")["all"]["DCG@10"]
    assert dcg > random + 0.3 * (ideal - random), (dcg, random, ideal)   # 300 sessions, 10 queries: a loose bar


@pytest.mark.e2e
def test_bal_fits_its_small_networks_under_the_cpu_thread_cap_and_trains_the_ranker_without_it(typed_logs,
                                                                                               monkeypatch):
    """The influence estimators and the click model fit under `bal.cpu_threads`; the ranker step does not."""
    from wpultr.bal import influence, method
    cfg, logs = typed_logs
    run = RunConfig()
    run.data.simulate, run.train.method, run.train.device = cfg, "bal", "cpu"
    run.train.epochs, run.train.warmup_epochs, run.train.batch_size = 1, 1, 32
    run.bal.graph, run.bal.cpu_threads = "all_features", 1         # fixed graph: every feature confounded
    run.bal.estimator_rows, run.bal.influence.epochs, run.bal.click_model.epochs = 500, 2, 1
    seen: dict[str, list[int]] = {"density": [], "click_model": [], "ranker": []}

    def recording(name, fn):
        def wrapped(*args, **kwargs):
            seen[name].append(torch.get_num_threads())
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(influence.ConditionalDensity, "fit", recording("density", influence.ConditionalDensity.fit))
    monkeypatch.setattr(method.ClickModel, "fit", recording("click_model", method.ClickModel.fit))
    monkeypatch.setattr(method, "ranker_loss", recording("ranker", method.ranker_loss))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(0)
        BAL().fit(logs.sessions, logs.annotations, run)
    finally:
        torch.set_num_threads(before)
    assert seen["density"] and set(seen["density"]) == {1}
    assert seen["click_model"] and set(seen["click_model"]) == {1}
    assert seen["ranker"] and set(seen["ranker"]) == {2}
