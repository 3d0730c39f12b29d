"""The LightGBM lambdarank anchor on the run's Dask cluster through lightgbm.dask (issue 13 part 3)."""
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wpultr.config import config_from_dict
from wpultr.evaluation.metrics import evaluate
from wpultr.methods.lightgbm_rank import LightGBMLambdaRank, LightGBMPositionLambdaRank, session_partitions
from wpultr.pipeline.runner import run_pipeline
from wpultr.rundir import layout as L

SIM = {"n_queries": 30, "docs_per_query": 10, "n_sessions": 800, "n_annotated_queries": 20,
       "results_per_page": 6, "vocab_size": 100, "n_dense_features": 6, "user_model": "pbm"}
ROWS_PER_PARTITION = 1200          # 800 sessions x 6 results: four ingest partitions


def _config(tmp: Path, distributed) -> dict:
    return {"name": "lgb_dask", "seed": 3, "run_dir": str(tmp / "{name}"),
            "data": {"source": "simulate", "simulate": SIM, "valid_fraction": 0.3,
                     "partition_rows": ROWS_PER_PARTITION},
            "train": {"method": "lightgbm_lambdarank", "epochs": 1, "batch_size": 64},
            "ranker": {"lightgbm": {"rounds": 20, "min_data_in_leaf": 5, "eval_points": 4,
                                    "distributed": distributed}},
            "evaluation": {"discover_graph": False}, "cluster": {"n_workers": 2}}


def test_session_partitions_never_split_a_session_and_balance_rows():
    sizes = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    bounds = session_partitions(sizes, 3)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(sizes)
    assert all(a < b for a, b in bounds) and all(b == c for (_, b), (c, _) in zip(bounds, bounds[1:], strict=False))
    rows = [int(sizes[a:b].sum()) for a, b in bounds]
    assert len(bounds) == 3 and max(rows) - min(rows) <= sizes.max()    # no partition far from a third
    assert session_partitions(np.array([4, 4]), 5) == [(0, 1), (1, 2)]  # never more partitions than sessions


@pytest.mark.e2e
def test_auto_uses_dask_only_for_data_beyond_one_partition(dask_client, caplog):
    cfg = config_from_dict({"data": {"partition_rows": 100}})
    assert LightGBMLambdaRank().dask_client(cfg, rows=101) is dask_client
    assert LightGBMLambdaRank().dask_client(cfg, rows=100) is None
    def as_an_experiment_run(c):                 # a run inside a worker task, on the worker's client
        from distributed import worker_client
        with worker_client():
            return LightGBMLambdaRank().dask_client(c, rows=101) is None

    assert dask_client.submit(as_an_experiment_run, cfg, pure=False).result()
    off = config_from_dict({"data": {"partition_rows": 100}, "ranker": {"lightgbm": {"distributed": False}}})
    assert LightGBMLambdaRank().dask_client(off, rows=10_000) is None
    with caplog.at_level(logging.INFO, logger="wpultr.methods.lightgbm_rank"):   # no `position` in lightgbm.dask
        assert LightGBMPositionLambdaRank().dask_client(cfg, rows=10_000) is None
    assert "takes no `position`" in caplog.text


@pytest.mark.e2e
def test_dask_trained_ranker_ranks_better_than_random(dask_client, tmp_path):
    run = run_pipeline(config_from_dict(_config(tmp_path, True)), client=dask_client).run_dir
    bias = json.loads((run / L.BIAS).read_text())
    assert bias["distributed"]["engine"] == "lightgbm.dask" and bias["distributed"]["workers"] == 2
    assert bias["distributed"]["partitions"] >= 2
    history = json.loads((run / L.HISTORY).read_text())["epochs"]
    assert [h["rounds"] for h in history] == [5, 10, 15, 20] and all(h["valid"] for h in history)

    theirs = pd.read_parquet(run / L.TEST_SCORES)
    ks = (10,)
    learned = evaluate(theirs, "score", ks=ks)["all"]["nDCG@10"]
    rng = np.random.default_rng(0)
    chance = np.mean([evaluate(theirs.assign(score=rng.random(len(theirs))), "score", ks=ks)["all"]["nDCG@10"]
                      for _ in range(20)])
    assert learned > chance + 0.05, (learned, chance)


@pytest.mark.e2e
def test_custom_objective_boosters_stay_in_process_and_say_so(dask_client, caplog):
    from wpultr.methods.training.gbdt import note_in_process
    with caplog.at_level(logging.INFO, logger="wpultr.methods.training.gbdt"):
        asked = config_from_dict({"ranker": {"lightgbm": {"distributed": True}}})
        assert note_in_process(asked, rows=10)
        small = config_from_dict({"data": {"partition_rows": 100}})
        assert not note_in_process(small, rows=100)          # auto: one partition's worth stays local silently
    assert caplog.text.count("trains in this process") == 1



@pytest.mark.e2e
def test_the_exported_booster_carries_no_cluster_settings(dask_client):
    """lightgbm.dask leaves the workers' ports (drawn at random per fit) in the model text, and the feature ranges of
    whichever worker it took the booster from: the exported text has neither, the ranges are those of all the rows."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4800, 6))
    y = (rng.random(len(x)) < 1 / (1 + np.exp(-x[:, 0]))).astype(float)
    cfg = config_from_dict({"seed": 5, "ranker": {"lightgbm": {"rounds": 5, "min_data_in_leaf": 5}}})
    text = LightGBMLambdaRank()._fit_dask(dask_client, x, y, np.full(600, 8), None, cfg).ranker.model_string()
    assert "[machines: " not in text and "[local_listen_port: " not in text
    infos = next(line for line in text.splitlines() if line.startswith("feature_infos=")).split("=")[1].split(" ")
    assert infos == [f"[{lo:.17g}:{hi:.17g}]" for lo, hi in zip(x.min(axis=0), x.max(axis=0), strict=True)]
