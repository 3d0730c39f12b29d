"""Session assembly: a session log parsed block by block into rows of the sessions table, the open session carried
across block boundaries, session ids numbered by file and query line (io/baidu's rules)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ...schema import (
    ABSTRACT_TOKENS,
    BAIDU_BEHAVIOUR_COLUMNS,
    BAIDU_MAX_POSITION,
    BAIDU_MEDIA_TYPE_DASH,
    BAIDU_N_RESULT_FIELDS,
    BAIDU_QUERY_FIELDS,
    BAIDU_RESULT_FIELDS,
    CLICK,
    MEDIA_TYPE,
    POSITION,
    TITLE_TOKENS,
    baidu_sessions_arrow_schema,
)
from ..quarantine import QuarantineRecord, quarantine_frame, raw_text
from .blocks import CHUNK_BYTES, Block, BlockReader, unverified_record
from .lines import (
    MAPPED_MEDIA,
    MAPPED_TOKEN,
    QUERY_LIKE_MAX_FIELDS,
    SplitLines,
    flag,
    keeper,
    line_reasons,
    parse_id,
    parse_uint,
    quarantine_records,
    wide_query,
)

FILE_INDEX_SHIFT = 40          # session_id = file_index << 40 | query-line ordinal
DOC_ID_SOURCE = "url_md5"      # the result column that becomes doc_id
_MAX_FILES = 1 << (63 - FILE_INDEX_SHIFT)
QUERY_FIELD_COUNT = len(BAIDU_QUERY_FIELDS)
_RESULT_COLUMN = {name: i for i, name in enumerate(BAIDU_RESULT_FIELDS) if name}
SESSIONS_SCHEMA = baidu_sessions_arrow_schema()
_OTHER, _QUERY, _RESULT, _BROKEN_QUERY = 0, 1, 2, 3



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


class SessionLogParser:
    """Parses one session log block by block, carrying the open session across block boundaries."""

    def __init__(self, path: str, file_index: int, chunk_bytes: int = CHUNK_BYTES):
        if not 0 <= file_index < _MAX_FILES:
            raise ValueError(f"{path}: file index {file_index} outside 0..{_MAX_FILES - 1} (session id layout)")
        self.path = path
        self.file_index = file_index
        self.reader = BlockReader(path, chunk_bytes)
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
                yield SESSIONS_SCHEMA.empty_table(), [item]
            else:
                yield self._parse(item)
        tail = [r for r in (self._close(self.open), self.reader.damage_record()) if r is not None]
        self.open = None
        if tail:
            yield SESSIONS_SCHEMA.empty_table(), tail

    def _close(self, session: _OpenSession | None) -> QuarantineRecord | None:
        if session is None or not session.ok:
            return None
        if session.good == 0:
            return QuarantineRecord(self.path, session.line, "empty_session", raw_text(session.text))
        self.sessions += 1
        return None

    def _parse(self, block: Block) -> tuple[pa.Table, list[QuarantineRecord]]:
        lines = SplitLines(block.data)
        query_like = (((lines.n_fields >= 1) & (lines.n_fields <= QUERY_LIKE_MAX_FIELDS) & ~lines.blank)
                      | wide_query(lines))
        kind = np.select([lines.n_fields == QUERY_FIELD_COUNT, lines.n_fields == BAIDU_N_RESULT_FIELDS, query_like],
                         [_QUERY, _RESULT, _BROKEN_QUERY], _OTHER)
        self.layout_lines += int(np.count_nonzero((kind == _QUERY) | (kind == _RESULT)))
        reasons = line_reasons(lines, (kind == _QUERY) | (kind == _RESULT))

        # Session-opening lines (query lines, broken or not): the sessions opened in this block,
        # after the one carried in (if any).
        q_lines = np.flatnonzero((kind == _QUERY) | (kind == _BROKEN_QUERY))
        parsed = (kind[q_lines] == _QUERY) & lines.utf8[q_lines]
        q_parsed = q_lines[parsed]
        q_ids, bad_ids = parse_id(lines.column(q_parsed, 0))
        q_tokens, bad_tokens, empty, q_skipped = lines.tokens(q_parsed, 1)
        q_reformulation = pc.utf8_rtrim(lines.column(q_parsed, 2), characters="\r\n")
        flag(reasons, q_parsed, bad_ids, "bad_query_id")
        flag(reasons, q_parsed, empty, "empty_query")
        flag(reasons, q_parsed, bad_tokens, "bad_token_id")
        self.mapped[MAPPED_TOKEN] += int(q_skipped[reasons[q_parsed] == 0].sum())
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
        position, bad = parse_uint(column[POSITION], 2)
        flag(reasons, rows, bad | (position < 1) | (position > BAIDU_MAX_POSITION), "bad_position")
        title, bad_title, _, title_skipped = lines.tokens(rows, _RESULT_COLUMN[TITLE_TOKENS])
        abstract, bad_abstract, _, abstract_skipped = lines.tokens(rows, _RESULT_COLUMN[ABSTRACT_TOKENS])
        flag(reasons, rows, bad_title | bad_abstract, "bad_token_id")
        dash = pc.equal(column[MEDIA_TYPE], "-").to_numpy(zero_copy_only=False)
        media_type, bad = parse_uint(pc.if_else(pa.array(dash), "0", column[MEDIA_TYPE]))
        media_type = np.where(dash, BAIDU_MEDIA_TYPE_DASH, media_type)
        flag(reasons, rows, bad, "bad_media_type")
        click, bad = parse_uint(column[CLICK], 1)
        flag(reasons, rows, bad | (click > 1), "bad_click")
        behaviour = {}
        parsed = lines.floats(rows, [_RESULT_COLUMN[name] for name in BAIDU_BEHAVIOUR_COLUMNS])
        for name, (values, bad) in zip(BAIDU_BEHAVIOUR_COLUMNS, parsed, strict=True):
            behaviour[name] = values
            flag(reasons, rows, bad, "bad_number")
        session = session_of_line[r_lines]
        orphan = session < 0
        broken = np.zeros(len(r_lines), dtype=bool)
        broken[~orphan] = ~s_ok[session[~orphan]]
        flag(reasons, r_lines, orphan, "orphan_result")
        flag(reasons, r_lines, broken, "broken_query_line")
        self._flag_duplicates(reasons, rows, session_of_line[rows], position, carried)

        good = reasons[rows] == 0
        good_session = session_of_line[rows[good]]
        self.mapped[MAPPED_MEDIA] += int(np.count_nonzero(dash[good]))
        self.mapped[MAPPED_TOKEN] += int(title_skipped[good].sum() + abstract_skipped[good].sum())
        keep = keeper(good)
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
        ], schema=SESSIONS_SCHEMA)
        self.results += table.num_rows

        records = quarantine_records(self.path, lines, block.first_line, reasons)
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
        flag(reasons, rows[good], repeat, "duplicate_position")

    def _roll_sessions(self, lines: SplitLines, first_line: int, q_lines: np.ndarray, s_ok: np.ndarray,
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


def read_baidu_sessions(path: str | Path, file_index: int = 0,
                        chunk_bytes: int = CHUNK_BYTES) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read one session log serially into (sessions, quarantine) frames; for small files and checks."""
    parser = SessionLogParser(str(path), file_index, chunk_bytes)
    tables, records = [], []
    for table, bad in parser.chunks():
        tables.append(table)
        records += bad
    if parser.reader.unverifiable:
        tables, records = [], [unverified_record(parser.path, parser.reader, parser.results)]
    sessions = pa.concat_tables([SESSIONS_SCHEMA.empty_table(), *tables])
    return sessions.to_pandas(), quarantine_frame(sorted(records, key=lambda r: r.line))
