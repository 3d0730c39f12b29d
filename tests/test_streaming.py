"""Training streamed from Parquet partitions (methods/training/streaming.py) against the in-memory trainer.

The partitions are written by ingest's own `SessionPartitionWriter`: one partition (where the streamed
order is the in-memory order, so the trained model must be the same), small partitions (a batch then
straddles partitions), and partitions shorter than a session (ingest splits such a session, and the
stream must put it back together).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wpultr.bal.method import BAL, streamed_columns
from wpultr.config import RunConfig
from wpultr.errors import ConfigError
from wpultr.io.parquet import column_table, partition_paths
from wpultr.io.tables import SessionPartitionWriter, to_arrow
from wpultr.methods.naive import Naive
from wpultr.methods.training.distributed import fit_streamed
from wpultr.methods.training.streaming import PartitionSessions, feature_moments, streaming_ranker, streaming_trainer
from wpultr.methods.training.trainer import build_ranker, list_scores
from wpultr.schema import CLICK, DOC_ID, FEATURES, POSITION, QUERY_ID, SESSION_ID, ids_as_text
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate

SIM = SimulateConfig(n_queries=30, docs_per_query=10, n_sessions=300, n_annotated_queries=20,
                     results_per_page=6, vocab_size=300, n_dense_features=6)


@pytest.fixture(scope="module")
def logs(one_torch_thread):
    return simulate(SIM, seed=0)


def partitions(frame, directory, rows: int):
    frame = frame.sort_values(SESSION_ID, kind="stable").reset_index(drop=True)
    writer = SessionPartitionWriter(directory, 0, rows)
    writer.write(to_arrow(frame))
    writer.close()
    return directory


def config(loss: str = "pointwise") -> RunConfig:
    cfg = RunConfig()
    cfg.seed = 3
    cfg.ranker.head, cfg.ranker.dropout = [16], 0.0
    cfg.train.loss, cfg.train.epochs, cfg.train.warmup_epochs = loss, 2, 1
    cfg.train.batch_size, cfg.train.device = 37, "cpu"     # 300 sessions: the last batch is short
    return cfg


@pytest.mark.parametrize("loss", ["pointwise", "listwise"])
def test_streaming_one_partition_trains_the_in_memory_model(logs, tmp_path, loss):
    cfg = config(loss)
    directory = partitions(logs.sessions, tmp_path, 10 ** 6)
    assert len(partition_paths(directory)) == 1
    memory = Naive().fit(logs.sessions, logs.annotations, cfg)
    streamed = Naive().fit_trainer(streaming_trainer(directory, logs.annotations, cfg), cfg)
    # The listwise softmax is blind to a shift of every score: the output bias's gradient is rounding noise,
    # which Adam scales to whole steps, so there the model is the same up to that shift.
    shift_free = {"net.2.bias"} if loss == "listwise" else set()
    for name, value in memory.ranker.state_dict().items():
        if name not in shift_free:
            torch.testing.assert_close(streamed.ranker.state_dict()[name], value, rtol=1e-5, atol=1e-5)
    assert [h["train"]["loss"] for h in streamed.history] == pytest.approx(
        [h["train"]["loss"] for h in memory.history], rel=1e-5)
    assert streamed.bias["best_epoch"] == memory.bias["best_epoch"]


def test_the_stage_entry_streams_with_the_switch(logs, tmp_path):
    cfg = config()
    cfg.train.streaming = True
    result = fit_streamed(partitions(logs.sessions, tmp_path, 200), logs.annotations, cfg)
    assert [h.get("phase") for h in result.history] == ["warmup", None, None]
    assert result.history[-1]["train"]["loss"] < result.history[0]["train"]["loss"]


@pytest.mark.parametrize("rows, n", [(200, 300), (4, 40)])   # 4 rows: every 6-result session is split
def test_each_epoch_streams_every_whole_session_once_in_a_seeded_order(logs, tmp_path, rows, n):
    frame = logs.sessions[logs.sessions[SESSION_ID].isin(logs.sessions[SESSION_ID].unique()[:n])]
    directory = partitions(frame, tmp_path, rows)
    n_sessions = frame[SESSION_ID].nunique()
    assert len(partition_paths(directory)) > 1
    ranker = build_ranker(config(), frame)
    stream = PartitionSessions(directory, ranker, 37, rng=np.random.default_rng(5))
    assert (stream.sessions, len(stream)) == (n_sessions, -(-n_sessions // 37))
    by_session = {sid: g.sort_values(POSITION) for sid, g in frame.groupby(SESSION_ID)}
    orders = []
    for _ in range(2):
        batches = list(stream)
        assert [len(b.index) for b in batches[:-1]] == [37] * (len(batches) - 1)
        order = np.concatenate([b.index for b in batches])
        assert sorted(order) == sorted(by_session)               # every session, once
        orders.append(order)
        for batch in batches[:3]:
            for i, sid in enumerate(batch.index):                # whole sessions, rows by position
                rows_ = by_session[sid]
                k = len(rows_)
                assert batch.mask[i].sum() == k
                assert batch.clicks[i, :k].tolist() == rows_[CLICK].astype(float).tolist()
                assert batch.positions[i, :k].tolist() == rows_[POSITION].tolist()
    assert not np.array_equal(orders[0], orders[1])                 # reshuffled each epoch
    again = list(PartitionSessions(directory, ranker, 37, rng=np.random.default_rng(5)))
    assert np.array_equal(np.concatenate([b.index for b in again]), orders[0])   # and seeded


def test_batches_straddling_partitions_score_their_own_rows(logs, tmp_path):
    frame = logs.sessions
    ranker = build_ranker(config(), frame).eval()
    stream = PartitionSessions(partitions(logs.sessions, tmp_path, 50), ranker, 37, rng=np.random.default_rng(1))
    by_session = {sid: g.sort_values(POSITION) for sid, g in frame.groupby(SESSION_ID)}
    with torch.no_grad():
        for batch in list(stream)[:4]:
            scores = list_scores(ranker, None, batch)
            for i, sid in enumerate(batch.index):
                expected = ranker(ranker.prepare(by_session[sid]))
                torch.testing.assert_close(scores[i, :len(expected)], expected)
                assert not scores[i, len(expected):].any()


def test_standardisation_merged_over_partitions_is_the_whole_tables(logs, tmp_path):
    directory = partitions(logs.sessions, tmp_path, 50)
    matrix = np.stack(logs.sessions[FEATURES].to_numpy()).astype(np.float64)
    width, mean, std = feature_moments(partition_paths(directory))
    assert width == matrix.shape[1]
    np.testing.assert_allclose(mean, matrix.mean(axis=0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(std, matrix.std(axis=0), rtol=1e-10)


def test_streaming_names_what_it_cannot_do(logs, tmp_path):
    directory = partitions(logs.sessions, tmp_path, 200)
    cfg = config()
    cfg.ranker.backbone = "bert"
    with pytest.raises(ConfigError, match="train.streaming: true trains ranker.backbone 'mlp' only"):
        streaming_ranker(cfg, directory)
    cfg = config()
    cfg.data.max_sessions = 10
    with pytest.raises(ConfigError, match="data.max_sessions: must be null with train.streaming"):
        streaming_trainer(directory, None, cfg)
    cfg = config()
    cfg.train.streaming = True
    with pytest.raises(ConfigError, match="train.streaming: true streams the sessions' partitions"):
        Naive().fit(logs.sessions, None, cfg)       # an in-memory table is never silently trained instead


@pytest.mark.parametrize("rows, n", [(50, 300), (4, 40)])   # 4 rows: every session split over partitions
def test_streamed_extras_and_scores_are_each_rows_own(logs, tmp_path, rows, n):
    """Per-row arrays over the partitions' concatenation (`table`'s order) reach each batch at the slot of the
    row they belong to, as the in-memory trainer's gathered extras do; `scores` follows the same order."""
    frame = logs.sessions[logs.sessions[SESSION_ID].isin(logs.sessions[SESSION_ID].unique()[:n])]
    directory = partitions(frame, tmp_path, rows)
    ranker = build_ranker(config(), frame).eval()
    stream = PartitionSessions(directory, ranker, 37)
    table = column_table(stream.paths, [SESSION_ID, POSITION])
    assert len(table) == stream.rows == len(frame)
    marker = np.arange(len(table), dtype=np.float64) + 1.0            # each row's own number, never 0 (padding)
    by_session = {sid: g.sort_values(POSITION) for sid, g in table.groupby(SESSION_ID)}
    seen = 0
    for batch in stream.epoch(np.random.default_rng(2), torch.device("cpu"), {"row": marker}):
        for i, sid in enumerate(batch.index):
            own = by_session[sid]
            k = len(own)
            assert batch.extras["row"][i, :k].tolist() == marker[own.index].tolist()
            assert batch.positions[i, :k].tolist() == own[POSITION].tolist()
            assert not batch.extras["row"][i, k:].any()
            seen += k
    assert seen == len(table)
    with torch.no_grad():
        expected = ranker(ranker.prepare(frame.sort_values(SESSION_ID, kind="stable"))).numpy()
    np.testing.assert_allclose(stream.scores(ranker, 7), expected, rtol=1e-6, atol=1e-6)


def test_column_table_codes_text_ids_as_they_sort(logs, tmp_path):
    """query_id/doc_id become int32 codes shared by every partition: equal iff the text is, ordered as the text
    sorts (nulls last), so grouping and tie-breaking by id fall as on the text."""
    frame = logs.sessions.sort_values(SESSION_ID, kind="stable").reset_index(drop=True)
    frame[DOC_ID] = frame[DOC_ID].astype(object).where(frame.index % 7 != 0, None)
    directory = partitions(frame, tmp_path, 50)
    table = column_table(partition_paths(directory), [SESSION_ID, QUERY_ID, DOC_ID, CLICK], codes=(QUERY_ID, DOC_ID))
    assert len(partition_paths(directory)) > 3
    assert table[SESSION_ID].tolist() == frame[SESSION_ID].tolist()
    assert table[CLICK].tolist() == frame[CLICK].tolist()
    for column in (QUERY_ID, DOC_ID):
        assert table[column].dtype == np.int32
        text = frame[column].astype(object)
        ranks = text.rank(method="dense", na_option="bottom").astype(int) - 1
        assert table[column].tolist() == ranks.tolist()
    rows = [0, 5, 9, 700]                                   # what a user reads names the ids by their text
    named = ids_as_text(table.iloc[rows][[QUERY_ID, DOC_ID, CLICK]], table.iloc[100:])   # derived frames keep it
    assert named[QUERY_ID].tolist() == frame[QUERY_ID].iloc[rows].tolist()
    assert named[DOC_ID].fillna("<null>").tolist() == frame[DOC_ID].iloc[rows].fillna("<null>").tolist()
    assert named[CLICK].tolist() == frame[CLICK].iloc[rows].tolist()


@pytest.mark.e2e
def test_streamed_bal_on_one_partition_is_the_in_memory_bal(logs, tmp_path):
    """BAL with the ranker's inputs streamed (`fit_streamed`: its own columns in memory, ids as codes) trains the
    in-memory BAL's model: the same graphs every epoch and the same ranker up to the float32 rounding of the
    standardisation merged over partitions (the only difference between the two paths)."""
    cfg = config()
    cfg.train.method = "bal"
    cfg.discovery.n_sessions, cfg.discovery.click_rows = 200, 1000
    frame = logs.sessions.sort_values(SESSION_ID, kind="stable").reset_index(drop=True)
    directory = partitions(frame, tmp_path, 10 ** 6)
    memory = BAL().fit(frame, logs.annotations, cfg)
    seen = []
    streamed = BAL().fit_streamed(directory, logs.annotations, cfg, prepare=lambda t: seen.append(t.dtypes) or t)
    assert list(seen[0].index) == streamed_columns(cfg, list(frame.columns))   # BAL's own columns, never features
    assert FEATURES not in seen[0] and seen[0][QUERY_ID] == np.int32
    assert [g.edges for g in streamed.graphs] == [g.edges for g in memory.graphs]
    for name, value in memory.ranker.state_dict().items():
        torch.testing.assert_close(streamed.ranker.state_dict()[name], value, rtol=1e-3, atol=5e-4)
    assert [h["train"]["loss"] for h in streamed.history] == pytest.approx(
        [h["train"]["loss"] for h in memory.history], rel=1e-3)
    assert [e["biases"] for e in streamed.bias["epochs"]] == [e["biases"] for e in memory.bias["epochs"]]
