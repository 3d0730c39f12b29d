"""`read_letor(path, query_path=None, n_features=None)`: a LETOR / SVMlight ranking file as dense arrays.

Format, one document per line: `label [qid:ID] fid:value fid:value ... [# comment]`. The label is an
integer grade 0..4; feature indices are 1-based (LETOR, MSLR-WEB, Yahoo! LTR), so `fid` fills column
`fid - 1` and an absent feature is 0. A query's documents are consecutive lines: their counts come from the
query file (one positive integer per line, LightGBM's `<file>.query`) or, without one, from runs of equal
`qid:` tokens. Blank lines and `#` comments are ignored. Every malformed input raises one SchemaError naming
the file, the line and what was expected. Lines are split in Python (one `split` per line, no per-token
Python work); the `fid:value` tokens of the whole file are parsed at once by Arrow's CSV reader (one token
a row, ':' the delimiter), and only when that fails is each token checked in Python, to name the first bad
one's line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from ..errors import SchemaError
from ..schema import MAX_LABEL

QID_PREFIX = "qid:"
MAX_FEATURE_INDEX = 65_536     # features are dense columns: a larger index is a typo, not a feature


@dataclass(frozen=True)
class LetorData:
    """The documents of one LETOR file in file order; query q holds rows offsets[q] .. offsets[q + 1] - 1."""

    features: np.ndarray       # float32 (n_docs, n_features), dense; absent features are 0
    labels: np.ndarray         # int8 (n_docs,): graded relevance 0..4
    group_sizes: np.ndarray    # int64 (n_queries,): consecutive documents of each query
    query_ids: np.ndarray      # str (n_queries,): the `qid:` value, or the query's 0-based index without one
    line_numbers: np.ndarray   # int64 (n_docs,): 1-based line of each document in its file

    @property
    def n_docs(self) -> int:
        return len(self.labels)

    @property
    def n_queries(self) -> int:
        return len(self.group_sizes)

    @property
    def offsets(self) -> np.ndarray:
        """int64 (n_queries + 1,): the first row of each query, then n_docs."""
        return np.concatenate(([0], np.cumsum(self.group_sizes))).astype(np.int64)


def _error(path: Path, line: int | None, message: str) -> SchemaError:
    return SchemaError(f"{path}:{line}: {message}" if line is not None else f"{path}: {message}")


def _label(token: str, path: Path, line: int) -> int:
    try:
        label = int(token)
    except ValueError:
        raise _error(path, line, f"expected an integer relevance label 0-{MAX_LABEL} first, got {token!r}") from None
    if not 0 <= label <= MAX_LABEL:
        raise _error(path, line, f"label {label} is outside 0-{MAX_LABEL}")
    return label


def _bad_pair(token: str, n_features: int | None) -> str | None:
    """Why one `fid:value` token is malformed, or None when it is fine (the fast path's rules, one token)."""
    fid, colon, value = token.partition(":")
    try:
        index, number = float(fid), float(value)
    except ValueError:
        index, number = math.nan, math.nan
    if not colon or not (math.isfinite(index) and index >= 1 and index.is_integer() and math.isfinite(number)):
        return f"expected fid:value with an integer feature index >= 1 and a finite number, got {token!r}"
    if index > MAX_FEATURE_INDEX:
        return f"feature index {int(index)} is above {MAX_FEATURE_INDEX}, the most a dense reader takes, in {token!r}"
    if n_features is not None and index > n_features:
        return f"feature index {int(index)} is beyond n_features ({n_features}) in {token!r}"
    return None


def _arrow_pairs(tokens: list[str], n_features: int | None) -> tuple[np.ndarray, np.ndarray] | None:
    """All `fid:value` tokens parsed by Arrow's CSV reader (one token a row, ':' the delimiter); None when any
    token is not an int64 index and a float64 value, or is out of range."""
    try:
        table = pcsv.read_csv(
            pa.BufferReader("\n".join(tokens).encode()),
            read_options=pcsv.ReadOptions(column_names=["fid", "value"]),
            parse_options=pcsv.ParseOptions(delimiter=":", quote_char=False, escape_char=False,
                                            ignore_empty_lines=False),
            convert_options=pcsv.ConvertOptions(column_types={"fid": pa.int64(), "value": pa.float64()},
                                                null_values=[], strings_can_be_null=False))
    except pa.ArrowInvalid:
        return None
    if table.num_rows != len(tokens):
        return None
    index, value = table["fid"].to_numpy(), table["value"].to_numpy()
    limit = n_features if n_features is not None else MAX_FEATURE_INDEX
    if not ((index >= 1).all() and (index <= limit).all() and np.isfinite(value).all()):
        return None
    return index, value


def _parse_pairs(tokens: list[str], token_line: np.ndarray, path: Path,
                 n_features: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(1-based feature index, value) of every `fid:value` token; SchemaError at the first bad one's line.

    Fast path: Arrow parses every token at once; when it refuses, each token is checked in Python to name
    the first bad one (and, should none be bad, e.g. an index written 2.0, Python parses them all).
    """
    if not tokens:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    parsed = _arrow_pairs(tokens, n_features)
    if parsed is not None:
        return parsed
    for token, line in zip(tokens, token_line, strict=True):   # slow path: name the first bad token
        why = _bad_pair(token, n_features)
        if why is not None:
            raise _error(path, int(line), why)
    # every token is fine by Python's number rules (an index written 2.0, non-ASCII digits): parse them here
    index = np.array([float(t.partition(":")[0]) for t in tokens]).astype(np.int64)
    return index, np.array([float(t.partition(":")[2]) for t in tokens])


def _query_file(query_path: Path, n_docs: int, path: Path) -> np.ndarray:
    """Group sizes from a query file (one positive integer a line); they must add up to the documents."""
    sizes: list[int] = []
    with open(query_path, encoding="utf-8") as f:
        for line_no, raw in enumerate(f, 1):
            text = raw.strip()
            if not text:
                continue
            try:
                size = int(text)
            except ValueError:
                size = 0
            if size < 1:
                raise _error(query_path, line_no, f"expected a positive integer number of documents, got {text!r}")
            sizes.append(size)
    if not sizes:
        raise _error(query_path, None, "no query sizes (empty file)")
    total = sum(sizes)
    if total != n_docs:
        raise _error(query_path, None, f"query sizes add up to {total} documents but {path} has {n_docs}")
    return np.array(sizes, dtype=np.int64)


def _qid_groups(qids: list[str | None], lines: np.ndarray, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(group sizes, query ids) from runs of equal `qid:` values; each query's lines must be consecutive."""
    starts = [0] + [i for i in range(1, len(qids)) if qids[i] != qids[i - 1]]
    seen: dict[str | None, int] = {}
    for start, end in zip(starts, starts[1:] + [len(qids)], strict=True):
        qid = qids[start]
        if qid in seen:
            raise _error(path, int(lines[start]), f"qid {qid} already ended at line {seen[qid]}; "
                                                  f"the documents of a query must be consecutive lines")
        seen[qid] = int(lines[end - 1])
    sizes = np.diff(np.array(starts + [len(qids)], dtype=np.int64))
    return sizes, np.array([qids[s] for s in starts], dtype=object)


def _scan(path: Path) -> tuple[list[int], list[int], list[str | None], list[str], list[int]]:
    """One pass over the lines: (labels, line numbers, qid or None, all fid:value tokens, tokens per line)."""
    labels: list[int] = []
    lines: list[int] = []
    qids: list[str | None] = []
    tokens: list[str] = []
    counts: list[int] = []
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise _error(path, line_no, f"expected UTF-8 text ({e.reason} at byte {e.start})") from None
            parts = text.split("#", 1)[0].split()
            if not parts:
                continue
            labels.append(_label(parts[0], path, line_no))
            first, qid = 1, None
            if len(parts) > 1 and parts[1].startswith(QID_PREFIX):
                qid, first = parts[1][len(QID_PREFIX):], 2
                if not qid:
                    raise _error(path, line_no, "expected qid:ID with a non-empty ID, got 'qid:'")
            if qids and (qid is None) != (qids[-1] is None):
                raise _error(path, line_no, "expected a qid: token on every line or on none "
                                            f"(line {lines[-1]} {'has none' if qids[-1] is None else 'has one'})")
            qids.append(qid)
            lines.append(line_no)
            tokens.extend(parts[first:])
            counts.append(len(parts) - first)
    return labels, lines, qids, tokens, counts


def _check_no_repeats(row_of_token: np.ndarray, index: np.ndarray, width: int, line_numbers: np.ndarray,
                      path: Path) -> None:
    """SchemaError at the first line that gives one feature index twice."""
    key = row_of_token * (width + 1) + index
    if len(key) and not (np.diff(key) > 0).all():     # some line's indices are not ascending: look closer
        _, first_at, seen = np.unique(key, return_index=True, return_counts=True)
        if (seen > 1).any():
            dup = int(np.sort(first_at[seen > 1])[0])
            raise _error(path, int(line_numbers[row_of_token[dup]]),
                         f"feature index {int(index[dup])} is given more than once")


def _query_file_groups(query_path: Path, qids: list[str | None], line_numbers: np.ndarray,
                       path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(group sizes, query ids) from the query file; qid: tokens, when present, must agree with its groups."""
    sizes = _query_file(query_path, len(qids), path)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    if qids[0] is None:
        return sizes, np.arange(len(sizes)).astype(str).astype(object)
    qid_array = np.array(qids, dtype=object)
    bad = np.flatnonzero(qid_array != np.repeat(qid_array[offsets[:-1]], sizes))
    if len(bad):
        row = int(bad[0])
        q = int(np.searchsorted(offsets, row, side="right")) - 1
        raise _error(path, int(line_numbers[row]),
                     f"qid {qids[row]} differs from qid {qids[offsets[q]]} of line {line_numbers[offsets[q]]}, "
                     f"which {query_path} puts in the same query (query {q + 1})")
    return sizes, qid_array[offsets[:-1]]


def read_letor(path: str | Path, query_path: str | Path | None = None, n_features: int | None = None) -> LetorData:
    """Read a LETOR/SVMlight file into dense arrays (see the module docstring for the format).

    query_path: the query file (document count per query); None reads the groups from `qid:` tokens.
    n_features: the width of `features`; a larger feature index is an error. None: the largest index seen.
    """
    path = Path(path)
    labels, lines, qids, tokens, counts = _scan(path)
    if not labels:
        raise _error(path, None, "no documents (empty file)")
    line_numbers = np.array(lines, dtype=np.int64)
    row_of_token = np.repeat(np.arange(len(labels)), counts)
    index, value = _parse_pairs(tokens, line_numbers[row_of_token], path, n_features)
    width = n_features if n_features is not None else int(index.max(initial=0))
    _check_no_repeats(row_of_token, index, width, line_numbers, path)
    features = np.zeros((len(labels), width), dtype=np.float32)
    features[row_of_token, index - 1] = value
    if query_path is not None:
        sizes, query_ids = _query_file_groups(Path(query_path), qids, line_numbers, path)
    elif qids[0] is not None:
        sizes, query_ids = _qid_groups(qids, line_numbers, path)
    else:
        raise _error(path, None, "no query file given and no qid: tokens: pass the query file (<file>.query) "
                                 "or write qid:ID after each label")
    return LetorData(features=features, labels=np.array(labels, dtype=np.int8), group_sizes=sizes,
                     query_ids=query_ids, line_numbers=line_numbers)
