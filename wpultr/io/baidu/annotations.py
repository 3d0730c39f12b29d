"""The Baidu-ULTR annotation file: read in blocks, parsed column-wise, repeated judgements kept once and conflicting
labels quarantined, written beside the sessions."""
from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ...rundir.layout import ANNOTATIONS_FILE
from ...schema import (
    BAIDU_ANNOTATION_FIELDS,
    DOC_ID,
    LABEL,
    MAX_LABEL,
    N_BUCKETS,
    QUERY_ID,
    QUERY_TOKENS,
    SchemaError,
    baidu_annotations_arrow_schema,
)
from ...storage import is_file, size  # inputs may be fsspec URLs
from ..quarantine import IngestSummary, QuarantineRecord, quarantine_frame, quarantine_table, raw_text
from ..tables import QUARANTINE_SUBDIR, write_table_atomic
from .blocks import CHUNK_BYTES, Block, BlockReader, unverified_record
from .lines import MAPPED_TOKEN, SplitLines, flag, line_reasons, parse_id, parse_uint, quarantine_records

_ANNOTATION_FIELD_COUNT = len(BAIDU_ANNOTATION_FIELDS)
_ANNOTATIONS_SCHEMA = baidu_annotations_arrow_schema().append(pa.field(DOC_ID, pa.string()))



# ---------------------------------------------------------------------------------------------
# Annotation file
# ---------------------------------------------------------------------------------------------
def _doc_ids(title: pa.Array, abstract: pa.Array) -> pa.Array:
    """Stable document ids: md5 of the title and abstract token text as written in the file."""
    return pa.array([hashlib.md5(f"{t}\t{a}".encode()).hexdigest()
                     for t, a in zip(title.to_pylist(), abstract.to_pylist(), strict=True)], type=pa.string())


def _parse_annotation_block(path: str, block: Block
                            ) -> tuple[pa.Table, list[QuarantineRecord], int, np.ndarray, pa.StringArray]:
    """(rows, records, empty tokens skipped in the kept rows, the kept rows' line numbers and texts) of one block
    of the annotation file."""
    lines = SplitLines(block.data)
    fits = lines.n_fields == _ANNOTATION_FIELD_COUNT
    reasons = line_reasons(lines, fits)
    rows = np.flatnonzero(fits & lines.utf8)
    query_id, bad = parse_id(lines.column(rows, 0))
    flag(reasons, rows, bad, "bad_query_id")
    query, bad, empty, query_skipped = lines.tokens(rows, 1)
    flag(reasons, rows, empty, "empty_query")
    flag(reasons, rows, bad, "bad_token_id")
    title_text, abstract_text = lines.column(rows, 2), lines.column(rows, 3)
    title, bad_title, _, title_skipped = lines.tokens(rows, 2)
    abstract, bad_abstract, _, abstract_skipped = lines.tokens(rows, 3)
    flag(reasons, rows, bad_title | bad_abstract, "bad_token_id")
    label, bad = parse_uint(lines.column(rows, 4), 1)
    flag(reasons, rows, bad | (label > MAX_LABEL), "bad_label")
    bucket, bad = parse_uint(pc.utf8_rtrim(lines.column(rows, 5), characters="\r\n"), 1)
    flag(reasons, rows, bad | (bucket >= N_BUCKETS), "bad_bucket")
    good = reasons[rows] == 0
    keep = pa.array(good)
    table = pa.Table.from_arrays([
        query_id.filter(keep), pa.array(label[good].astype(np.int8)), pa.array(bucket[good].astype(np.int8)),
        query.filter(keep), title.filter(keep), abstract.filter(keep),
        _doc_ids(title_text.filter(keep), abstract_text.filter(keep)),
    ], schema=_ANNOTATIONS_SCHEMA)
    skipped = int((query_skipped + title_skipped + abstract_skipped)[good].sum())
    return (table, quarantine_records(path, lines, block.first_line, reasons), skipped, block.first_line + rows[good],
            lines.texts(rows[good]))


def _judged_once(path: str, table: pa.Table, line: np.ndarray, text: pa.Array
                 ) -> tuple[pa.Table, list[QuarantineRecord]]:
    """The annotations with one line per (query, document) — query id and tokens, doc_id — and the records of the
    others: a repeat of the same label is a duplicate_annotation (the first line kept); when the lines of a pair
    give different labels, all of them are conflicting_label (which one is right cannot be told)."""
    if table.num_rows == 0:
        return table, []
    tokens = pc.binary_join(pc.cast(table[QUERY_TOKENS], pa.list_(pa.string())), " ")
    pair = pd.DataFrame({"q": table[QUERY_ID].to_numpy(zero_copy_only=False),
                         "t": tokens.to_numpy(zero_copy_only=False),
                         "d": table[DOC_ID].to_numpy(zero_copy_only=False)})
    pair = pair.groupby(["q", "t", "d"], sort=False).ngroup()
    label = table[LABEL].to_numpy()
    conflicting = (pd.Series(label).groupby(pair.to_numpy()).transform("nunique") > 1).to_numpy()
    repeated = pair.duplicated().to_numpy() & ~conflicting
    drop = conflicting | repeated
    if not drop.any():
        return table, []
    records = [QuarantineRecord(path, int(line[i]), "conflicting_label" if conflicting[i] else "duplicate_annotation",
                                raw_text(text[i].as_py().encode())) for i in np.flatnonzero(drop)]
    return table.filter(pa.array(~drop)), records


def _read_annotations(path: str, chunk_bytes: int
                      ) -> tuple[pa.Table, list[QuarantineRecord], BlockReader, Counter[str]]:
    if not is_file(path):
        raise FileNotFoundError(f"{path}: no such annotation file")
    reader = BlockReader(path, chunk_bytes)
    tables, records, mapped = [_ANNOTATIONS_SCHEMA.empty_table()], [], Counter()
    lines, texts = [np.zeros(0, dtype=np.int64)], [pa.array([], pa.string())]
    for item in reader:
        if isinstance(item, QuarantineRecord):
            records.append(item)
            continue
        table, bad, skipped, line, text = _parse_annotation_block(path, item)
        tables.append(table)
        records += bad
        lines.append(line)
        texts.append(text)
        mapped[MAPPED_TOKEN] += skipped
    table, repeats = _judged_once(path, pa.concat_tables(tables), np.concatenate(lines), pa.concat_arrays(texts))
    records = sorted(records + repeats, key=lambda r: r.line)
    if reader.unverifiable:   # as for session logs: nothing decoded from a member that failed its check is kept
        return _ANNOTATIONS_SCHEMA.empty_table(), [unverified_record(path, reader, table.num_rows)], reader, Counter()
    damage = reader.damage_record()
    if damage is not None:
        records.append(damage)
    return table, records, reader, mapped


def _check_not_empty(path: str, table: pa.Table, records: list[QuarantineRecord], where: str = "") -> None:
    """SchemaError naming the file when it gave no annotation row: as the own-table path, nothing to evaluate on is a
    user error, never a run that reports `n_queries: 0`."""
    if table.num_rows:
        return
    reasons = sorted({r.reason for r in records})
    why = (f"its lines were all set aside{where}: {', '.join(reasons)}" if reasons and reasons != ["empty_file"]
           else "it holds no annotation line")
    raise SchemaError(f"{path}: no annotation rows ({why}); an annotation file needs at least one line of qid, query, "
                      f"title, abstract, label, bucket")


def read_baidu_annotations(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read a Baidu annotation file (qid, query, title, abstract, label, bucket; gzip optional).

    Returns (annotations with a stable doc_id, quarantine records as a QUARANTINE_SCHEMA frame).
    """
    table, records, _, _ = _read_annotations(str(path), chunk_bytes)
    _check_not_empty(str(path), table, records)
    return table.to_pandas(), quarantine_frame(records)


def ingest_baidu_annotations(path: str | Path, out_dir: str | Path, chunk_bytes: int = CHUNK_BYTES) -> IngestSummary:
    """Write out_dir/annotations.parquet and out_dir/quarantine/annotations.parquet; return the summary."""
    out_dir = Path(out_dir)
    table, records, reader, mapped = _read_annotations(str(path), chunk_bytes)
    write_table_atomic(table, out_dir / ANNOTATIONS_FILE)
    write_table_atomic(quarantine_table(records), out_dir / QUARANTINE_SUBDIR / ANNOTATIONS_FILE)
    _check_not_empty(str(path), table, records, f" (in {out_dir / QUARANTINE_SUBDIR / ANNOTATIONS_FILE})")
    summary = IngestSummary(files=1, lines=reader.lines, results=table.num_rows,
                            bytes_read=size(path), bytes_uncompressed=reader.bytes_uncompressed,
                            damaged_files=[str(path)] if reader.damage else [],
                            unverified_lines=reader.lines if reader.unverifiable else 0)
    summary.add_records(Counter(r.reason for r in records))
    summary.add_mapped(mapped)
    return summary
