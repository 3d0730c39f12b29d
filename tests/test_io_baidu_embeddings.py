"""The Baidu-ULTR embedding datasets' reader (io/baidu_embeddings.py) on fixtures in the published schema
(tests/baidu_embeddings_fixture.py): both stored forms give the same rows, every value as the generator made it,
sessions stay sessions, and each kind of malformed record is quarantined with its file, record and reason."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from baidu_embeddings_fixture import LTR, annotation_tables, click_tables, make_corpus, make_part, write_dataset
from wpultr.config import ConfigError, config_from_dict
from wpultr.io.baidu_embeddings import ingest_embedding_sessions, read_embedding_annotations
from wpultr.schema import QUARANTINE_SCHEMA

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 768


@pytest.fixture(scope="module")
def world():
    corpus = make_corpus(n_queries=12, docs_per_query=12, seed=3)
    part = make_part(corpus, n_sessions=90, seed=5)
    per_session, flat = click_tables(corpus, part)
    return corpus, part, per_session, flat


def _ingest(tmp_path: Path, name: str, table_or_path, fmt: str = "feather", **kwargs):
    """Write `table` as one file (or take a path), ingest it alone: (summary, sessions frame, quarantine frame)."""
    if isinstance(table_or_path, pa.Table):
        path = tmp_path / f"{name}.{fmt}"
        if fmt == "feather":
            feather.write_feather(table_or_path, path, chunksize=kwargs.pop("chunksize", None))
        else:
            pq.write_table(table_or_path, path, row_group_size=kwargs.pop("row_group_size", None))
    else:
        path = table_or_path
    out = tmp_path / f"out_{name}"
    summary, _ = ingest_embedding_sessions([path], out, None, **kwargs)
    parts = sorted((out / "sessions").glob("part-*.parquet"))
    sessions = (pa.concat_tables([pq.read_table(p) for p in parts]).to_pandas() if parts else pd.DataFrame())
    quarantine = pq.read_table(out / "quarantine" / "part-00000.parquet").to_pandas()
    return summary, sessions, quarantine


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["session_id", "position"]).reset_index(drop=True)


def _assert_same_rows(a: pd.DataFrame, b: pd.DataFrame) -> None:
    a, b = _sorted(a), _sorted(b)
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for column in a.columns:
        left, right = a[column].to_numpy(), b[column].to_numpy()
        if left.dtype == object and len(left) and isinstance(left[0], np.ndarray):
            assert all(np.array_equal(x, y) for x, y in zip(left, right, strict=True)), column
        else:
            assert np.array_equal(left, right, equal_nan=left.dtype.kind == "f"), column


def test_both_stored_forms_ingest_to_the_same_rows(tmp_path, world):
    _, _, per_session, flat = world
    ltr = ("bm25", "query_length", "document_length")
    s1, a, qa = _ingest(tmp_path, "per_session", per_session, "parquet", row_group_size=7, ltr_features=ltr,
                        batch_rows=16 * 5)
    # the flat Feather in batches of 9 rows read 5 at a time: sessions straddle batches
    s2, b, qb = _ingest(tmp_path, "flat", flat, "feather", chunksize=9, ltr_features=ltr, batch_rows=5)
    s3, c, _ = _ingest(tmp_path, "flat_parquet", flat, "parquet", ltr_features=ltr)
    assert len(qa) == len(qb) == 0 and s1.sessions == s2.sessions == s3.sessions == 90
    _assert_same_rows(a, b)
    _assert_same_rows(a, c)
    assert s1.lines == 90 and s2.lines == len(flat) and s1.results == s2.results == len(flat)


def test_every_value_is_the_generators(tmp_path, world):
    corpus, part, _, flat = world
    ltr = ("bm25", "tf_idf", "query_length", "abstract_length")
    _, got, _ = _ingest(tmp_path, "flat", flat, "feather", ltr_features=ltr)
    got = _sorted(got)        # the generator's rows are in (session, position) order too
    q, d = part.row_query, part.doc
    features = np.stack(got["features"].to_numpy())
    assert features.dtype == np.float32 and features.shape == (len(d), WIDTH + len(ltr))
    assert np.array_equal(features[:, :WIDTH], corpus.embedding[q, d].astype(np.float32))
    lengths = np.array([len(t) for t in corpus.query_tokens])[q]
    extra = np.stack([lengths if name == "query_length" else corpus.ltr[name][q, d] for name in ltr], axis=1)
    assert np.array_equal(features[:, WIDTH:], extra.astype(np.float32))
    assert np.array_equal(got["session_id"], part.session)
    assert list(got["query_id"]) == [corpus.query_id[i] for i in q]
    assert list(got["doc_id"]) == list(corpus.text_md5[q, d]) and list(got["url_md5"]) == list(corpus.url_md5[q, d])
    for column, expected in [("position", part.position), ("click", part.click), ("media_type", part.media_type),
                             ("serp_height", part.serp_height), ("displayed_time", part.displayed_time),
                             ("slipoff_count_after_click", part.slipoff)]:
        assert np.array_equal(got[column].to_numpy(), expected), column
    assert got["position"].dtype == np.int16 and got["click"].dtype == np.int8
    assert got["serp_height"].dtype == got["displayed_time"].dtype == np.float64
    assert all(np.array_equal(t, corpus.query_tokens[i]) for t, i in zip(got["query_tokens"], q, strict=True))
    assert all(np.array_equal(t, corpus.title[i][j]) for t, i, j in zip(got["title_tokens"], q, d, strict=True))
    assert all(np.array_equal(t, corpus.abstract[i][j]) for t, i, j in zip(got["abstract_tokens"], q, d, strict=True))
    for name in LTR:
        assert np.array_equal(got[name].to_numpy(), corpus.ltr[name][q, d].astype(np.float32)), name


def test_a_repeated_query_id_stays_two_sessions(tmp_path, world):
    corpus, part, per_session, flat = world
    _, got, _ = _ingest(tmp_path, "flat", flat, "feather")
    per = got.groupby("session_id").agg(query=("query_id", "first"), rows=("position", "size"))
    assert len(per) == len(part.n) and np.array_equal(per["rows"].to_numpy(), part.n)
    repeated = per.groupby("query").size()
    assert (repeated > 1).any()       # the popular queries were searched in several sessions, each kept apart
    assert repeated.sum() == len(part.n)
    # two files: the same ordinals, other ids (the file's index is part of the session id)
    path = tmp_path / "flat.feather"
    other = tmp_path / "flat_copy.feather"      # the same sessions, other bytes (a byte-identical copy is read once)
    feather.write_feather(feather.read_table(path), other, compression="uncompressed")
    assert other.read_bytes() != path.read_bytes()
    summary, ids = ingest_embedding_sessions([path, other], tmp_path / "two", None)
    assert summary.sessions == 2 * len(part.n)


def _set_list(table: pa.Table, column: str, row: int, value) -> pa.Table:
    values = table.column(column).to_pylist()
    values[row] = value
    return table.set_column(table.schema.get_field_index(column), column,
                            pa.array(values, type=table.schema.field(column).type))


def _records(quarantine: pd.DataFrame) -> list[tuple[int, str]]:
    return list(zip(quarantine["line"], quarantine["reason"], strict=True))


def test_a_session_whose_lists_disagree_with_n_is_dropped_whole(tmp_path, world):
    _, part, per_session, _ = world
    clicks = per_session.column("click").to_pylist()
    bad = _set_list(per_session, "click", 3, clicks[3][:-1])                 # one click short
    emb = per_session.column("query_document_embedding")[7].as_py()
    bad = _set_list(bad, "query_document_embedding", 7, emb + [emb[0]])      # one embedding row too many
    summary, got, quarantine = _ingest(tmp_path, "lists", bad, "parquet")
    assert _records(quarantine) == [(4, "list_length_mismatch"), (8, "list_length_mismatch")]
    assert "'click' holds" in quarantine["text"][0] and "query_document_embedding" in quarantine["text"][1]
    assert sorted(set(got["session_id"])) == [i for i in range(len(part.n)) if i not in (3, 7)]
    assert summary.sessions == len(part.n) - 2 and summary.quarantined == 2
    # a session that showed nothing (n = 0, every list empty) is an empty_session record, not silence
    nothing = per_session.slice(0, 1)
    for name in nothing.column_names:
        if name == "n":
            nothing = nothing.set_column(nothing.schema.get_field_index("n"), "n", pa.array([0], pa.int32()))
        elif pa.types.is_list(nothing.schema.field(name).type) and name != "query":
            nothing = _set_list(nothing, name, 0, [])
    _, got, quarantine = _ingest(tmp_path, "nothing", pa.concat_tables([nothing, per_session.slice(1, 2)]),
                                 "parquet")
    assert _records(quarantine) == [(1, "empty_session")] and sorted(set(got["session_id"])) == [1, 2]
    assert list(quarantine.columns) == QUARANTINE_SCHEMA.names


def test_an_embedding_of_the_wrong_width_drops_that_result(tmp_path, world):
    _, part, per_session, flat = world
    emb = flat.column("query_document_embedding").to_pylist()
    bad = _set_list(flat, "query_document_embedding", 5, emb[5][:-1])
    bad = _set_list(bad, "query_document_embedding", 11, None)
    summary, got, quarantine = _ingest(tmp_path, "width", bad, "feather")
    assert _records(quarantine) == [(6, "bad_embedding_width"), (12, "bad_embedding_width")]
    assert "767 values, expected 768" in quarantine["text"][0]
    assert len(got) == len(flat) - 2 and summary.sessions == len(part.n)
    # in the per-session form: the record of the session, the result named in the text
    nested = per_session.column("query_document_embedding")[2].as_py()
    nested[1] = nested[1] + [0.5]
    summary, got, quarantine = _ingest(tmp_path, "nested", _set_list(per_session, "query_document_embedding", 2,
                                                                       nested), "parquet")
    assert _records(quarantine) == [(3, "bad_embedding_width")] and "session record 3, result 2" in \
        quarantine["text"][0]
    assert len(got) == len(flat) - 1


def test_a_missing_column_quarantines_the_file(tmp_path, world):
    _, _, per_session, flat = world
    summary, got, quarantine = _ingest(tmp_path, "no_click", flat.drop_columns(["click"]), "feather")
    assert _records(quarantine) == [(0, "missing_column")] and "'click'" in quarantine["text"][0]
    assert len(got) == 0 and summary.file_reasons == {"missing_column": 1} and summary.damaged_files
    summary, _, quarantine = _ingest(tmp_path, "typed", per_session.set_column(
        per_session.schema.get_field_index("n"), "n", pa.array(["x"] * per_session.num_rows)), "parquet")
    assert _records(quarantine) == [(0, "missing_column")] and "'n' has type string" in quarantine["text"][0]
    # a selected LTR feature the file lacks
    _, _, quarantine = _ingest(tmp_path, "no_bm25", flat.drop_columns(["bm25"]), "feather", ltr_features=("bm25",))
    assert _records(quarantine) == [(0, "missing_column")]


def test_values_and_session_structure_are_checked(tmp_path, world):
    _, part, _, flat = world
    n0, n1 = int(part.n[0]), int(part.n[1])
    emb = flat.column("query_document_embedding").to_pylist()
    bad = _set_list(flat, "click", 1, 2)                                       # row 2
    bad = _set_list(bad, "position", 2, 0)                                     # row 3
    bad = _set_list(bad, "query_document_embedding", 3, [float("nan")] + emb[3][1:])   # row 4
    bad = _set_list(bad, "position", n0 + 1, int(part.position[n0]))          # session 1's 2nd result repeats 1st
    bad = _set_list(bad, "text_md5", n0 + 2, None)
    bad = _set_list(bad, "serp_height", n0 + 3, None)
    summary, got, quarantine = _ingest(tmp_path, "values", bad, "feather")
    assert _records(quarantine) == [(2, "bad_click"), (3, "bad_position"), (4, "bad_value"),
                                    (n0 + 2, "duplicate_position"), (n0 + 3, "bad_value"), (n0 + 4, "bad_number")]
    assert len(got) == len(flat) - 6 and summary.sessions == len(part.n)
    # every result of a session bad: an empty_session record too; its rows moved after another session's: split
    bad = flat
    for row in range(n0):
        bad = _set_list(bad, "click", row, 7)
    order = list(range(n0, n0 + n1 - 1)) + list(range(n0)) + [n0 + n1 - 1] + list(range(n0 + n1, len(flat)))
    summary, got, quarantine = _ingest(tmp_path, "empty", bad.take(pa.array(order)), "feather")
    reasons = quarantine.groupby("reason").size().to_dict()
    assert reasons == {"bad_click": n0, "empty_session": 1, "split_session": 1}
    assert summary.sessions == len(part.n) - 1
    assert (got["session_id"] == 1).sum() == n1 - 1           # session 1's row after session 0's: quarantined


def test_annotations_in_both_forms(tmp_path):
    corpus = make_corpus(n_queries=6, docs_per_query=8, seed=1)
    per_query, flat = annotation_tables(corpus, 5)
    pq.write_table(per_query, tmp_path / "a.parquet")
    feather.write_feather(flat, tmp_path / "a.feather")
    a, qa, _ = read_embedding_annotations(tmp_path / "a.parquet", ltr_features=("bm25",))
    b, qb, _ = read_embedding_annotations(tmp_path / "a.feather", ltr_features=("bm25",))
    assert not qa and not qb and a.equals(b) and a.num_rows == 40
    q, d = np.repeat(np.arange(5), 8), np.tile(np.arange(8), 5)
    frame = a.to_pandas()
    assert np.array_equal(frame["label"], corpus.grade[q, d]) and list(frame["doc_id"]) == list(corpus.text_md5[q, d])
    assert np.array_equal(frame["bucket"], corpus.frequency_bucket[q])
    features = np.stack(frame["features"].to_numpy())
    assert np.array_equal(features[:, :WIDTH], corpus.embedding[q, d].astype(np.float32))
    assert np.array_equal(features[:, WIDTH], corpus.ltr["bm25"][q, d])
    # a document judged twice: the same label kept once, two labels set aside
    twice = pa.concat_tables([flat, flat.slice(0, 1), _set_list(flat.slice(1, 1), "label", 0, 4)])
    feather.write_feather(twice, tmp_path / "twice.feather")
    got, records, _ = read_embedding_annotations(tmp_path / "twice.feather")
    assert sorted((r.line, r.reason) for r in records) == [
        (2, "conflicting_label"), (41, "duplicate_annotation"), (42, "conflicting_label")]
    assert got.num_rows == 39
    bad = _set_list(flat, "label", 0, 9)
    feather.write_feather(bad, tmp_path / "bad.feather")
    _, records, _ = read_embedding_annotations(tmp_path / "bad.feather")
    assert [(r.line, r.reason) for r in records] == [(1, "bad_label")]


def test_config_checks_the_embedding_keys():
    base = {"data": {"source": "baidu_embeddings", "train": ["x.feather"], "annotations": "a.feather"}}
    assert config_from_dict(base).data.page_features == {     # the SERP features the datasets carry, by default
        "position": "ordinal", "media_type": "categorical", "serp_height": "continuous",
        "displayed_time": "continuous"}
    with pytest.raises(ConfigError, match="data.embeddings.ltr_features"):
        config_from_dict({"data": {**base["data"], "embeddings": {"ltr_features": ["bm26"]}}})
    with pytest.raises(ConfigError, match="data.heldout"):
        config_from_dict({"data": {"source": "baidu", "train": ["x.gz"], "annotations": "a", "heldout": ["y"]}})
    with pytest.raises(ConfigError, match="data.annotations"):
        config_from_dict({"data": {"source": "baidu_embeddings", "train": ["x.feather"]}})


@pytest.mark.e2e
def test_the_pipeline_runs_on_the_fixture(tmp_path):
    from wpultr.cli import app
    data = tmp_path / "data"
    write_dataset(data, 240, n_queries=40, docs_per_query=12, n_annotated=30, forms=("feather",))
    run = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "run", str(ROOT / "pipelines" / "baidu_embeddings.yaml"), "--set", f"run_dir={run}",
        "--set", f"data.train=[{data}/parts/part-1_split-0.feather, {data}/parts/part-2_split-0.feather, "
                 f"{data}/parts/part-3_split-0.feather]",
        "--set", f"data.heldout=[{data}/parts/part-0_split-0.feather]",
        "--set", f"data.annotations={data}/annotations.feather", "--set", "train.method=ipw",
        "--set", "train.epochs=1", "--set", "ranker.head=[32]"])
    assert result.exit_code == 0, result.output
    ingest = json.loads((run / "data" / "ingest.json").read_text())
    assert ingest["sessions"] == 180 and ingest["heldout"]["sessions"] == 60
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["all"]["n_queries"] == 24 and 0 < metrics["all"]["nDCG@10"] <= 1
    clicks = metrics["clicks"]
    assert clicks["sessions"] == 60
    for model in ("ctr", "position_based"):
        assert clicks["models"][model]["perplexity"]["overall"] > 1


def test_a_heldout_file_in_the_training_files_is_refused(tmp_path):
    from types import SimpleNamespace

    from wpultr.pipeline.stages import _ingest_embeddings
    from wpultr.rundir.files import RunDir
    part = ROOT / "data" / "sample_embeddings" / "parts" / "part-0_split-0.feather"
    cfg = config_from_dict({"data": {"source": "baidu_embeddings", "train": [str(part)], "heldout": [str(part)],
                                     "annotations": str(part.parents[1] / "annotations.feather")}})
    with pytest.raises(ConfigError, match="data.heldout: .*part-0_split-0.feather is in data.train too"):
        _ingest_embeddings(SimpleNamespace(config=cfg, run=RunDir(tmp_path / "run"), client=None), tmp_path / "run")
    assert not (tmp_path / "run").exists()
