"""Column-wise parsing of one block of a Baidu-ULTR file: lines split on tabs in one compiled pass, token ids and
numbers read as whole arrays, each line's quarantine reason (io/baidu's rules)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...schema import BAIDU_N_RESULT_FIELDS, QUERY_ID_MAX_DIGITS, TOKEN_TYPE
from ..baidu_kernels import field_starts, gather, parse_plain_decimals, parse_tokens
from ..quarantine import REASONS, QuarantineRecord, raw_text
from .blocks import MAX_LINE_BYTES

QUERY_LIKE_MAX_FIELDS = 16     # a non-blank line of 1..16 fields (not 3) is a broken query line
_MAX_INT_DIGITS = 18           # always fits int64
MAPPED_MEDIA, MAPPED_TOKEN = "media_type_dash", "empty_token"   # quarantine.MAPPED_VALUES keys

# Reason codes for vectorised bookkeeping: 0 = line is fine, i + 1 = the i-th reason.
_REASON_NAMES: tuple[str, ...] = tuple(REASONS)
_CODE = {name: i + 1 for i, name in enumerate(_REASON_NAMES)}



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


class SplitLines:
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


def wide_query(lines: SplitLines) -> np.ndarray:
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


def parse_uint(column: pa.Array, max_digits: int = _MAX_INT_DIGITS) -> tuple[np.ndarray, np.ndarray]:
    """(values, bad): 1 to `max_digits` plain ASCII digits; 0 where bad."""
    if len(column) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    lengths = pc.min_max(pc.binary_length(column)).as_py()
    if lengths["min"] >= 1 and lengths["max"] <= max_digits and _all_digits(column):  # the usual case
        return pc.cast(column, pa.int64()).to_numpy(), np.zeros(len(column), dtype=bool)
    ok = pc.and_(pc.ascii_is_decimal(column), pc.less_equal(pc.binary_length(column), max_digits))
    values = pc.cast(pc.if_else(ok, column, "0"), pa.int64()).to_numpy()
    return values, ~ok.to_numpy(zero_copy_only=False)


def parse_id(column: pa.Array) -> tuple[pa.Array, np.ndarray]:
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


def line_reasons(lines: SplitLines, fits: np.ndarray) -> np.ndarray:
    """Reason codes every layout shares: line_too_long, wrong_field_count, then not_utf8."""
    reasons = np.zeros(lines.n, dtype=np.int16)
    reasons[lines.too_long] = _CODE["line_too_long"]
    reasons[~fits & ~lines.too_long] = _CODE["wrong_field_count"]
    reasons[fits & ~lines.utf8] = _CODE["not_utf8"]
    return reasons


def flag(reasons: np.ndarray, rows: np.ndarray, bad: np.ndarray, reason: str) -> None:
    """Give `reason` to the bad `rows` that have no reason yet (earlier fields win)."""
    target = rows[bad]
    reasons[target] = np.where(reasons[target] == 0, _CODE[reason], reasons[target])


def keeper(good: np.ndarray) -> Callable[[pa.Array], pa.Array]:
    """A function keeping the `good` elements of an array: the array itself when all are (no copy)."""
    if good.all():
        return lambda array: array
    mask = pa.array(good)
    return lambda array: array.filter(mask)


def quarantine_records(path: str, lines: SplitLines, first_line: int, reasons: np.ndarray) -> list[QuarantineRecord]:
    return [QuarantineRecord(path, first_line + int(i), _REASON_NAMES[reasons[i] - 1], raw_text(lines.line(i)))
            for i in np.flatnonzero(reasons)]
