"""`wpultr ingest` on the Baidu-ULTR embedding datasets as a user downloads them (tests/baidu_embeddings_fixture.py):
both stored forms found by --format auto and read back row for row alike, data.embeddings taken from --config,
--json, the ownership rule for --out, and a bad file or a mix of formats as one line naming it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from baidu_embeddings_fixture import write_dataset
from test_io_baidu_embeddings import _assert_same_rows
from wpultr.cli import app

WIDTH = 768


def _cli(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def _one_line_error(outcome) -> str:
    assert outcome.exit_code == 2, outcome.output
    lines = [line for line in outcome.output.splitlines() if line.strip()]
    assert len(lines) == 1, outcome.output
    return lines[0]


def _sessions(out: Path):
    parts = sorted((out / "sessions").glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in parts]).to_pandas()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("embeddings")
    _, parts = write_dataset(root, 120, n_queries=15, docs_per_query=12, n_annotated=5, parts=2)
    return root, parts


def test_both_stored_forms_ingest_through_the_cli_to_the_same_rows(tmp_path, dataset):
    root, parts = dataset
    feather_files = sorted((root / "parts").glob("*.feather"))
    parquet_files = sorted((root / "clicks").glob("*.parquet"))
    summaries = {}
    for name, files in (("flat", feather_files), ("per_session", parquet_files)):
        outcome = _cli("ingest", *files, "--out", tmp_path / name, "--json")     # --format auto
        assert outcome.exit_code == 0, outcome.output
        summaries[name] = json.loads(outcome.output)
    shown = int(sum(p.n.sum() for p in parts))
    for summary in summaries.values():
        assert (summary["sessions"], summary["results"], summary["quarantined"]) == (120, shown, 0)
    flat, per_session = _sessions(tmp_path / "flat"), _sessions(tmp_path / "per_session")
    _assert_same_rows(flat, per_session)
    assert np.stack(flat["features"].to_numpy()).shape == (shown, WIDTH)
    assert pq.read_table(tmp_path / "flat" / "quarantine" / "part-00000.parquet").num_rows == 0
    # the table for people names the counts
    outcome = _cli("ingest", *feather_files, "--out", tmp_path / "flat")       # its own output: replaced
    assert outcome.exit_code == 0, outcome.output
    assert "sessions" in outcome.output and "120" in outcome.output


def test_the_configs_embedding_settings_are_used(tmp_path, dataset):
    root, _ = dataset
    files = sorted((root / "clicks").glob("*.parquet"))
    config = tmp_path / "run.yaml"          # a run config of the protocol, as the user has it
    config.write_text(f"data:\n  source: baidu_embeddings\n  train: {[str(f) for f in files]}\n"
                      f"  annotations: {root / 'annotations.parquet'}\n"
                      f"  embeddings:\n    ltr_features: [bm25, tf_idf]\n")
    outcome = _cli("ingest", *files, "--out", tmp_path / "out", "--format", "embeddings", "--config", config,
                   "--json")
    assert outcome.exit_code == 0, outcome.output
    features = np.stack(_sessions(tmp_path / "out")["features"].to_numpy())
    assert features.shape[1] == WIDTH + 2


def test_a_file_that_is_not_feather_is_one_line_naming_it(tmp_path, dataset):
    root, _ = dataset
    bad = tmp_path / "part-9_split-0.feather"
    bad.write_bytes(b"not an arrow file at all")
    line = _one_line_error(_cli("ingest", sorted((root / "parts").glob("*.feather"))[0], bad,
                                "--out", tmp_path / "out"))
    assert str(bad) in line and "Feather" in line
    assert not (tmp_path / "out" / "sessions").exists()


def test_a_bad_file_is_refused_before_any_task_reaches_the_cluster(tmp_path, dataset):
    """Above 50 MB the CLI ingests on a LocalCluster, whose worker would print a task's failure block before the one
    line: every file is opened (its footer) before a task is submitted. The client here fails any use of it."""
    from wpultr.io.baidu_embeddings import ingest_embedding_sessions
    from wpultr.schema import SchemaError
    root, _ = dataset
    bad = tmp_path / "part-9.parquet"
    bad.write_bytes(b"PAR1 but nothing else")
    with pytest.raises(SchemaError, match=f"{bad}: not a readable Parquet file"):
        ingest_embedding_sessions([sorted((root / "clicks").glob("*.parquet"))[0], bad], tmp_path / "out",
                                  client=object())
    assert not (tmp_path / "out").exists()


def test_a_mix_of_formats_and_a_users_directory_are_refused_in_one_line(tmp_path, dataset):
    root, _ = dataset
    log = tmp_path / "part-00000.gz"
    log.write_bytes(b"")
    line = _one_line_error(_cli("ingest", sorted((root / "parts").glob("*.feather"))[0], log,
                                "--out", tmp_path / "out"))
    assert "--format" in line and "embedding" in line and "Baidu logs" in line
    users = tmp_path / "mine"
    (users / "sessions").mkdir(parents=True)
    (users / "sessions" / "notes.txt").write_text("the user's")
    line = _one_line_error(_cli("ingest", *sorted((root / "parts").glob("*.feather")), "--out", users))
    assert "--out" in line
    assert (users / "sessions" / "notes.txt").read_text() == "the user's"


def test_a_plain_parquet_table_is_still_a_table(tmp_path, dataset):
    """--format auto tells an embedding dataset's Parquet from a table of wpultr's columns by its schema."""
    from wpultr.cli import _log_format
    root, _ = dataset
    table = tmp_path / "sessions.parquet"
    pq.write_table(pa.table({"session_id": [1], "position": [1], "click": [0]}), table)
    assert _log_format([str(table)]) == "table"
    assert _log_format([str(p) for p in sorted((root / "clicks").glob("*.parquet"))]) == "embeddings"
    assert _log_format([str(tmp_path / "a.gz")]) == "baidu"
