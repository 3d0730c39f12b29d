"""Writer of the Baidu-ULTR layout: session logs and the annotation file, as gzip text.

Session log: per session one query line (query_id as its decimal text, query token ids joined by
schema.BAIDU_TOKEN_SEP, the query_reformulation column as written or '-' without one) followed by one line
per shown result with the 32 fields of schema.BAIDU_RESULT_FIELDS in order; url_md5 is the table's doc_id,
columns the table lacks (and the dataset's unused ones) are '-', missing numbers (NaN) are '-', whole
numbers are written without decimals, media type schema.BAIDU_MEDIA_TYPE_DASH is written '-'. Annotation
file: one line per document (qid, query, title, abstract, label, bucket).
Lines are formatted column-wise with pyarrow; files are written atomically with gzip mtime 0, so the
same table always gives the same bytes.
"""
from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..rundir.files import Replaces, atomic_path
from ..schema import (
    BAIDU_ANNOTATION_FIELDS,
    BAIDU_MAX_POSITION,
    BAIDU_MEDIA_TYPE_DASH,
    BAIDU_RESULT_FIELDS,
    BAIDU_TOKEN_SEP,
    BUCKET,
    CLICK,
    DOC_ID,
    LABEL,
    MAX_LABEL,
    MEDIA_TYPE,
    N_BUCKETS,
    POSITION,
    QUERY_ID,
    QUERY_ID_MAX_DIGITS,
    QUERY_REFORMULATION,
    QUERY_TOKENS,
    SESSION_ID,
    TOKEN_COLUMNS,
    SchemaError,
)

MISSING = "-"
GZIP_LEVEL = 3            # zlib level: 3 writes about 3x faster than 6 for ~12% larger files
# Result fields whose table column has another name.
_SOURCE_COLUMN = {"url_md5": DOC_ID}
# Result fields a session table must carry; every other field is written as '-' when absent.
_REQUIRED_RESULT_FIELDS = tuple(name for name in BAIDU_RESULT_FIELDS[:6] if name is not None)
_QUERY_ID_PATTERN = f"^[0-9]{{1,{QUERY_ID_MAX_DIGITS}}}$"


def _as_table(df: pd.DataFrame | pa.Table) -> pa.Table:
    return df if isinstance(df, pa.Table) else pa.Table.from_pandas(df, preserve_index=False)


def _require(table: pa.Table, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise SchemaError(f"{what}: missing column(s) {missing}; present: {table.column_names}")


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _check_range(table: pa.Table, column: str, low: int, high: int | None, what: str) -> None:
    values = table[column]
    if values.null_count:
        raise SchemaError(f"{what}: column {column!r} row {_first_bad(values.is_null().to_numpy())} is empty")
    if not pa.types.is_integer(values.type):
        raise SchemaError(f"{what}: column {column!r} has type {values.type}, expected integers")
    numbers = values.to_numpy()
    bad = (numbers < low) | ((numbers > high) if high is not None else False)
    if bad.any():
        row = _first_bad(bad)
        bound = f"in {low}..{high}" if high is not None else f">= {low}"
        raise SchemaError(f"{what}: column {column!r} row {row} is {numbers[row]}, expected an integer {bound}")


def _token_text(table: pa.Table, column: str, what: str) -> pa.Array:
    """Token id lists as text: ids joined by BAIDU_TOKEN_SEP (an empty list gives an empty field)."""
    tokens = table[column].combine_chunks()
    if tokens.null_count:
        raise SchemaError(f"{what}: column {column!r} row {_first_bad(tokens.is_null().to_numpy())} is empty")
    flat = tokens.flatten()
    if not pa.types.is_integer(flat.type):
        raise SchemaError(f"{what}: column {column!r} has type {tokens.type}, expected lists of integer token ids")
    negative = flat.to_numpy(zero_copy_only=False) < 0
    if negative.any():
        row_of_token = np.repeat(np.arange(len(tokens)), np.diff(tokens.offsets.to_numpy()))
        raise SchemaError(f"{what}: column {column!r} row {row_of_token[_first_bad(negative)]} holds a "
                          f"negative token id")
    return pc.binary_join(pc.cast(tokens, pa.list_(pa.string())), BAIDU_TOKEN_SEP)


def _number_text(values: pa.ChunkedArray) -> pa.Array:
    """Numbers as text ('123' for whole numbers, shortest round-trip form otherwise), '-' for null or NaN."""
    values = values.combine_chunks()
    text = pc.cast(values, pa.string())
    missing = values.is_null()
    if pa.types.is_floating(values.type):
        missing = pc.or_(missing, pc.fill_null(pc.is_nan(values), True))
    return pc.if_else(missing, MISSING, text)


def _id_text(table: pa.Table, column: str, what: str, allow_empty: bool = False) -> pa.Array:
    values = table[column].combine_chunks()
    text = pc.cast(values, pa.string())
    pattern = r"[\t\r\n]" if allow_empty else r"[\t\r\n]|^$"
    if text.null_count or pc.any(pc.match_substring_regex(text, pattern)).as_py():
        bad = pc.fill_null(pc.match_substring_regex(text, pattern), True).to_numpy(zero_copy_only=False)
        raise SchemaError(f"{what}: column {column!r} row {_first_bad(bad)} is empty or holds a tab or newline")
    return text


def _query_id_text(table: pa.Table, what: str) -> pa.Array:
    """Query ids as their decimal text: strings of 1 to QUERY_ID_MAX_DIGITS digits, or non-negative integers."""
    values = table[QUERY_ID].combine_chunks()
    if pa.types.is_integer(values.type):
        _check_range(table, QUERY_ID, 0, None, what)
        return pc.cast(values, pa.string())
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise SchemaError(f"{what}: column {QUERY_ID!r} has type {values.type}, expected decimal id strings")
    ok = pc.fill_null(pc.match_substring_regex(values, _QUERY_ID_PATTERN), False).to_numpy(zero_copy_only=False)
    if not ok.all():
        row = _first_bad(~ok)
        raise SchemaError(f"{what}: column {QUERY_ID!r} row {row} is {values[row].as_py()!r}, expected 1 to "
                          f"{QUERY_ID_MAX_DIGITS} ASCII digits")
    return pc.cast(values, pa.string())


def _media_type_text(table: pa.Table, what: str) -> pa.Array:
    """Media types as text; BAIDU_MEDIA_TYPE_DASH (the log's '-') is written '-'."""
    _check_range(table, MEDIA_TYPE, BAIDU_MEDIA_TYPE_DASH, None, what)
    values = table[MEDIA_TYPE].combine_chunks()
    return pc.if_else(pc.equal(values, BAIDU_MEDIA_TYPE_DASH), MISSING, pc.cast(values, pa.string()))


def _field_text(table: pa.Table, field: str | None, what: str) -> pa.Array | str:
    column = _SOURCE_COLUMN.get(field, field)
    if field is None or column not in table.column_names:
        return MISSING
    if column in TOKEN_COLUMNS:
        return _token_text(table, column, what)
    if column == DOC_ID:
        return _id_text(table, column, what)
    if column == MEDIA_TYPE:
        return _media_type_text(table, what)
    return _number_text(table[column])


def _join_fields(fields: list[pa.Array | str]) -> pa.Array:
    """One line per row: the fields joined by tabs, each line ending in a newline."""
    n = max(len(f) for f in fields if not isinstance(f, str))
    columns = [pa.repeat(pa.scalar(f, pa.string()), n) if isinstance(f, str) else f for f in fields]
    return pc.binary_join_element_wise(pc.binary_join_element_wise(*columns, "\t"), pa.scalar(""), "\n")


def _text(lines: pa.Array) -> bytes:
    """The concatenated lines: the value bytes of the string array, read straight from its buffers."""
    lines = pc.cast(lines, pa.large_string())          # 64-bit offsets: any file size
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset:lines.offset + len(lines) + 1]
    return lines.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]] if len(lines) else b""


def baidu_session_text(df: pd.DataFrame | pa.Table, what: str = "sessions") -> tuple[bytes, int]:
    """(text, number of lines) of a Baidu session log for a sessions table: rows grouped by session
    in order of first appearance, by position within a session, each session after its query line."""
    table = _as_table(df)
    source_columns = [_SOURCE_COLUMN.get(f, f) for f in _REQUIRED_RESULT_FIELDS]
    _require(table, [SESSION_ID, QUERY_ID, QUERY_TOKENS, *source_columns], what)
    if table.num_rows == 0:
        return b"", 0
    _check_range(table, POSITION, 1, BAIDU_MAX_POSITION, what)
    _check_range(table, CLICK, 0, 1, what)
    _query_id_text(table, what)   # checked on every row, so an error names the table's row
    session_code, _ = pd.factorize(table[SESSION_ID].to_numpy())
    order = np.lexsort((table[POSITION].to_numpy(), session_code))
    if (np.diff(order) != 1).any():
        table = table.take(pa.array(order))
        session_code = session_code[order]
    results = _join_fields([_field_text(table, f, what) for f in BAIDU_RESULT_FIELDS])
    starts = np.flatnonzero(np.diff(session_code, prepend=-1))
    heads = table.take(pa.array(starts))
    reformulation = (_id_text(heads, QUERY_REFORMULATION, what, allow_empty=True)
                     if QUERY_REFORMULATION in heads.column_names else MISSING)
    queries = _join_fields([_query_id_text(heads, what), _token_text(heads, QUERY_TOKENS, what), reformulation])
    # line i of the file: query line j sits at starts[j] + j, result r at r + (number of sessions begun by r)
    source = np.empty(len(results) + len(queries), dtype=np.int64)
    query_slot = starts + np.arange(len(starts))
    is_query = np.zeros(len(source), dtype=bool)
    is_query[query_slot] = True
    source[query_slot] = len(results) + np.arange(len(queries))
    source[~is_query] = np.arange(len(results))
    lines = pa.concat_arrays([results, queries]).take(pa.array(source))
    return _text(lines), len(lines)


def baidu_annotation_text(df: pd.DataFrame | pa.Table, what: str = "annotations") -> tuple[bytes, int]:
    """(text, number of lines) of a Baidu annotation file: qid, query, title, abstract, label, bucket."""
    table = _as_table(df)
    _require(table, list(BAIDU_ANNOTATION_FIELDS), what)
    if table.num_rows == 0:
        return b"", 0
    _check_range(table, LABEL, 0, MAX_LABEL, what)
    _check_range(table, BUCKET, 0, N_BUCKETS - 1, what)
    lines = _join_fields([_token_text(table, name, what) if name in TOKEN_COLUMNS
                          else _query_id_text(table, what) if name == QUERY_ID else _number_text(table[name])
                          for name in BAIDU_ANNOTATION_FIELDS])
    return _text(lines), len(lines)


def write_gzip(data: bytes, path: str | Path, replaces: Replaces | None = None) -> None:
    """Write bytes gzip-compressed with mtime 0 and no file name (same data, same bytes), atomically (an existing
    `path` replaced only as `replaces` allows: rundir.files.atomic_path)."""
    with atomic_path(path, replaces) as tmp:
        tmp.write_bytes(gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0))


def write_baidu_sessions(df: pd.DataFrame | pa.Table, path: str | Path) -> int:
    """Write a sessions table as a gzip Baidu session log; returns the number of lines written."""
    data, n_lines = baidu_session_text(df, what=str(path))
    write_gzip(data, path)
    return n_lines


def write_baidu_annotations(df: pd.DataFrame | pa.Table, path: str | Path, replaces: Replaces | None = None) -> int:
    """Write an annotations table as a gzip Baidu annotation file; returns the number of lines written."""
    data, n_lines = baidu_annotation_text(df, what=str(path))
    write_gzip(data, path, replaces)
    return n_lines
