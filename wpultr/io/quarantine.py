"""Quarantine of malformed input: the fixed vocabulary of reasons, the records and their Parquet file,
and the summary of what an ingest kept and what it set aside.

A quarantine record names the file, the 1-based line number, the reason and the raw text of the line,
so a user can find and fix every line that did not make it into the sessions table.
"""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..schema import QUARANTINE_SCHEMA

# The whole vocabulary of quarantine reasons. A line gets the first reason that applies: the
# line-level ones (line_too_long, wrong_field_count, not_utf8), then its fields' in the order they
# appear on the line, then the session-level ones (orphan_result, broken_query_line,
# duplicate_position). File-level reasons (FILE_REASONS) describe a whole file, once.
REASONS: dict[str, str] = {
    "wrong_field_count": "a log line with neither 3 (query) nor 32 (result) tab-separated fields, "
                         "or an annotation line without 6",
    "not_utf8": "the line is not valid UTF-8",
    "line_too_long": "the line is longer than baidu.MAX_LINE_BYTES (1 MiB); never held whole",
    "bad_query_id": "query id is not 1 to 64 ASCII digits (schema.QUERY_ID_MAX_DIGITS)",
    "empty_query": "the query has no token ids",
    "bad_token_id": "a query, title or abstract token is not a decimal integer in [0, 2^31)",
    "bad_position": "position is not an integer in 1..30",
    "bad_media_type": "multimedia type is neither a non-negative decimal integer nor '-'",
    "bad_click": "click is not 0 or 1",
    "bad_number": "a behaviour column is neither a finite number nor '-' / empty (nan, inf, 1e400 are bad)",
    "orphan_result": "a result line before any query line of its file",
    "broken_query_line": "a result line of a session whose query line is quarantined (a 3-field line with "
                         "a bad field, a line of 1 to baidu.QUERY_LIKE_MAX_FIELDS fields, or one of up to 31 "
                         "fields whose second field is a token list)",
    "duplicate_position": "a result line whose position an earlier kept result of its session already holds",
    "empty_session": "a well-formed query line none of whose result lines is usable; the session is dropped",
    "bad_label": "annotation label is not an integer in 0..4",
    "bad_bucket": "annotation frequency bucket is not an integer in 0..9",
    "duplicate_annotation": "an annotation line repeating an earlier one's (query, document) and label: the "
                            "first is kept",
    "conflicting_label": "an annotation line whose (query, document) other lines give another label: every line "
                         "of that pair is set aside, so no document is judged twice",
    "truncated_gzip": "the gzip stream ends before its end marker; every line before the cut is kept "
                      "(line = the first line not read whole)",
    "corrupt_gzip": "the gzip stream is damaged (bad data, CRC or trailing garbage). When bytes were decoded "
                    "from the member that failed its check, nothing of the file is known intact: every line is "
                    "dropped (line 1; the text gives the range, the summary unverified_lines/_rows); when only "
                    "garbage follows verified members, their lines are kept (line = the first line not read whole)",
    "empty_file": "the file holds no byte (or its gzip stream decodes to nothing); line 0",
    "not_gzip": "nothing is read: a .gz/.gzip name whose first bytes are not the gzip magic, or binary "
                "content (NUL or invalid UTF-8 in over a quarter of its first 64 KiB); line 0",
    # Baidu-ULTR embedding datasets (io/baidu_embeddings.py): `line` is the 1-based record (a session's, in the
    # per-session form; a shown result's row, in the flat form), the text says which result and why.
    "missing_column": "an embedding dataset file lacks a column the layout needs, or holds it in a type it "
                      "cannot be read as; nothing of the file is read; line 0",
    "list_length_mismatch": "a session record whose per-result lists (or n x width embedding) do not all hold n "
                            "entries, or whose n is missing: the results cannot be aligned; the session is dropped",
    "bad_embedding_width": "a query_document_embedding row that is missing or not data.embeddings.width values",
    "bad_value": "a missing or non-finite value where the layout needs one (text_md5, query_no, an embedding or "
                 "selected LTR feature value)",
    "split_session": "a row of a query_no whose session ended earlier in the file: a session's rows must be "
                     "adjacent",
}
# Reasons that describe a whole file rather than one of its lines.
FILE_REASONS: frozenset[str] = frozenset({"truncated_gzip", "corrupt_gzip", "empty_file", "not_gzip",
                                          "missing_column"})
# Values the reader maps rather than quarantines, counted in IngestSummary.mapped.
MAPPED_VALUES: dict[str, str] = {
    "media_type_dash": "a '-' multimedia type, stored as schema.BAIDU_MEDIA_TYPE_DASH",
    "empty_token": "an empty token between, before or after \\x01 separators, skipped",
}
# Raw text kept per record, so a garbage "line" of megabytes does not bloat the quarantine table.
MAX_TEXT_BYTES = 4096


class QuarantineRecord(NamedTuple):
    file: str
    line: int
    reason: str
    text: str


def raw_text(line: bytes) -> str:
    """A raw line as quarantine text: newline dropped, at most MAX_TEXT_BYTES, bad UTF-8 as \\x escapes."""
    return line.rstrip(b"\r\n")[:MAX_TEXT_BYTES].decode("utf-8", "backslashreplace")


def quarantine_table(records: Iterable[QuarantineRecord]) -> pa.Table:
    records = list(records)
    for record in records:
        if record.reason not in REASONS:
            raise ValueError(f"{record.file}:{record.line}: unknown quarantine reason {record.reason!r}")
    columns = list(zip(*records, strict=True)) if records else [[] for _ in QUARANTINE_SCHEMA.names]
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, QUARANTINE_SCHEMA, strict=True)],
                                schema=QUARANTINE_SCHEMA)


def quarantine_frame(records: Iterable[QuarantineRecord]) -> pd.DataFrame:
    return quarantine_table(records).to_pandas()


class QuarantineWriter:
    """Streams the quarantine records of one input file into one Parquet file.

    Records go to a hidden temporary sibling first; `close` renames it into place, so a reader
    never sees a half-written file.
    """

    def __init__(self, path: str | Path, flush_records: int = 10_000):
        self.path = Path(path)
        self.flush_records = flush_records
        self.counts: Counter[str] = Counter()
        self._pending: list[QuarantineRecord] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self._writer = pq.ParquetWriter(self._tmp, QUARANTINE_SCHEMA)

    def add(self, records: Iterable[QuarantineRecord]) -> None:
        for record in records:
            self.counts[record.reason] += 1
            self._pending.append(record)
        if len(self._pending) >= self.flush_records:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(quarantine_table(self._pending))
            self._pending = []

    def close(self) -> None:
        """Write what is pending and move the file to its final name."""
        self._flush()
        self._writer.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drop the partial file (the input could not be read to the end)."""
        self._writer.close()
        self._tmp.unlink(missing_ok=True)


@dataclass
class IngestSummary:
    """What an ingest read, kept and quarantined; merged over files, JSON-able through `to_dict`.

    Every input line is accounted for exactly once:
    ``lines == sessions + results + quarantined + unverified_lines`` (a query line becomes a session or a
    record; the lines of a gzip member whose CRC failed are dropped together, counted in unverified_lines).
    """

    files: int = 0
    lines: int = 0                 # input lines read (rows, for tables)
    sessions: int = 0              # sessions written
    results: int = 0               # rows written (one per shown result)
    quarantined: int = 0           # quarantined lines (file-level records not included)
    reasons: dict[str, int] = field(default_factory=dict)  # records per reason, file-level included
    bytes_read: int = 0            # bytes on disk
    bytes_uncompressed: int = 0    # bytes after decompression
    partitions: int = 0            # Parquet partitions written
    damaged_files: list[str] = field(default_factory=list)  # files with a file-level record
    file_reasons: dict[str, int] = field(default_factory=dict)  # files per file-level reason (FILE_REASONS)
    mapped: dict[str, int] = field(default_factory=dict)        # kept values mapped, per MAPPED_VALUES key
    unverified_lines: int = 0      # lines read but dropped: decoded from a gzip member whose CRC failed
    unverified_rows: int = 0       # the rows (shown results) those lines held, dropped with them
    duplicate_inputs: list[list[str]] = field(default_factory=list)  # [spelling skipped, the file read] per input
    #                                                                  naming a file already given

    def add_records(self, counts: Counter[str] | dict[str, int]) -> None:
        for reason, n in counts.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + n
            if reason in FILE_REASONS:
                self.file_reasons[reason] = self.file_reasons.get(reason, 0) + n
            else:
                self.quarantined += n

    def add_mapped(self, counts: Counter[str] | dict[str, int]) -> None:
        for name, n in counts.items():
            if n:
                self.mapped[name] = self.mapped.get(name, 0) + int(n)

    def merge(self, other: IngestSummary) -> IngestSummary:
        merged = IngestSummary(
            files=self.files + other.files, lines=self.lines + other.lines,
            sessions=self.sessions + other.sessions, results=self.results + other.results,
            bytes_read=self.bytes_read + other.bytes_read,
            bytes_uncompressed=self.bytes_uncompressed + other.bytes_uncompressed,
            partitions=self.partitions + other.partitions,
            damaged_files=self.damaged_files + other.damaged_files,
            unverified_lines=self.unverified_lines + other.unverified_lines,
            unverified_rows=self.unverified_rows + other.unverified_rows,
            duplicate_inputs=self.duplicate_inputs + other.duplicate_inputs)
        merged.add_records(self.reasons)
        merged.add_records(other.reasons)
        merged.add_mapped(self.mapped)
        merged.add_mapped(other.mapped)
        return merged

    @classmethod
    def combine(cls, summaries: Iterable[IngestSummary]) -> IngestSummary:
        total = cls()
        for summary in summaries:
            total = total.merge(summary)
        return total

    def to_dict(self) -> dict:
        out = asdict(self)
        out["reasons"] = dict(sorted(self.reasons.items()))
        out["file_reasons"] = dict(sorted(self.file_reasons.items()))
        out["mapped"] = dict(sorted(self.mapped.items()))
        return out
