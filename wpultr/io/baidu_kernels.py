"""Byte-level kernels of the Baidu reader, compiled by numba: the passes over every byte of a block
(field boundaries, token ids, field text gathered into Arrow buffers) that pyarrow.compute can only
do through per-element intermediate arrays, which cost 3-5x the decompression itself.

Each kernel is one loop over the bytes it needs; the reader (baidu.py) keeps every rule about what a
line or a field means. Compiled once per process (cached on disk next to this file when writable).

Two habits make them several times faster than the obvious loops: byte offsets are unsigned, so numba
emits no negative-index wraparound test per access (and LLVM can merge eight byte loads into one),
and the text is looked at eight bytes at a time (SWAR: bit tricks on a uint64 word) where a
delimiter or a token's end is usually more than a byte away.
"""
from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

_TAB, _NEWLINE, _TOKEN_SEP, _ZERO = 9, 10, 1, 48
_MAX_TOKEN_DIGITS = 10
_INT32_MAX = 2**31 - 1
_WORD = np.uint64(8)                              # bytes in a word
_ONE = np.uint64(1)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)             # each byte's low 7 bits
_HIGH = np.uint64(0x8080808080808080)             # each byte's high bit
_LOW_NIBBLE = np.uint64(0x0F0F0F0F0F0F0F0F)
_TABS = np.uint64(0x0909090909090909)
_NEWLINES = np.uint64(0x0A0A0A0A0A0A0A0A)
_FROM_0 = np.uint64(0x5050505050505050)           # + byte & 0x7F: high bit set when >= '0' (0x30)
_FROM_COLON = np.uint64(0x4646464646464646)       # + byte & 0x7F: high bit set when >= ':' (0x3A, after '9')


@njit(inline="always")
def _word(data: np.ndarray, i: np.uint64) -> np.uint64:
    """data[i:i + 8] as a little-endian uint64 (byte i lowest); the caller keeps i + 8 <= len(data)."""
    word = np.uint64(0)
    for b in range(8):
        word |= np.uint64(data[i + np.uint64(b)]) << np.uint64(8 * b)
    return word


@njit(inline="always")
def _zero_bytes(x: np.uint64) -> np.uint64:
    """The high bit of each byte of x that is zero (exactly those), every other bit clear."""
    return ~(((x & _LOW7) + _LOW7) | x | _LOW7)


@njit(inline="always")
def _leading_digits(word: np.uint64) -> int:
    """How many of the word's bytes, from its lowest, are ASCII digits before the first that is not (0..8)."""
    low = word & _LOW7
    digit = (low + _FROM_0) & ~(low + _FROM_COLON) & ~word & _HIGH
    return int(trailing_zeros(~digit & _HIGH) >> np.uint64(3))


@njit(inline="always")
def _digits_value(word: np.uint64, n: int) -> int:
    """The decimal value of the word's first n (1..8) bytes, all ASCII digits, the lowest byte the first digit."""
    v = (word & _LOW_NIBBLE) << np.uint64(8 * (8 - n))   # the n digits in the top bytes, zeros before them
    v = (v * np.uint64(10) + (v >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)      # pairs of digits
    v = (v * np.uint64(100) + (v >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)    # fours
    return int((v * np.uint64(10000) + (v >> np.uint64(32))) & np.uint64(0xFFFFFFFF))  # all eight


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
    k = _ONE                     # the next field's number
    line = _ONE                  # the next line's number
    size = np.uint64(len(data))
    i = np.uint64(0)
    while i + _WORD <= size:     # a word at a time: visit its tabs and newlines only (most words have none)
        word = _word(data, i)
        newlines = _zero_bytes(word ^ _NEWLINES)
        delimiters = _zero_bytes(word ^ _TABS) | newlines
        while delimiters:
            bit = trailing_zeros(delimiters)
            starts[k] = np.int64(i + (bit >> np.uint64(3))) + 1
            if (newlines >> bit) & _ONE:
                first_field[line] = k
                line += _ONE
            k += _ONE
            delimiters &= delimiters - _ONE
        i += _WORD
    while i < size:              # the last bytes, one at a time
        if data[i] == _TAB or data[i] == _NEWLINE:
            starts[k] = np.int64(i) + 1
            if data[i] == _NEWLINE:
                first_field[line] = k
                line += _ONE
            k += _ONE
        i += _ONE
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
    m = np.uint64(0)
    for j in range(n):
        for i in range(np.uint64(begin[j]), np.uint64(end[j])):
            out[m] = data[i]
            m += _ONE
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
    m = np.uint64(0)
    n_bytes = np.uint64(len(data))
    for j in range(n):
        i, stop = np.uint64(begin[j]), np.uint64(end[j])
        while i < stop:          # a token per turn, from byte i to the next separator or the field's end
            if i + _WORD <= n_bytes:   # the usual token, 1 to 7 digits then its end, read as one word
                word = _word(data, i)
                digits = _leading_digits(word)
                after = i + np.uint64(digits)
                if digits < 8 and (after == stop or (after < stop and data[after] == _TOKEN_SEP)):
                    if digits:
                        ids[m] = _digits_value(word, digits)
                        m += _ONE
                    else:
                        skipped[j] += 1
                    i = after + _ONE
                    continue
            value = 0            # any other token, a byte at a time
            digits = 0
            wrong = False
            while i < stop and data[i] != _TOKEN_SEP:
                digit = np.int64(data[i]) - _ZERO
                if 0 <= digit <= 9:
                    value = value * 10 + digit
                    digits += 1
                else:
                    wrong = True
                i += _ONE
            if digits == 0 and not wrong:
                skipped[j] += 1
            else:
                if wrong or digits > _MAX_TOKEN_DIGITS or value > _INT32_MAX:
                    bad[j] = True
                    value = 0
                ids[m] = value
                m += _ONE
            i += _ONE
        if i == stop and stop > np.uint64(begin[j]):   # the field ended in a separator: an empty last token
            skipped[j] += 1
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
