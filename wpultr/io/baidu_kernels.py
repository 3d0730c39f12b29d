"""Byte-level kernels of the Baidu reader, compiled by numba: the passes over every byte of a block
(field boundaries, token ids, field text gathered into Arrow buffers) that pyarrow.compute can only
do through per-element intermediate arrays, which cost 3-5x the decompression itself.

Each kernel is one loop over the bytes it needs; the reader (baidu.py) keeps every rule about what a
line or a field means. Compiled once per process (cached on disk next to this file when writable).
"""
from __future__ import annotations

import numpy as np
from numba import njit

_TAB, _NEWLINE, _TOKEN_SEP, _ZERO = 9, 10, 1, 48
_MAX_TOKEN_DIGITS = 10
_INT32_MAX = 2**31 - 1


@njit(cache=True, nogil=True)
def field_starts(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, first_field) of a block of whole lines (each ending in a newline) split on tabs.

    starts[k] is the offset of field k's first byte, fields of all lines numbered in order, plus one
    sentinel = len(data); field k ends at starts[k + 1] - 1 (its tab, or its line's newline).
    first_field[i] is the number of line i's first field; first_field[n_lines] = the field count.
    """
    n_lines = 0
    n_tabs = 0
    for i in range(len(data)):   # a loop the compiler vectorises
        n_lines += data[i] == _NEWLINE
        n_tabs += data[i] == _TAB
    if len(data) and data[len(data) - 1] != _NEWLINE:
        raise ValueError("field_starts: the block must end in a newline")
    starts = np.empty(n_lines + n_tabs + 1, dtype=np.int64)
    first_field = np.empty(n_lines + 1, dtype=np.int64)
    starts[0] = 0
    first_field[0] = 0
    k = 1
    line = 1
    for i in range(len(data)):   # without branches: the slot k (and line) is rewritten until a delimiter moves it
        byte = data[i]
        newline = byte == _NEWLINE
        starts[k] = i + 1
        first_field[line] = k
        k += newline | (byte == _TAB)
        line += newline
    return starts, first_field


@njit(cache=True, nogil=True)
def gather(data: np.ndarray, begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, bytes) of the Arrow string array whose element j is data[begin[j]:end[j]]."""
    n = len(begin)
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    for j in range(n):
        offsets[j + 1] = offsets[j] + (end[j] - begin[j])
    out = np.empty(offsets[n], dtype=np.uint8)
    m = 0
    for j in range(n):
        for i in range(begin[j], end[j]):
            out[m] = data[i]
            m += 1
    return offsets, out


@njit(cache=True, nogil=True)
def parse_tokens(data: np.ndarray, begin: np.ndarray, end: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Token id lists of the fields data[begin[j]:end[j]], ids joined by \\x01.

    Returns (list offsets int32, ids int32, bad, skipped): an empty field has no token; an empty
    token is skipped and counted in skipped[j]; a field with a token that is not 1 to 10 ASCII
    digits of value < 2^31 is bad (its ids are then meaningless).
    """
    n = len(begin)
    size = 0
    for j in range(n):
        size += end[j] - begin[j]
    ids = np.empty(size // 2 + n, dtype=np.int32)   # a token takes a digit, and a separator but for the last
    offsets = np.empty(n + 1, dtype=np.int32)
    bad = np.zeros(n, dtype=np.bool_)
    skipped = np.zeros(n, dtype=np.int64)
    offsets[0] = 0
    m = 0
    for j in range(n):
        if end[j] > begin[j]:
            value = 0
            digits = 0
            wrong = False
            for i in range(begin[j], end[j] + 1):
                byte = data[i] if i < end[j] else np.uint8(_TOKEN_SEP)   # the field's end closes its last token
                digit = np.int64(byte) - _ZERO
                if 0 <= digit <= 9:
                    value = value * 10 + digit
                    digits += 1
                elif byte == _TOKEN_SEP:
                    if digits == 0 and not wrong:
                        skipped[j] += 1
                    else:
                        if wrong or digits > _MAX_TOKEN_DIGITS or value > _INT32_MAX:
                            bad[j] = True
                            value = 0
                        ids[m] = value
                        m += 1
                    value = 0
                    digits = 0
                    wrong = False
                else:
                    wrong = True
        offsets[j + 1] = m
    return offsets, ids[:m], bad, skipped      # a view: the pages past m were never touched


_EXACT_POWERS = np.array([10.0**k for k in range(16)])   # 10^0..10^15: exact doubles
_MAX_EXACT_DIGITS = 15                                   # a 15-digit integer is exact in a double


@njit(cache=True, nogil=True)
def _plain_decimal(data: np.ndarray, i: int, stop: int) -> float:
    """data[i:stop] as a float when it is '', '-' (NaN) or a plain decimal, else -inf (never a plain value)."""
    if i == stop or (stop - i == 1 and data[i] == 45):          # '' or '-'
        return np.nan
    negative = data[i] == 45
    if negative:
        i += 1
    mantissa = 0
    digits = 0
    fraction = -1                      # digits after the '.', -1 before one
    for k in range(i, stop):
        byte = data[k]
        if _ZERO <= byte <= _ZERO + 9:
            mantissa = mantissa * 10 + (np.int64(byte) - _ZERO)
            digits += 1
            if fraction >= 0:
                fraction += 1
        elif byte == 46 and fraction < 0 and k > i:   # '.', once, after a digit
            fraction = 0
        else:
            return -np.inf
    if digits > _MAX_EXACT_DIGITS or fraction == 0:    # too long, or a trailing '.'
        return -np.inf
    value = mantissa / _EXACT_POWERS[max(fraction, 0)]
    return -value if negative else value


@njit(cache=True, nogil=True)
def parse_plain_decimals(data: np.ndarray, starts: np.ndarray, first: np.ndarray, fields: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(values, plain): values[c, j] is field fields[c] of the line whose first field is first[j] (see
    field_starts), read line by line (the bytes of a line are read in order, once).

    A cell is plain when it is '', '-' (NaN) or an optional '-', digits, optionally '.' and digits,
    at most 15 digits in all: then it is M / 10^f with M and 10^f exact doubles, so the one division
    is the correctly rounded value any exact parser (Arrow's cast included) gives. plain[c] = False
    when any cell of column c is anything else (exponents, '+', 'inf', long mantissas, garbage):
    the caller parses that column the general way, and its values here are meaningless.
    """
    n_columns = len(fields)
    values = np.empty((n_columns, len(first)), dtype=np.float64)
    plain = np.ones(n_columns, dtype=np.bool_)
    for j in range(len(first)):
        for c in range(n_columns):
            k = first[j] + fields[c]
            value = _plain_decimal(data, starts[k], starts[k + 1] - 1)
            if value == -np.inf:
                plain[c] = False
            values[c, j] = value
    return values, plain


@njit(cache=True, nogil=True)
def count_newlines(data: np.ndarray) -> int:
    """The number of newline bytes in `data` (a loop the compiler vectorises)."""
    count = 0
    for i in range(len(data)):
        count += data[i] == _NEWLINE
    return count
