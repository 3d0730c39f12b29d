"""The train stage keeps list columns as Arrow buffers (issue 13 item 2: its memory at scale) with the same
trainer inputs, query keys and trained ranker as the per-row numpy objects it held before."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from wpultr.config import config_from_dict
from wpultr.io.parquet import read_table
from wpultr.methods.base import get_method
from wpultr.methods.training.trainer import Trainer, build_ranker
from wpultr.pipeline import stages as S
from wpultr.rankers.mlp import FEATURE_INPUT, feature_matrix
from wpultr.schema import CLICK, DOC_ID, FEATURES, POSITION, QUERY_ID, QUERY_TOKENS, SESSION_ID, SchemaError, query_key

N_SESSIONS, PAGE, N_FEATURES = 60, 5, 6
LISTS = (FEATURES, QUERY_TOKENS)


def sessions_table(seed: int = 0) -> pa.Table:
    """Sessions of PAGE results, shuffled rows, float32 feature lists and int32 query-token lists, as ingested."""
    rng = np.random.default_rng(seed)
    n = N_SESSIONS * PAGE
    query = rng.integers(0, 12, size=N_SESSIONS).repeat(PAGE)
    x = rng.normal(size=(n, N_FEATURES)).astype(np.float32)
    order = rng.permutation(n)
    tokens = [np.arange(q % 3 + 1, dtype=np.int32) + q for q in query]
    frame = pd.DataFrame({
        SESSION_ID: np.arange(N_SESSIONS).repeat(PAGE), QUERY_ID: [f"q{q}" for q in query],
        POSITION: np.tile(np.arange(1, PAGE + 1), N_SESSIONS).astype(np.int16),
        CLICK: (rng.random(n) < 1 / (1 + np.exp(-x[:, 0]))).astype(np.int8),
        DOC_ID: [f"d{q}-{i}" for q, i in zip(query, rng.integers(0, 8, size=n), strict=True)],
        QUERY_TOKENS: tokens, "media_type": rng.integers(0, 3, size=n), FEATURES: list(x)}).iloc[order]
    return pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)


@pytest.fixture(scope="module")
def partitions(tmp_path_factory) -> str:
    """The table as three Parquet partitions (the reader concatenates them: several Arrow chunks per column)."""
    directory = tmp_path_factory.mktemp("sessions")
    table = sessions_table()
    for i, start in enumerate(range(0, table.num_rows, 110)):
        pq.write_table(table.slice(start, 110), directory / f"part-{i:05d}.parquet")
    return str(directory)


def config(backbone: str = "mlp"):
    return config_from_dict({"seed": 3, "ranker": {"backbone": backbone, "head": [8], "dropout": 0.0},
                             "train": {"method": "naive", "epochs": 2, "batch_size": 16, "learning_rate": 0.01}})


def test_arrow_lists_read_the_same_values_without_an_object_per_row(partitions):
    objects = read_table(partitions)
    arrow = read_table(partitions, arrow_lists=LISTS)
    assert list(arrow.columns) == list(objects.columns)
    for name in LISTS:
        assert isinstance(arrow[name].dtype, pd.ArrowDtype)
        assert objects[name].dtype == object
        assert [list(v) for v in arrow[name].to_numpy()] == [list(v) for v in objects[name]]
    assert not (arrow.dtypes == np.dtype(object)).any()
    others = [c for c in objects.columns if c not in LISTS]
    pd.testing.assert_frame_equal(arrow[others], objects[others])
    one_file = f"{partitions}/part-00001.parquet"        # a single file reads the same way
    assert isinstance(read_table(one_file, arrow_lists=LISTS)[FEATURES].dtype, pd.ArrowDtype)
    assert read_table(one_file, [SESSION_ID, FEATURES], LISTS).columns.tolist() == [SESSION_ID, FEATURES]


@pytest.mark.parametrize("max_sessions", [None, 17])
def test_sampled_sessions_with_arrow_lists_are_the_same_rows(partitions, max_sessions):
    objects = S.read_sampled_sessions(partitions, max_sessions, seed=5)
    arrow = S.read_sampled_sessions(partitions, max_sessions, seed=5, arrow_lists=LISTS)
    np.testing.assert_array_equal(arrow[SESSION_ID].to_numpy(), objects[SESSION_ID].to_numpy())
    np.testing.assert_array_equal(feature_matrix(arrow), feature_matrix(objects))
    pd.testing.assert_series_equal(query_key(arrow), query_key(objects))


def test_feature_matrix_from_arrow_buffers_equals_stacking_rows(partitions):
    """Across chunks, after a row filter and a reordering (slices and gathers of the Arrow arrays)."""
    objects = read_table(partitions)
    arrow = read_table(partitions, arrow_lists=LISTS)
    assert arrow[FEATURES].array.__arrow_array__().num_chunks > 1
    rows = np.random.default_rng(1).permutation(len(objects))[:123]
    keep = (objects[CLICK] == 1).to_numpy()
    for pick in (lambda f: f, lambda f: f.iloc[rows], lambda f: f[keep].reset_index(drop=True),
                 lambda f: f.iloc[200:]):
        got, expected = feature_matrix(pick(arrow)), feature_matrix(pick(objects))
        assert got.dtype == np.float32 and got.flags.writeable and got.flags.c_contiguous
        np.testing.assert_array_equal(got, expected)


def _arrow_frame(rows: list) -> pd.DataFrame:
    column = pa.chunked_array([pa.array(rows[:2], pa.list_(pa.float32())), pa.array(rows[2:], pa.list_(pa.float32()))])
    return pd.DataFrame({FEATURES: pd.arrays.ArrowExtensionArray(column)})


@pytest.mark.parametrize("rows, message", [
    ([[1.0, 2.0], [1.0, 2.0], [3.0], [1.0, 2.0]], "sessions: column 'features' row 2 has 1 values, row 0 has 2"),
    ([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, float("nan")]], "sessions: column 'features' row 3 value 1 is nan"),
    ([[1.0, 2.0], [1.0, 2.0], None, [1.0, 2.0]], "sessions: column 'features' row 2 is null"),
])
def test_feature_matrix_from_arrow_names_the_bad_row(rows, message):
    with pytest.raises(SchemaError, match=message.replace("(", r"\(")):
        feature_matrix(_arrow_frame(rows), "sessions")


def test_trainer_inputs_are_the_same_as_from_per_row_objects(partitions):
    """Standardisation, the prepared feature tensor and the session lists do not depend on the representation."""
    cfg = config()
    frames = [S.read_sampled_sessions(partitions, None, cfg.seed, arrow_lists=lists) for lists in ((), LISTS)]
    trainers = [Trainer(build_ranker(cfg, frame), frame, None, cfg) for frame in frames]
    old, new = trainers
    assert torch.equal(old.ranker.mean, new.ranker.mean) and torch.equal(old.ranker.scale, new.ranker.scale)
    assert old.inputs[FEATURE_INPUT].dtype == torch.float32
    assert torch.equal(old.inputs[FEATURE_INPUT], new.inputs[FEATURE_INPUT])
    for name in ("rows", "mask", "clicks", "positions", "session_ids"):
        np.testing.assert_array_equal(getattr(old.lists, name), getattr(new.lists, name))


def test_a_method_trains_the_same_ranker_from_either_representation(partitions, one_torch_thread):
    cfg = config()
    results = [get_method("naive").fit(S.read_sampled_sessions(partitions, None, cfg.seed, arrow_lists=lists),
                                       None, cfg) for lists in ((), LISTS)]
    old, new = (r.ranker.state_dict() for r in results)
    assert old.keys() == new.keys()
    assert all(torch.equal(old[k], new[k]) for k in old)
    assert [e["train"]["loss"] for e in results[0].history] == [e["train"]["loss"] for e in results[1].history]


def test_the_train_stage_keeps_query_tokens_as_objects_for_bert_only():
    """BERT reads each row's token ids; every other backbone reads them only through schema.query_key."""
    assert set(S.arrow_lists(config("mlp"))) == {FEATURES, QUERY_TOKENS}
    assert set(S.arrow_lists(config("lightgbm"))) == {FEATURES, QUERY_TOKENS}
    assert S.arrow_lists(config("bert")) == (FEATURES,)


FREED_BLOCKS = """
import sys, numpy as np, psutil
from wpultr.memory import map_large_allocations
mapped = map_large_allocations() if sys.argv[1] == "map" else None
rss = lambda: psutil.Process().memory_info().rss
big = np.ones(30 << 17); del big              # a freed 30 MiB block: glibc raises its mmap threshold to it
before = rss()
blocks, pins = [], []
for _ in range(10):                           # 10 x 20 MiB, each followed by a small block still in use
    blocks.append(np.ones(20 << 17)); pins.append(np.ones(1024))
del blocks
print(mapped, (rss() - before) >> 20)
"""


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="glibc's mallopt")
def test_the_train_stage_hands_freed_large_blocks_back_to_the_os():
    """With glibc's default, the freed 20 MiB blocks stay resident (heap); mapped, none of them does."""
    import os
    import subprocess
    import sys
    # glibc's own defaults: a Dask cluster started earlier in this process may have set MALLOC_TRIM_THRESHOLD_ etc.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}

    def grown(mode: str) -> tuple[str, int]:
        out = subprocess.run([sys.executable, "-c", FREED_BLOCKS, mode], capture_output=True, text=True, check=True,
                             env=env)
        mapped, mib = out.stdout.split()
        return mapped, int(mib)
    assert grown("default")[1] >= 15
    mapped, mib = grown("map")
    assert mapped == "True" and mib <= 2


def _retain_freed_blocks() -> int:
    """In a Dask worker: free 190 MiB of 64 KiB blocks that a task thread allocated, every 50th pinned by a small live
    block (a stage's temporaries): they stay on that thread's glibc arena. Returns the resident bytes they added."""
    import threading

    import numpy
    import psutil
    pins = globals().setdefault("_pins", [])
    start = psutil.Process().memory_info().rss

    def task() -> None:
        blocks = []
        for i in range(3000):
            blocks.append(numpy.ones(8000))
            if i % 50 == 0:
                pins.append(numpy.ones(16))
        del blocks
    thread = threading.Thread(target=task)
    thread.start()
    thread.join()
    return psutil.Process().memory_info().rss - start


@pytest.mark.e2e
@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="glibc's malloc_trim")
def test_workers_hand_their_freed_heap_back_between_stages():
    """Freed, retained heap on the workers is handed back by `release_worker_memory`. On fresh workers: the session's
    shared cluster carries earlier tests' arenas and leftovers (once, late in a full CI run, a worker grew 125 MB and
    released 2 MB), which would make the figures about those tests rather than the release."""
    from wpultr.cluster import open_client, release_worker_memory
    from wpultr.config import ClusterConfig
    with open_client(ClusterConfig(n_workers=2, threads_per_worker=1, memory_limit="2GiB")) as client:
        retained = sum(client.run(_retain_freed_blocks).values())
        assert retained >= 100 << 20                   # of 2 x 190 MiB freed; a reused arena may hold less
        released = release_worker_memory(client)
        assert released >= 0.6 * retained, (retained, released)


@pytest.mark.parametrize("query_ids", ["text", "integers"])
def test_document_codes_equal_factorising_the_query_document_texts(query_ids):
    """The identifiability preflight codes (query_id, doc_id) from the two columns' codes: the same codes, in the
    same order, as factorising one "query<TAB>doc" string per row (what it built before, 0.46 GB at 1.25 M rows)."""
    from wpultr.identifiability.factor_graph import document_codes
    rng = np.random.default_rng(4)
    query = rng.integers(0, 40, size=3000)
    frame = pd.DataFrame({QUERY_ID: query if query_ids == "integers" else [f"q{q}" for q in query],
                          DOC_ID: [f"d{d}" for d in rng.integers(0, 25, size=3000)]})
    codes, keys = document_codes(frame)
    expected, _ = pd.factorize(frame[QUERY_ID].astype(str) + "\t" + frame[DOC_ID], sort=False)
    np.testing.assert_array_equal(codes, expected)
    first = np.unique(expected, return_index=True)[1]
    pd.testing.assert_frame_equal(keys, frame.iloc[first].reset_index(drop=True))


def _sessions_log(n_sessions: int, seed: int) -> pd.DataFrame:
    """A small log with whole sessions in runs of rows, documents shown across sessions, a categorical and a
    continuous page feature and a few missing media types."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 8, size=n_sessions)
    session = np.repeat(np.arange(n_sessions) * 3 + 11, sizes)
    position = np.concatenate([np.arange(1, k + 1) for k in sizes])
    query = np.repeat(rng.integers(0, 9, size=n_sessions), sizes)
    media = rng.integers(0, 4, size=len(session)).astype(float)
    media[rng.random(len(session)) < 0.02] = np.nan
    return pd.DataFrame({SESSION_ID: session, QUERY_ID: [f"q{q}" for q in query],
                         DOC_ID: [f"d{d}" for d in rng.integers(0, 15, size=len(session))], POSITION: position,
                         "media_type": media, "height": rng.normal(size=len(session)),
                         CLICK: (rng.random(len(session)) < 0.3).astype(np.int64)})


def test_the_identifiability_graph_is_the_same_from_chunks_of_any_size(monkeypatch):
    """The IG reads a log through its condensed impressions, built a chunk of rows at a time: every chunk size
    gives the IG of the whole-table group-by (nodes, impressions, clicks, document pairs, components)."""
    from wpultr.identifiability import factor_graph as G
    frame = _sessions_log(400, 5)
    whole = G.build_graph(frame, ["position", "media_type"])
    pairs = frame.groupby([QUERY_ID, DOC_ID, POSITION, "media_type"], dropna=False).size()
    assert int(whole.impressions.sum()) == len(frame) == int(pairs.sum())
    assert int(whole.clicks.sum()) == int(frame[CLICK].sum())
    for size in (1, 7, 500):
        monkeypatch.setattr(G.condensed_impressions, "__defaults__", (size,))
        part = G.build_graph(frame, ["position", "media_type"])
        assert part.nodes == whole.nodes or all(str(a) == str(b) for a, b in zip(part.nodes, whole.nodes, strict=True))
        np.testing.assert_array_equal(part.impressions, whole.impressions)
        np.testing.assert_array_equal(part.clicks, whole.clicks)
        np.testing.assert_array_equal(part.component, whole.component)
        pd.testing.assert_frame_equal(part.pairs, whole.pairs)
        pd.testing.assert_frame_equal(part.doc_keys, whole.doc_keys)


def test_merges_apply_by_factor_values_including_a_missing_one():
    from wpultr.identifiability.factor_graph import build_graph
    from wpultr.identifiability.repair import apply_merges
    frame = _sessions_log(200, 6)
    ig = build_graph(frame, ["media_type"])
    missing = next(i for i, node in enumerate(ig.nodes) if pd.isna(node[0]))
    merged = apply_merges(frame, ig, {missing: 0})
    assert merged["media_type"].isna().sum() == 0
    assert (merged["media_type"] == ig.nodes[0][0]).sum() == frame["media_type"].isna().sum() + \
        (frame["media_type"] == ig.nodes[0][0]).sum()


def test_session_spans_hold_whole_sessions_and_encoders_fit_the_same_from_them():
    from wpultr.features.encoders import PageFeatureEncoder, session_spans
    from wpultr.schema import PageFeature
    frame = _sessions_log(300, 7).assign(media_type=lambda f: f["media_type"].fillna(9.0))
    spans = session_spans(frame, 50)
    assert len(spans) > 5 and spans[0].start == 0 and spans[-1].stop == len(frame)
    assert all(a.stop == b.start for a, b in zip(spans[:-1], spans[1:], strict=True))
    ids = frame[SESSION_ID].to_numpy()
    assert all(ids[s.start - 1] != ids[s.start] for s in spans[1:])      # never inside a session
    shuffled = frame.sample(frac=1.0, random_state=0)
    assert session_spans(shuffled, 50) == [slice(0, len(frame))]          # sessions not in runs: one span
    features = [PageFeature.parse("position", "ordinal", "t"), PageFeature.parse("media_type", "categorical", "t"),
                PageFeature.parse("height", "continuous", "t")]
    whole = PageFeatureEncoder(features).fit(frame, chunk_rows=10 ** 9).transform(frame)
    chunked = PageFeatureEncoder(features).fit(frame, chunk_rows=50).transform(frame)
    pd.testing.assert_frame_equal(chunked, whole, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("categorical, n_pairs", [(True, 60), (True, 50_000), (False, 60)])
def test_within_document_share_is_the_same_in_chunks(categorical, n_pairs):
    """Chunked sums give the one-pass share; many (pair, level) cells are counted sparsely, to the same share."""
    from wpultr.bal.separability import within_document_share
    rng = np.random.default_rng(8)
    pairs = np.sort(rng.integers(0, n_pairs, size=5000)).astype(np.int32)
    values = (rng.integers(0, 5, size=5000) if categorical else rng.normal(size=5000)) + (pairs % 3 == 0)
    whole = within_document_share(pairs, values, categorical)
    assert 0.0 < whole < 1.0
    for size in (1, 333, 4999):
        assert within_document_share(pairs, values, categorical, chunk_rows=size) == pytest.approx(whole, rel=1e-9)


def test_training_rows_built_from_partitions_a_few_columns_at_a_time_are_the_frames(tmp_path, monkeypatch):
    """A streamed BAL fit builds its rows from the Parquet partitions (`PartitionColumns`: one step's columns read
    at a time, ids as codes) and spills them to disk: the same rows as from the frame in memory, with the
    encoders fitted over the same whole-session chunks (several of them here), and the pre-flight's changed
    columns read from its output."""
    from wpultr.bal import rows as R
    from wpultr.bal.column_sources import PartitionColumns
    from wpultr.bal.rows import TrainingRows
    from wpultr.io.parquet import partition_paths
    from wpultr.io.tables import SessionPartitionWriter, to_arrow
    monkeypatch.setattr(R, "CHUNK_ROWS", 300)                   # several whole-session chunks per encoder fit
    frame = _sessions_log(400, 9).assign(media_type=lambda f: f["media_type"].fillna(9.0))
    (tmp_path / "parts").mkdir()
    writer = SessionPartitionWriter(tmp_path / "parts", 0, 500)
    writer.write(to_arrow(frame))
    writer.close()
    paths = [str(p) for p in partition_paths(tmp_path / "parts")]
    assert len(paths) >= 3
    cfg = config_from_dict({"seed": 4, "train": {"method": "bal"},
                            "data": {"page_features": {"position": "ordinal", "media_type": "categorical",
                                                       "height": "continuous"}},
                            "discovery": {"n_sessions": 50}, "bal": {"click_model": {"document_effects": True}}})
    kept = TrainingRows.build(frame, cfg)
    source = PartitionColumns(paths, list(frame.columns))
    loads = []
    load = source.load
    monkeypatch.setattr(source, "load", lambda columns: loads.append(list(columns)) or load(columns))
    lean = TrainingRows.build(source, cfg, spill=True)
    assert max(len(c) for c in loads) == 3                       # never the whole table
    assert lean.nodes.nbytes_in_memory() == 4 * len(frame)      # on disk but r̂
    pd.testing.assert_frame_equal(lean.nodes.to_frame(), kept.nodes.to_frame())
    assert list(kept.nodes.to_frame().columns) == ["position", "media_type", "height", "relevance_score", CLICK]
    for name in ("clicks", "positions"):
        np.testing.assert_array_equal(getattr(lean, name), getattr(kept, name))
    np.testing.assert_array_equal(lean.pairs_at(), kept.pairs_at())
    np.testing.assert_array_equal(lean.pairs_at(np.array([7, 3, 3])), kept.pairs_at()[[7, 3, 3]])
    np.testing.assert_array_equal(lean.graph_rows.kci, kept.graph_rows.kci)
    assert lean.separable.to_dict() == kept.separable.to_dict() and lean.document_effects == kept.document_effects
    assert lean.separable.checked and lean.document_effects["used"]
    assert np.shares_memory(kept.clicks, kept.nodes.column(CLICK))    # in memory: one copy of the clicks
    nodes, r = lean.with_scores(np.arange(len(frame), dtype=np.float32))
    assert np.shares_memory(r, nodes.column("relevance_score")) and r[5] == 5.0
    assert nodes.iloc[4:7]["relevance_score"].tolist() == [4.0, 5.0, 6.0]
    directory = lean.nodes.directory
    assert directory is not None and directory.exists()
    del lean, nodes
    import gc
    gc.collect()
    assert not directory.exists()                               # the scratch files go with the rows

    merged = frame.assign(media_type=frame["media_type"].where(frame["media_type"] != 3.0, 2.0))
    prepared = source.prepared(lambda t: t.assign(media_type=merged["media_type"].to_numpy()), ["media_type", CLICK])
    assert set(prepared.overrides) == {"media_type"}             # only what the pre-flight changed is held
    pd.testing.assert_frame_equal(TrainingRows.build(prepared, cfg).nodes.to_frame(),
                                  TrainingRows.build(merged, cfg).nodes.to_frame())


def test_spilled_rows_sweep_the_scratch_a_killed_fit_left_and_keep_live_and_other_hosts(tmp_path):
    """A SIGKILLed fit skips its clean-up at exit: the next spilled fit on the host removes that scratch directory
    (its process is gone), never one of a live process or of another host sharing the directory."""
    import subprocess
    import sys

    from wpultr.bal.node_columns import NodeColumns, scratch_prefix
    child = subprocess.Popen([sys.executable, "-c", "import os, signal, tempfile, sys; "
                              "from wpultr.bal.node_columns import NodeColumns; "
                              f"rows = NodeColumns.spilled(4, {str(tmp_path)!r}); rows.add('a', [1, 2, 3, 4]); "
                              "print(rows.directory, flush=True); os.kill(os.getpid(), signal.SIGKILL)"],
                             stdout=subprocess.PIPE, text=True)
    killed = Path(child.communicate(timeout=120)[0].strip())
    assert child.returncode == -9 and (killed / "a.bin").exists()       # left behind by the kill
    live = tmp_path / f"{scratch_prefix()}kept"                  # this process's: alive
    live.mkdir()
    other_host = tmp_path / f"wpultr-rows-another_host-{child.pid}-x"
    other_host.mkdir()
    unrelated = tmp_path / "wpultr-rows-notes"
    unrelated.mkdir()
    rows = NodeColumns.spilled(4, tmp_path)
    assert not killed.exists()
    assert live.exists() and other_host.exists() and unrelated.exists() and rows.directory.exists()
    directory = rows.directory
    del rows
    assert not directory.exists()                                # a finished fit removes its own


def test_node_columns_read_the_same_rows_in_memory_and_spilled(tmp_path):
    """`NodeColumns.iloc` gives the rows a DataFrame's iloc gives, held in memory or spilled to disk, for slices,
    gathers in any order with repeats (read chunk by chunk from the files) and r̂ set in memory."""
    from wpultr.bal import node_columns
    from wpultr.bal.node_columns import NodeColumns
    rng = np.random.default_rng(3)
    n = 1000
    data = {"a": rng.standard_normal(n), "b": rng.integers(0, 5, n), "_hidden": rng.integers(0, 9, n).astype(np.int16)}
    scores = rng.standard_normal(n).astype(np.float32)
    frame = pd.DataFrame({"a": data["a"], "b": data["b"], "relevance_score": scores,
                          CLICK: (scores > 0).astype(np.float32)})
    held = [NodeColumns(n), NodeColumns.spilled(n, tmp_path)]
    for store in held:
        store.add("a", data["a"])
        store.add("b", data["b"])
        store.add("_hidden", data["_hidden"])
        store.set_scores(scores)
        store.add(CLICK, frame[CLICK].to_numpy())
        assert store.columns == list(frame.columns) and len(store) == n
    assert held[1].nbytes_in_memory() == scores.nbytes and any(tmp_path.iterdir())
    index = np.array([999, 0, 5, 5, 512, 3, 998])
    old = node_columns.READ_ROWS
    node_columns.READ_ROWS = 64                                  # gathers cross many file chunks
    try:
        for store in held:
            pd.testing.assert_frame_equal(store.iloc[10:300], frame.iloc[10:300])
            pd.testing.assert_frame_equal(store.iloc[990:2000], frame.iloc[990:2000])
            pd.testing.assert_frame_equal(store.iloc[index], frame.iloc[index])
            pd.testing.assert_frame_equal(store.iloc[np.array([], dtype=np.int64)], frame.iloc[[]],
                                          check_index_type=False)
            np.testing.assert_array_equal(store.take("_hidden", index), data["_hidden"][index])
            np.testing.assert_array_equal(store.column("_hidden"), data["_hidden"])
            with pytest.raises(KeyError, match="no column 'nope'"):
                store.column("nope")
            with pytest.raises(ValueError, match="already held"):
                store.add("a", data["a"])
            with pytest.raises(ValueError, match="rows"):
                store.add("c", data["a"][:5])
        for store in held:                                       # both holdings refuse what a file could not give
            with pytest.raises(IndexError):
                store.take("a", np.array([n]))
            with pytest.raises(IndexError):
                store.take("a", np.array([-1]))
    finally:
        node_columns.READ_ROWS = old
