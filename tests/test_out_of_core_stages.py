"""The non-training stages read partitions, not whole tables (issue 13 part 3), with the in-memory results."""
import json

import numpy as np
import pandas as pd
import pytest

from wpultr.config import config_from_dict
from wpultr.evaluation.metrics import click_mse, mcc
from wpultr.io import train_input
from wpultr.io.parquet import partition_paths, read_table, sample_sessions
from wpultr.pipeline.runner import run_pipeline
from wpultr.rankers.base import score_frame
from wpultr.rankers.registry import load_ranker
from wpultr.rundir import layout as L
from wpultr.rundir.layout import TRUTH_SESSIONS
from wpultr.schema import query_key

pytestmark = pytest.mark.e2e


def small_run_config(tmp, name: str, seed: int, n_sessions: int, **sections):
    """A simulated naive run on the MLP whose sessions span several 900-row partitions."""
    return config_from_dict({
        "name": name, "seed": seed, "run_dir": str(tmp / "{name}"),
        "data": {"source": "simulate", "valid_fraction": 0.3, "partition_rows": 900,
                 "page_features": {"position": "ordinal", "media_type": "categorical"},
                 "simulate": {"n_queries": 30, "n_sessions": n_sessions, "n_annotated_queries": 15}},
        "ranker": {"backbone": "mlp", "head": [16]}, **sections})


@pytest.fixture(scope="module")
def run(tmp_path_factory, dask_client):
    """A simulated naive run whose sessions span several partitions, with the discover stage on."""
    cfg = small_run_config(tmp_path_factory.mktemp("ooc"), "ooc", 5, 400, train={"epochs": 1, "batch_size": 64},
                           discovery={"n_sessions": 120, "n_bootstrap": 0, "ci_test": "fisherz"})  # fast: reads tested
    return run_pipeline(cfg, client=dask_client).run_dir


def test_ingest_columns_come_from_the_schema(run):
    assert len(partition_paths(run / L.SESSIONS_DIR)) >= 3
    summary = json.loads((run / L.INGEST_SUMMARY).read_text())
    assert summary["columns"] == sorted(read_table(run / L.SESSIONS_DIR).columns)


def test_discover_writes_scores_per_partition_equal_to_scoring_the_whole_table(run):
    scores_dir = run / L.SESSION_SCORES
    sessions_dir = run / L.SESSIONS_DIR
    assert scores_dir.is_dir()
    assert [p.name for p in partition_paths(scores_dir)] == [p.name for p in partition_paths(sessions_dir)]
    sessions = read_table(sessions_dir)
    written = read_table(scores_dir)
    expected = score_frame(load_ranker(run / L.RANKER_DIR), sessions, 512)
    np.testing.assert_array_equal(written["session_id"].to_numpy(), sessions["session_id"].to_numpy())
    np.testing.assert_allclose(written["relevance_score"].to_numpy(), expected, rtol=1e-6, atol=1e-6)
    assert (run / "epoch_0" / "graph.json").exists()      # discovery read the partitioned scores
    assert json.loads((run / "stages" / "discover.json").read_text())["info"]["scored_rows"] == len(sessions)


def test_truth_metrics_equal_the_whole_table_computation(run):
    """MCC and click MSE from key columns + first rows equal the same numbers from the whole table in memory."""
    sessions = read_table(run / L.SESSIONS_DIR)
    truth = pd.read_parquet(run / L.TRUTH_DIR / TRUTH_SESSIONS,
                            columns=["session_id", "position", "examination_prob", "click_prob"])
    rows = sessions.merge(truth, on=["session_id", "position"])
    rows = rows[rows["examination_prob"] > 0].reset_index(drop=True)
    test = json.loads((run / L.SPLIT).read_text())["test_queries"]        # left out, as the oracle leaves them
    rows = rows[~query_key(rows).isin(test)].reset_index(drop=True)
    docs = rows.drop_duplicates(["query_id", "doc_id"]).reset_index(drop=True)
    scores = np.asarray(score_frame(load_ranker(run / L.RANKER_DIR), docs, 64), dtype=np.float64)
    predicted = 1.0 / (1.0 + np.exp(-scores))                 # naive pointwise: σ(score)
    truth_rel = (docs["click_prob"] / docs["examination_prob"]).to_numpy()
    lookup = rows.merge(docs[["query_id", "doc_id"]].assign(p=predicted), on=["query_id", "doc_id"])["p"]
    metrics = json.loads((run / L.METRICS).read_text())["truth"]
    assert metrics["documents"] == len(docs) and metrics["rows"] == len(rows)
    assert metrics["MCC"] == pytest.approx(mcc(truth_rel, predicted), abs=1e-9)
    assert metrics["click_MSE"] == pytest.approx(click_mse(rows["click_prob"], lookup.to_numpy(), fit_scale=True),
                                                 rel=1e-9)


@pytest.mark.parametrize("max_sessions", [1, 57, 399, 400, 10_000, None])
def test_sampled_sessions_read_equal_sampling_the_whole_table(run, max_sessions):
    sessions_dir = run / L.SESSIONS_DIR
    expected = sample_sessions(read_table(sessions_dir), max_sessions, seed=11)
    got = train_input.read_sampled_sessions(sessions_dir, max_sessions, seed=11)
    pd.testing.assert_frame_equal(got, expected)


def test_train_stage_streams_the_partitions_with_train_streaming(tmp_path, dask_client):
    """`train.streaming: true`: the train stage never reads the table whole, counts its rows from the Parquet
    metadata, and the streamed ranker is evaluated like any other."""
    cfg = small_run_config(tmp_path, "stream", 3, 300, train={"epochs": 2, "batch_size": 32, "streaming": True},
                           evaluation={"discover_graph": False})
    result = run_pipeline(cfg, client=dask_client)
    record = json.loads((result.run_dir / "stages" / "train.json").read_text())["info"]
    assert len(partition_paths(result.run_dir / L.SESSIONS_DIR)) >= 3
    assert record["train_rows"] == len(read_table(result.run_dir / L.SESSIONS_DIR))
    assert record["identifiability"]["checked"] is False
    history = json.loads((result.run_dir / L.HISTORY).read_text())["epochs"]
    assert len(history) == 2 and all(np.isfinite(e["train"]["loss"]) for e in history)
    assert result.metrics["all"]["n_queries"] > 0


def test_train_stage_streams_bal_holding_only_its_own_columns(tmp_path, dask_client):
    """`train.method: bal` with `train.streaming: true`: BAL's per-row columns (ids as codes, position, click, page
    features) are read for the identifiability pre-flight and BAL's steps, the ranker's features streamed; the
    run records its graphs, biases and epochs like an in-memory BAL run."""
    cfg = small_run_config(tmp_path, "bal-stream", 3, 300,
                           train={"method": "bal", "epochs": 2, "warmup_epochs": 1, "batch_size": 32,
                                  "streaming": True},
                           discovery={"n_sessions": 120, "click_rows": 600}, evaluation={"discover_graph": False})
    result = run_pipeline(cfg, client=dask_client)
    record = json.loads((result.run_dir / "stages" / "train.json").read_text())["info"]
    assert len(partition_paths(result.run_dir / L.SESSIONS_DIR)) >= 3
    assert record["train_rows"] == len(read_table(result.run_dir / L.SESSIONS_DIR))
    assert record["identifiability"]["factors"] == ["position", "media_type"]     # the pre-flight ran on the codes
    report = json.loads((result.run_dir / "train" / "identifiability.json").read_text())
    sessions = read_table(result.run_dir / L.SESSIONS_DIR)
    swaps = report["interventions"]                      # media type fixed per document: the graph is disconnected
    assert swaps and all(s["query_id"] in set(sessions["query_id"]) and s["doc_id"] in set(sessions["doc_id"])
                         for s in swaps)
    history = json.loads((result.run_dir / L.HISTORY).read_text())["epochs"]
    assert [e.get("phase") for e in history] == ["warmup", "bal", "bal"]
    assert all(np.isfinite(e["train"]["loss"]) for e in history)
    bias = json.loads((result.run_dir / L.BIAS).read_text())
    assert bias["method"] == "bal" and len(bias["epochs"]) == 2
    for k in range(2):
        graph = json.loads((result.run_dir / f"epoch_{k}" / "graph.json").read_text())
        assert {"from": "relevance_score", "to": "click"}.items() <= next(
            e for e in graph["edges"] if e["to"] == "click" and e["from"] == "relevance_score").items()
    assert result.metrics["all"]["n_queries"] > 0


def test_train_stage_reads_only_the_columns_methods_train_on():
    """Behaviour columns no page feature declares are left on disk, and the title/abstract token lists too when a
    dense feature vector and a doc_id serve a non-BERT ranker (much of the train stage's memory on Baidu logs)."""
    from wpultr.schema import BAIDU_BEHAVIOUR_COLUMNS, TOKEN_COLUMNS
    available = ["session_id", "query_id", "position", "click", "doc_id", *TOKEN_COLUMNS, "query_reformulation",
                 "media_type", *BAIDU_BEHAVIOUR_COLUMNS, "features"]
    page = {"position": "ordinal", "media_type": "categorical", "serp_height": "continuous"}
    mlp = config_from_dict({"data": {"page_features": page}, "ranker": {"backbone": "mlp"}})
    kept = train_input.training_columns(mlp, available)
    assert kept == ["session_id", "query_id", "position", "click", "doc_id", "query_tokens", "media_type",
                    "serp_height", "features"]                  # query tokens: part of the query key
    bert = config_from_dict({"data": {"page_features": page}, "ranker": {"backbone": "bert"}})
    assert set(TOKEN_COLUMNS) <= set(train_input.training_columns(bert, available))
    no_doc = [c for c in available if c != "doc_id"]           # tokens then identify documents (identifiability)
    assert set(TOKEN_COLUMNS) <= set(train_input.training_columns(mlp, no_doc))
    assert "dwelling_time" not in train_input.training_columns(bert, available)
