"""Reading the partitioned Parquet tables that stages hand to each other."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..errors import RunDirError
from ..rundir.layout import INGEST_MARKER
from ..schema import ID_TEXT, SESSION_ID, IdText


def check_ingest_complete(directory: str | Path) -> None:
    """RunDirError (one line) when `directory` is a table an ingest began and never completed: its
    INGEST_MARKER says so (or cannot be read). A directory without the marker is a user's own table."""
    marker = Path(directory) / INGEST_MARKER
    if not marker.is_file():
        return
    try:
        complete = json.loads(marker.read_text()).get("complete") is True
    except (OSError, ValueError, AttributeError):
        complete = False
    if not complete:
        raise RunDirError(f"{directory}: an ingest that did not complete (killed, failed or still running) wrote "
                          f"this table; run `wpultr ingest` again")


def partition_paths(directory: str | Path) -> list[Path]:
    """The Parquet partitions of a table directory, in a stable order (temporary files excluded)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such table directory")
    check_ingest_complete(directory)
    return sorted(p for p in directory.glob("*.parquet") if not p.name.startswith("."))


def row_count(paths: Sequence[str | Path]) -> int:
    """Rows of the Parquet files `paths` together, from their footers only."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


def column_names(path: str | Path) -> list[str]:
    """The columns `read_table(path)` gives, in its order, read from the Parquet footers only."""
    path = Path(path)
    if path.is_dir():
        names = ds.dataset([str(p) for p in partition_paths(path)], format="parquet").schema.names
    else:
        names = pq.read_schema(path).names
    return [n for n in names if not n.startswith("__index_level_")]


def read_table(path: str | Path, columns: Sequence[str] | None = None,
               arrow_lists: Sequence[str] = ()) -> pd.DataFrame:
    """Read a single Parquet file or a directory of partitions into one DataFrame.

    List columns named in `arrow_lists` stay Arrow arrays (`pd.ArrowDtype`): one values buffer instead of a
    numpy object per row (~120 bytes each; the train stage's 1.25 M-row frame took 0.77 GB, now 0.37 GB).
    """
    path = Path(path)
    if path.is_dir():
        parts = partition_paths(path)
        if not parts:
            raise FileNotFoundError(f"{path}: table directory holds no Parquet partitions")
        table = ds.dataset([str(p) for p in parts], format="parquet").to_table(
            columns=list(columns) if columns else None)
        return table_to_pandas(table, arrow_lists)
    check_ingest_complete(path.parent)
    if not arrow_lists:
        return pd.read_parquet(path, columns=list(columns) if columns else None)
    return table_to_pandas(pq.read_table(path, columns=list(columns) if columns else None), arrow_lists)


def table_to_pandas(table: pa.Table, arrow_lists: Sequence[str] = ()) -> pd.DataFrame:
    """`table.to_pandas()`, except that the list columns named in `arrow_lists` keep their Arrow buffers."""
    kept = [name for name in table.column_names
            if name in set(arrow_lists) and pa.types.is_list(table.schema.field(name).type)]
    if not kept:
        return table.to_pandas()
    frame = table.drop_columns(kept).to_pandas()
    pa.default_memory_pool().release_unused()   # the converted columns' Arrow buffers, else kept by the pool
    order = [name for name in table.column_names if name in kept or name in frame.columns]
    for name in kept:   # inserted where the column was (in table order): the frame's column order is the table's
        frame.insert(order.index(name), name,
                     pd.Series(pd.arrays.ArrowExtensionArray(table.column(name)), index=frame.index))
    return frame


def sample_sessions(df: pd.DataFrame, max_sessions: int | None, seed: int) -> pd.DataFrame:
    """Keep at most `max_sessions` whole sessions, chosen uniformly with `seed`; row order preserved."""
    if max_sessions is None:
        return df
    ids = df[SESSION_ID].unique()
    if len(ids) <= max_sessions:
        return df
    keep = np.random.default_rng(seed).choice(ids, size=max_sessions, replace=False)
    return df[df[SESSION_ID].isin(keep)].reset_index(drop=True)


def column_table(paths: Sequence[str | Path], columns: Sequence[str], codes: Sequence[str] = ()) -> pd.DataFrame:
    """`columns` of every row of the partitions `paths`, in order, one partition read at a time; each `codes`
    column (text ids: query_id, doc_id) as int32 codes shared by all partitions and ordered as the values sort
    (nulls last), so ties broken by id fall as they would on the text, while a log's per-row memory stays a few
    bytes a column rather than a Python string a row. The codes' values are read first, alone."""
    codes = [c for c in codes if c in columns]
    levels: dict[str, set] = {c: set() for c in codes}
    for path in paths if codes else ():
        table = pq.read_table(path, columns=codes)
        for name in codes:
            levels[name].update(dictionary(table.column(name)).dictionary.to_pylist())
    ordered = {name: sorted(values, key=lambda v: (v is None, v)) for name, values in levels.items()}
    ranks = {name: {v: i for i, v in enumerate(values)} for name, values in ordered.items()}
    n_rows = row_count(paths)
    out: dict[str, np.ndarray] = {}
    start = 0
    for path in paths:              # filled in place: never the partitions' frames and their concatenation at once
        table = pq.read_table(path, columns=list(columns))
        for name in columns:
            if name in ranks:
                encoded = dictionary(table.column(name))
                mapping = np.array([ranks[name][v] for v in encoded.dictionary.to_pylist()], dtype=np.int32)
                values = mapping[encoded.indices.to_numpy()]
            else:
                values = table.column(name).to_numpy()
            if name not in out:
                out[name] = np.empty(n_rows, dtype=values.dtype)
            elif np.result_type(out[name], values) != out[name].dtype:   # nulls in an integer column: floats
                out[name] = out[name].astype(np.result_type(out[name], values))
            out[name][start: start + len(values)] = values
        start += table.num_rows
    frame = pd.DataFrame(out, copy=False) if out else pd.DataFrame(columns=list(columns))
    frame.attrs[ID_TEXT] = IdText(ordered)              # the text of each code, for what a user reads
    return frame


def dictionary(column: Any) -> Any:
    """A (chunked) Arrow column as one dictionary array, a null its own entry."""
    return column.combine_chunks().dictionary_encode(null_encoding="encode")
