"""Issue 29, ingest and inputs: nothing an ingest reads or does not own is deleted, damaged gzip keeps nothing
unverified, session ids are unique across tables, annotations judge a document once, an unfinished ingest is
never read as a table, a file named twice is read once, non-finite numbers and wide query lines are caught,
non-log inputs are refused and relative paths work with a separate scheduler. Real gzip files, a real
LocalCluster, the real `wpultr` CLI."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from test_io_baidu import query, result, write_gz
from test_io_tables import PAGE, sessions_frame
from wpultr.cli import app
from wpultr.errors import RunDirError
from wpultr.evaluation.metrics import per_query
from wpultr.io.baidu import ingest_baidu, ingest_baidu_annotations, read_baidu_annotations, read_baidu_sessions
from wpultr.io.parquet import read_table
from wpultr.io.tables import ingest_tables
from wpultr.rundir.ownership import OWNED_FILE
from wpultr.schema import BAIDU_TOKEN_SEP, SESSION_ID, SchemaError

SEP = BAIDU_TOKEN_SEP


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _one_line_error(outcome) -> str:
    assert outcome.exit_code == 2, outcome.output
    lines = [line for line in outcome.output.splitlines() if line.strip()]
    assert len(lines) == 1, outcome.output
    return lines[0]


def _log(n_sessions: int, first_qid: int = 0) -> list[str]:
    return [line for s in range(n_sessions)
            for line in [query(first_qid + s)] + [result(p, doc=f"d{s}-{p}") for p in range(1, 11)]]


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------
# 3, 9: the output is swapped in whole, never over an input; a failed or killed ingest leaves the old table
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_ingest_never_deletes_its_own_inputs(tmp_path, dask_client):
    out = tmp_path / "OUT"
    sessions_frame().to_parquet(tmp_path / "a.parquet")
    ingest_tables([tmp_path / "a.parquet"], out, PAGE, dask_client)
    before = _files(out / "sessions")
    inputs = sorted((out / "sessions").glob("*.parquet"))
    with pytest.raises(RunDirError, match="an input of this command"):
        ingest_tables(inputs, out, PAGE, dask_client)
    assert _files(out / "sessions") == before
    line = _one_line_error(_cli("ingest", *map(str, inputs), "--out", str(out)))
    assert "--out" in line and _files(out / "sessions") == before


@pytest.mark.e2e
def test_a_failed_ingest_leaves_the_previous_table_whole(tmp_path, dask_client):
    out = tmp_path / "OUT"
    good = tmp_path / "a.parquet"
    sessions_frame().to_parquet(good)
    first = ingest_tables([good], out, PAGE, dask_client)
    before = _files(out / "sessions")
    bad = sessions_frame(seed=1).assign(**{SESSION_ID: np.arange(18) + 10_000, "click": 7})
    bad.to_parquet(tmp_path / "b.parquet")
    with pytest.raises(SchemaError, match="click"):
        ingest_tables([good, tmp_path / "b.parquet"], out, PAGE, dask_client)   # a.parquet's partitions were written
    assert _files(out / "sessions") == before and len(read_table(out / "sessions")) == first.results
    assert not [p for p in out.iterdir() if p.name.startswith(".") and p.name != OWNED_FILE]   # no temporary left


KILLED_INGEST = """
import os, sys
import pandas as pd
from wpultr.io.tables import ingest_output
with ingest_output(sys.argv[1], []) as output:
    pd.DataFrame({"session_id": [1], "query_id": ["1"], "position": [1], "click": [0]}).to_parquet(
        output.sessions / "part-00000-00000.parquet")
    print(output.sessions, flush=True)
    os._exit(9)     # killed mid-ingest: no completion record, no swap
"""


@pytest.mark.e2e
def test_a_killed_ingest_is_never_read_as_a_table(tmp_path, dask_client):
    out = tmp_path / "OUT"
    done = subprocess.run([sys.executable, "-c", KILLED_INGEST, str(out)], capture_output=True, text=True)
    assert done.returncode == 9, done.stderr
    half = Path(done.stdout.strip())
    assert half.is_dir() and not (out / "sessions").exists()       # nothing at the table's name
    with pytest.raises(RunDirError, match="did not complete"):
        read_table(half)
    line = _one_line_error(_cli("identifiability", "check", str(half)))
    assert "did not complete" in line
    line = _one_line_error(_cli("discover", str(half), "--scores", "click", "--out", str(tmp_path / "graph"),
                                "--scheduler", dask_client.scheduler.address))
    assert "did not complete" in line and not (tmp_path / "graph" / "epoch_0").exists()
    with pytest.raises(RunDirError, match="did not complete"):   # its partitions given as inputs
        ingest_tables(sorted(half.glob("*.parquet")), tmp_path / "again", PAGE, client=None)


# ---------------------------------------------------------------------------------------------
# 5: a symlinked sessions directory is never written or emptied through
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_a_symlinked_sessions_directory_is_refused_and_its_target_kept(tmp_path, dask_client):
    foreign = tmp_path / "elsewhere"
    foreign.mkdir()
    sessions_frame().to_parquet(foreign / "part-00000-00000.parquet")   # a user's file, named like ours
    out = tmp_path / "run" / "data"
    out.mkdir(parents=True)
    (out / "sessions").symlink_to(foreign)
    log = write_gz(tmp_path / "log.gz", _log(3))
    with pytest.raises(RunDirError, match="symlink"):
        ingest_baidu([log], out, dask_client)
    assert (foreign / "part-00000-00000.parquet").is_file() and (out / "sessions").is_symlink()


@pytest.mark.e2e
def test_a_run_whose_data_sessions_is_a_symlink_is_refused_on_resume(tmp_path, dask_client):
    from wpultr.config import RunConfig
    from wpultr.pipeline.stages import StageContext, ingest
    from wpultr.rundir.files import RunDir
    foreign = tmp_path / "elsewhere"
    foreign.mkdir()
    sessions_frame().to_parquet(foreign / "part-00000-00000.parquet")
    log = write_gz(tmp_path / "train.gz", _log(3))
    annotations = write_gz(tmp_path / "annotations.gz", [f"0\t5{SEP}6\t1\t2\t3\t0"])
    cfg = RunConfig()
    cfg.data.source, cfg.data.train, cfg.data.annotations = "baidu", [str(log)], str(annotations)
    cfg.data.page_features = {}
    run = RunDir.create(tmp_path / "run")
    (tmp_path / "run" / "data").mkdir(exist_ok=True)
    (tmp_path / "run" / "data" / "sessions").symlink_to(foreign)
    with pytest.raises(RunDirError, match="run_dir .*data/sessions: is a symlink"):
        ingest(StageContext(cfg, run, dask_client))
    assert (foreign / "part-00000-00000.parquet").is_file()


# ---------------------------------------------------------------------------------------------
# 6: a gzip damaged in the middle keeps nothing its CRC did not vouch for
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_sixteen_flipped_bytes_drop_the_unverified_member_and_say_so(tmp_path, dask_client):
    clean = write_gz(tmp_path / "clean.gz", _log(2000))
    data = bytearray(clean.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
    (tmp_path / "damaged").mkdir()
    damaged = tmp_path / "damaged" / "part-0.gz"
    damaged.write_bytes(bytes(data))
    ok = write_gz(tmp_path / "damaged" / "part-1.gz", _log(5, first_qid=9000))
    summary = ingest_baidu([damaged, ok], tmp_path / "out", dask_client)
    kept = read_table(tmp_path / "out" / "sessions")
    assert set(kept["query_id"]) == {str(9000 + s) for s in range(5)}       # only the intact file's rows
    assert (summary.sessions, summary.results) == (5, 50)
    assert summary.unverified_lines > 0 and summary.unverified_rows > 0
    assert summary.lines == summary.sessions + summary.results + summary.quarantined + summary.unverified_lines
    assert summary.file_reasons == {"corrupt_gzip": 1} and summary.damaged_files == [str(damaged)]
    records = pd.read_parquet(tmp_path / "out" / "quarantine" / "part-00000.parquet")
    assert list(zip(records["file"], records["line"], records["reason"], strict=True)) == [
        (str(damaged), 1, "corrupt_gzip")]
    assert f"lines 1-{summary.unverified_lines} dropped ({summary.unverified_rows} rows" in records["text"].iloc[0]


def test_a_multi_member_gzip_with_garbage_after_verified_members_keeps_them(tmp_path):
    first, second = _log(3), _log(2, first_qid=100)
    path = tmp_path / "members.gz"
    path.write_bytes(gzip.compress(("\n".join(first) + "\n").encode(), mtime=0)
                     + gzip.compress(("\n".join(second) + "\n").encode(), mtime=0) + b"trailing junk")
    sessions, bad = read_baidu_sessions(path)
    assert len(sessions) == 50 and list(bad["reason"]) == ["corrupt_gzip"]


# ---------------------------------------------------------------------------------------------
# 7: session ids are unique across the tables of one ingest
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_two_tables_sharing_session_ids_are_refused_naming_both(tmp_path, dask_client):
    sessions_frame(seed=0).to_parquet(tmp_path / "a.parquet")
    sessions_frame(seed=1).to_parquet(tmp_path / "b.parquet")            # the same session ids 100..105
    with pytest.raises(SchemaError, match=r"b\.parquet: column 'session_id' reuses session id 100 of .*a\.parquet"):
        ingest_tables([tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path / "out", PAGE, dask_client)
    assert not (tmp_path / "out" / "sessions").exists()


# ---------------------------------------------------------------------------------------------
# 8: annotations: repeats and conflicts quarantined with reasons; a document is never judged twice
# ---------------------------------------------------------------------------------------------
def test_duplicate_and_conflicting_annotations_are_quarantined_with_reasons(tmp_path):
    lines = [f"1\t5{SEP}6\t1{SEP}2\t3\t4\t0",       # 1 kept
             f"1\t5{SEP}6\t1{SEP}2\t3\t4\t0",       # 2 the same label again: duplicate_annotation
             f"1\t5{SEP}6\t7\t8\t2\t0",             # 3 conflicting_label (with line 4)
             f"1\t5{SEP}6\t7\t8\t0\t0",             # 4 conflicting_label
             "1\t9\t7\t8\t0\t0",                    # 5 another query (same id, other tokens): kept
             "bad line"]                            # 6 wrong_field_count
    path = write_gz(tmp_path / "annotations.gz", lines)
    summary = ingest_baidu_annotations(path, tmp_path / "out")
    table = pd.read_parquet(tmp_path / "out" / "annotations.parquet")
    records = pd.read_parquet(tmp_path / "out" / "quarantine" / "annotations.parquet")
    assert list(zip(records["line"], records["reason"], strict=True)) == [
        (2, "duplicate_annotation"), (3, "conflicting_label"), (4, "conflicting_label"), (6, "wrong_field_count")]
    assert records["text"].iloc[0] == lines[1]
    assert len(table) == 2 and list(table["label"]) == [4, 0]             # lines 1 and 5
    assert summary.lines == summary.results + summary.quarantined == 6
    assert read_baidu_annotations(path)[0].equals(table)


def test_evaluation_and_own_annotation_tables_refuse_a_document_judged_twice(tmp_path):
    frame = pd.DataFrame({"query_id": ["1", "1", "1"], "doc_id": ["a", "b", "a"], "label": [4, 0, 0],
                          "bucket": [0, 0, 0], "score": [0.1, 0.2, 0.3]})
    with pytest.raises(SchemaError, match="column 'doc_id' row 2 is document 'a' a second time"):
        per_query(frame, "score")
    from wpultr.io.tables import read_annotations_table
    frame.assign(features=[[0.0]] * 3).drop(columns="score").to_parquet(tmp_path / "ann.parquet")
    with pytest.raises(SchemaError, match="rows 0 and 2 label document 'a'"):
        read_annotations_table(tmp_path / "ann.parquet")


@pytest.mark.e2e
def test_the_run_stage_writes_quarantined_annotation_lines(tmp_path, dask_client):
    from wpultr.config import RunConfig
    from wpultr.pipeline.stages import StageContext, ingest
    from wpultr.rundir.files import RunDir
    log = write_gz(tmp_path / "train.gz", _log(3))
    annotations = write_gz(tmp_path / "annotations.gz", [f"0\t5{SEP}6\t1\t2\t3\t0", f"0\t5{SEP}6\t1\t2\t1\t0", "x"])
    cfg = RunConfig()
    cfg.data.source, cfg.data.train, cfg.data.annotations = "baidu", [str(log)], str(annotations)
    cfg.data.page_features = {}
    run = RunDir.create(tmp_path / "run")
    with pytest.raises(SchemaError, match=rf"^{annotations}: no annotation rows \(its lines were all set aside "):
        ingest(StageContext(cfg, run, dask_client))       # issue 42 item 10: no row left is refused, not run on
    records = pd.read_parquet(tmp_path / "run" / "data" / "quarantine" / "annotations.parquet")
    assert sorted(records["reason"]) == ["conflicting_label", "conflicting_label", "wrong_field_count"]


# ---------------------------------------------------------------------------------------------
# 10: one file named twice is read once; non-finite numbers; query lines of 17-31 fields
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["1e400", "-inf", "nan", "inf"])
def test_non_finite_behaviour_numbers_are_quarantined_at_their_line(tmp_path, value):
    path = write_gz(tmp_path / "log.gz", [query(1), result(1, serp_height=value), result(2)])
    sessions, bad = read_baidu_sessions(path)
    assert list(zip(bad["line"], bad["reason"], strict=True)) == [(2, "bad_number")]
    assert list(sessions["position"]) == [2]


@pytest.mark.e2e
@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_non_finite_page_features_of_own_tables_name_column_and_row(tmp_path, dask_client, value):
    frame = sessions_frame()
    frame.loc[4, "serp_height"] = value
    frame.to_parquet(tmp_path / "a.parquet")
    with pytest.raises(SchemaError, match="page feature 'serp_height' row 4 is -?inf, expected a finite number"):
        ingest_tables([tmp_path / "a.parquet"], tmp_path / "out", PAGE, dask_client)


@pytest.mark.parametrize("n_fields", [17, 24, 31])
def test_a_query_line_of_17_to_31_fields_never_lends_its_results_to_the_previous_session(tmp_path, n_fields):
    wide = "\t".join([query(2)] + ["7"] * (n_fields - 3))
    path = write_gz(tmp_path / "log.gz", [query(1), result(1), wide, result(2, doc="x"), result(3, doc="y")])
    sessions, bad = read_baidu_sessions(path)
    assert list(sessions["query_id"]) == ["1"] and list(sessions["position"]) == [1]
    assert list(zip(bad["line"], bad["reason"], strict=True)) == [(3, "wrong_field_count"), (4, "broken_query_line"),
                                                     (5, "broken_query_line")]


def test_a_result_line_that_lost_fields_still_leaves_its_session_alone(tmp_path):
    short = "\t".join(result(2, doc="d2").split("\t")[:25])
    sessions, bad = read_baidu_sessions(write_gz(tmp_path / "log.gz", [query(1), result(1), short, result(3)]))
    assert list(sessions["position"]) == [1, 3] and list(bad["reason"]) == ["wrong_field_count"]


# ---------------------------------------------------------------------------------------------
# 12: inputs that are no session log are refused; relative paths work with a separate scheduler
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_inputs_that_are_no_session_log_are_refused_in_one_line(tmp_path, dask_client):
    (tmp_path / "config.json").write_text(json.dumps({"a": 1}))
    line = _one_line_error(_cli("ingest", str(tmp_path / "config.json"), "--out", str(tmp_path / "out"),
                                "--scheduler", dask_client.scheduler.address))
    assert "config.json: not a Baidu-ULTR session log by its name" in line
    (tmp_path / "notes.txt").write_text("some notes\nwithout any tab\n")
    with pytest.raises(SchemaError, match="notes.txt: not a Baidu-ULTR session log: none of its 2 lines"):
        ingest_baidu([tmp_path / "notes.txt"], tmp_path / "out", dask_client)
    assert not (tmp_path / "out" / "sessions").exists()
    (tmp_path / "plain.txt").write_text("\n".join(_log(2)) + "\n")          # a plain-text log is still a log
    assert ingest_baidu([tmp_path / "plain.txt"], tmp_path / "out", dask_client).sessions == 2


@pytest.mark.e2e
def test_relative_table_paths_work_with_a_scheduler_in_another_directory(tmp_path, dask_client, monkeypatch):
    (tmp_path / "in").mkdir()
    sessions_frame().to_parquet(tmp_path / "in" / "a.parquet")
    write_gz(tmp_path / "in" / "b.gz", _log(2))
    (tmp_path / "in" / "run.yaml").write_text("data:\n  page_features:\n    media_type: categorical\n")
    monkeypatch.chdir(tmp_path)                  # the workers were started elsewhere
    outcome = _cli("ingest", "in/a.parquet", "--out", "out-a", "--config", "in/run.yaml", "--json",
                   "--scheduler", dask_client.scheduler.address)
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.output)["sessions"] == 6 and (tmp_path / "out-a" / "sessions").is_dir()
    outcome = _cli("ingest", "in/b.gz", "--out", "out-b", "--json", "--scheduler", dask_client.scheduler.address)
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.output)["sessions"] == 2


def test_a_damaged_annotation_gzip_keeps_no_unverified_label(tmp_path):
    lines = [f"{q}\t5{SEP}6\t{d}\t8\t{(q + d) % 5}\t0" for q in range(300) for d in range(10)]
    data = bytearray(write_gz(tmp_path / "clean.gz", lines).read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
    (tmp_path / "damaged.gz").write_bytes(bytes(data))
    with pytest.raises(SchemaError, match=r"damaged.gz: no annotation rows \(its lines were all set aside .*gzip"):
        ingest_baidu_annotations(tmp_path / "damaged.gz", tmp_path / "out")   # issue 42 item 10: none kept, refused
    assert pd.read_parquet(tmp_path / "out" / "annotations.parquet").empty
    records = pd.read_parquet(tmp_path / "out" / "quarantine" / "annotations.parquet")
    assert list(records["reason"]) == ["corrupt_gzip"]


@pytest.mark.e2e
def test_workers_with_their_own_copy_make_the_same_swap(tmp_path, dask_client):
    """A URL run directory's workers on another host write into their own copy: there the swap is redone (here
    the worker copy is faked by a directory only the test fills, at the path the ingest swaps)."""
    from wpultr.io.tables import _swap_here
    from wpultr.rundir.files import RunDir
    RunDir.create(tmp_path)                  # the worker's copy of a URL run directory: it holds the run's marker
    old, tmp = tmp_path / "data" / "sessions", tmp_path / "data" / ".sessions.tmp-1"
    old.mkdir(parents=True)
    tmp.mkdir()
    (old / "part-00000-00000.parquet").write_bytes(b"old")
    (tmp / "part-00000-00000.parquet").write_bytes(b"new")
    dask_client.run(_swap_here, [(str(tmp), str(old))], True)
    assert (old / "part-00000-00000.parquet").read_bytes() == b"new" and not tmp.exists()
    tmp.mkdir()
    (tmp / "part-00000-00001.parquet").write_bytes(b"half")
    dask_client.run(_swap_here, [(str(tmp), str(old))], False)        # a failed ingest: the half copy goes
    assert not tmp.exists() and (old / "part-00000-00000.parquet").read_bytes() == b"new"
