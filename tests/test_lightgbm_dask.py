"""The LightGBM lambdarank anchor on the run's Dask cluster through lightgbm.dask (issue 13 part 3)."""
import json
import logging
from pathlib import Path

import numpy as np

from export_roundtrip import export_and_score
from wpultr.config import config_from_dict
from wpultr.methods.lightgbm_rank import LightGBMLambdaRank, LightGBMPositionLambdaRank, session_partitions
from wpultr.metrics import evaluate
from wpultr.pipeline import stages as S
from wpultr.pipeline.runner import run_pipeline

SIM = {"n_queries": 30, "docs_per_query": 10, "n_sessions": 800, "n_annotated_queries": 20,
       "results_per_page": 6, "vocab_size": 100, "n_dense_features": 6, "user_model": "pbm"}
ROWS_PER_PARTITION = 1200          # 800 sessions x 6 results: four ingest partitions


def _config(tmp: Path, distributed) -> dict:
    return {"name": "lgb_dask", "seed": 3, "run_dir": str(tmp / "{name}"),
            "data": {"source": "simulate", "simulate": SIM, "valid_fraction": 0.3,
                     "partition_rows": ROWS_PER_PARTITION},
            "train": {"method": "lightgbm_lambdarank", "epochs": 1, "batch_size": 64},
            "baselines": {"lightgbm_rounds": 20, "lightgbm_min_data_in_leaf": 5, "lightgbm_eval_points": 4,
                          "lightgbm_distributed": distributed},
            "evaluation": {"discover_graph": False}, "cluster": {"n_workers": 2}}


def test_session_partitions_never_split_a_session_and_balance_rows():
    sizes = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    bounds = session_partitions(sizes, 3)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(sizes)
    assert all(a < b for a, b in bounds) and all(b == c for (_, b), (c, _) in zip(bounds, bounds[1:]))
    rows = [int(sizes[a:b].sum()) for a, b in bounds]
    assert len(bounds) == 3 and max(rows) - min(rows) <= sizes.max()    # no partition far from a third
    assert session_partitions(np.array([4, 4]), 5) == [(0, 1), (1, 2)]  # never more partitions than sessions


def test_auto_uses_dask_only_for_data_beyond_one_partition(dask_client, caplog):
    cfg = config_from_dict({"data": {"partition_rows": 100}})
    assert LightGBMLambdaRank().dask_client(cfg, rows=101) is dask_client
    assert LightGBMLambdaRank().dask_client(cfg, rows=100) is None
    def as_an_experiment_run(c):                 # a run inside a worker task, on the worker's client
        from distributed import worker_client
        with worker_client():
            return LightGBMLambdaRank().dask_client(c, rows=101) is None

    assert dask_client.submit(as_an_experiment_run, cfg, pure=False).result()
    off = config_from_dict({"data": {"partition_rows": 100}, "baselines": {"lightgbm_distributed": False}})
    assert LightGBMLambdaRank().dask_client(off, rows=10_000) is None
    with caplog.at_level(logging.INFO, logger="wpultr.methods.lightgbm_rank"):   # no `position` in lightgbm.dask
        assert LightGBMPositionLambdaRank().dask_client(cfg, rows=10_000) is None
    assert "takes no `position`" in caplog.text


def test_dask_trained_ranker_round_trips_and_ranks_better_than_random(dask_client, tmp_path):
    run = run_pipeline(config_from_dict(_config(tmp_path, True)), client=dask_client).run_dir
    bias = json.loads((run / S.BIAS).read_text())
    assert bias["distributed"]["engine"] == "lightgbm.dask" and bias["distributed"]["workers"] == 2
    assert bias["distributed"]["partitions"] >= 2
    history = json.loads((run / S.HISTORY).read_text())["epochs"]
    assert [h["rounds"] for h in history] == [5, 10, 15, 20] and all(h["valid"] for h in history)

    _, annotations, mine, theirs = export_and_score(run, tmp_path)
    np.testing.assert_array_equal(mine["score"].to_numpy(), theirs["score"].to_numpy())

    ks = (10,)
    learned = evaluate(theirs, "score", ks=ks)["all"]["nDCG@10"]
    rng = np.random.default_rng(0)
    chance = np.mean([evaluate(theirs.assign(score=rng.random(len(theirs))), "score", ks=ks)["all"]["nDCG@10"]
                      for _ in range(20)])
    assert learned > chance + 0.05, (learned, chance)


def test_custom_objective_boosters_stay_in_process_and_say_so(dask_client, caplog):
    from wpultr.methods.gbdt_training import note_in_process
    with caplog.at_level(logging.INFO, logger="wpultr.methods.gbdt_training"):
        asked = config_from_dict({"baselines": {"lightgbm_distributed": True}})
        assert note_in_process(asked, rows=10)
        small = config_from_dict({"data": {"partition_rows": 100}})
        assert not note_in_process(small, rows=100)          # auto: one partition's worth stays local silently
    assert caplog.text.count("trains in this process") == 1


def _ranking_data(seed: int = 0, n_groups: int = 600, k: int = 8, n_features: int = 6):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_groups * k, n_features))
    x[:, 1] = rng.integers(0, 4, size=len(x))                               # a feature of four levels
    y = (rng.random(len(x)) < 1 / (1 + np.exp(-x[:, 0] - 0.4 * x[:, 1]))).astype(float)
    return x, y, np.full(n_groups, k)


def test_fits_on_one_client_give_the_same_booster_file(dask_client):
    """lightgbm.dask ranks its workers, and orders each one's parts, by a set of part keys it draws at random, and
    LightGBM finds each feature's bins on one rank's rows: without one part per worker placed in address order and
    bins fixed from all the rows, fits on one client give one of two boosters by chance. With them, every fit exports
    the same model text (no ports, no temporary path, the feature ranges of all the rows), and no file is left."""
    import glob
    import tempfile
    x, y, groups = _ranking_data()
    cfg = config_from_dict({"seed": 5, "baselines": {"lightgbm_rounds": 15, "lightgbm_min_data_in_leaf": 5}})
    texts = [LightGBMLambdaRank()._fit_dask(dask_client, x, y, groups, None, cfg).ranker.model_string()
             for _ in range(4)]
    assert all(t == texts[0] for t in texts[1:])
    assert "machines" not in texts[0] and "local_listen_port" not in texts[0] and "forcedbins" not in texts[0]
    assert not glob.glob(f"{tempfile.gettempdir()}/wpultr-forcedbins-*.json")
    local = LightGBMLambdaRank()._fit_dask(dask_client, x, y, groups, None, cfg).bias["distributed"]
    assert local["partitions"] == 2 and local["bins"].startswith("forced")


def test_forced_bin_bounds_come_from_all_rows_and_the_seed_alone():
    from wpultr.methods.lightgbm_rank import forced_bin_bounds
    x, _, _ = _ranking_data(n_groups=100)
    x[::7, 2] = np.nan                                                       # missing values take no bound
    bounds = forced_bin_bounds(x, 255, seed=1)
    assert [b["feature"] for b in bounds] == list(range(x.shape[1]))
    assert bounds[1]["bin_upper_bound"] == [0.5, 1.5, 2.5]                   # midpoints between the levels
    for b in bounds:
        assert np.all(np.diff(b["bin_upper_bound"]) > 0) and len(b["bin_upper_bound"]) <= 254
        assert all(np.isfinite(b["bin_upper_bound"]))
    assert len(bounds[0]["bin_upper_bound"]) == 254                          # 800 distinct values: quantiles
    sampled = forced_bin_bounds(x, 16, seed=1, sample_rows=300)
    assert sampled == forced_bin_bounds(x, 16, seed=1, sample_rows=300) != forced_bin_bounds(x, 16, seed=2,
                                                                                             sample_rows=300)
    assert len(sampled[0]["bin_upper_bound"]) == 15
