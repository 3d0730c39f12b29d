"""The Baidu-ULTR reader: exact counts, reasons and line numbers on a hand-written log, robustness to
random corruption, parallel ingest on a real LocalCluster equal to a serial read, annotations."""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wpultr.io.baidu import (
    FILE_INDEX_SHIFT,
    MAX_LINE_BYTES,
    driver,
    ingest_baidu,
    ingest_baidu_annotations,
    read_baidu_annotations,
    read_baidu_sessions,
)
from wpultr.io.quarantine import FILE_REASONS, REASONS
from wpultr.schema import (
    BAIDU_MEDIA_TYPE_DASH,
    BAIDU_N_RESULT_FIELDS,
    BAIDU_RESULT_FIELDS,
    BAIDU_TOKEN_SEP,
    CLICK,
    DOC_ID,
    POSITION,
    QUARANTINE_SCHEMA,
    QUERY_ID,
    QUERY_REFORMULATION,
    QUERY_TOKENS,
    SESSION_ID,
    TITLE_TOKENS,
    baidu_sessions_arrow_schema,
)

SEP = BAIDU_TOKEN_SEP
INDEX = {name: i for i, name in enumerate(BAIDU_RESULT_FIELDS) if name}


def result(position: int | str = 1, doc: str = "d0", title: str = f"1{SEP}2", abstract: str = "3",
           media: str = "0", click: str = "0", **behaviour: str) -> str:
    """A result line: the named fields, serp_height 100, every other column '-'."""
    fields = ["-"] * BAIDU_N_RESULT_FIELDS
    fields[:6] = [str(position), doc, title, abstract, media, click]
    fields[INDEX["serp_height"]] = "100"
    for name, value in behaviour.items():
        fields[INDEX[name]] = value
    return "\t".join(fields)


def query(qid: int | str, tokens: str = f"5{SEP}6", reformulation: str = "") -> str:
    return f"{qid}\t{tokens}\t{reformulation}"


def write_gz(path: Path, lines: list[str | bytes]) -> Path:
    raw = b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n" for line in lines)
    path.write_bytes(gzip.compress(raw, mtime=0))
    return path


# The hand-written log: (line, expected reason or None for kept). Line numbers are list index + 1.
HAND_LOG: list[tuple[str | bytes, str | None]] = [
    (result(1), "orphan_result"),                                   # 1
    (query(7), None),                                               # 2  session A (qid 7)
    (result(1, doc="a1", click="1"), None),                         # 3
    (result(2, click="2"), "bad_click"),                            # 4
    (result(2, doc="a2"), None),                                    # 5
    (result(3, serp_height="tall"), "bad_number"),                  # 6
    (result(31), "bad_position"),                                   # 7
    (result(4, media="video"), "bad_media_type"),                   # 8
    (result(5, title=f"1{SEP}x"), "bad_token_id"),                  # 9
    ("\t".join(result(6).split("\t")[:-1]), "wrong_field_count"),   # 10: 31 fields
    (result(7, doc="a7", dwelling_time="", skip="-"), None),        # 11: '-' and '' are NaN
    (query("q8"), "bad_query_id"),                                  # 12 broken query
    (result(1), "broken_query_line"),                               # 13
    (result(2), "broken_query_line"),                               # 14
    (query(9, tokens=""), "empty_query"),                           # 15
    (result(1, click="x"), "bad_click"),                            # 16: own defect wins
    (query(10), "empty_session"),                                   # 17 every result bad
    (result("0"), "bad_position"),                                  # 18
    (query(11, tokens=f"4{SEP}x5"), "bad_token_id"),                # 19
    (query(12, reformulation="twelve"), None),                      # 20 session B (qid 12)
    (result(1, doc="b1").encode().replace(b"b1", b"b\xff"), "not_utf8"),  # 21
    (result(2, doc="b2", click="1"), None),                         # 22
    ("", "wrong_field_count"),                                      # 23 blank line
    (query(13), "empty_session"),                                   # 24 no result at all
    (query(14), None),                                              # 25 session C, last in file
    (result(1, doc="c1", media="2", serp_height="1e2"), None),      # 26
]


@pytest.fixture()
def hand_log(tmp_path) -> Path:
    return write_gz(tmp_path / "hand.gz", [line for line, _ in HAND_LOG])


@pytest.mark.parametrize("chunk_bytes", [1, 97, 1 << 20])
def test_hand_written_log_exact(hand_log, chunk_bytes):
    sessions, bad = read_baidu_sessions(hand_log, file_index=3, chunk_bytes=chunk_bytes)
    expected_bad = [(i + 1, reason) for i, (_, reason) in enumerate(HAND_LOG) if reason]
    assert list(zip(bad["line"], bad["reason"], strict=True)) == expected_bad
    assert set(bad["file"]) == {str(hand_log)}
    assert bad.loc[bad["line"] == 21, "text"].item() == result(1, doc="b\\xff")  # raw text, escaped
    # kept rows: the good results around every bad line, in file order
    assert list(sessions[DOC_ID]) == ["a1", "a2", "a7", "b2", "c1"]
    assert list(sessions[QUERY_ID]) == ["7", "7", "7", "12", "14"]
    assert list(sessions[QUERY_REFORMULATION]) == ["", "", "", "twelve", ""]
    assert list(sessions[POSITION]) == [1, 2, 7, 2, 1]
    assert list(sessions[CLICK]) == [1, 0, 0, 1, 0]
    # ids: file 3, ordinal of the query line among the file's query lines (broken ones counted)
    base = 3 << FILE_INDEX_SHIFT
    assert list(sessions[SESSION_ID]) == [base + 0] * 3 + [base + 5, base + 7]
    assert list(sessions.columns) == baidu_sessions_arrow_schema().names
    row = sessions.iloc[2]
    assert np.isnan(row["dwelling_time"]) and np.isnan(row["skip"]) and row["serp_height"] == 100.0
    assert sessions.iloc[4]["serp_height"] == 100.0 and sessions.iloc[4]["media_type"] == 2
    assert list(sessions[TITLE_TOKENS].iloc[0]) == [1, 2] and list(sessions["query_tokens"].iloc[0]) == [5, 6]
    # every line accounted for once: sessions + rows + quarantined lines
    assert sessions[SESSION_ID].nunique() + len(sessions) + len(bad) == len(HAND_LOG)


@pytest.mark.e2e
def test_every_reason_documented_and_written_as_parquet(hand_log, tmp_path, dask_client):
    summary = ingest_baidu([hand_log], tmp_path / "out", dask_client, partition_rows=2)
    table = pq.read_table(tmp_path / "out" / "quarantine" / "part-00000.parquet")
    assert table.schema.equals(QUARANTINE_SCHEMA)
    reasons = table.column("reason").to_pylist()
    assert set(reasons) <= set(REASONS)
    assert summary.reasons == {r: reasons.count(r) for r in set(reasons)}
    assert (summary.lines, summary.sessions, summary.results, summary.quarantined) == (26, 3, 5, 18)
    json.dumps(summary.to_dict())


def test_truncated_gzip_keeps_what_was_read(tmp_path):
    lines = [query(1)] + [result(p, doc=f"d{p}") for p in range(1, 11)]
    lines = (lines * 300)
    data = gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0)
    path = tmp_path / "cut.gz"
    path.write_bytes(data[: len(data) // 2])
    recovered = zlib.decompressobj(31).decompress(data[: len(data) // 2])
    sessions, bad = read_baidu_sessions(path, chunk_bytes=4096)
    whole_lines = recovered.count(b"\n")        # the partial line after them is never parsed
    assert bad["reason"].iloc[-1] == "truncated_gzip" and bad["line"].iloc[-1] == whole_lines + 1
    assert bad["text"].iloc[-1] == recovered[recovered.rfind(b"\n") + 1:].decode()
    line_records = bad[~bad["reason"].isin(FILE_REASONS)]
    assert sessions[SESSION_ID].nunique() + len(sessions) + len(line_records) == whole_lines
    assert len(sessions) > 1000


def test_damaged_gzip_keeps_what_was_read(tmp_path):
    lines = [query(1), result(1), result(2)]
    path = tmp_path / "junk.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0) + b"not gzip at all")
    sessions, bad = read_baidu_sessions(path)
    assert list(zip(bad["line"], bad["reason"], strict=True)) == [(4, "corrupt_gzip")] and len(sessions) == 2


def test_overlong_line_is_skipped_not_held(tmp_path):
    path = write_gz(tmp_path / "long.gz", [query(1), result(1), "x" * (MAX_LINE_BYTES + 10), result(2)])
    sessions, bad = read_baidu_sessions(path, chunk_bytes=1 << 16)
    assert list(zip(bad["line"], bad["reason"], strict=True)) == [(3, "line_too_long")]
    assert len(bad["text"].iloc[0]) < 10_000 and list(sessions[POSITION]) == [1, 2]


@pytest.mark.parametrize("chunk_bytes", [1 << 16, 4 << 20])
def test_only_a_line_longer_than_the_limit_is_too_long(tmp_path, chunk_bytes):
    """Whole lines adding up to more than MAX_LINE_BYTES are never taken for one long line, whether they
    share a block with the long line after them (4 MiB blocks) or not (64 KiB)."""
    session = [query(1)] + [result(p) for p in range(1, 11)]
    n = MAX_LINE_BYTES // sum(len(line) + 1 for line in session) + 2   # the sessions before it exceed the limit
    lines = session * n + ["x" * (MAX_LINE_BYTES + 10)] + session * n
    sessions, bad = read_baidu_sessions(write_gz(tmp_path / "long.gz", lines), chunk_bytes=chunk_bytes)
    assert list(zip(bad["line"], bad["reason"], strict=True)) == [(11 * n + 1, "line_too_long")]
    assert len(sessions) == 20 * n and sessions[SESSION_ID].nunique() == 2 * n


def test_partitions_gather_blocks_into_row_groups_and_delta_pack_token_ids(tmp_path, monkeypatch):
    """One worker task's output: the rows of many small blocks gathered into row groups of about
    ROW_GROUP_ROWS rows, equal to a serial read; token-id lists delta-packed with no dictionary and no
    statistics, the other columns dictionary-encoded with statistics."""
    monkeypatch.setattr(driver, "ROW_GROUP_ROWS", 40)
    path = write_gz(tmp_path / "log.gz", _valid_log(np.random.default_rng(3), 60))
    for sub in ("sessions", "quarantine"):
        (tmp_path / sub).mkdir()
    summary = driver._ingest_file(str(path), 0, str(tmp_path / "sessions"), str(tmp_path / "quarantine"),
                                  partition_rows=10_000, chunk_bytes=300)
    (part,) = (tmp_path / "sessions").glob("*.parquet")
    expected, _ = read_baidu_sessions(path, chunk_bytes=300)
    pd.testing.assert_frame_equal(pd.read_parquet(part), expected)
    meta = pq.ParquetFile(part).metadata
    rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    # A write holds back its last session for the next (tables.SessionPartitionWriter): a row group has
    # ROW_GROUP_ROWS rows less at most a session (<= 4 rows here), but for the last run and that session.
    assert len(rows) > 3 and min(rows[:-2]) >= 40 - 4 and sum(rows) == summary.results == len(expected)
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            column = meta.row_group(g).column(c)
            tokens = column.path_in_schema.endswith(".list.element")
            assert ("DELTA_BINARY_PACKED" in column.encodings) == tokens, column.path_in_schema
            assert ("RLE_DICTIONARY" in column.encodings) != tokens, column.path_in_schema
            assert column.is_stats_set != tokens, column.path_in_schema


def test_plain_text_log_is_read_too(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_text(f"{query(1)}\n{result(1)}")  # no final newline
    sessions, bad = read_baidu_sessions(path)
    assert len(sessions) == 1 and bad.empty


# ---------------------------------------------------------------------------------------------
# Robustness: random corruption never crashes and never loses or duplicates a line
# ---------------------------------------------------------------------------------------------
def _valid_log(rng: np.random.Generator, n_sessions: int) -> list[str]:
    lines = []
    for s in range(n_sessions):
        lines.append(query(int(rng.integers(0, 50)), SEP.join(map(str, rng.integers(0, 99, rng.integers(1, 4))))))
        for p in range(1, int(rng.integers(1, 5)) + 1):
            lines.append(result(p, doc=f"d{s}-{p}", click=str(int(rng.integers(0, 2))),
                                dwelling_time=f"{rng.gamma(2.0):.2f}"))
    return lines


@st.composite
def corrupted_logs(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    text = ("\n".join(_valid_log(rng, draw(st.integers(1, 8)))) + "\n").encode()
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["delete_field", "garbage", "swap_fields", "truncate_text"]))
        lines = text.split(b"\n")
        i = draw(st.integers(0, len(lines) - 1))
        fields = lines[i].split(b"\t")
        if kind == "delete_field" and len(fields) > 1:
            del fields[draw(st.integers(0, len(fields) - 1))]
        elif kind == "swap_fields" and len(fields) > 1:
            a, b = draw(st.integers(0, len(fields) - 1)), draw(st.integers(0, len(fields) - 1))
            fields[a], fields[b] = fields[b], fields[a]
        elif kind == "garbage":
            j = draw(st.integers(0, len(fields) - 1))
            fields[j] = fields[j][:1] + draw(st.binary(min_size=1, max_size=6)) + fields[j][1:]
        lines[i] = b"\t".join(fields)
        text = b"\n".join(lines)
        if kind == "truncate_text":
            text = text[: draw(st.integers(0, len(text)))]
    data = gzip.compress(text, mtime=0)
    cut = draw(st.one_of(st.none(), st.integers(10, len(data))))
    return data if cut is None else data[:cut]


def _input_lines(data: bytes) -> int:
    """Lines the reader parses: the whole lines, plus an unterminated last one when the stream is intact."""
    inflater = zlib.decompressobj(31)
    text = inflater.decompress(data)
    return text.count(b"\n") + (inflater.eof and len(text) > 0 and not text.endswith(b"\n"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=corrupted_logs(), chunk_bytes=st.sampled_from([1, 64, 1 << 20]))
def test_corruption_never_crashes_and_accounts_every_line(tmp_path, data, chunk_bytes):
    path = tmp_path / "corrupt.gz"
    path.write_bytes(data)
    sessions, bad = read_baidu_sessions(path, chunk_bytes=chunk_bytes)
    line_records = bad[~bad["reason"].isin(FILE_REASONS)]
    if set(bad["reason"]) & {"empty_file", "not_gzip"}:   # nothing read: reported once
        assert len(bad) == 1 and bad["line"].item() == 0 and sessions.empty
    else:
        assert sessions[SESSION_ID].nunique() + len(sessions) + len(line_records) == _input_lines(data)
    assert not sessions.duplicated([SESSION_ID, POSITION]).any()
    assert line_records["line"].is_unique and set(bad["reason"]) <= set(REASONS)
    assert sessions[POSITION].between(1, 30).all() and sessions[CLICK].isin([0, 1]).all()
    whole, whole_bad = read_baidu_sessions(path)  # the block size never changes the result
    pd.testing.assert_frame_equal(sessions, whole)
    pd.testing.assert_frame_equal(bad, whole_bad)


# ---------------------------------------------------------------------------------------------
# Parallel ingest on a real LocalCluster
# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_parallel_ingest_equals_serial_read_and_respects_partition_rows(tmp_path, dask_client):
    rng = np.random.default_rng(7)
    paths = []
    for i in range(4):
        lines = _valid_log(rng, 25)
        lines.insert(5 * i + 3, result(1, click="7"))  # one bad line per file
        paths.append(write_gz(tmp_path / f"log-{i}.gz", lines))
    out = tmp_path / "out"
    summary = ingest_baidu(list(reversed(paths)), out, dask_client, partition_rows=9, chunk_bytes=512)

    serial = [read_baidu_sessions(p, file_index=i) for i, p in enumerate(sorted(paths))]
    expected = pd.concat([s for s, _ in serial], ignore_index=True)
    parts = sorted((out / "sessions").glob("part-*.parquet"))
    got = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    pd.testing.assert_frame_equal(got, expected)
    sizes = [pq.ParquetFile(p).metadata.num_rows for p in parts]
    assert max(sizes) <= 9 and summary.partitions == len(parts)
    ids_per_part = [set(pd.read_parquet(p, columns=[SESSION_ID])[SESSION_ID]) for p in parts]
    assert sum(len(ids) for ids in ids_per_part) == expected[SESSION_ID].nunique()  # no session split
    assert summary.files == 4 and summary.results == len(expected)
    assert summary.sessions == expected[SESSION_ID].nunique()
    assert summary.reasons == {"bad_click": 4} and summary.quarantined == 4
    assert summary.lines == summary.sessions + summary.results + summary.quarantined
    quarantined = pd.concat([pd.read_parquet(p) for p in sorted((out / "quarantine").glob("*.parquet"))])
    assert list(quarantined["file"]) == [str(p) for p in sorted(paths)]

    again = ingest_baidu(paths[:2], out, dask_client, partition_rows=1000)  # replaces the old table
    assert len(list((out / "sessions").glob("*.parquet"))) == again.partitions == 2


@pytest.mark.e2e
def test_ingest_rejects_missing_files_and_reads_a_file_named_twice_once(tmp_path, hand_log, dask_client):
    with pytest.raises(FileNotFoundError, match="nope.gz"):
        ingest_baidu([tmp_path / "nope.gz"], tmp_path / "out", dask_client)
    once = ingest_baidu([hand_log], tmp_path / "once", dask_client)
    (tmp_path / "link.gz").symlink_to(hand_log)
    spellings = [hand_log, hand_log, tmp_path / ".." / tmp_path.name / hand_log.name, tmp_path / "link.gz"]
    twice = ingest_baidu(spellings, tmp_path / "out", dask_client)
    assert (twice.files, twice.sessions, twice.results) == (once.files, once.sessions, once.results)
    skipped = [given for given, read in twice.duplicate_inputs]   # all but one spelling, each said to be hand_log
    assert len(skipped) == 3 and {read for _, read in twice.duplicate_inputs} == {str(hand_log)}
    assert set(skipped) <= {str(p) for p in spellings} and str(tmp_path / "link.gz") in skipped
    assert twice.to_dict()["duplicate_inputs"] == twice.duplicate_inputs


# ---------------------------------------------------------------------------------------------
# Annotations
# ---------------------------------------------------------------------------------------------
def test_annotations_bad_lines_quarantined_and_doc_ids_stable(tmp_path):
    rows = [f"1\t5{SEP}6\t1{SEP}2\t3\t4\t0", f"1\t5{SEP}6\t1{SEP}2\t9\t0\t0", f"2\t7\t1{SEP}2\t3\t7\t3",
            f"2\t7\t1{SEP}2\t3\t2\t10", "3\t7\t1\t3\t2", f"4\t8\t1{SEP}2\t3\t3\t9\r"]
    path = tmp_path / "annotations.tsv.gz"
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode(), mtime=0))
    df, bad = read_baidu_annotations(path)
    assert list(zip(bad["line"], bad["reason"], strict=True)) == [(3, "bad_label"), (4, "bad_bucket"),
                                                                  (5, "wrong_field_count")]
    assert list(df[QUERY_ID]) == ["1", "1", "4"] and list(df["label"]) == [4, 0, 3] and list(df["bucket"]) == [0, 0, 9]
    assert df[DOC_ID].iloc[0] != df[DOC_ID].iloc[1] and df[DOC_ID].iloc[0] == df[DOC_ID].iloc[2]
    again, _ = read_baidu_annotations(path, chunk_bytes=8)
    pd.testing.assert_frame_equal(df, again)
    summary = ingest_baidu_annotations(path, tmp_path / "out")
    assert (summary.lines, summary.results, summary.quarantined) == (6, 3, 3)
    assert len(pd.read_parquet(tmp_path / "out" / "annotations.parquet")) == 3
    assert len(pd.read_parquet(tmp_path / "out" / "quarantine" / "annotations.parquet")) == 3


# ---------------------------------------------------------------------------------------------
# Real Baidu-ULTR values: 20-digit query ids, '-' media types, empty tokens, the reformulation
# ---------------------------------------------------------------------------------------------
def test_query_ids_are_kept_exactly_as_written(tmp_path):
    from wpultr.io.baidu_writer import write_baidu_annotations, write_baidu_sessions
    ids = ["10000014169022957140", "100000141690229571", "0070", "9" * 64]   # > int64, > 2^53, zeros, longest
    lines = [line for i, qid in enumerate(ids) for line in (query(qid), result(1, doc=f"d{i}"))]
    lines += [query("1" * 65), result(1), query("-5"), result(1)]
    sessions, bad = read_baidu_sessions(write_gz(tmp_path / "ids.gz", lines))
    assert list(sessions[QUERY_ID]) == ids
    assert list(zip(bad["line"], bad["reason"], strict=True)) == [(9, "bad_query_id"), (10, "broken_query_line"),
                                                     (11, "bad_query_id"), (12, "broken_query_line")]
    write_baidu_sessions(sessions, tmp_path / "again.gz")              # the writer keeps them too
    again, _ = read_baidu_sessions(tmp_path / "again.gz")
    assert list(again[QUERY_ID]) == ids
    annotations = [f"{qid}\t5\t1\t2\t3\t{i}" for i, qid in enumerate(ids)]
    path = tmp_path / "annotations.tsv.gz"
    path.write_bytes(gzip.compress(("\n".join(annotations) + "\n").encode(), mtime=0))
    df, _ = read_baidu_annotations(path)
    assert list(df[QUERY_ID]) == ids
    write_baidu_annotations(df, tmp_path / "annotations-again.tsv.gz")
    assert list(read_baidu_annotations(tmp_path / "annotations-again.tsv.gz")[0][QUERY_ID]) == ids


@pytest.mark.e2e
def test_dash_media_type_and_empty_tokens_are_kept_and_counted(tmp_path, dask_client):
    lines = [query(7, tokens=f"5{SEP}6{SEP}", reformulation="1"), result(1, doc="a", media="-"),
             result(2, doc="b", title=f"12{SEP}34{SEP}"), result(3, doc="c", title=f"12{SEP}{SEP}34", abstract=""),
             result(4, doc="d", media="", click="9")]                # quarantined: not counted as mapped
    path = write_gz(tmp_path / "mapped.gz", lines)
    sessions, bad = read_baidu_sessions(path)
    assert list(sessions[DOC_ID]) == ["a", "b", "c"] and list(bad["reason"]) == ["bad_media_type"]
    assert list(sessions["media_type"]) == [BAIDU_MEDIA_TYPE_DASH, 0, 0]
    assert [list(t) for t in sessions[TITLE_TOKENS]] == [[1, 2], [12, 34], [12, 34]]
    assert list(sessions[QUERY_TOKENS].iloc[0]) == [5, 6] and list(sessions["abstract_tokens"].iloc[2]) == []
    assert list(sessions[QUERY_REFORMULATION]) == ["1"] * 3
    summary = ingest_baidu([path], tmp_path / "out", dask_client)
    assert summary.mapped == {"media_type_dash": 1, "empty_token": 3} and summary.to_dict()["mapped"]
    from wpultr.io.baidu_writer import write_baidu_sessions
    write_baidu_sessions(sessions, tmp_path / "again.gz")               # the '-' is written back as '-'
    text = gzip.decompress((tmp_path / "again.gz").read_bytes()).decode().split("\n")
    assert text[0] == f"7\t5{SEP}6\t1" and text[1].split("\t")[INDEX["media_type"]] == "-"


# ---------------------------------------------------------------------------------------------
# Session boundaries: a broken query line never lends its results to the previous session
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk_bytes", [1, 200, 1 << 20])
@pytest.mark.parametrize("broken", [query(2) + "\textra", "2", f"2{SEP}5", "\t".join(["2"] * 16)])
def test_results_after_a_broken_query_line_are_quarantined(tmp_path, chunk_bytes, broken):
    lines = ([query(1)] + [result(p, doc=f"a{p}") for p in (1, 2, 3)] + [broken]
             + [result(p, doc=f"b{p}") for p in (1, 2, 3)]
             + ["\t".join(result(4).split("\t")[:-1])]                # 31 fields: a result, not a query
             + [query(3), result(1, doc="c1"), "", result(2, doc="c2")])  # a blank line leaves the session alone
    sessions, bad = read_baidu_sessions(write_gz(tmp_path / "broken.gz", lines), chunk_bytes=chunk_bytes)
    assert list(sessions[DOC_ID]) == ["a1", "a2", "a3", "c1", "c2"]
    assert list(sessions[QUERY_ID]) == ["1"] * 3 + ["3"] * 2 and sessions[SESSION_ID].nunique() == 2
    assert list(zip(bad["line"], bad["reason"], strict=True)) == [(5, "wrong_field_count")] + [
        (line, "broken_query_line") for line in (6, 7, 8)] + [(9, "wrong_field_count"), (12, "wrong_field_count")]


@pytest.mark.parametrize("chunk_bytes", [1, 150, 1 << 20])
def test_a_session_never_holds_a_position_twice(tmp_path, chunk_bytes):
    lines = [query(1), result(1, doc="a"), result(2, doc="b", click="x"), result(2, doc="c"), result(1, doc="d"),
             result(2, doc="e"), result(3, doc="f"), query(2), result(1, doc="g")]
    sessions, bad = read_baidu_sessions(write_gz(tmp_path / "dup.gz", lines), chunk_bytes=chunk_bytes)
    assert list(sessions[DOC_ID]) == ["a", "c", "f", "g"]       # the first kept result of a position stays
    assert list(zip(bad["line"], bad["reason"], strict=True)) == [(3, "bad_click"), (5, "duplicate_position"),
                                                     (6, "duplicate_position")]
    assert "duplicate_position" in REASONS


# ---------------------------------------------------------------------------------------------
# Damaged and unreadable files
# ---------------------------------------------------------------------------------------------
def test_gzip_damaged_in_the_middle_keeps_nothing_of_the_unverified_member(tmp_path):
    lines = [line for s in range(300) for line in [query(s)] + [result(p, doc=f"d{s}-{p}") for p in range(1, 11)]]
    clean = write_gz(tmp_path / "clean.gz", lines)
    data = bytearray(clean.read_bytes())
    data[len(data) // 2: len(data) // 2 + 64] = b"\xff" * 64                # far smaller than CHUNK_BYTES
    path = tmp_path / "damaged.gz"
    path.write_bytes(bytes(data))
    sessions, bad = read_baidu_sessions(path)
    assert sessions.empty                                        # one member, its check failed: nothing is known intact
    assert list(zip(bad["line"], bad["reason"], strict=True)) == [(1, "corrupt_gzip")]
    assert "dropped" in bad["text"].iloc[0]


@pytest.mark.e2e
def test_empty_binary_and_misnamed_files_are_reported_once(tmp_path, dask_client):
    import bz2
    rng = np.random.default_rng(3)
    good_text = ("\n".join([query(1), result(1)]) + "\n").encode()
    files = {"empty.gz": b"", "empty.txt": b"", "empty-stream.gz": gzip.compress(b"", mtime=0),
             "random.gz": rng.bytes(5000), "random.log": rng.bytes(5000), "bzip2.gz": bz2.compress(good_text),
             "binary-in-gzip.gz": gzip.compress(rng.bytes(5000), mtime=0)}
    expected = {"empty.gz": "empty_file", "empty.txt": "empty_file", "empty-stream.gz": "empty_file",
                "random.gz": "not_gzip", "random.log": "not_gzip", "bzip2.gz": "not_gzip",
                "binary-in-gzip.gz": "not_gzip"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        sessions, bad = read_baidu_sessions(tmp_path / name)
        assert sessions.empty and list(zip(bad["line"], bad["reason"], strict=True)) == [(0, expected[name])], name
    summary = ingest_baidu([tmp_path / n for n in files] + [write_gz(tmp_path / "ok.gz", [query(1), result(1)])],
                           tmp_path / "out", dask_client)
    assert summary.file_reasons == {"empty_file": 3, "not_gzip": 4}
    assert summary.to_dict()["file_reasons"] == summary.file_reasons
    assert sorted(Path(p).name for p in summary.damaged_files) == sorted(files)
    assert (summary.lines, summary.sessions, summary.results, summary.quarantined) == (2, 1, 1, 0)


# ---------------------------------------------------------------------------------------------
# Property: session boundaries against a line-by-line reference of the documented rules
# ---------------------------------------------------------------------------------------------
LINE_KINDS = ["query", "query", "bad_id_query", "short_query", "long_query", "wide_query", "result", "result",
              "result", "result", "bad_click_result", "short_result", "blank"]


@st.composite
def session_logs(draw):
    """(lines, expected rows as (session ordinal, query id, position, doc), expected (line, reason) records)."""
    kinds = draw(st.lists(st.sampled_from(LINE_KINDS), min_size=1, max_size=40))
    lines, rows, records = [], [], []
    session = None          # dict(ordinal, qid, ok, line, positions) of the open session
    ordinal = 0

    def close():
        if session is not None and session["ok"] and not session["positions"]:
            records.append((session["line"], "empty_session"))

    for number, kind in enumerate(kinds, start=1):
        if kind.endswith("query"):
            qid = draw(st.text("0123456789", min_size=1, max_size=22))
            fields = {"query": 3, "bad_id_query": 3, "short_query": draw(st.sampled_from([1, 2])),
                      "long_query": draw(st.integers(4, 16)), "wide_query": draw(st.integers(17, 31))}[kind]
            text = "\t".join(([("x" if kind == "bad_id_query" else "") + qid, "5", "-"] + ["7"] * 28)[:fields])
            close()
            session = {"ordinal": ordinal, "qid": qid, "ok": kind == "query", "line": number, "positions": set()}
            ordinal += 1
            if kind != "query":
                records.append((number, "bad_query_id" if kind == "bad_id_query" else "wrong_field_count"))
            lines.append(text)
            continue
        if kind == "blank":
            lines.append("")
            records.append((number, "wrong_field_count"))
            continue
        position = draw(st.integers(1, 4))      # few positions: repeats are common
        doc = f"doc{number}"
        if kind == "short_result":
            lines.append("\t".join(result(position, doc=doc).split("\t")[:draw(st.sampled_from([17, 31]))]))
            records.append((number, "wrong_field_count"))
        elif kind == "bad_click_result":
            lines.append(result(position, doc=doc, click="2"))
            records.append((number, "bad_click"))
        else:
            lines.append(result(position, doc=doc))
            if session is None:
                records.append((number, "orphan_result"))
            elif not session["ok"]:
                records.append((number, "broken_query_line"))
            elif position in session["positions"]:
                records.append((number, "duplicate_position"))
            else:
                session["positions"].add(position)
                rows.append((session["ordinal"], session["qid"], position, doc))
    close()
    return lines, rows, sorted(records)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(log=session_logs(), chunk_bytes=st.one_of(st.integers(1, 600), st.just(1 << 20)))
def test_session_boundaries_follow_the_documented_rules(tmp_path, log, chunk_bytes):
    lines, rows, records = log
    sessions, bad = read_baidu_sessions(write_gz(tmp_path / "log.gz", lines), chunk_bytes=chunk_bytes)
    # no session ever holds a position twice
    assert not sessions.duplicated([SESSION_ID, POSITION]).any()
    # every input line is a session, a row or a quarantine record
    assert sessions[SESSION_ID].nunique() + len(sessions) + len(bad) == len(lines)
    # results attach to the right query: the reference's session ordinal, query id and position, in order
    got = list(zip(sessions[SESSION_ID], sessions[QUERY_ID], sessions[POSITION], sessions[DOC_ID], strict=True))
    assert got == rows
    assert sorted(zip(bad["line"], bad["reason"], strict=True)) == records


# ---------------------------------------------------------------------------------------------
# The bundled sample: every deliberately damaged line is quarantined where MANIFEST.json says
# ---------------------------------------------------------------------------------------------
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"


@pytest.mark.skipif(not (SAMPLE / "MANIFEST.json").exists(), reason="data/sample not generated")
def test_sample_damage_is_quarantined_where_the_manifest_says():
    manifest = json.loads((SAMPLE / "MANIFEST.json").read_text())
    train = sorted(f["path"] for f in manifest["files"] if f["path"].startswith("train/"))
    read = [read_baidu_sessions(SAMPLE / path, file_index=i) for i, path in enumerate(train)]
    sessions = pd.concat([s for s, _ in read], ignore_index=True)
    bad = pd.concat([b.assign(file=path) for (_, b), path in zip(read, train, strict=True)], ignore_index=True)
    got = {(f, line): reason for f, line, reason in zip(bad["file"], bad["line"], bad["reason"], strict=True)}
    for c in manifest["corruptions"]:
        assert got[(c["file"], c["line"])] == c["reader_reason"], c
        followers = [got.get((c["file"], c["line"] + k)) for k in range(1, c["quarantined_lines"])]
        assert followers == ["broken_query_line"] * (c["quarantined_lines"] - 1), c   # a lost session's results
    assert len(bad) == manifest["quarantined_lines"]
    assert sessions[SESSION_ID].nunique() == manifest["sessions_readable"]
    assert len(sessions) == manifest["result_lines_readable"]
    assert not sessions.duplicated([SESSION_ID, POSITION]).any()
