"""Reader of the Baidu-ULTR layout: session logs and the annotation file, streamed, parsed column-wise
(compiled byte passes in baidu_kernels, then pyarrow and numpy on whole arrays), malformed lines
quarantined (see quarantine.REASONS for the vocabulary).

Session logs (gzip or plain text, tab-separated): a query line (qid, query token ids joined by
\\x01, reformulation) starts a session; each result line after it carries the 32 fields of
schema.BAIDU_RESULT_FIELDS. A file is read in blocks of whole lines (bounded memory whatever its
size); each block is split on tabs in one compiled pass, token ids and plain decimal numbers are read
by compiled loops, every other column is validated and cast as a whole array, so no Python code runs
per line or field. One Dask task per file (gzip cannot be split by byte range).

Rules the reader keeps:
- Session id = (index of the file in the sorted input list << 40) | (0-based ordinal of the line that
  opened the session among the file's session-opening lines, broken ones counted): unique, stable.
- Line kinds by tab-separated field count: 3 = query line, 32 = result line. Any other non-blank line
  of at most QUERY_LIKE_MAX_FIELDS (16, half a result line) fields, or of 17-31 fields whose second
  field is a token list (digits and \\x01: a query's, never a result's url_md5), is taken for a broken
  query line: it is quarantined (wrong_field_count) and opens a broken session, so the result lines
  after it are never attached to the previous query. The remaining lines (blank, 17-31 fields with a
  url_md5-like second field, 33+ fields, too long) are quarantined and leave the session structure alone
  (e.g. a result line that lost a field).
- A quarantined result line does not affect its session's other results; the results of a session
  whose query line is quarantined are quarantined as broken_query_line; a result whose position an
  earlier kept result of its session holds is quarantined as duplicate_position (a session never
  holds a position twice); a session left with no usable result is dropped and its query line
  quarantined as empty_session. So every input line is a session, a row of the sessions table, or a
  quarantine record: lines read == sessions + rows + line records.
- query_id is kept as the exact text of the id (1 to 64 ASCII digits; real ids have 20, above int64),
  the reformulation field as written. Empty \\x01 tokens are skipped and a '-' media type becomes
  schema.BAIDU_MEDIA_TYPE_DASH; both are counted in the summary's `mapped`.
- Behaviour columns: float64, '-' or empty is NaN; anything pyarrow cannot parse as a float, and any
  non-finite value written out (nan, inf, -inf, 1e400), is bad_number. Other integers (position, media
  type, click, tokens) must be plain ASCII digits.
- A whole file is reported once, at line 0, when it is empty (empty_file), or when nothing of it is
  read (not_gzip: a .gz/.gzip name without the gzip magic bytes, or binary content). A truncated gzip
  stream (truncated_gzip) keeps every whole line decoded before the cut (a cut alters no earlier byte);
  its record names the first line not read whole and holds that line's partial text (never parsed).
  A corrupt stream (corrupt_gzip) is checked per member: flipped bytes decode without error until the
  member's CRC, so when bytes were decoded from the member that failed, nothing of the file is kept —
  one record at line 1 names the lines dropped, the summary counts them (unverified_lines/_rows); when
  only garbage follows verified members, their lines are kept as for a truncated stream.
- A file that holds lines but none with 3 or 32 fields is no session log: SchemaError in `ingest_baidu`
  (which also refuses names without a LOG_SUFFIXES suffix).
- Output rows keep file order; partitions hold whole sessions (see tables.SessionPartitionWriter),
  in row groups of about ROW_GROUP_ROWS rows, the token-id lists delta-packed (_sessions_parquet_options).
  Quarantine records are written in line order, except that an empty_session record is written
  when its session ends (after the records of its result lines); sort by line to read them in order.
"""
from __future__ import annotations

import hashlib
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..memory import large_blocks_kept
from ..rundir.layout import ANNOTATIONS_FILE
from ..schema import (ABSTRACT_TOKENS, BAIDU_ANNOTATION_FIELDS, BAIDU_BEHAVIOUR_COLUMNS, BAIDU_MAX_POSITION,
                      BAIDU_MEDIA_TYPE_DASH, BAIDU_N_RESULT_FIELDS, BAIDU_QUERY_FIELDS, BAIDU_RESULT_FIELDS,
                      CLICK, DOC_ID, LABEL, MAX_LABEL, MEDIA_TYPE, N_BUCKETS, POSITION, QUERY_ID, QUERY_TOKENS,
                      QUERY_ID_MAX_DIGITS, TITLE_TOKENS, TOKEN_TYPE, SchemaError, baidu_annotations_arrow_schema,
                      baidu_sessions_arrow_schema)
from ..storage import is_file, open_input, size   # inputs may be fsspec URLs
from .baidu_kernels import count_newlines, field_starts, gather, parse_plain_decimals, parse_tokens
from .quarantine import (REASONS, IngestSummary, QuarantineRecord, QuarantineWriter, quarantine_frame,
                         quarantine_table, raw_text)
from .tables import (QUARANTINE_SUBDIR, SessionPartitionWriter, checked_paths, ingest_output, map_files,
                     partition_name, write_table_atomic)

CHUNK_BYTES = 8 << 20          # decompressed bytes parsed at a time
ROW_GROUP_ROWS = 1 << 16       # parsed rows gathered per Parquet write (row group): fewer dictionaries and pages
MAX_LINE_BYTES = 1 << 20       # a longer line is quarantined as line_too_long, never held whole
FILE_INDEX_SHIFT = 40          # session_id = file_index << 40 | query-line ordinal
QUERY_LIKE_MAX_FIELDS = 16     # a non-blank line of 1..16 fields (not 3) is a broken query line
SNIFF_BYTES = 64 << 10         # decoded bytes inspected to tell binary content from text
GZIP_MAGIC = b"\x1f\x8b"
GZIP_SUFFIXES = (".gz", ".gzip")
TEXT_SUFFIXES = (".txt", ".tsv", ".log")
LOG_SUFFIXES = GZIP_SUFFIXES + TEXT_SUFFIXES   # a session log's name ends in one of these, or has no suffix
DOC_ID_SOURCE = "url_md5"      # the result column that becomes doc_id

_MAX_FILES = 1 << (63 - FILE_INDEX_SHIFT)
_QUERY_FIELD_COUNT = len(BAIDU_QUERY_FIELDS)
_ANNOTATION_FIELD_COUNT = len(BAIDU_ANNOTATION_FIELDS)
_RESULT_COLUMN = {name: i for i, name in enumerate(BAIDU_RESULT_FIELDS) if name}
_MAX_INT_DIGITS = 18           # always fits int64
_IN_BYTES = 64 << 10           # compressed bytes given to zlib at a time (what a damage can cost)
_GZIP_WBITS = 16 + zlib.MAX_WBITS   # gzip header and trailer, CRC checked
_SESSIONS_SCHEMA = baidu_sessions_arrow_schema()
_ANNOTATIONS_SCHEMA = baidu_annotations_arrow_schema().append(pa.field(DOC_ID, pa.string()))


def _sessions_parquet_options(schema: pa.Schema) -> dict:
    """ParquetWriter options of the sessions partitions: token-id lists DELTA_BINARY_PACKED rather than
    dictionary-encoded, without min/max statistics (nothing filters on token ids); other columns as default.

    Why (bench/ingest.py log, one 127 MB file): dictionary-encoding the lists was a third of the ingest's
    CPU; delta-packing takes about 0.35 CPU-s less per file, gives files of the same size (random ids in
    a bounded vocabulary pack to as few bits either way) and reads faster.
    """
    lists = [f.name for f in schema if pa.types.is_list(f.type)]
    others = [name for name in schema.names if name not in lists]
    return {"use_dictionary": others, "write_statistics": others,
            "column_encoding": {f"{name}.list.element": "DELTA_BINARY_PACKED" for name in lists}}


_SESSIONS_PARQUET = _sessions_parquet_options(_SESSIONS_SCHEMA)

# Reason codes for vectorised bookkeeping: 0 = line is fine, i + 1 = the i-th reason.
_REASON_NAMES: tuple[str, ...] = tuple(REASONS)
_CODE = {name: i + 1 for i, name in enumerate(_REASON_NAMES)}
_OTHER, _QUERY, _RESULT, _BROKEN_QUERY = 0, 1, 2, 3
_MAPPED_MEDIA, _MAPPED_TOKEN = "media_type_dash", "empty_token"   # quarantine.MAPPED_VALUES keys


# ---------------------------------------------------------------------------------------------
# Blocks of whole lines from a (possibly gzip, possibly damaged) file
# ---------------------------------------------------------------------------------------------
@dataclass
class _Block:
    data: bytes        # whole lines, each ending in b"\n" (one is added to a last line without it)
    first_line: int    # 1-based number of its first line


class _BlockReader:
    """Yields blocks of whole lines (and line_too_long records) from one file in bounded memory.

    After iteration, `lines` (whole lines read), `bytes_uncompressed` and `damage` (a file-level
    reason or None) are set; `cut` holds the partial line a damaged stream ended in.
    """

    def __init__(self, path: str, block_bytes: int = CHUNK_BYTES):
        if block_bytes <= 0:
            raise ValueError(f"chunk_bytes: must be > 0, got {block_bytes}")
        self.path = path
        self.block_bytes = block_bytes
        self.lines = 0
        self.bytes_uncompressed = 0
        self.damage: str | None = None
        self.cut = b""
        self.unverified = 0   # bytes decoded from the gzip member being read, not yet checked by its CRC

    def _pieces(self, raw: BinaryIO) -> Iterator[bytes]:
        """Decompressed pieces (from zlib, as they come; of plain text, block_bytes read at a time).

        zlib directly rather than GzipFile, whose buffered reads drop the last decoded bytes when a
        stream turns out truncated; multi-member files are followed member by member. Compressed
        input goes in _IN_BYTES at a time; when zlib rejects a piece, the piece is fed again byte by
        byte from the state before it, so every byte decoded before the damage is kept.
        """
        head = raw.read(2)
        if head != GZIP_MAGIC:
            if head and self.path.lower().endswith(GZIP_SUFFIXES):
                self.damage = "not_gzip"
                return
            raw.seek(0)
            yield from iter(lambda: raw.read(self.block_bytes), b"")
            return
        raw.seek(0)
        yield from self._inflate(raw)

    def _inflate(self, raw: BinaryIO) -> Iterator[bytes]:
        """The decoded bytes of a gzip file, member after member, in pieces; sets `damage`."""
        inflater, data, fed = zlib.decompressobj(_GZIP_WBITS), b"", False
        while True:
            if not data:
                data = raw.read(_IN_BYTES)
                if not data:
                    if fed and not inflater.eof:
                        yield from filter(None, [inflater.flush()])  # bytes decoded before the cut
                        self.damage = "truncated_gzip"
                    return
            fed = True
            before = inflater.copy()
            try:
                piece = inflater.decompress(data, self.block_bytes)
            except zlib.error:
                for piece in self._salvage(before, data):
                    self.unverified += len(piece)
                    yield piece
                self.damage = "corrupt_gzip"
                return
            if piece:
                self.unverified += len(piece)
                yield piece
            if inflater.eof:  # the member's CRC and length checked; next member, if any
                self.unverified = 0
                inflater, data, fed = zlib.decompressobj(_GZIP_WBITS), inflater.unused_data, False
            else:
                data = inflater.unconsumed_tail

    @staticmethod
    def _salvage(inflater, data: bytes) -> Iterator[bytes]:
        """What `inflater` decodes from `data` fed byte by byte, up to the byte zlib rejects."""
        for i in range(len(data)):
            try:
                piece = inflater.decompress(data[i:i + 1])
            except zlib.error:
                return
            if piece:
                yield piece

    def _counted(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        for piece in pieces:
            self.bytes_uncompressed += len(piece)
            yield piece

    def _sniffed(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        """The pieces, unless the first SNIFF_BYTES are binary (then none, and damage = not_gzip)."""
        head, size = [], 0
        for piece in pieces:
            head.append(piece)
            size += len(piece)
            if size >= SNIFF_BYTES:
                break
        if _is_binary(b"".join(head)[:SNIFF_BYTES]):
            self.damage = "not_gzip"
            return
        yield from head
        yield from pieces

    def _too_long(self, head: bytes) -> QuarantineRecord:
        self.lines += 1
        return QuarantineRecord(self.path, self.lines, "line_too_long", raw_text(head))

    def _block(self, parts: list[bytes], at: int, cut: int) -> tuple[_Block, list[bytes]]:
        """(the block of parts[:at] and parts[at][:cut], the parts after it): one copy of the bytes."""
        block = b"".join([*parts[:at], memoryview(parts[at])[:cut]])
        first_line = self.lines + 1
        self.lines += count_newlines(np.frombuffer(block, dtype=np.uint8))
        return _Block(block, first_line), [parts[at][cut:], *parts[at + 1:]]

    def __iter__(self) -> Iterator[_Block | QuarantineRecord]:
        # Decoded pieces are held as they come and joined once, into a block of whole lines, when
        # their whole lines reach block_bytes (or before a line_too_long record, or at the end).
        parts: list[bytes] = []   # bytes not in a block yet
        size = 0                  # their length
        whole = 0                 # their length up to the end of their last newline (0: none)
        at = cut = 0              # that newline's end: parts[at][:cut]
        skipping = False  # inside a too-long line already reported: drop bytes up to its newline
        with open_input(self.path) as raw:   # a local path or an fsspec URL (wpultr.storage)
            for piece in self._sniffed(self._counted(self._pieces(raw))):
                if skipping:
                    newline = piece.find(b"\n")
                    if newline < 0:
                        continue
                    piece, skipping = piece[newline + 1:], False
                parts.append(piece)
                size += len(piece)
                newline = piece.rfind(b"\n")
                if newline >= 0:
                    at, cut, whole = len(parts) - 1, newline + 1, size - len(piece) + newline + 1
                if whole >= self.block_bytes or (whole and size - whole > MAX_LINE_BYTES):
                    block, parts = self._block(parts, at, cut)
                    yield block
                    size, whole = size - whole, 0
                if size - whole > MAX_LINE_BYTES:    # the bytes after the last newline: a line too long
                    yield self._too_long(b"".join(parts))
                    parts, size, skipping = [], 0, True
        if whole:
            block, parts = self._block(parts, at, cut)
            yield block
        pending = b"".join(parts)
        if self.damage in ("truncated_gzip", "corrupt_gzip"):
            self.cut = pending   # a line the damage cut short: never parsed, kept in the file record
        elif pending:
            yield _Block(pending + b"\n", self.lines + 1)
            self.lines += 1
        if self.damage is None and self.bytes_uncompressed == 0:
            self.damage = "empty_file"

    @property
    def unverifiable(self) -> bool:
        """The stream is corrupt and bytes were decoded from the member whose check failed: they may be garbage
        (flipped bytes decode without error until the CRC at the member's end)."""
        return self.damage == "corrupt_gzip" and self.unverified > 0

    def damage_record(self) -> QuarantineRecord | None:
        if self.damage is None:
            return None
        if self.damage in ("empty_file", "not_gzip"):   # the file as a whole: line 0
            return QuarantineRecord(self.path, 0, self.damage, "")
        return QuarantineRecord(self.path, self.lines + 1, self.damage, raw_text(self.cut))


def _is_binary(sample: bytes) -> bool:
    """Binary content: NUL bytes or invalid UTF-8 make up over a quarter of the sample."""
    if not sample:
        return False
    bad = sample.count(b"\x00") + sample.decode("utf-8", "replace").count("\ufffd")
    return 4 * bad > len(sample)


# ---------------------------------------------------------------------------------------------
# Column-wise parsing of one block
# ---------------------------------------------------------------------------------------------
def _bad_elements(array: pa.Array, convert: Callable[[pa.Array], object]) -> np.ndarray:
    """Mask of the elements `convert` rejects, found by bisection: one call when all are fine."""
    bad = np.zeros(len(array), dtype=bool)
    todo = [(0, len(array))]
    while todo:
        low, high = todo.pop()
        if high <= low:
            continue
        try:
            convert(array.slice(low, high - low))
        except pa.ArrowInvalid:
            if high - low == 1:
                bad[low] = True
            else:
                middle = (low + high) // 2
                todo += [(low, middle), (middle, high)]
    return bad


def _to_string(array: pa.Array) -> pa.Array:
    return array.cast(pa.string())


class _SplitLines:
    """One block's lines split on tabs: a field count per line, field text and token ids for the UTF-8 lines.

    The field boundaries come from one compiled pass over the block (baidu_kernels.field_starts);
    a column is gathered from the block's bytes only for the lines asked for.
    """

    def __init__(self, data: bytes):
        self.data = data
        self.bytes = np.frombuffer(data, dtype=np.uint8)
        self.starts, first_field = field_starts(self.bytes)
        self.first_field = first_field[:-1]
        self.n = len(self.first_field)
        self.n_fields = np.diff(first_field)
        self.offsets = self.starts[first_field]                 # line starts, then len(data)
        binary = pa.BinaryArray.from_buffers(
            pa.binary(), self.n, [None, pa.py_buffer(self.offsets.astype(np.int32)), pa.py_buffer(data)])
        self.utf8 = ~_bad_elements(binary, _to_string)
        length = np.diff(self.offsets) - 1                      # without the newline
        self.too_long = length > MAX_LINE_BYTES
        last = self.bytes[np.maximum(self.offsets[1:] - 2, 0)] if self.n else length
        self.blank = (length == 0) | ((length == 1) & (last == 13))   # "" or a lone "\r"
        self.n_fields[self.too_long] = 0  # fits no layout: quarantined, never parsed further

    def line(self, i: int) -> bytes:
        return self.data[self.offsets[i]:self.offsets[i + 1]]

    def texts(self, rows: np.ndarray) -> pa.StringArray:
        """The (UTF-8) lines `rows` as text, without their newline."""
        offsets, text = gather(self.bytes, self.offsets[rows], self.offsets[rows + 1] - 1)
        return pa.StringArray.from_buffers(len(rows), pa.py_buffer(offsets), pa.py_buffer(text))

    def _bounds(self, rows: np.ndarray, field: int) -> tuple[np.ndarray, np.ndarray]:
        index = self.first_field[rows] + field
        return self.starts[index], self.starts[index + 1] - 1

    def column(self, rows: np.ndarray, field: int) -> pa.StringArray:
        """Field `field` of the (UTF-8) lines `rows`, without its tab or newline."""
        offsets, text = gather(self.bytes, *self._bounds(rows, field))
        return pa.StringArray.from_buffers(len(rows), pa.py_buffer(offsets), pa.py_buffer(text))

    def tokens(self, rows: np.ndarray, field: int) -> tuple[pa.ListArray, np.ndarray, np.ndarray, np.ndarray]:
        """(token lists as list<int32>, bad rows, rows without a token, empty tokens skipped per row) of
        field `field` of the lines `rows`, ids joined by \\x01: an empty field is no token, an empty
        token ("1\\x01\\x012", "1\\x01") is skipped, a token not 1 to 10 digits below 2^31 is bad."""
        offsets, ids, bad, skipped = parse_tokens(self.bytes, *self._bounds(rows, field))
        tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids), type=TOKEN_TYPE)
        return tokens, bad, np.diff(offsets) == 0, skipped

    def floats(self, rows: np.ndarray, fields: Sequence[int]) -> list[tuple[pa.Array, np.ndarray]]:
        """Per field of `fields`, (float64 values with NaN for '-', empty and bad cells, bad) of the lines
        `rows`: compiled, line by line, where every cell is a plain decimal (the usual case), else as
        _parse_float decides."""
        values, plain = parse_plain_decimals(self.bytes, self.starts, self.first_field[rows],
                                             np.asarray(fields, dtype=np.int64))
        ok = np.zeros(len(rows), dtype=bool)
        return [(pa.array(values[c]), ok) if plain[c] else _parse_float(self.column(rows, field))
                for c, field in enumerate(fields)]


def _wide_query(lines: _SplitLines) -> np.ndarray:
    """Mask of the lines of QUERY_LIKE_MAX_FIELDS + 1 to 31 fields whose second field is a token list (digits and
    \\x01 only, or empty): a query line with extra tabs, never a result line (whose second field is its url_md5)."""
    wide = np.zeros(lines.n, dtype=bool)
    rows = np.flatnonzero((lines.n_fields > QUERY_LIKE_MAX_FIELDS) & (lines.n_fields < BAIDU_N_RESULT_FIELDS)
                          & lines.utf8)
    if len(rows):
        tokens = pc.match_substring_regex(lines.column(rows, 1), "^[0-9\x01]*$")
        wide[rows] = pc.fill_null(tokens, False).to_numpy(zero_copy_only=False)
    return wide


def _all_digits(column: pa.Array) -> bool:
    """True when every byte of every string in `column` is an ASCII digit (one pass over its bytes)."""
    if column.null_count or column.buffers()[2] is None:
        return False
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)[column.offset:column.offset + len(column) + 1]
    data = np.frombuffer(column.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    return len(data) == 0 or (int(data.min()) >= ord("0") and int(data.max()) <= ord("9"))


def _parse_uint(column: pa.Array, max_digits: int = _MAX_INT_DIGITS) -> tuple[np.ndarray, np.ndarray]:
    """(values, bad): 1 to `max_digits` plain ASCII digits; 0 where bad."""
    if len(column) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    lengths = pc.min_max(pc.binary_length(column)).as_py()
    if lengths["min"] >= 1 and lengths["max"] <= max_digits and _all_digits(column):  # the usual case
        return pc.cast(column, pa.int64()).to_numpy(), np.zeros(len(column), dtype=bool)
    ok = pc.and_(pc.ascii_is_decimal(column), pc.less_equal(pc.binary_length(column), max_digits))
    values = pc.cast(pc.if_else(ok, column, "0"), pa.int64()).to_numpy()
    return values, ~ok.to_numpy(zero_copy_only=False)


def _parse_id(column: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(the ids as written, bad): a query id is 1 to QUERY_ID_MAX_DIGITS ASCII digits, kept as text."""
    if len(column) == 0:
        return column, np.zeros(0, dtype=bool)
    lengths = pc.min_max(pc.binary_length(column)).as_py()
    if lengths["min"] >= 1 and lengths["max"] <= QUERY_ID_MAX_DIGITS and _all_digits(column):  # the usual case
        return column, np.zeros(len(column), dtype=bool)
    ok = pc.match_substring_regex(column, f"^[0-9]{{1,{QUERY_ID_MAX_DIGITS}}}$")
    return column, ~pc.fill_null(ok, False).to_numpy(zero_copy_only=False)


def _to_float(array: pa.Array) -> pa.Array:
    return pc.cast(array, pa.float64())


def _parse_float(column: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(float64 values with NaN for '-', empty and bad cells, bad): bad = pyarrow cannot parse it."""
    present = pc.if_else(pc.is_in(column, value_set=pa.array(["-", ""])), pa.scalar(None, pa.string()), column)
    try:
        values = _to_float(present)
        bad = np.zeros(len(column), dtype=bool)
    except pa.ArrowInvalid:
        bad = _bad_elements(present, _to_float)
        values = _to_float(pc.if_else(pa.array(bad), pa.scalar(None, pa.string()), present))
    bad |= ~pc.fill_null(pc.is_finite(values), True).to_numpy(zero_copy_only=False)   # nan, inf, 1e400
    return pc.fill_null(values, np.nan), bad


def _line_reasons(lines: _SplitLines, fits: np.ndarray) -> np.ndarray:
    """Reason codes every layout shares: line_too_long, wrong_field_count, then not_utf8."""
    reasons = np.zeros(lines.n, dtype=np.int16)
    reasons[lines.too_long] = _CODE["line_too_long"]
    reasons[~fits & ~lines.too_long] = _CODE["wrong_field_count"]
    reasons[fits & ~lines.utf8] = _CODE["not_utf8"]
    return reasons


def _flag(reasons: np.ndarray, rows: np.ndarray, bad: np.ndarray, reason: str) -> None:
    """Give `reason` to the bad `rows` that have no reason yet (earlier fields win)."""
    target = rows[bad]
    reasons[target] = np.where(reasons[target] == 0, _CODE[reason], reasons[target])


def _keeper(good: np.ndarray) -> Callable[[pa.Array], pa.Array]:
    """A function keeping the `good` elements of an array: the array itself when all are (no copy)."""
    if good.all():
        return lambda array: array
    mask = pa.array(good)
    return lambda array: array.filter(mask)


def _records(path: str, lines: _SplitLines, first_line: int, reasons: np.ndarray) -> list[QuarantineRecord]:
    return [QuarantineRecord(path, first_line + int(i), _REASON_NAMES[reasons[i] - 1], raw_text(lines.line(i)))
            for i in np.flatnonzero(reasons)]


# ---------------------------------------------------------------------------------------------
# Session logs
# ---------------------------------------------------------------------------------------------
@dataclass
class _OpenSession:
    """The session whose results may continue in the next block."""

    ordinal: int
    ok: bool
    query_id: pa.Array       # one string element (null for a broken query line)
    tokens: pa.Array         # one list<int32> element
    reformulation: pa.Array  # one string element
    line: int
    text: bytes
    good: int                # usable results so far
    positions: int           # bit p set: a kept result holds position p


class _SessionLogParser:
    """Parses one session log block by block, carrying the open session across block boundaries."""

    def __init__(self, path: str, file_index: int, chunk_bytes: int = CHUNK_BYTES):
        if not 0 <= file_index < _MAX_FILES:
            raise ValueError(f"{path}: file index {file_index} outside 0..{_MAX_FILES - 1} (session id layout)")
        self.path = path
        self.file_index = file_index
        self.reader = _BlockReader(path, chunk_bytes)
        self.open: _OpenSession | None = None
        self.next_ordinal = 0
        self.sessions = 0
        self.results = 0
        self.layout_lines = 0    # lines with a query's or a result's field count: is this a Baidu log at all?
        self.mapped: Counter[str] = Counter()

    def chunks(self) -> Iterator[tuple[pa.Table, list[QuarantineRecord]]]:
        """(sessions rows, quarantine records) per block, in file order; closes the last session at the end."""
        for item in self.reader:
            if isinstance(item, QuarantineRecord):
                yield _SESSIONS_SCHEMA.empty_table(), [item]
            else:
                yield self._parse(item)
        tail = [r for r in (self._close(self.open), self.reader.damage_record()) if r is not None]
        self.open = None
        if tail:
            yield _SESSIONS_SCHEMA.empty_table(), tail

    def _close(self, session: _OpenSession | None) -> QuarantineRecord | None:
        if session is None or not session.ok:
            return None
        if session.good == 0:
            return QuarantineRecord(self.path, session.line, "empty_session", raw_text(session.text))
        self.sessions += 1
        return None

    def _parse(self, block: _Block) -> tuple[pa.Table, list[QuarantineRecord]]:
        lines = _SplitLines(block.data)
        query_like = (((lines.n_fields >= 1) & (lines.n_fields <= QUERY_LIKE_MAX_FIELDS) & ~lines.blank)
                      | _wide_query(lines))
        kind = np.select([lines.n_fields == _QUERY_FIELD_COUNT, lines.n_fields == BAIDU_N_RESULT_FIELDS, query_like],
                         [_QUERY, _RESULT, _BROKEN_QUERY], _OTHER)
        self.layout_lines += int(np.count_nonzero((kind == _QUERY) | (kind == _RESULT)))
        reasons = _line_reasons(lines, (kind == _QUERY) | (kind == _RESULT))

        # Session-opening lines (query lines, broken or not): the sessions opened in this block,
        # after the one carried in (if any).
        q_lines = np.flatnonzero((kind == _QUERY) | (kind == _BROKEN_QUERY))
        parsed = (kind[q_lines] == _QUERY) & lines.utf8[q_lines]
        q_parsed = q_lines[parsed]
        q_ids, bad_ids = _parse_id(lines.column(q_parsed, 0))
        q_tokens, bad_tokens, empty, q_skipped = lines.tokens(q_parsed, 1)
        q_reformulation = pc.utf8_rtrim(lines.column(q_parsed, 2), characters="\r\n")
        _flag(reasons, q_parsed, bad_ids, "bad_query_id")
        _flag(reasons, q_parsed, empty, "empty_query")
        _flag(reasons, q_parsed, bad_tokens, "bad_token_id")
        self.mapped[_MAPPED_TOKEN] += int(q_skipped[reasons[q_parsed] == 0].sum())
        where_parsed = np.full(len(q_lines), -1)
        where_parsed[parsed] = np.arange(len(q_parsed))
        pick = pa.array(where_parsed, mask=where_parsed < 0)
        carried = self.open is not None
        head = [self.open] if carried else []
        s_ok = np.concatenate(([self.open.ok] if carried else [], reasons[q_lines] == 0)).astype(bool)
        s_query_id = pa.concat_arrays([s.query_id for s in head] + [q_ids.take(pick)])
        s_tokens = pa.concat_arrays([s.tokens for s in head] + [q_tokens.take(pick)])
        s_reformulation = pa.concat_arrays([s.reformulation for s in head] + [q_reformulation.take(pick)])
        s_ordinal = np.concatenate(([self.open.ordinal] if carried else [],
                                    self.next_ordinal + np.arange(len(q_lines)))).astype(np.int64)
        self.next_ordinal += len(q_lines)
        opens = (kind == _QUERY) | (kind == _BROKEN_QUERY)
        session_of_line = np.cumsum(opens) - 1 + int(carried)  # -1: before any session-opening line

        # Result lines: own defects first, then the session they belong to.
        r_lines = np.flatnonzero(kind == _RESULT)
        rows = r_lines[lines.utf8[r_lines]]
        column = {name: lines.column(rows, _RESULT_COLUMN[name])
                  for name in (POSITION, DOC_ID_SOURCE, MEDIA_TYPE, CLICK)}
        position, bad = _parse_uint(column[POSITION], 2)
        _flag(reasons, rows, bad | (position < 1) | (position > BAIDU_MAX_POSITION), "bad_position")
        title, bad_title, _, title_skipped = lines.tokens(rows, _RESULT_COLUMN[TITLE_TOKENS])
        abstract, bad_abstract, _, abstract_skipped = lines.tokens(rows, _RESULT_COLUMN[ABSTRACT_TOKENS])
        _flag(reasons, rows, bad_title | bad_abstract, "bad_token_id")
        dash = pc.equal(column[MEDIA_TYPE], "-").to_numpy(zero_copy_only=False)
        media_type, bad = _parse_uint(pc.if_else(pa.array(dash), "0", column[MEDIA_TYPE]))
        media_type = np.where(dash, BAIDU_MEDIA_TYPE_DASH, media_type)
        _flag(reasons, rows, bad, "bad_media_type")
        click, bad = _parse_uint(column[CLICK], 1)
        _flag(reasons, rows, bad | (click > 1), "bad_click")
        behaviour = {}
        parsed = lines.floats(rows, [_RESULT_COLUMN[name] for name in BAIDU_BEHAVIOUR_COLUMNS])
        for name, (values, bad) in zip(BAIDU_BEHAVIOUR_COLUMNS, parsed, strict=True):
            behaviour[name] = values
            _flag(reasons, rows, bad, "bad_number")
        session = session_of_line[r_lines]
        orphan = session < 0
        broken = np.zeros(len(r_lines), dtype=bool)
        broken[~orphan] = ~s_ok[session[~orphan]]
        _flag(reasons, r_lines, orphan, "orphan_result")
        _flag(reasons, r_lines, broken, "broken_query_line")
        self._flag_duplicates(reasons, rows, session_of_line[rows], position, carried)

        good = reasons[rows] == 0
        good_session = session_of_line[rows[good]]
        self.mapped[_MAPPED_MEDIA] += int(np.count_nonzero(dash[good]))
        self.mapped[_MAPPED_TOKEN] += int(title_skipped[good].sum() + abstract_skipped[good].sum())
        keep = _keeper(good)
        take = pa.array(good_session)
        table = pa.Table.from_arrays([
            pa.array((self.file_index << FILE_INDEX_SHIFT) | s_ordinal[good_session]),
            s_query_id.take(take),
            pa.array(position[good].astype(np.int16)),
            pa.array(click[good].astype(np.int8)),
            keep(column[DOC_ID_SOURCE]),
            s_tokens.take(take),
            s_reformulation.take(take),
            keep(title),
            keep(abstract),
            pa.array(media_type[good]),
            *(keep(behaviour[name]) for name in BAIDU_BEHAVIOUR_COLUMNS),
        ], schema=_SESSIONS_SCHEMA)
        self.results += table.num_rows

        records = _records(self.path, lines, block.first_line, reasons)
        positions = np.left_shift(1, position[good].astype(np.int64))
        records += self._roll_sessions(lines, block.first_line, q_lines, s_ok, s_query_id, s_tokens, s_reformulation,
                                       s_ordinal, np.bincount(good_session, minlength=len(s_ok)),
                                       int(np.bitwise_or.reduce(positions[good_session == len(s_ok) - 1],
                                                                initial=0)), carried)
        return table, sorted(records, key=lambda r: r.line)

    def _flag_duplicates(self, reasons: np.ndarray, rows: np.ndarray, session: np.ndarray, position: np.ndarray,
                         carried: bool) -> None:
        """duplicate_position for each otherwise good result whose session already holds its position."""
        good = reasons[rows] == 0
        if not good.any():
            return
        key = session[good] * (BAIDU_MAX_POSITION + 1) + position[good]
        repeat = np.ones(len(key), dtype=bool)
        repeat[np.unique(key, return_index=True)[1]] = False       # the first of each (session, position)
        if carried and self.open.positions:
            held = (np.right_shift(self.open.positions, position[good]) & 1).astype(bool)
            repeat |= (session[good] == 0) & held
        _flag(reasons, rows[good], repeat, "duplicate_position")

    def _roll_sessions(self, lines: _SplitLines, first_line: int, q_lines: np.ndarray, s_ok: np.ndarray,
                       s_query_id: pa.Array, s_tokens: pa.Array, s_reformulation: pa.Array, s_ordinal: np.ndarray,
                       good_counts: np.ndarray, last_positions: int, carried: bool) -> list[QuarantineRecord]:
        """Close every session that ended in this block (all but the last) and carry the last one on."""
        if len(s_ok) == 0:
            return []
        total = good_counts.copy()
        if carried:
            total[0] += self.open.good
        closed_ok = s_ok[:-1]
        self.sessions += int(np.count_nonzero(closed_ok & (total[:-1] > 0)))
        records = []
        for j in np.flatnonzero(closed_ok & (total[:-1] == 0)):
            if carried and j == 0:
                line, text = self.open.line, self.open.text
            else:
                line, text = first_line + int(q_lines[j - carried]), lines.line(int(q_lines[j - carried]))
            records.append(QuarantineRecord(self.path, line, "empty_session", raw_text(text)))
        last = len(s_ok) - 1
        if carried and last == 0:
            self.open.good = int(total[0])
            self.open.positions |= last_positions
        else:
            q = int(q_lines[last - carried])
            self.open = _OpenSession(ordinal=int(s_ordinal[last]), ok=bool(s_ok[last]),
                                     query_id=s_query_id.slice(last, 1), tokens=s_tokens.slice(last, 1),
                                     reformulation=s_reformulation.slice(last, 1),
                                     line=first_line + q, text=lines.line(q), good=int(total[last]),
                                     positions=last_positions)
        return records


def _unverified_record(path: str, reader: _BlockReader, rows: int) -> QuarantineRecord:
    """The one record left of a file whose gzip check failed after bytes were decoded: every line is dropped."""
    return QuarantineRecord(path, 1, "corrupt_gzip",
                            f"lines 1-{reader.lines} dropped ({rows} rows): a gzip member failed its check after "
                            f"{reader.unverified} decoded bytes, so nothing of the file is known intact")


def read_baidu_sessions(path: str | Path, file_index: int = 0,
                        chunk_bytes: int = CHUNK_BYTES) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read one session log serially into (sessions, quarantine) frames; for small files and checks."""
    parser = _SessionLogParser(str(path), file_index, chunk_bytes)
    tables, records = [], []
    for table, bad in parser.chunks():
        tables.append(table)
        records += bad
    if parser.reader.unverifiable:
        tables, records = [], [_unverified_record(parser.path, parser.reader, parser.results)]
    sessions = pa.concat_tables([_SESSIONS_SCHEMA.empty_table(), *tables])
    return sessions.to_pandas(), quarantine_frame(sorted(records, key=lambda r: r.line))


def _row_groups(chunks: Iterator[tuple[pa.Table, list[QuarantineRecord]]], quarantine: QuarantineWriter
                ) -> Iterator[list[pa.Table]]:
    """The parsed tables in runs of ROW_GROUP_ROWS rows or more (the last run shorter), each to be one
    row group; the quarantine records go to `quarantine` as they come.

    A block parses into about 12 000 rows; a row group of one block each was a tenth more CPU to
    write and a tenth larger (a dictionary per column per row group) than one of 65 536 rows.
    """
    run, rows = [], 0
    for table, records in chunks:
        quarantine.add(records)
        if table.num_rows:
            run.append(table)
            rows += table.num_rows
        if rows >= ROW_GROUP_ROWS:
            yield run
            run, rows = [], 0
    if run:
        yield run


def _ingest_file(path: str, file_index: int, sessions_dir: str, quarantine_dir: str, partition_rows: int,
                 chunk_bytes: int) -> IngestSummary:
    """One worker task: parse one log, write its partitions and quarantine file, return a small summary."""
    parser = _SessionLogParser(path, file_index, chunk_bytes)
    partitions = SessionPartitionWriter(sessions_dir, file_index, partition_rows, _SESSIONS_PARQUET)
    quarantine_path = Path(quarantine_dir) / f"part-{file_index:05d}.parquet"
    quarantine = QuarantineWriter(quarantine_path)
    try:
        with large_blocks_kept():   # glibc reuses the freed multi-MB blocks (see memory.py)
            for tables in _row_groups(parser.chunks(), quarantine):
                partitions.write(pa.concat_tables(tables))
        partitions.close()
        _check_layout(parser)
    except BaseException:
        partitions.abort()
        quarantine.abort()
        raise
    if parser.reader.unverifiable:
        return _drop_unverified(parser, partitions, quarantine, size(path))
    quarantine.close()
    summary = IngestSummary(files=1, lines=parser.reader.lines, sessions=parser.sessions,
                            results=parser.results, bytes_read=size(path),
                            bytes_uncompressed=parser.reader.bytes_uncompressed,
                            partitions=partitions.partitions,
                            damaged_files=[path] if parser.reader.damage else [])
    summary.add_records(quarantine.counts)
    summary.add_mapped(parser.mapped)
    return summary


def _check_layout(parser: _SessionLogParser) -> None:
    """SchemaError when a readable file holds lines but none with a query's or a result's field count."""
    reader = parser.reader
    if reader.damage is None and reader.lines and not parser.layout_lines:
        raise SchemaError(f"{parser.path}: not a Baidu-ULTR session log: none of its {reader.lines} lines has "
                          f"{_QUERY_FIELD_COUNT} (query) or {BAIDU_N_RESULT_FIELDS} (result) tab-separated fields")


def _drop_unverified(parser: _SessionLogParser, partitions: SessionPartitionWriter, quarantine: QuarantineWriter,
                     bytes_read: int) -> IngestSummary:
    """A file whose gzip check failed: its partitions (this ingest's own, still in its temporary directory) and
    line records are dropped; one corrupt_gzip record names the lines, the summary counts them and their rows."""
    for k in range(partitions.partitions):
        (partitions.directory / partition_name(parser.file_index, k)).unlink()
    quarantine.abort()
    replacement = QuarantineWriter(quarantine.path)
    replacement.add([_unverified_record(parser.path, parser.reader, parser.results)])
    replacement.close()
    summary = IngestSummary(files=1, lines=parser.reader.lines, bytes_read=bytes_read,
                            bytes_uncompressed=parser.reader.bytes_uncompressed, damaged_files=[parser.path],
                            unverified_lines=parser.reader.lines, unverified_rows=parser.results)
    summary.add_records(replacement.counts)
    return summary


def check_log_names(files: Sequence[str]) -> None:
    """SchemaError naming the first file whose name is not a session log's: LOG_SUFFIXES, or no suffix."""
    for f in files:
        name = f.rstrip("/").rsplit("/", 1)[-1].lower()
        if "." in name.lstrip(".") and not name.endswith(LOG_SUFFIXES):
            raise SchemaError(f"{f}: not a Baidu-ULTR session log by its name; expected gzip "
                              f"({', '.join(GZIP_SUFFIXES)}) or text ({', '.join(TEXT_SUFFIXES)}, or no suffix); "
                              f"tables (.parquet, .csv) go with --format table")


def ingest_baidu(paths: Sequence[str | Path], out_dir: str | Path, client, partition_rows: int = 200_000,
                 chunk_bytes: int = CHUNK_BYTES, key: str = "--out") -> IngestSummary:
    """Ingest Baidu-ULTR session logs on the Dask `client`, one task per file (in this process when it is None).

    Workers write out_dir/sessions/part-<file#>-<k>.parquet and out_dir/quarantine/part-<file#>.parquet
    themselves (so out_dir must be on a file system every worker sees); only summaries travel back. Both
    directories are written under temporary names and swapped into place when every file is done
    (tables.ingest_output); `key` names out_dir in a refusal.
    """
    from ..progress import ingest_rates
    files, duplicates = checked_paths(paths)
    check_log_names(files)
    with ingest_output(out_dir, files, key, client) as output:
        summary = IngestSummary.combine(map_files(
            client, _ingest_file, files, ingest_rates, sessions_dir=str(output.sessions),
            quarantine_dir=str(output.quarantine), partition_rows=partition_rows, chunk_bytes=chunk_bytes))
    summary.duplicate_inputs = duplicates
    return summary


# ---------------------------------------------------------------------------------------------
# Annotation file
# ---------------------------------------------------------------------------------------------
def _doc_ids(title: pa.Array, abstract: pa.Array) -> pa.Array:
    """Stable document ids: md5 of the title and abstract token text as written in the file."""
    return pa.array([hashlib.md5(f"{t}\t{a}".encode()).hexdigest()
                     for t, a in zip(title.to_pylist(), abstract.to_pylist(), strict=True)], type=pa.string())


def _parse_annotation_block(path: str, block: _Block
                            ) -> tuple[pa.Table, list[QuarantineRecord], int, np.ndarray, pa.StringArray]:
    """(rows, records, empty tokens skipped in the kept rows, the kept rows' line numbers and texts) of one block
    of the annotation file."""
    lines = _SplitLines(block.data)
    fits = lines.n_fields == _ANNOTATION_FIELD_COUNT
    reasons = _line_reasons(lines, fits)
    rows = np.flatnonzero(fits & lines.utf8)
    query_id, bad = _parse_id(lines.column(rows, 0))
    _flag(reasons, rows, bad, "bad_query_id")
    query, bad, empty, query_skipped = lines.tokens(rows, 1)
    _flag(reasons, rows, empty, "empty_query")
    _flag(reasons, rows, bad, "bad_token_id")
    title_text, abstract_text = lines.column(rows, 2), lines.column(rows, 3)
    title, bad_title, _, title_skipped = lines.tokens(rows, 2)
    abstract, bad_abstract, _, abstract_skipped = lines.tokens(rows, 3)
    _flag(reasons, rows, bad_title | bad_abstract, "bad_token_id")
    label, bad = _parse_uint(lines.column(rows, 4), 1)
    _flag(reasons, rows, bad | (label > MAX_LABEL), "bad_label")
    bucket, bad = _parse_uint(pc.utf8_rtrim(lines.column(rows, 5), characters="\r\n"), 1)
    _flag(reasons, rows, bad | (bucket >= N_BUCKETS), "bad_bucket")
    good = reasons[rows] == 0
    keep = pa.array(good)
    table = pa.Table.from_arrays([
        query_id.filter(keep), pa.array(label[good].astype(np.int8)), pa.array(bucket[good].astype(np.int8)),
        query.filter(keep), title.filter(keep), abstract.filter(keep),
        _doc_ids(title_text.filter(keep), abstract_text.filter(keep)),
    ], schema=_ANNOTATIONS_SCHEMA)
    skipped = int((query_skipped + title_skipped + abstract_skipped)[good].sum())
    return (table, _records(path, lines, block.first_line, reasons), skipped, block.first_line + rows[good],
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
                      ) -> tuple[pa.Table, list[QuarantineRecord], _BlockReader, Counter[str]]:
    if not is_file(path):
        raise FileNotFoundError(f"{path}: no such annotation file")
    reader = _BlockReader(path, chunk_bytes)
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
        mapped[_MAPPED_TOKEN] += skipped
    table, repeats = _judged_once(path, pa.concat_tables(tables), np.concatenate(lines), pa.concat_arrays(texts))
    records = sorted(records + repeats, key=lambda r: r.line)
    if reader.unverifiable:   # as for session logs: nothing decoded from a member that failed its check is kept
        return _ANNOTATIONS_SCHEMA.empty_table(), [_unverified_record(path, reader, table.num_rows)], reader, Counter()
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
