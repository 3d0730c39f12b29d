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
  in row groups of about ROW_GROUP_ROWS rows, the token-id lists delta-packed (driver._sessions_parquet_options).
  Quarantine records are written in line order, except that an empty_session record is written
  when its session ends (after the records of its result lines); sort by line to read them in order.

One module per job: `blocks` (blocks of whole lines, gzip members and their CRC, salvage of a damaged stream),
`lines` (a block split on tabs and parsed column-wise, each line's quarantine reason), `sessions` (session
assembly), `driver` (one Dask task per file, partitions and quarantine written), `annotations` (the annotation
file). The names below are the package's public ones.
"""
from __future__ import annotations

from .annotations import ingest_baidu_annotations, read_baidu_annotations
from .blocks import CHUNK_BYTES, GZIP_MAGIC, GZIP_SUFFIXES, MAX_LINE_BYTES, SNIFF_BYTES
from .driver import LOG_SUFFIXES, ROW_GROUP_ROWS, TEXT_SUFFIXES, check_log_names, ingest_baidu
from .lines import QUERY_LIKE_MAX_FIELDS
from .sessions import DOC_ID_SOURCE, FILE_INDEX_SHIFT, read_baidu_sessions

__all__ = ["CHUNK_BYTES", "DOC_ID_SOURCE", "FILE_INDEX_SHIFT", "GZIP_MAGIC", "GZIP_SUFFIXES", "LOG_SUFFIXES",
           "MAX_LINE_BYTES", "QUERY_LIKE_MAX_FIELDS", "ROW_GROUP_ROWS", "SNIFF_BYTES", "TEXT_SUFFIXES",
           "check_log_names", "ingest_baidu", "ingest_baidu_annotations", "read_baidu_annotations",
           "read_baidu_sessions"]
