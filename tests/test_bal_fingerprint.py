"""A small in-memory BAL fit pinned to what it gave before issue 33's refactors (method specs, one loss table, one
parse of the page features, one sampler of discovery's rows): the graphs, the rows the click tests read, the
importance weights, the losses and the metrics must not move. Recorded at commit 822558b, one torch thread.

The same fit's full-precision hashes (scores, history, bias record) were compared before and after by hand; this
test keeps the rounded record so it holds across BLAS builds."""
from __future__ import annotations

import numpy as np
import pytest
import torch

RECORDED = {'graphs': [[['position', 'click', 'directed'],
                        ['position', 'media_type', 'undirected'],
                        ['relevance_score', 'click', 'directed'],
                        ['relevance_score', 'media_type', 'directed'],
                        ['relevance_score', 'position', 'directed'],
                        ['serp_height', 'serp_max_show_height', 'undirected']],
                       [['position', 'click', 'directed'],
                        ['position', 'media_type', 'undirected'],
                        ['relevance_score', 'click', 'directed'],
                        ['relevance_score', 'media_type', 'directed'],
                        ['relevance_score', 'position', 'directed'],
                        ['serp_height', 'serp_max_show_height', 'undirected']]],
            'click_rows': [[3000, 600], [3000, 600]],
            'confounded': [['position'], ['position']],
            'ess': [6705.964555, 3028.334743],
            'weight_range': [[0.316703, 4.83917], [0.138155, 20.0]],
            'losses': [0.39286, 0.328416, 0.345922],
            'metrics': {'DCG@10': 13.793689, 'nDCG@10': 0.871711, 'ERR@10': 0.587973},
            'scores': [-0.56032, -0.62904, -1.04307, -2.13273, -0.23469]}


def fingerprint() -> dict:
    """What the record holds of a 2-epoch BAL fit (discovered graph, hybrid test) on a small simulated log."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        return _fit_record()
    finally:
        torch.set_num_threads(threads)


def _fit_record() -> dict:
    from wpultr.config import RunConfig
    from wpultr.evaluation.metrics import evaluate
    from wpultr.rankers.base import score_frame
    from wpultr.settings.methods import get_method
    from wpultr.settings.simulate import SimulateConfig
    from wpultr.simulate import simulate
    cfg = SimulateConfig(n_queries=30, docs_per_query=6, n_sessions=1500, n_annotated_queries=10, results_per_page=5,
                         n_dense_features=4, media_type_features=True)
    logs = simulate(cfg, seed=1)
    run = RunConfig()
    run.data.simulate, run.train.method, run.train.device = cfg, "bal", "cpu"
    run.train.epochs, run.train.warmup_epochs, run.train.batch_size = 2, 1, 32
    run.discovery.n_sessions, run.discovery.n_bootstrap, run.discovery.click_rows = 400, 0, 3000
    run.bal.estimator_rows, run.bal.influence.epochs, run.bal.click_model.epochs = 1000, 3, 2
    torch.manual_seed(0)
    result = get_method("bal").fit(logs.sessions, logs.annotations, run)
    scores = score_frame(result.ranker, logs.annotations)
    metrics = evaluate(logs.annotations.assign(score=scores), "score")["all"]
    return {
        "graphs": [sorted([e["from"], e["to"], e["type"]] for e in g.to_dict()["edges"]) for g in result.graphs],
        "click_rows": [[g.meta["click_rows"]["n_rows"], g.meta["click_rows"]["n_sessions"]] for g in result.graphs],
        "confounded": [e["weights"]["confounded"] for e in result.bias["epochs"]],
        "ess": [round(e["weights"].get("ess", 0.0), 6) for e in result.bias["epochs"]],
        "weight_range": [[round(e["weights"].get("weight_min", 1.0), 6), round(e["weights"].get("weight_max", 1.0), 6)]
                         for e in result.bias["epochs"]],
        "losses": [round(float(e["train"]["loss"]), 6) for e in result.history],
        "metrics": {k: round(float(metrics[k]), 6) for k in ("DCG@10", "nDCG@10", "ERR@10")},
        "scores": [round(float(s), 5) for s in np.asarray(scores)[:5]],
    }


@pytest.mark.e2e
def test_an_in_memory_bal_fit_is_unchanged():
    got = fingerprint()
    assert got["graphs"] == RECORDED["graphs"] and got["click_rows"] == RECORDED["click_rows"]
    assert got["confounded"] == RECORDED["confounded"]
    for key in ("ess", "weight_range", "losses", "scores"):
        np.testing.assert_allclose(np.asarray(got[key], float), np.asarray(RECORDED[key], float), rtol=1e-5, atol=1e-5)
    assert got["metrics"] == pytest.approx(RECORDED["metrics"], rel=1e-5)
