"""Users' own click logs and annotations (Parquet or CSV), validated against the schema contracts,
and the partitioned sessions layout every ingest path writes.

Layout: ``out_dir/sessions/part-<file#>-<k>.parquet``, each at most `partition_rows` rows, whole
sessions kept in one partition unless a single session is longer than `partition_rows`.
Partitions are streamed (one row group per table handed to the writer, so memory does not grow
with `partition_rows`), written under a temporary name and renamed into place when complete.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..processes import process_started
from ..progress import gather, ingest_rates
from ..rundir.files import atomic_path, replaceable, write_json
from ..rundir.layout import INGEST_MARKER
from ..rundir.ownership import file_sha256, output_of
from ..schema import (
    ABSTRACT_TOKENS,
    ANNOTATION_CORE_FIELDS,
    ANNOTATION_OPTIONAL_FIELDS,
    DOC_ID,
    FEATURES,
    QUERY_ID,
    QUERY_TOKENS,
    SESSION_CORE_FIELDS,
    SESSION_ID,
    SESSION_OPTIONAL_FIELDS,
    TITLE_TOKENS,
    PageFeature,
    SchemaError,
    coerce_annotations,
    coerce_sessions,
)
from ..storage import is_file, is_url, open_input, size
from .parquet import check_ingest_complete
from .quarantine import IngestSummary

SESSIONS_SUBDIR = "sessions"
QUARANTINE_SUBDIR = "quarantine"
PARQUET_SUFFIXES = (".parquet", ".pq")
CSV_SUFFIXES = (".csv", ".csv.gz")
# List-valued columns: in CSV written as space-separated numbers.
_LIST_COLUMNS: dict[str, type] = {QUERY_TOKENS: int, TITLE_TOKENS: int, ABSTRACT_TOKENS: int, FEATURES: float}
_CANONICAL_TYPES: dict[str, pa.DataType] = {
    f.name: f.type for f in (*SESSION_CORE_FIELDS, *SESSION_OPTIONAL_FIELDS,
                             *ANNOTATION_CORE_FIELDS, *ANNOTATION_OPTIONAL_FIELDS)}

log = logging.getLogger(__name__)


def partition_name(file_index: int, partition: int) -> str:
    return f"part-{file_index:05d}-{partition:05d}.parquet"


# What an ingest may replace under out_dir: only the sessions/ and quarantine/ an earlier ingest wrote there, listed
# with every file's sha256 in out_dir's manifest (rundir.ownership), or inside a run directory; never for their names.
INGEST = output_of("wpultr ingest")
INGEST_STAGE = output_of("wpultr ingest", in_runs=True)   # the pipeline's ingest stage (key "run_dir"): its own run
_STALE = re.compile(rf"\.({SESSIONS_SUBDIR}|{QUARANTINE_SUBDIR})\.tmp-(\d+)")


@dataclass
class IngestOutput:
    """Where one ingest writes: temporary sessions/ and quarantine/ directories, swapped into place when done."""

    sessions: Path
    quarantine: Path


@contextlib.contextmanager
def ingest_output(out_dir: str | Path, inputs: Sequence[str], key: str = "--out",
                  client: Any = None) -> Iterator[IngestOutput]:
    """Temporary out_dir/sessions and out_dir/quarantine, renamed over the old ones only when the body completes.

    Refused (RunDirError naming `key`) before anything is written: an output that is a symlink, that holds or lies
    in one of `inputs`, or that holds files an ingest does not write. The sessions directory carries
    INGEST_MARKER, "complete": false until the body returns, so a reader never takes a half table for a whole one.
    Workers of `client` whose copy of out_dir is their own (a URL run directory's working copy on another host)
    make the same swap there afterwards, or drop their temporary directories when the body failed.
    """
    out = Path(os.path.abspath(out_dir))
    moves: list[tuple[str, str]] = []
    here = {"host": socket.gethostname(), "pid": os.getpid()}
    try:
        owned = INGEST_STAGE if key == "run_dir" else INGEST
        with atomic_path(out / SESSIONS_SUBDIR, owned, inputs, key) as sessions, \
                atomic_path(out / QUARANTINE_SUBDIR, owned, inputs, key) as quarantine:
            sweep_stale_ingests(out)
            moves = [(str(sessions), str(out / SESSIONS_SUBDIR)), (str(quarantine), str(out / QUARANTINE_SUBDIR))]
            sessions.mkdir()
            quarantine.mkdir()
            write_json(sessions / INGEST_MARKER, {"complete": False, "inputs": list(inputs), **here})
            yield IngestOutput(sessions, quarantine)
            write_json(sessions / INGEST_MARKER, {"complete": True, "inputs": list(inputs)})
    except BaseException:
        if client is not None and moves:
            client.run(_swap_here, moves, False)
        raise
    if client is not None:
        client.run(_swap_here, moves, True)


def sweep_stale_ingests(out: Path) -> list[Path]:
    """Remove the temporary `.sessions.tmp-PID` (and its `.quarantine.tmp-PID`) of ingests into `out` that died on
    this host: their marker names this host and a pid that no longer lives (processes.process_started). Another
    host's, or a live one's, are left. Returns what was removed."""
    removed = []
    for path in sorted(out.glob(f".{SESSIONS_SUBDIR}.tmp-*")):
        match = _STALE.fullmatch(path.name)
        if match is None or path.is_symlink() or not path.is_dir() or int(match.group(2)) == os.getpid():
            continue
        try:
            record = json.loads((path / INGEST_MARKER).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("host") != socket.gethostname() \
                or record.get("pid") != int(match.group(2)) or process_started(int(match.group(2))) is not None:
            continue
        for stale in (path, out / f".{QUARANTINE_SUBDIR}.tmp-{match.group(2)}"):
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale)
                removed.append(stale)
    return removed


def _swap_here(moves: Sequence[tuple[str, str]], keep: bool) -> None:
    """On a worker (client.run): each temporary directory this host still holds (its own copy of the output: on a
    shared file system the caller has moved it already) renamed over its final one (`keep`), else removed. A worker
    first claims it by renaming it to a name of its own, so of the workers of one host exactly one acts."""
    for tmp, final in map(lambda m: (Path(m[0]), Path(m[1])), moves):
        claimed = tmp.with_name(f"{tmp.name}.{os.getpid()}")
        try:
            os.rename(tmp, claimed)
        except (FileNotFoundError, NotADirectoryError):
            continue        # none here, or another worker of this host has it
        if not keep:
            shutil.rmtree(claimed)
            continue
        if final.is_dir() and not final.is_symlink() and replaceable(final, INGEST_STAGE):
            shutil.rmtree(final)   # this host's copy of the table the caller replaced
        os.replace(claimed, final)


def write_table_atomic(table: pa.Table, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


class SessionPartitionWriter:
    """Streams session tables (the rows of a session adjacent) into Parquet partitions.

    A partition ends at the last session boundary at or before `partition_rows` rows; a single
    session longer than `partition_rows` is the only thing ever split. Rows go to the open
    partition's ParquetWriter as soon as their partition is certain (one row group per `write`);
    only the last, possibly unfinished, session of the stream is held back. So memory stays at
    about one input table plus one session, whatever `partition_rows` or the input size.
    A partition is written under a hidden temporary name and renamed into place when complete.
    """

    def __init__(self, directory: str | Path, file_index: int, partition_rows: int,
                 parquet_options: dict | None = None):
        if partition_rows <= 0:
            raise ValueError(f"partition_rows: must be > 0, got {partition_rows}")
        self.directory = Path(directory)
        self.file_index = file_index
        self.partition_rows = partition_rows
        self.parquet_options = parquet_options or {}   # pq.ParquetWriter keywords (encodings, statistics)
        self.partitions = 0                         # partitions completed
        self.rows = 0                               # rows in completed partitions
        self._held: pa.Table | None = None          # rows not placed yet: the last session seen (or more)
        self._writer: pq.ParquetWriter | None = None
        self._tmp: Path | None = None
        self._open_rows = 0                         # rows in the open partition

    def write(self, table: pa.Table) -> None:
        """Place `table`'s rows: whole partitions are completed, whole sessions written, the last one held."""
        if table.num_rows == 0:
            return
        held = table if self._held is None else pa.concat_tables([self._held, table])
        ids = held.column(SESSION_ID).to_numpy()
        # More rows than the open partition takes: the row after its last slot is known, so is the cut.
        while len(ids) > self.partition_rows - self._open_rows:
            cut = self._cut(ids, self.partition_rows - self._open_rows)
            self._append(held.slice(0, cut))
            self._finish()
            held, ids = held.slice(cut), ids[cut:]
        starts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
        last_start = int(starts[-1]) if len(starts) else 0
        self._append(held.slice(0, last_start))
        self._held = held.slice(last_start)

    def _cut(self, ids: np.ndarray, capacity: int) -> int:
        """Rows of `ids` that complete the open partition: up to its last session start within capacity.

        The held rows always begin a session unless a session was split, and a split closes the
        partition, so with rows already in the open partition, 0 is a session boundary too.
        """
        starts = np.flatnonzero(ids[1:capacity + 1] != ids[:capacity]) + 1
        if len(starts):
            return int(starts[-1])
        return 0 if self._open_rows else capacity

    def _append(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self._writer is None:
            final = self.directory / partition_name(self.file_index, self.partitions)
            self._tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
            self._writer = pq.ParquetWriter(self._tmp, table.schema, **self.parquet_options)
        self._writer.write_table(table)
        self._open_rows += table.num_rows

    def _finish(self) -> None:
        """Close the open partition (if any) and rename it into place."""
        if self._writer is None:
            return
        self._writer.close()
        os.replace(self._tmp, self.directory / partition_name(self.file_index, self.partitions))
        self.partitions += 1
        self.rows += self._open_rows
        self._writer, self._tmp, self._open_rows = None, None, 0

    def close(self) -> None:
        """Write the held rows and complete the last partition."""
        if self._held is not None:
            self._append(self._held)
            self._held = None
        self._finish()

    def abort(self) -> None:
        """Drop the open partition's temporary file (completed partitions stay)."""
        if self._writer is not None:
            self._writer.close()
            self._tmp.unlink(missing_ok=True)
        self._held, self._writer, self._tmp, self._open_rows = None, None, None, 0


# ---------------------------------------------------------------------------------------------
# Own tables
# ---------------------------------------------------------------------------------------------
_EXPECTED = f"a Parquet ({', '.join(PARQUET_SUFFIXES)}) or CSV ({', '.join(CSV_SUFFIXES)}) table"
_INTEGER_TEXT = re.compile(r"\s*[+-]?\d+\s*")


def _kind(path: str) -> str:
    name = path.rsplit("/", 1)[-1].lower()
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(CSV_SUFFIXES):
        return "csv"
    raise SchemaError(f"{path}: unsupported table format; expected {_EXPECTED} (by file name)")


def _csv_query_ids(cells: pd.Series) -> pd.Series:
    """CSV query ids as read: integer text kept exactly as written, float text ("3.0", "1e20", "inf") as a
    float (the schema accepts it only when finite, integral and below 2^53), any other text as a string id."""
    def cell(text: object) -> object:
        if not isinstance(text, str) or _INTEGER_TEXT.fullmatch(text):
            return text.strip() if isinstance(text, str) else text
        try:
            return float(text)
        except ValueError:
            return text
    return pd.Series([cell(v) for v in cells], index=cells.index, dtype=object)


def _parse_list_cell(value: object, element: type, path: Path, column: str, row: int) -> list:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    try:
        return [element(part) for part in str(value).split()]
    except ValueError:
        kind = "integers" if element is int else "numbers"
        raise SchemaError(f"{path}: column {column!r} row {row} is {value!r}, "
                          f"expected space-separated {kind}") from None


def _read_csv(path: str) -> pd.DataFrame:
    try:
        with open_input(path, compression="infer") as f:   # a local path or an fsspec URL; .gz decompressed
            header = pd.read_csv(f, nrows=0).columns
        list_columns = [c for c in header if c in _LIST_COLUMNS]
        text_columns = list_columns + [QUERY_ID] if QUERY_ID in header else list_columns
        with open_input(path, compression="infer") as f:
            df = pd.read_csv(f, dtype={c: str for c in text_columns})
    except pd.errors.EmptyDataError:
        raise SchemaError(f"{path}: empty CSV file; expected a header line naming the columns, then one "
                          f"row per line") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, EOFError) as error:
        raise SchemaError(f"{path}: not a readable CSV table ({type(error).__name__}: "
                          f"{str(error).strip().splitlines()[0] if str(error).strip() else 'no detail'}); "
                          f"expected {_EXPECTED}") from None
    if QUERY_ID in df.columns:
        df[QUERY_ID] = _csv_query_ids(df[QUERY_ID])
    for column in list_columns:
        element = _LIST_COLUMNS[column]
        df[column] = [_parse_list_cell(v, element, path, column, row) for row, v in enumerate(df[column])]
    return df


def _read_parquet(path: str) -> pd.DataFrame:
    try:
        if is_url(path):
            with open_input(path) as f:
                table = pq.read_table(f)
        else:
            table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else "no detail"
        raise SchemaError(f"{path}: not a readable Parquet file ({type(error).__name__}: {detail}); "
                          f"expected {_EXPECTED}") from None
    for column in _LIST_COLUMNS:
        if column not in table.column_names:
            continue
        dtype = table.schema.field(column).type
        numeric = pa.types.is_integer if _LIST_COLUMNS[column] is int else (
            lambda t: pa.types.is_floating(t) or pa.types.is_integer(t))
        if not (pa.types.is_list(dtype) or pa.types.is_large_list(dtype)) or not numeric(dtype.value_type):
            kind = "integers" if _LIST_COLUMNS[column] is int else "numbers"
            raise SchemaError(f"{path}: column {column!r} has type {dtype}, expected a list of {kind}")
    try:
        return table.to_pandas()
    except (pa.ArrowException, ValueError) as error:
        raise SchemaError(f"{path}: Parquet columns that cannot be read as a table ({error})") from None


def _read_frame(path: str | Path) -> tuple[str, pd.DataFrame]:
    """(the path as text, its table): a local path or an fsspec URL (kept as written, never made a Path)."""
    path = str(path)
    if not is_file(path):
        if is_url(path) or not Path(path).exists():
            raise FileNotFoundError(f"{path}: no such table file")
        raise SchemaError(f"{path}: not a file; expected {_EXPECTED}")
    kind = _kind(path)
    return path, (_read_parquet(path) if kind == "parquet" else _read_csv(path))


def read_sessions_table(path: str | Path, page_features: Sequence[PageFeature]) -> pd.DataFrame:
    """Read a sessions table (Parquet or CSV), validate it (SchemaError names file, column, row), coerce dtypes.
    Users' tables must carry `doc_id`: BAL's within-document click tests, the click model's document effects and
    the identifiability check compare impressions of the same document, so a table without it fails here, not
    in training."""
    path, df = _read_frame(path)
    _check_doc_id(df, str(path))
    return coerce_sessions(df, page_features, table=str(path))


def _check_doc_id(df: pd.DataFrame, table: str) -> None:
    """SchemaError naming the table (and the first empty row) when `doc_id` is missing or empty."""
    if DOC_ID not in df.columns:
        raise SchemaError(f"{table}: no column {DOC_ID!r} (each shown result's document id, text or integer: "
                          f"BAL's within-document tests and the identifiability check compare impressions of the "
                          f"same document); present: {list(df.columns)[:12]}")
    empty = df[DOC_ID].isna().to_numpy() | (df[DOC_ID].astype(str).str.strip() == "").to_numpy()
    if empty.any():
        raise SchemaError(f"{table}: column {DOC_ID!r} row {int(np.flatnonzero(empty)[0])} is empty; every shown "
                          f"result needs its document id")


def read_table_file(path: str | Path) -> pd.DataFrame:
    """A Parquet or CSV table as it is (CSV list cells parsed, query_id as text), unvalidated: what `wpultr score`
    scores."""
    return _read_frame(path)[1]


def read_annotations_table(path: str | Path) -> pd.DataFrame:
    """Read an annotations table (Parquet or CSV), validate and coerce it."""
    path, df = _read_frame(path)
    return coerce_annotations(df, table=str(path))


def to_arrow(df: pd.DataFrame) -> pa.Table:
    """A validated frame as Arrow with the canonical types for every column the schema names."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    fields = []
    for f in table.schema:
        if f.name in _CANONICAL_TYPES:
            fields.append(pa.field(f.name, _CANONICAL_TYPES[f.name]))
        elif pa.types.is_large_string(f.type):
            fields.append(pa.field(f.name, pa.string()))
        else:
            fields.append(f)
    return table.cast(pa.schema(fields))


def _ingest_table_file(path: str, file_index: int, sessions_dir: str, page_features: Sequence[PageFeature],
                       partition_rows: int) -> tuple[IngestSummary, np.ndarray]:
    """One worker task: read, validate and coerce one table, write its partitions; return a small summary and
    the table's session ids (sorted, unique: checked across the files by the caller)."""
    df = read_sessions_table(path, page_features)
    df = df.sort_values(SESSION_ID, kind="stable").reset_index(drop=True)  # whole sessions per partition
    writer = SessionPartitionWriter(sessions_dir, file_index, partition_rows)
    try:
        writer.write(to_arrow(df))
        writer.close()
    except BaseException:
        writer.abort()
        raise
    ids = np.unique(df[SESSION_ID].to_numpy())
    return IngestSummary(files=1, lines=len(df), sessions=len(ids), results=len(df),
                         bytes_read=size(path), partitions=writer.partitions), ids


def _check_unique_sessions(files: Sequence[str], ids: Sequence[np.ndarray]) -> None:
    """SchemaError naming both files and an example id when two tables share a session id."""
    if len(files) < 2:
        return
    owner = np.repeat(np.arange(len(files)), [len(i) for i in ids])
    values = np.concatenate(ids)
    order = np.argsort(values, kind="stable")
    shared = np.flatnonzero(values[order][1:] == values[order][:-1])
    if len(shared):
        first, second = order[shared[0]], order[shared[0] + 1]
        raise SchemaError(f"{files[owner[second]]}: column {SESSION_ID!r} reuses session id {values[first]} of "
                          f"{files[owner[first]]} (and {len(shared) - 1} more); session ids must be unique across "
                          f"the tables of one ingest")


def ingest_tables(paths: Sequence[str | Path], out_dir: str | Path, page_features: Sequence[PageFeature],
                  client, partition_rows: int = 200_000, key: str = "--out") -> IngestSummary:
    """Validate users' own session tables, one Dask task per file (in this process when `client`
    is None), into out_dir/sessions partitions.

    A table either passes whole or the ingest fails with the SchemaError of its first bad cell. Session ids are
    taken as given and must be unique across the files (else SchemaError naming both); nothing under out_dir
    changes unless the whole ingest succeeds (`ingest_output`).
    """
    files, duplicates = checked_paths(paths)
    with ingest_output(out_dir, files, key, client) as output:
        done = map_files(client, _ingest_table_file, files,
                         lambda finished, seconds: ingest_rates([s for s, _ in finished], seconds),
                         sessions_dir=str(output.sessions), page_features=tuple(page_features),
                         partition_rows=partition_rows)
        _check_unique_sessions(files, [ids for _, ids in done])
        summary = IngestSummary.combine(s for s, _ in done)
    summary.duplicate_inputs = duplicates
    return summary


def map_files(client: Any, task: Any, files: Sequence[str], postfix: Any, **kwargs: Any) -> list[Any]:
    """`task(file, its index, **kwargs)` for every file: one Dask task each on `client` (under a progress bar with
    `postfix`), or one after another in this process when `client` is None (a small ingest,
    `cluster.client_for_input`)."""
    if client is None:
        return [task(f, i, **kwargs) for i, f in enumerate(files)]
    futures = client.map(task, files, range(len(files)), pure=False, **kwargs)
    return gather(client, futures, desc="ingest", unit="file", postfix=postfix)


def checked_paths(paths: Sequence[str | Path]) -> tuple[list[str], list[list[str]]]:
    """(the input files, absolute and sorted — their index there numbers partitions and session ids —, the
    spellings dropped as naming a file already given: [as given, the file read]).

    Local paths are made absolute (workers may run in another directory); one file named twice (`a/p.gz`,
    `a/../a/p.gz`, a symlink to it, a hard link) is read once, and so is a byte-identical copy under another name
    (same size and sha256: the second is dropped with a warning, as reading it would double its sessions). A file
    inside a table an unfinished ingest wrote is refused (io.parquet.check_ingest_complete).
    """
    given = [str(p) for p in paths]
    if not given:
        raise ValueError("ingest: no input files given")
    files: list[str] = []
    kept: dict[object, str] = {}
    duplicates: list[list[str]] = []
    for g in sorted(given, key=lambda g: (g if is_url(g) else os.path.abspath(g), g)):
        if not is_file(g):   # a local path or an fsspec URL
            raise FileNotFoundError(f"{g}: no such log file")
        f = g if is_url(g) else os.path.abspath(g)
        if not is_url(f):
            check_ingest_complete(Path(f).parent)
        identity = _file_identity(f)
        if identity in kept:
            duplicates.append([g, kept[identity]])
            continue
        kept[identity] = f
        files.append(f)
    for copy, first in _same_content(files):
        log.warning("%s: the same bytes as %s (sha256); read once", copy, first)
        duplicates.append([next(g for g in given if (g if is_url(g) else os.path.abspath(g)) == copy), first])
        files.remove(copy)
    return files, duplicates


def _same_content(files: Sequence[str]) -> list[tuple[str, str]]:
    """(copy, first) for each of `files` whose bytes equal an earlier one's: compared by sha256 among files of the
    same size only, so distinct inputs are never read twice to tell them apart."""
    by_size: dict[int, list[str]] = {}
    for f in files:
        by_size.setdefault(size(f), []).append(f)
    pairs = []
    for group in (g for s, g in by_size.items() if len(g) > 1 and s > 0):   # empty files double nothing
        seen: dict[str, str] = {}
        for f in group:
            digest = _url_sha256(f) if is_url(f) else file_sha256(f)
            if digest in seen:
                pairs.append((f, seen[digest]))
            else:
                seen[digest] = f
    return pairs


def _url_sha256(url: str) -> str:
    digest = hashlib.sha256()
    with open_input(url) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_identity(path: str) -> object:
    """What tells two spellings of one file apart from two files: (device, inode) locally, the URL otherwise."""
    if is_url(path):
        return path
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino
