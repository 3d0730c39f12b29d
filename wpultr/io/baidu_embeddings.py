"""Reader of the Baidu-ULTR embedding datasets (Hager et al., "Unbiased Learning to Rank Meets Reality", SIGIR
2024): the sessions with a 768-d query-document embedding (float16), the SERP features and thirteen LTR features
per shown result, and the expert annotations likewise, read as they are published.

Two stored forms, told apart by their columns:
- per session (the hub's Parquet): one record per session, `n` and one list per shown result in every per-result
  column (`query_document_embedding` n x width);
- flat (the Feather parts `part-{p}_split-{s}.feather`, or Parquet): one row per shown result, `query_no` shared by
  a session's rows (adjacent).
Files are read a record batch at a time (Feather: its IPC batches, memory-mapped; Parquet: `iter_batches`), one Dask
task per file, the embedding converted float16 -> float32 per batch into the dense `features` vector (with the
LTR features data.embeddings.ltr_features names appended), `text_md5` as doc_id, the token lists as the token
columns, the SERP features as columns (schema.EMBEDDING_PAGE_FEATURES gives their kinds).

Rules the reader keeps:
- Session id = (index of the file in the sorted input list << 40) | the session's ordinal: its 0-based record number
  in the per-session form, its `query_no` in the flat form. Stable across runs; the two forms of one file give the
  same ids when query_no numbers the sessions from 0, as the published parts do.
- A file without a column the layout needs (or with one of a type it cannot be read as) is one `missing_column`
  record at line 0; nothing of it is read. Other problems are quarantined with the 1-based record (a session's in
  the per-session form, a row's in the flat form), the reason (quarantine.REASONS) and a text naming the result:
  lists that disagree with `n` drop the session (list_length_mismatch); a bad result drops that result alone
  (bad_embedding_width, bad_value, bad_click, bad_position, bad_query_id, bad_media_type, bad_number, bad_label,
  bad_bucket, duplicate_position, split_session); a session left with no result is an empty_session record.
- Every kept session's rows are adjacent in the output, so partitions hold whole sessions
  (tables.SessionPartitionWriter).
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..progress import ingest_rates
from ..rundir.layout import ANNOTATIONS_FILE
from ..schema import (
    ABSTRACT_TOKENS,
    BUCKET,
    CLICK,
    DISPLAYED_TIME,
    DOC_ID,
    EMBEDDING_ABSTRACT,
    EMBEDDING_BUCKET,
    EMBEDDING_COLUMN,
    EMBEDDING_DOC_ID,
    EMBEDDING_IDS,
    EMBEDDING_LTR_FEATURES,
    EMBEDDING_N,
    EMBEDDING_QUERY_NO,
    EMBEDDING_QUERY_TOKENS,
    EMBEDDING_SESSION_LEVEL,
    EMBEDDING_TITLE,
    FEATURE_VECTOR_TYPE,
    FEATURES,
    LABEL,
    MAX_LABEL,
    MAX_POSITION,
    MEDIA_TYPE,
    N_BUCKETS,
    POSITION,
    QUERY_ID,
    QUERY_ID_MAX_DIGITS,
    QUERY_TOKENS,
    SERP_HEIGHT,
    SESSION_ID,
    SLIPOFF_AFTER_CLICK,
    TITLE_TOKENS,
    TOKEN_TYPE,
    SchemaError,
    query_key,
)
from ..storage import is_url, open_input, size
from .quarantine import IngestSummary, QuarantineRecord, QuarantineWriter, quarantine_table
from .tables import (
    PARQUET_SUFFIXES,
    QUARANTINE_SUBDIR,
    SessionPartitionWriter,
    checked_paths,
    ingest_output,
    map_files,
    write_table_atomic,
)

FEATHER_SUFFIXES = (".feather", ".arrow", ".ipc")
FILE_INDEX_SHIFT = 40               # session_id = file_index << 40 | the session's ordinal
MAX_ORDINAL = (1 << FILE_INDEX_SHIFT) - 1
_MAX_FILES = 1 << (63 - FILE_INDEX_SHIFT)
CLICKS, ANNOTATIONS = "clicks", "annotations"
_RECORD = "_record"                 # annotations: a row's record, dropped once the judged-once check is done
PER_SESSION, FLAT = "per_session", "flat"
_QUERY_ID_TEXT = re.compile(f"^[0-9]{{1,{QUERY_ID_MAX_DIGITS}}}$")
_BEHAVIOUR = (SERP_HEIGHT, DISPLAYED_TIME, SLIPOFF_AFTER_CLICK)   # float64 columns of the sessions table

# The token columns: published name -> the table's name.
_TOKENS = {EMBEDDING_QUERY_TOKENS: QUERY_TOKENS, EMBEDDING_TITLE: TITLE_TOKENS, EMBEDDING_ABSTRACT: ABSTRACT_TOKENS}


def _is_int(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_id(t: pa.DataType) -> bool:
    return _is_text(t) or pa.types.is_integer(t)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _list_of(test: Callable[[pa.DataType], bool]) -> Callable[[pa.DataType], bool]:
    return lambda t: _is_list(t) and test(t.value_type)


def _is_float(t: pa.DataType) -> bool:
    return pa.types.is_floating(t)


# Per shown result: name -> (type test of one result's value, what the message calls it). Required ones first.
_RESULT_COLUMNS: dict[str, tuple[Callable, str]] = {
    EMBEDDING_DOC_ID: (_is_text, "a string"),
    EMBEDDING_COLUMN: (_list_of(_is_float), "a list of floats"),
    CLICK: (_is_int, "an integer"),
    POSITION: (_is_int, "an integer"),
    MEDIA_TYPE: (_is_int, "an integer"),
    SERP_HEIGHT: (_is_number, "a number"),
    DISPLAYED_TIME: (_is_number, "a number"),
    SLIPOFF_AFTER_CLICK: (_is_number, "a number"),
    LABEL: (_is_int, "an integer"),
    "url_md5": (_is_text, "a string"),
    EMBEDDING_TITLE: (_list_of(_is_int), "a list of integers"),
    EMBEDDING_ABSTRACT: (_list_of(_is_int), "a list of integers"),
    **{name: (_is_number, "a number") for name in EMBEDDING_LTR_FEATURES if name != "query_length"},
}
# One per session (repeated on each row in the flat form).
_SESSION_COLUMNS: dict[str, tuple[Callable, str]] = {
    QUERY_ID: (_is_id, "a string (or integer) id"),
    "query_md5": (_is_text, "a string"),
    EMBEDDING_QUERY_TOKENS: (_list_of(_is_int), "a list of integers"),
    "query_length": (_is_number, "a number"),
    EMBEDDING_N: (_is_int, "an integer"),
    EMBEDDING_BUCKET: (_is_int, "an integer"),
    EMBEDDING_QUERY_NO: (_is_int, "an integer"),
}
_REQUIRED = {
    CLICKS: (QUERY_ID, EMBEDDING_DOC_ID, EMBEDDING_COLUMN, CLICK, POSITION, MEDIA_TYPE, SERP_HEIGHT, DISPLAYED_TIME,
             SLIPOFF_AFTER_CLICK),
    ANNOTATIONS: (QUERY_ID, EMBEDDING_DOC_ID, EMBEDDING_COLUMN, LABEL, EMBEDDING_BUCKET),
}
_OPTIONAL = ("query_md5", "url_md5", EMBEDDING_QUERY_TOKENS, EMBEDDING_TITLE, EMBEDDING_ABSTRACT,
             *EMBEDDING_LTR_FEATURES)


@dataclass(frozen=True)
class Layout:
    """How to read one file: clicks or annotations, per session or flat, the embedding's width, the LTR features
    appended to `features`, and the optional columns it holds (written when present)."""

    kind: str
    form: str
    width: int
    ltr_features: tuple[str, ...]
    present: tuple[str, ...]


def layout_of(schema: pa.Schema, kind: str, width: int, ltr_features: Sequence[str]) -> tuple[Layout | None, str]:
    """(the file's layout, "") or (None, why it cannot be read): a column missing or of a type it cannot be read as."""
    names = set(schema.names)
    form = FLAT if EMBEDDING_QUERY_NO in names or (kind == ANNOTATIONS and EMBEDDING_N not in names) else PER_SESSION
    required = list(_REQUIRED[kind]) + list(ltr_features)
    if form == PER_SESSION:
        required.append(EMBEDDING_N)
    elif kind == CLICKS:
        required.append(EMBEDDING_QUERY_NO)
    missing = [c for c in dict.fromkeys(required) if c not in names]
    if missing:
        return None, f"missing column(s) {missing} ({form.replace('_', '-')} form); present: {sorted(names)}"
    present = tuple(c for c in _OPTIONAL if c in names)
    for name in dict.fromkeys(required + list(present)):
        field = schema.field(name)
        if name in _SESSION_COLUMNS:
            test, what = _SESSION_COLUMNS[name]
        else:
            test, what = _RESULT_COLUMNS[name]
            if form == PER_SESSION:
                test, what = _list_of(test), f"a list with one value per result, each {what}"
        if not test(field.type):
            return None, f"column {name!r} has type {field.type}, expected {what}"
    return Layout(kind, form, width, tuple(ltr_features), present), ""


# ---------------------------------------------------------------------------------------------
# Record batches of one file
# ---------------------------------------------------------------------------------------------
def file_kind(path: str) -> str:
    name = path.rsplit("/", 1)[-1].lower()
    if name.endswith(FEATHER_SUFFIXES):
        return "feather"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    raise SchemaError(f"{path}: not a Baidu-ULTR embedding dataset file by its name; expected Feather "
                      f"({', '.join(FEATHER_SUFFIXES)}) or Parquet ({', '.join(PARQUET_SUFFIXES)})")


def is_embedding_parquet(path: str) -> bool:
    """Whether a Parquet file (path or URL) holds the embedding datasets' query_document_embedding column (its footer
    alone is read); False for one that cannot be read (the ingest it is then given says why, naming it)."""
    try:
        if is_url(path):
            with open_input(path) as handle:
                return EMBEDDING_COLUMN in pq.read_schema(handle).names
        return EMBEDDING_COLUMN in pq.read_schema(path).names
    except (pa.ArrowException, OSError, ValueError):
        return False


class BatchSource:
    """The record batches of one Feather (Arrow IPC) or Parquet file, at most `rows` rows each, and its schema.

    Feather is memory-mapped (a local path) and read batch by batch as written, each sliced to `rows`; Parquet
    through `iter_batches`. Use as a context manager: the file stays open while batches are read.
    """

    def __init__(self, path: str, rows: int):
        self.path, self.rows, self.kind = path, rows, file_kind(path)
        self._handle: Any = None

    def __enter__(self) -> BatchSource:
        try:
            if self.kind == "feather":
                self._handle = open_input(self.path) if is_url(self.path) else pa.memory_map(self.path, "r")
                self._reader = pa.ipc.open_file(self._handle)
                self.schema = self._reader.schema
            else:
                self._handle = open_input(self.path) if is_url(self.path) else None
                self._reader = pq.ParquetFile(self._handle or self.path)
                self.schema = self._reader.schema_arrow
        except (pa.ArrowException, OSError, ValueError) as error:
            self.__exit__()
            detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise SchemaError(f"{self.path}: not a readable {self.kind.capitalize()} file ({detail})") from None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def batches(self, columns: Sequence[str], rows: int | None = None) -> Iterator[pa.RecordBatch]:
        rows = rows or self.rows
        if self.kind == "parquet":
            yield from self._reader.iter_batches(batch_size=rows, columns=list(columns))
            return
        for i in range(self._reader.num_record_batches):
            batch = self._reader.get_batch(i).select(list(columns))
            for start in range(0, batch.num_rows, rows):
                yield batch.slice(start, rows)


# ---------------------------------------------------------------------------------------------
# Rows: a unit of whole sessions as one row per shown result, checked
# ---------------------------------------------------------------------------------------------
def _numpy(column: pa.ChunkedArray | pa.Array, fill: Any, dtype: Any) -> np.ndarray:
    """A (chunked) numeric column as a numpy array, nulls as `fill`."""
    if not column.null_count:
        return column.to_numpy().astype(dtype, copy=False)
    if isinstance(fill, float) and not pa.types.is_floating(column.type):   # NaN for a missing integer
        column = column.cast(pa.float64())
    return pc.fill_null(column, fill).to_numpy().astype(dtype, copy=False)


def _combined(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def embedding_matrix(column: pa.ChunkedArray | pa.Array, width: int, extra: int = 0
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(float32 rows x (width + extra) matrix, the embedding in its first `width` columns, zeros where the row is
    bad; wrong width (or missing); non-finite) of a column of one list of floats per row, chunk by chunk: the
    float16 values are converted straight into the matrix, never copied whole first."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    n = sum(len(c) for c in chunks)
    out = np.zeros((n, width + extra), dtype=np.float32)
    wrong = np.zeros(n, dtype=bool)
    start = 0
    for chunk in chunks:
        m = len(chunk)
        if pa.types.is_fixed_size_list(chunk.type):
            lengths = np.full(m, chunk.type.list_size, dtype=np.int64)
        else:
            lengths = pc.list_value_length(chunk).to_numpy(zero_copy_only=False)
        if chunk.null_count:
            lengths = np.where(chunk.is_null().to_numpy(zero_copy_only=False), -1, lengths)
        good = lengths == width
        wrong[start:start + m] = ~good
        if good.all():
            out[start:start + m, :width] = chunk.flatten().to_numpy(zero_copy_only=False).reshape(m, width)
        elif good.any():
            kept = chunk.filter(pa.array(good)).flatten().to_numpy(zero_copy_only=False)
            out[np.flatnonzero(good) + start, :width] = kept.reshape(-1, width)
        start += m
    with np.errstate(invalid="ignore", over="ignore"):
        nonfinite = ~np.isfinite(out[:, :width].sum(axis=1))
    return out, wrong, nonfinite


@dataclass
class _Unit:
    """Whole sessions as one row per shown result, before any check of a result."""

    columns: dict[str, pa.Array]    # published name -> one value per row (session-level ones repeated)
    record: np.ndarray              # 1-based record a row came from (a session's, or a flat row's)
    result: np.ndarray              # 1-based index of the result within its session record (flat: 0)
    ordinal: np.ndarray             # the session's ordinal (record number or query_no; -1 when unknown)
    dropped: list[QuarantineRecord]   # sessions dropped whole (list_length_mismatch)


def _flat_unit(table: pa.Table, first_row: int, layout: Layout) -> _Unit:
    n = table.num_rows
    columns = {name: _combined(table.column(name)) for name in table.column_names if name != EMBEDDING_COLUMN}
    columns[EMBEDDING_COLUMN] = table.column(EMBEDDING_COLUMN)
    ordinal = (_numpy(table.column(EMBEDDING_QUERY_NO), -1, np.int64) if EMBEDDING_QUERY_NO in table.column_names
               else np.full(n, -1, dtype=np.int64))
    return _Unit(columns, np.arange(first_row, first_row + n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                 ordinal, [])


def _session_unit(path: str, table: pa.Table, first_record: int, layout: Layout) -> _Unit:
    """The per-session records of `table` flattened to rows; records whose lists disagree with n dropped whole."""
    k = table.num_rows
    n = _numpy(table.column(EMBEDDING_N), -1, np.int64)
    per_result = [c for c in table.column_names if c not in EMBEDDING_SESSION_LEVEL]
    mismatch = np.where(n < 0, True, False)
    why = np.full(k, "", dtype=object)
    why[n < 0] = "n is missing"
    for name in per_result:
        lengths = _numpy(pc.list_value_length(table.column(name)), -1, np.int64)
        bad = (lengths != n) & ~mismatch
        why[bad] = [f"n = {n[i]} but {name!r} holds {'no list' if lengths[i] < 0 else lengths[i]}"
                    for i in np.flatnonzero(bad)]
        mismatch |= bad
    records = np.arange(first_record, first_record + k, dtype=np.int64)
    dropped = [QuarantineRecord(path, int(records[i]), "list_length_mismatch",
                                f"session record {records[i]} (query_id {_text(table, QUERY_ID, i)}): {why[i]}")
               for i in np.flatnonzero(mismatch)]
    empty = (n == 0) & ~mismatch            # a session that showed nothing: no row would tell of it
    if layout.kind == CLICKS:
        dropped += [QuarantineRecord(path, int(records[i]), "empty_session", f"session record {records[i]}: n = 0")
                    for i in np.flatnonzero(empty)]
        dropped.sort(key=lambda r: r.line)
    keep = ~mismatch & ~empty
    if not keep.all():
        table = table.filter(pa.array(keep))
    counts, records = n[keep], records[keep]
    repeat = np.repeat(np.arange(len(counts)), counts)
    take = pa.array(repeat)
    columns: dict[str, Any] = {}
    for name in table.column_names:
        column = _combined(table.column(name))
        if name == EMBEDDING_COLUMN or name in per_result:
            columns[name] = column.flatten()
        else:
            columns[name] = column.take(take)
    result = np.arange(len(repeat), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts) + 1
    return _Unit(columns, np.repeat(records, counts), result, np.repeat(records - 1, counts), dropped)


def _text(table: pa.Table, name: str, i: int) -> str:
    return str(table.column(name)[i].as_py()) if name in table.column_names else "?"


# Reasons checked per row, in order (the first that applies is the row's).
def _row_reasons(unit: _Unit, layout: Layout, emb_wrong: np.ndarray, emb_nonfinite: np.ndarray
                 ) -> tuple[np.ndarray, list[str]]:
    """(reason per row, "" for a good one; the detail of each bad row, "" otherwise)."""
    c = unit.columns
    rows = len(unit.record)
    reason = np.full(rows, "", dtype=object)
    detail = np.full(rows, "", dtype=object)

    def flag(bad: np.ndarray, name: str, what: Callable[[int], str]) -> None:
        hit = np.flatnonzero(bad & (reason == ""))
        reason[hit] = name
        detail[hit] = [what(i) for i in hit]

    qid = c[QUERY_ID]
    qtext = pc.cast(qid, pa.string()) if not _is_text(qid.type) else qid
    ok = pc.fill_null(pc.match_substring_regex(qtext, _QUERY_ID_TEXT.pattern), False).to_numpy(zero_copy_only=False)
    if pa.types.is_integer(qid.type):
        ok &= pc.fill_null(pc.greater_equal(qid, 0), False).to_numpy(zero_copy_only=False)
    flag(~ok, "bad_query_id", lambda i: f"query_id is {qid[i].as_py()!r}, expected 1 to {QUERY_ID_MAX_DIGITS} digits")
    if layout.form == FLAT and layout.kind == CLICKS:
        flag((unit.ordinal < 0) | (unit.ordinal > MAX_ORDINAL), "bad_value",
             lambda i: f"query_no is {c[EMBEDDING_QUERY_NO][i].as_py()!r}, expected an integer in 0..{MAX_ORDINAL}")
    flag(c[EMBEDDING_DOC_ID].is_null().to_numpy(zero_copy_only=False), "bad_value", lambda i: "text_md5 is missing")
    flag(emb_wrong, "bad_embedding_width", lambda i: f"{EMBEDDING_COLUMN} holds "
         f"{'no list' if c[EMBEDDING_COLUMN][i].as_py() is None else len(c[EMBEDDING_COLUMN][i].as_py())} values, "
         f"expected {layout.width}")
    flag(emb_nonfinite, "bad_value", lambda i: f"{EMBEDDING_COLUMN} holds a non-finite value")
    if layout.kind == CLICKS:
        click = _numpy(c[CLICK], -1, np.int64)
        flag((click != 0) & (click != 1), "bad_click", lambda i: f"click is {c[CLICK][i].as_py()!r}, expected 0 or 1")
        position = _numpy(c[POSITION], -1, np.int64)
        flag((position < 1) | (position > MAX_POSITION), "bad_position",
             lambda i: f"position is {c[POSITION][i].as_py()!r}, expected 1..{MAX_POSITION}")
        flag(c[MEDIA_TYPE].is_null().to_numpy(zero_copy_only=False), "bad_media_type",
             lambda i: "media_type is missing")
        for name in _BEHAVIOUR:
            values = _numpy(c[name], np.nan, np.float64)
            flag(~np.isfinite(values), "bad_number", lambda i, name=name: f"{name} is {c[name][i].as_py()!r}")
    else:
        label = _numpy(c[LABEL], -1, np.int64)
        flag((label < 0) | (label > MAX_LABEL), "bad_label",
             lambda i: f"label is {c[LABEL][i].as_py()!r}, expected 0..{MAX_LABEL}")
        bucket = _numpy(c[EMBEDDING_BUCKET], -1, np.int64)
        flag((bucket < 0) | (bucket >= N_BUCKETS), "bad_bucket",
             lambda i: f"frequency_bucket is {c[EMBEDDING_BUCKET][i].as_py()!r}, expected 0..{N_BUCKETS - 1}")
    for name in layout.ltr_features:
        values = _numpy(c[name], np.nan, np.float64)
        flag(~np.isfinite(values), "bad_value", lambda i, name=name: f"LTR feature {name} is {c[name][i].as_py()!r}")
    return reason, list(detail)


def _where(unit: _Unit, layout: Layout, i: int) -> str:
    """Which result a record is about, as a user finds it in the file."""
    if layout.form == FLAT:
        qn = f", query_no {unit.ordinal[i]}" if layout.kind == CLICKS else ""
        return f"row {unit.record[i]}{qn}"
    return f"session record {unit.record[i]}, result {unit.result[i]}"


def _duplicate_positions(session: np.ndarray, position: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Rows (among `kept`) whose (session, position) an earlier kept row holds."""
    rows = np.flatnonzero(kept)
    order = np.lexsort((rows, position[rows], session[rows]))
    s, p = session[rows][order], position[rows][order]
    again = np.zeros(len(rows), dtype=bool)
    again[1:] = (s[1:] == s[:-1]) & (p[1:] == p[:-1])
    out = np.zeros(len(session), dtype=bool)
    out[rows[order][again]] = True
    return out


def _output_table(unit: _Unit, layout: Layout, matrix: np.ndarray, keep: np.ndarray, session_id: np.ndarray
                  ) -> pa.Table:
    """The kept rows in the table's columns and types (schema: sessions or annotations contract)."""
    c = unit.columns
    mask = pa.array(keep) if not keep.all() else None

    def kept(array: pa.Array) -> pa.Array:
        return array.filter(mask) if mask is not None else array

    for j, name in enumerate(layout.ltr_features):
        matrix[:, layout.width + j] = _numpy(c[name], np.nan, np.float32)
    rows = matrix[keep] if mask is not None else matrix
    m, d = rows.shape
    features = pa.ListArray.from_arrays(pa.array(np.arange(0, (m + 1) * d, d, dtype=np.int32)),
                                        pa.array(rows.reshape(-1)), type=FEATURE_VECTOR_TYPE)
    qid = kept(c[QUERY_ID])
    out: dict[str, pa.Array] = {}
    if layout.kind == CLICKS:
        out[SESSION_ID] = pa.array(session_id[keep], pa.int64())
    else:                                    # the record each row came from, for the judged-once records
        out[_RECORD] = pa.array(unit.record[keep], pa.int64())
    out[QUERY_ID] = qid.cast(pa.string())
    if layout.kind == CLICKS:
        out[POSITION] = kept(c[POSITION]).cast(pa.int16())
        out[CLICK] = kept(c[CLICK]).cast(pa.int8())
    else:
        out[LABEL] = kept(c[LABEL]).cast(pa.int8())
        out[BUCKET] = kept(c[EMBEDDING_BUCKET]).cast(pa.int8())
    out[DOC_ID] = kept(c[EMBEDDING_DOC_ID]).cast(pa.string())
    out[FEATURES] = features
    for name, column in _TOKENS.items():
        if name in layout.present:
            out[column] = kept(c[name]).cast(TOKEN_TYPE)
    if layout.kind == CLICKS:
        out[MEDIA_TYPE] = kept(c[MEDIA_TYPE]).cast(pa.int64())
        for name in _BEHAVIOUR:
            out[name] = kept(c[name]).cast(pa.float64())
    for name in EMBEDDING_IDS:
        if name in layout.present:
            out[name] = kept(c[name]).cast(pa.string())
    for name in EMBEDDING_LTR_FEATURES:
        if name in layout.present:
            out[name] = kept(c[name]).cast(pa.float32())
    return pa.table(out)


class _FileReader:
    """Reads one embedding dataset file unit by unit (whole sessions), yielding (table, quarantine records)."""

    def __init__(self, path: str, file_index: int, kind: str, width: int, ltr_features: Sequence[str],
                 batch_rows: int):
        if not 0 <= file_index < _MAX_FILES:
            raise ValueError(f"{path}: file index {file_index} outside 0..{_MAX_FILES - 1} (session id layout)")
        self.path, self.file_index, self.kind = path, file_index, kind
        self.width, self.ltr_features, self.batch_rows = width, tuple(ltr_features), batch_rows
        self.records = 0       # records read (sessions in the per-session form, rows in the flat form)
        self.sessions = 0
        self.results = 0
        self.layout: Layout | None = None
        self.file_record: QuarantineRecord | None = None
        self._closed: set[int] = set()    # flat form: query_no values whose session ended

    def units(self) -> Iterator[tuple[pa.Table, list[QuarantineRecord]]]:
        with BatchSource(self.path, self.batch_rows) as source:
            layout, why = layout_of(source.schema, self.kind, self.width, self.ltr_features)
            if layout is None:
                self.file_record = QuarantineRecord(self.path, 0, "missing_column", why)
                return
            self.layout = layout
            columns = [n for n in source.schema.names if n in _RESULT_COLUMNS or n in _SESSION_COLUMNS]
            if layout.form == PER_SESSION:
                rows = max(1, self.batch_rows // 16)     # records of ~10 results each
                for batch in source.batches(columns, rows):
                    table = pa.Table.from_batches([batch])
                    unit = _session_unit(self.path, table, self.records + 1, layout)
                    self.records += table.num_rows
                    yield self._checked(unit)
            else:
                yield from self._flat_units(source, columns, layout)

    def _flat_units(self, source: BatchSource, columns: list[str], layout: Layout
                    ) -> Iterator[tuple[pa.Table, list[QuarantineRecord]]]:
        """Flat rows in units of whole sessions: the last session of a batch waits for the next batch's rows."""
        held: pa.Table | None = None
        grouped = layout.kind == CLICKS
        for batch in source.batches(columns):
            table = pa.Table.from_batches([batch])
            if held is not None:
                table = pa.concat_tables([held, table])
            if not grouped:
                held, unit_rows = None, table.num_rows
            else:
                qn = _numpy(table.column(EMBEDDING_QUERY_NO), -1, np.int64)
                starts = np.flatnonzero(qn[1:] != qn[:-1]) + 1
                unit_rows = int(starts[-1]) if len(starts) else 0
                held = table.slice(unit_rows)
            if unit_rows:
                yield self._checked(_flat_unit(table.slice(0, unit_rows), self.records + 1, layout))
                self.records += unit_rows
        if held is not None and held.num_rows:
            yield self._checked(_flat_unit(held, self.records + 1, layout))
            self.records += held.num_rows

    def _checked(self, unit: _Unit) -> tuple[pa.Table, list[QuarantineRecord]]:
        layout = self.layout
        matrix, wrong, nonfinite = embedding_matrix(unit.columns[EMBEDDING_COLUMN], layout.width,
                                                    len(layout.ltr_features))
        reason, detail = _row_reasons(unit, layout, wrong, nonfinite)
        records = list(unit.dropped)
        session_id = None
        if layout.kind == CLICKS:
            ordinal = unit.ordinal
            if layout.form == FLAT:
                self._flag_split_sessions(ordinal, reason, detail)
            session_id = (np.int64(self.file_index) << np.int64(FILE_INDEX_SHIFT)) | np.maximum(ordinal, 0)
            position = _numpy(unit.columns[POSITION], -1, np.int64)
            again = _duplicate_positions(session_id, position, reason == "")
            reason[again] = "duplicate_position"
            for i in np.flatnonzero(again):
                detail[i] = f"position {position[i]} is held by an earlier result of this session"
        bad = np.flatnonzero(reason != "")
        records += [QuarantineRecord(self.path, int(unit.record[i]), str(reason[i]),
                                     f"{_where(unit, layout, i)}: {detail[i]}") for i in bad]
        keep = reason == ""
        if layout.kind == CLICKS:
            records += self._empty_sessions(unit, session_id, keep)
            self.sessions += len(np.unique(session_id[keep]))
        self.results += int(keep.sum())
        records.sort(key=lambda r: r.line)
        return _output_table(unit, layout, matrix, keep, session_id), records

    def _flag_split_sessions(self, ordinal: np.ndarray, reason: np.ndarray, detail: list[str]) -> None:
        """split_session for the rows of a query_no already seen before another session's rows."""
        if not len(ordinal):
            return
        run_start = np.r_[True, ordinal[1:] != ordinal[:-1]]
        starts = np.flatnonzero(run_start)
        run_values = ordinal[starts]
        seen_before = np.isin(run_values, np.fromiter(self._closed, dtype=np.int64, count=len(self._closed)))
        _, first = np.unique(run_values, return_index=True)
        repeated = np.ones(len(run_values), dtype=bool)
        repeated[first] = False
        split_runs = (seen_before | repeated) & (run_values >= 0)
        run_of_row = np.cumsum(run_start) - 1
        hit = np.flatnonzero(split_runs[run_of_row] & (reason == ""))
        reason[hit] = "split_session"
        for i in hit:
            detail[i] = f"query_no {ordinal[i]}'s earlier rows are not adjacent to this one"
        self._closed.update(int(v) for v in run_values[run_values >= 0])

    def _empty_sessions(self, unit: _Unit, session_id: np.ndarray, keep: np.ndarray) -> list[QuarantineRecord]:
        """One empty_session record per session (of this unit) none of whose results was kept."""
        if not len(session_id):
            return []
        valid = (unit.ordinal >= 0) & (unit.ordinal <= MAX_ORDINAL)
        ids, first = np.unique(session_id[valid], return_index=True)
        rows = np.flatnonzero(valid)[first]
        kept_ids = np.unique(session_id[keep])
        empty = ~np.isin(ids, kept_ids)
        per_session = self.layout.form == PER_SESSION
        return [QuarantineRecord(self.path, int(unit.record[i]), "empty_session",
                                 (f"session record {unit.record[i]}" if per_session else f"query_no {unit.ordinal[i]}")
                                 + ": none of its results is usable") for i in rows[empty]]


# ---------------------------------------------------------------------------------------------
# Ingest: sessions (one Dask task per file) and annotations
# ---------------------------------------------------------------------------------------------
def sessions_parquet_options(schema: pa.Schema) -> dict:
    """ParquetWriter options of the sessions partitions: lists (the features, token ids) neither
    dictionary-encoded nor given statistics; the features' float32 values BYTE_STREAM_SPLIT, uncompressed (a
    cross-encoder's vectors do not compress: compressing them cost CPU for nothing, bench/ingest.py)."""
    lists = [f.name for f in schema if pa.types.is_list(f.type)]
    others = [name for name in schema.names if name not in lists]
    compression = {name: "snappy" for name in schema.names}
    compression[FEATURES] = "none"
    encoding = {f"{name}.list.element": "DELTA_BINARY_PACKED" for name in lists if name != FEATURES}
    encoding[f"{FEATURES}.list.element"] = "BYTE_STREAM_SPLIT"
    return {"use_dictionary": others, "write_statistics": others, "compression": compression,
            "column_encoding": encoding}


def _ingest_file(path: str, file_index: int, sessions_dir: str, quarantine_dir: str, partition_rows: int,
                 width: int, ltr_features: tuple[str, ...], batch_rows: int) -> tuple[IngestSummary, list[str]]:
    """One worker task: read one file, write its partitions and quarantine file; (summary, the columns written)."""
    reader = _FileReader(path, file_index, CLICKS, width, ltr_features, batch_rows)
    writer: SessionPartitionWriter | None = None
    quarantine = QuarantineWriter(Path(quarantine_dir) / f"part-{file_index:05d}.parquet")
    columns: list[str] = []
    try:
        for table, records in reader.units():
            quarantine.add(records)
            if writer is None:
                columns = table.column_names
                writer = SessionPartitionWriter(sessions_dir, file_index, partition_rows,
                                                sessions_parquet_options(table.schema))
            writer.write(table)
        if writer is not None:
            writer.close()
        if reader.file_record is not None:
            quarantine.add([reader.file_record])
    except BaseException:
        if writer is not None:
            writer.abort()
        quarantine.abort()
        raise
    quarantine.close()
    summary = IngestSummary(files=1, lines=reader.records, sessions=reader.sessions, results=reader.results,
                            bytes_read=size(path), partitions=writer.partitions if writer is not None else 0,
                            damaged_files=[path] if reader.file_record is not None else [])
    summary.add_records(quarantine.counts)
    return summary, columns


def ingest_embedding_sessions(paths: Sequence[str | Path], out_dir: str | Path, client: Any,
                              width: int = 768, ltr_features: Sequence[str] = (), partition_rows: int = 200_000,
                              batch_rows: int = 32_768, key: str = "--out") -> tuple[IngestSummary, list[str]]:
    """Ingest embedding dataset session files on the Dask `client`, one task per file (in this process when it is
    None), into out_dir/sessions and out_dir/quarantine (swapped into place when every file is done,
    tables.ingest_output); (the summary, the sessions table's columns). SchemaError when two files give different
    columns (one lacks an optional column the other has)."""
    files, duplicates = checked_paths(paths)
    for f in files:     # opened here first (the footer read): a file that is no Feather or Parquet at all is one line
        with BatchSource(f, 1):       # naming it before any task runs, never a worker's 'Compute Failed' block
            pass
    with ingest_output(out_dir, files, key, client) as output:
        done = map_files(client, _ingest_file, files, lambda finished, seconds: ingest_rates(
            [s for s, _ in finished], seconds), sessions_dir=str(output.sessions),
            quarantine_dir=str(output.quarantine), partition_rows=partition_rows, width=width,
            ltr_features=tuple(ltr_features), batch_rows=batch_rows)
        written = [(f, cols) for f, (_, cols) in zip(files, done, strict=True) if cols]
        for f, cols in written[1:]:
            if cols != written[0][1]:
                raise SchemaError(f"{f}: gives the columns {cols}, {written[0][0]} gives {written[0][1]}; the "
                                  f"files of one ingest must hold the same optional columns")
        summary = IngestSummary.combine(s for s, _ in done)
    summary.duplicate_inputs = duplicates
    return summary, written[0][1] if written else []


def read_embedding_annotations(path: str | Path, width: int = 768, ltr_features: Sequence[str] = (),
                               batch_rows: int = 32_768) -> tuple[pa.Table, list[QuarantineRecord], IngestSummary]:
    """(the annotations table, its quarantine records, the summary) of one annotations file: each (query, document)
    judged once (a repeat with the same label is a duplicate_annotation, the first kept; pairs given two labels are
    conflicting_label, every row of them set aside)."""
    path = str(path)
    reader = _FileReader(path, 0, ANNOTATIONS, width, ltr_features, batch_rows)
    tables, records = [], []
    for table, bad in reader.units():
        tables.append(table)
        records += bad
    if reader.file_record is not None:
        records.append(reader.file_record)
    table = pa.concat_tables(tables) if tables else pa.table({QUERY_ID: pa.array([], pa.string()),
                                                               LABEL: pa.array([], pa.int8()),
                                                               BUCKET: pa.array([], pa.int8()),
                                                               DOC_ID: pa.array([], pa.string())})
    table, repeats = _judged_once(path, table)
    table = table.drop_columns([c for c in (_RECORD,) if c in table.column_names])
    records = sorted(records + repeats, key=lambda r: r.line)
    summary = IngestSummary(files=1, lines=reader.records, results=table.num_rows, bytes_read=size(path),
                            damaged_files=[path] if reader.file_record is not None else [])
    summary.add_records(Counter(r.reason for r in records))
    return table, records, summary


def _judged_once(path: str, table: pa.Table) -> tuple[pa.Table, list[QuarantineRecord]]:
    """The rows with one label per (query key, doc_id), and the records of the others."""
    if table.num_rows == 0:
        return table, []
    ids = table.select([c for c in (QUERY_ID, QUERY_TOKENS) if c in table.column_names]).to_pandas()
    pairs = pd.DataFrame({"q": query_key(ids).to_numpy(), "d": table[DOC_ID].to_numpy(zero_copy_only=False)})
    pair = pairs.groupby(["q", "d"], sort=False).ngroup().to_numpy()
    label = table[LABEL].to_numpy()
    conflicting = (pd.Series(label).groupby(pair).transform("nunique") > 1).to_numpy()
    repeated = pd.Series(pair).duplicated().to_numpy() & ~conflicting
    drop = conflicting | repeated
    if not drop.any():
        return table, []
    row_of = table.column(_RECORD).to_numpy()
    records = [QuarantineRecord(path, int(row_of[i]),
                                "conflicting_label" if conflicting[i] else "duplicate_annotation",
                                f"query_id {pairs['q'][i].split(chr(9))[0]}, text_md5 {pairs['d'][i]}, label "
                                f"{label[i]}") for i in np.flatnonzero(drop)]
    return table.filter(pa.array(~drop)), records


def ingest_embedding_annotations(path: str | Path, out_dir: str | Path, width: int = 768,
                                 ltr_features: Sequence[str] = (), batch_rows: int = 32_768) -> IngestSummary:
    """Write out_dir/annotations.parquet and out_dir/quarantine/annotations.parquet; return the summary."""
    out_dir = Path(out_dir)
    table, records, summary = read_embedding_annotations(path, width, ltr_features, batch_rows)
    write_table_atomic(table, out_dir / ANNOTATIONS_FILE)
    write_table_atomic(quarantine_table(records), out_dir / QUARANTINE_SUBDIR / ANNOTATIONS_FILE)
    return summary
