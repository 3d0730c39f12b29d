"""The Baidu reader's compiled fast paths against plain statements of the rules they implement: field
boundaries against bytes.split, token ids against a per-token reading of the documented rules, and
plain decimals against Arrow's own float cast (bit for bit), including the cells that must fall back."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpultr.io.baidu.lines import SplitLines, _parse_float
from wpultr.io.baidu_kernels import count_newlines, field_starts, parse_plain_decimals, parse_tokens

SEP = b"\x01"


def _block(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


# ---------------------------------------------------------------------------------------------
# Field boundaries
# ---------------------------------------------------------------------------------------------
# Pieces that put tabs anywhere in an 8-byte word the kernel reads at once: none, one, several, all.
TAB_RICH = st.lists(st.sampled_from([b"\t", b"\t\t", b"a", b"12345678", b"1234567890abcdef", b"\x01", b"\r",
                                     b"\x89", b"\x8a", b"\xff" * 9]), max_size=12).map(b"".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), TAB_RICH), max_size=20))
def test_field_boundaries_are_bytes_split_on_tabs(lines):
    data = _block(lines)
    starts, first_field = field_starts(np.frombuffer(data, dtype=np.uint8))
    assert count_newlines(np.frombuffer(data, dtype=np.uint8)) == len(lines)
    assert len(first_field) == len(lines) + 1
    for i, line in enumerate(lines):
        fields = [data[starts[k]:starts[k + 1] - 1] for k in range(first_field[i], first_field[i + 1])]
        assert fields == line.split(b"\t")


def test_field_boundaries_of_a_block_without_final_newline_are_refused():
    with pytest.raises(ValueError, match="newline"):
        field_starts(np.frombuffer(b"a\tb", dtype=np.uint8))


# ---------------------------------------------------------------------------------------------
# Token ids
# ---------------------------------------------------------------------------------------------
def _reference_tokens(field: bytes) -> tuple[list[int | None], bool, int]:
    """(ids, bad, skipped) by the documented rules, one token at a time (None: a bad token)."""
    if not field:
        return [], False, 0
    ids, bad, skipped = [], False, 0
    for token in field.split(SEP):
        if not token:
            skipped += 1
        elif 1 <= len(token) <= 10 and token.isdigit() and token.isascii() and int(token) < 2**31:
            ids.append(int(token))
        else:
            bad = True
            ids.append(None)
    return ids, bad, skipped


TOKEN_PIECES = st.sampled_from([b"0", b"7", b"42", b"007", b"1234567", b"12345678", b"2147483647", b"2147483648",
                                b"9999999999", b"12345678901", b"x", b"-1", b" ", b":", b"/", b"1:", b"12/3",
                                b"\xb0", b"1\xb9", b"\xc3\xa9", b"\xd9\xa3"])   # \xb0-\xb9: digits with the high bit


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.one_of(TOKEN_PIECES, st.just(b"")), max_size=6).map(SEP.join), min_size=1, max_size=12),
       st.sampled_from([b"", b"\t" * 7, b"9" * 8]))
def test_token_ids_follow_the_documented_rules(fields, after):
    """`after` (bytes past the last line) moves the tokens near the block's end in and out of the
    word-at-a-time path, which reads 8 bytes and needs them inside the block."""
    data = b"\t".join(fields) + b"\n" + after
    begin = np.cumsum([0] + [len(f) + 1 for f in fields[:-1]])
    end = begin + np.array([len(f) for f in fields])
    offsets, ids, bad, skipped = parse_tokens(np.frombuffer(data, dtype=np.uint8), begin, end)
    for j, field in enumerate(fields):
        expected_ids, expected_bad, expected_skipped = _reference_tokens(field)
        got = list(ids[offsets[j]:offsets[j + 1]])
        assert (bool(bad[j]), int(skipped[j]), len(got)) == (expected_bad, expected_skipped, len(expected_ids)), field
        if not expected_bad:
            assert got == expected_ids, field


def test_token_ids_of_many_separators_stay_in_bounds():
    """A field of separators only has no token (every one skipped) and writes nothing past the ids."""
    fields = [SEP * 500, b"1" + SEP + b"2", b""]
    data = b"\t".join(fields) + b"\n"
    begin = np.array([0, 501, 505])
    offsets, ids, bad, skipped = parse_tokens(np.frombuffer(data, dtype=np.uint8), begin, begin + [500, 3, 0])
    assert list(offsets) == [0, 0, 2, 2] and list(ids) == [1, 2]
    assert list(skipped) == [501, 0, 0] and not bad.any()


# ---------------------------------------------------------------------------------------------
# Behaviour numbers: plain decimals compiled, everything else through Arrow's cast
# ---------------------------------------------------------------------------------------------
PLAIN = st.one_of(st.just("-"), st.just(""), st.decimals(allow_nan=False, allow_infinity=False, places=3,
                                                          min_value=-10**11, max_value=10**11).map(str),
                  st.integers(0, 10**15 - 1).map(str), st.floats(0, 1e6).map(lambda x: f"{x:.4f}"))
OTHER = st.sampled_from(["1e2", "+5", ".5", "5.", "inf", "-inf", "nan", "NaN", "1.2.3", "--1", "12a", " 1",
                         "1234567890123456", "0.1234567890123456", "-.5", "x", "1E-3", "00012.50", "-5.", "1..2",
                         "1-2", "-0", "12345678", "-1234567", "1234567.8", "\u00ae", "1\u00ae5", "1\u00b05"])


def _floats_both_ways(cells: list[str]) -> tuple[list, list]:
    """(the reader's floats, the general path's) of one column holding `cells`."""
    lines = SplitLines(_block([f"a\t{cell}\tb".encode() for cell in cells]))
    rows = np.arange(len(cells))
    (fast, fast_bad), = lines.floats(rows, [1])
    general, general_bad = _parse_float(pa.array(cells, type=pa.string()))
    return (fast, fast_bad), (general, general_bad)


@settings(max_examples=200, deadline=None)
@given(st.lists(PLAIN, min_size=1, max_size=30), st.lists(OTHER, max_size=2))
def test_behaviour_numbers_equal_arrows_cast_bit_for_bit(plain, other):
    (fast, fast_bad), (general, general_bad) = _floats_both_ways(plain + other)
    assert np.array_equal(fast.to_numpy().view(np.int64), general.to_numpy().view(np.int64))
    assert list(fast_bad) == list(general_bad)


def test_plain_decimals_take_the_compiled_path_and_others_do_not():
    """A plain column is read by the kernel (no Arrow cast involved); one odd cell sends it to Arrow."""
    lines = SplitLines(_block([b"a\t12.5\t-", b"a\t-\t0.1", b"a\t\t-3"]))
    values, plain = parse_plain_decimals(lines.bytes, lines.starts, lines.first_field, np.array([1, 2]))
    assert list(plain) == [True, True]
    assert values[0, 0] == 12.5 and np.isnan(values[0, 1]) and np.isnan(values[0, 2])
    assert np.isnan(values[1, 0]) and values[1, 1] == 0.1 and values[1, 2] == -3.0
    odd = SplitLines(_block([b"a\t1e2\t1", b"a\t2\t1"]))
    (column, bad), = odd.floats(np.arange(2), [1])
    assert column.to_pylist() == [100.0, 2.0] and not bad.any()   # Arrow's reading of 1e2, kept


# ---------------------------------------------------------------------------------------------
# The allocator policy around a parse
# ---------------------------------------------------------------------------------------------
class _RecordingLibc:
    """Stands in for glibc's mallopt/malloc_trim (process-wide C state no test can read back)."""

    def __init__(self):
        self.calls = []

    def mallopt(self, parameter, value):
        self.calls.append(("mallopt", parameter, value))
        return 1

    def malloc_trim(self, pad):
        self.calls.append(("malloc_trim", pad))
        return 1


def test_large_blocks_kept_sets_the_policy_once_and_restores_dasks(monkeypatch):
    from wpultr import memory as allocator
    libc = _RecordingLibc()
    monkeypatch.setattr(allocator, "_LIBC", libc)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    with allocator.large_blocks_kept():
        with allocator.large_blocks_kept():         # a second parse in the same process
            pass
        assert libc.calls == [("mallopt", -3, 32 << 20), ("mallopt", -1, 256 << 20)]   # not restored yet
    assert libc.calls[2:] == [("mallopt", -3, 128 << 10), ("mallopt", -1, 65536), ("malloc_trim", 0)]
    with pytest.raises(RuntimeError), allocator.large_blocks_kept():      # restored when the parse fails too
        raise RuntimeError("boom")
    assert libc.calls[-1] == ("malloc_trim", 0) and allocator._active == 0


def test_every_call_into_the_c_allocator_goes_through_the_memory_module(monkeypatch):
    """The train stage's policy and the workers' heap trim use the one C-library handle the parse uses."""
    from wpultr import cluster, memory
    libc = _RecordingLibc()
    monkeypatch.setattr(memory, "_LIBC", libc)
    monkeypatch.setattr(pa, "set_memory_pool", lambda pool: None)   # the process keeps its Arrow pool
    assert memory.map_large_allocations(4 << 20)
    cluster.release_memory()
    assert libc.calls == [("mallopt", -3, 4 << 20), ("malloc_trim", 0)]
    monkeypatch.setattr(memory, "_LIBC", None)                       # not glibc: nothing to tune, nothing fails
    assert not memory.map_large_allocations() and cluster.release_memory() >= 0
