"""Lexical query–document features from token-id lists, for the dense-feature MLP ranker on Baidu-ULTR.

The Baidu-ULTR layout carries token ids only; Hager et al. (SIGIR 2024, "Unbiased Learning to Rank
Meets Reality") rank it with classic lexical features. Per document field (title, abstract) this module
computes, with query tokens counted with their repeats and statistics fitted on the collection:

* bm25: sum_t idf(t) tf (k1 + 1) / (tf + k1 (1 − b + b |d| / avgdl)), idf = ln(1 + (N − df + .5)/(df + .5))
  (Robertson & Zaragoza 2009, Lucene's non-negative idf, as Hager et al.).
* tf, idf, tf_idf: sums over the query terms found in the field of ln(1 + tf), ln((1 + N)/(1 + df)) and
  their product (sublinear tf and smoothed idf, as Hager et al.).
* ql_jm_short / ql_jm_long: query log-likelihood with Jelinek–Mercer smoothing,
  sum_t ln((1 − λ) tf/|d| + λ cf/|C|), λ = 0.1 (short queries) and 0.7 (long ones) (Zhai & Lafferty 2004).
* ql_dirichlet: sum_t ln((tf + μ cf/|C|) / (|d| + μ)), Dirichlet smoothing (Zhai & Lafferty 2004).
* length: the field's token count; and once per row, query_length.

Query terms the fitted collection never saw (cf = 0) are left out of the query likelihoods: their
probability is 0 for every document of the query, so they carry no ranking information.
Statistics are counted over distinct documents (rows whose field token lists are all equal count
once) within each frame given to `fit`/`partial_fit`; a document repeated in two partitions counts once
per partition. The transform is vectorised: one sort and a few searchsorted/bincount calls per field.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..schema import ABSTRACT_TOKENS, FEATURE_VECTOR_TYPE, FEATURES, QUERY_TOKENS, TITLE_TOKENS, SchemaError

FIELD_FEATURES: tuple[str, ...] = ("bm25", "tf_idf", "tf", "idf", "ql_jm_short", "ql_jm_long", "ql_dirichlet", "length")
QUERY_LENGTH = "query_length"
STATE_JSON = "lexical_featurizer.json"
STATE_NPZ = "lexical_featurizer.npz"
STATE_FORMAT = "wpultr.lexical_featurizer/1"


# ---------------------------------------------------------------------------------------------
# Token-id columns as flat arrays
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenLists:
    """One token-id column flattened: all ids in row order and each row's count."""

    values: np.ndarray   # int64, concatenated token ids
    lengths: np.ndarray  # int64, tokens per row

    @property
    def row_of_token(self) -> np.ndarray:
        return np.repeat(np.arange(self.lengths.size), self.lengths)

    def row_bytes(self) -> list[bytes]:
        """Each row's ids as bytes: an exact, hashable key of the row's content."""
        buffer = self.values.tobytes()
        ends = np.cumsum(self.lengths) * 8
        starts = ends - self.lengths * 8
        return [buffer[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]


def _first_non_integer_row(cells: pd.Series) -> int:
    """Row of the first cell that is not a list of integers (0 if none is found)."""
    for row, cell in enumerate(cells):
        ids = np.zeros(0, np.int64) if cell is None else np.asarray(cell)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            return row
    return 0


def token_lists(df: pd.DataFrame, column: str, table: str = "lexical") -> TokenLists:
    """Flatten the token-id lists of `df[column]`; SchemaError names the column and row of a bad cell."""
    if column not in df.columns:
        raise SchemaError(f"{table}: missing token column {column!r}; present: {list(df.columns)}")
    if len(df) == 0:
        return TokenLists(values=np.zeros(0, np.int64), lengths=np.zeros(0, np.int64))
    try:
        array = pa.array(df[column], from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        row = _first_non_integer_row(df[column])
        raise SchemaError(f"{table}: column {column!r} row {row} is {df[column].iloc[row]!r}, "
                          f"expected a list of integer token ids") from None
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        raise SchemaError(f"{table}: column {column!r} holds {array.type}, expected lists of integer token ids")
    if array.null_count:
        row = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise SchemaError(f"{table}: column {column!r} row {row} is empty (null), expected a list of token ids")
    value_type = array.type.value_type
    if not (pa.types.is_integer(value_type) or pa.types.is_null(value_type)):
        row = _first_non_integer_row(df[column])
        raise SchemaError(f"{table}: column {column!r} row {row} is {df[column].iloc[row]!r}, "
                          f"expected a list of integer token ids")
    flat = array.flatten()
    if flat.null_count:
        row_of_value = np.repeat(np.arange(len(array)), pc.list_value_length(array).to_numpy())
        row = int(row_of_value[np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0]])
        raise SchemaError(f"{table}: column {column!r} row {row} has an empty token id")
    values = flat.cast(pa.int64()).to_numpy() if len(flat) else np.zeros(0, np.int64)
    lengths = pc.list_value_length(array).to_numpy().astype(np.int64)
    return TokenLists(values=np.ascontiguousarray(values, dtype=np.int64), lengths=lengths)


# ---------------------------------------------------------------------------------------------
# Collection statistics of one field
# ---------------------------------------------------------------------------------------------
def sorted_unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values (ascending) and their counts, by one sort (np.unique hashes, far slower on ~1e7 keys)."""
    ordered = np.sort(values)
    if ordered.size == 0:
        return ordered, np.zeros(0, np.int64)
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], np.diff(np.append(starts, ordered.size))


@dataclass(frozen=True)
class FieldStatistics:
    """Per distinct token id (sorted): documents containing it and occurrences; plus the field's total length."""

    token_ids: np.ndarray   # int64, sorted, unique
    doc_freq: np.ndarray    # int64, documents that contain the token
    coll_freq: np.ndarray   # int64, occurrences in the collection
    total_length: int       # tokens in the collection's field

    @classmethod
    def count(cls, tokens: TokenLists) -> FieldStatistics:
        token_ids, coll_freq = sorted_unique(tokens.values)
        n_ids = max(token_ids.size, 1)
        token_code = np.searchsorted(token_ids, tokens.values)
        distinct_pairs, _ = sorted_unique(tokens.row_of_token * n_ids + token_code)  # (document, token) once each
        doc_freq = np.bincount(distinct_pairs % n_ids, minlength=token_ids.size)
        return cls(token_ids.astype(np.int64), doc_freq.astype(np.int64), coll_freq.astype(np.int64),
                   int(tokens.values.size))

    def merge(self, other: FieldStatistics) -> FieldStatistics:
        token_ids = np.union1d(self.token_ids, other.token_ids)
        doc_freq = np.zeros(token_ids.size, np.int64)
        coll_freq = np.zeros(token_ids.size, np.int64)
        for part in (self, other):
            where = np.searchsorted(token_ids, part.token_ids)
            doc_freq[where] += part.doc_freq
            coll_freq[where] += part.coll_freq
        return FieldStatistics(token_ids, doc_freq, coll_freq, self.total_length + other.total_length)

    def lookup(self, token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(doc_freq, coll_freq) of each given id; 0 for ids the collection never held."""
        if self.token_ids.size == 0:
            return np.zeros(token_ids.size, np.int64), np.zeros(token_ids.size, np.int64)
        where = np.minimum(np.searchsorted(self.token_ids, token_ids), self.token_ids.size - 1)
        known = self.token_ids[where] == token_ids
        return np.where(known, self.doc_freq[where], 0), np.where(known, self.coll_freq[where], 0)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, FieldStatistics) and self.total_length == other.total_length
                and all(np.array_equal(getattr(self, n), getattr(other, n))
                        for n in ("token_ids", "doc_freq", "coll_freq")))


def term_frequencies(query: TokenLists, document: TokenLists) -> np.ndarray:
    """For every query token (in flat order), how often its row's document holds it."""
    vocabulary, _ = sorted_unique(np.concatenate([query.values, document.values]))
    size = max(vocabulary.size, 1)
    doc_keys = np.sort(document.row_of_token * size + np.searchsorted(vocabulary, document.values))
    query_keys = query.row_of_token * size + np.searchsorted(vocabulary, query.values)
    return np.searchsorted(doc_keys, query_keys, side="right") - np.searchsorted(doc_keys, query_keys, side="left")


# ---------------------------------------------------------------------------------------------
# The featurizer
# ---------------------------------------------------------------------------------------------
class LexicalFeaturizer:
    """BM25, TF-IDF, TF, IDF, query likelihoods and lengths per field, plus query length (float32).

    scikit-learn contract: parameters here, `fit`/`partial_fit` learn collection statistics (state ends
    in `_`), `transform` applies them; `merge` combines two fitted states, so partitions fit in parallel.
    """

    def __init__(self, fields: Sequence[str] = (TITLE_TOKENS, ABSTRACT_TOKENS), query_field: str = QUERY_TOKENS,
                 k1: float = 1.2, b: float = 0.75, mu: float = 256.0, jm_lambda_short: float = 0.1,
                 jm_lambda_long: float = 0.7, unique_documents: bool = True) -> None:
        self.fields = tuple(fields)
        self.query_field = query_field
        self.k1 = k1
        self.b = b
        self.mu = mu
        self.jm_lambda_short = jm_lambda_short
        self.jm_lambda_long = jm_lambda_long
        self.unique_documents = unique_documents

    def get_params(self) -> dict[str, Any]:
        return {"fields": list(self.fields), "query_field": self.query_field, "k1": self.k1, "b": self.b,
                "mu": self.mu, "jm_lambda_short": self.jm_lambda_short, "jm_lambda_long": self.jm_lambda_long,
                "unique_documents": self.unique_documents}

    def _check_params(self) -> None:
        if not self.fields or len(set(self.fields)) != len(self.fields):
            raise ValueError(f"LexicalFeaturizer.fields: expected distinct column names, got {list(self.fields)}")
        if self.query_field in self.fields:
            raise ValueError(f"LexicalFeaturizer.fields: {self.query_field!r} is the query field")
        checks = {"k1": self.k1 >= 0, "b": 0 <= self.b <= 1, "mu": self.mu > 0,
                  "jm_lambda_short": 0 < self.jm_lambda_short <= 1, "jm_lambda_long": 0 < self.jm_lambda_long <= 1}
        allowed = {"k1": ">= 0", "b": "in [0, 1]", "mu": "> 0", "jm_lambda_short": "in (0, 1]",
                   "jm_lambda_long": "in (0, 1]"}
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"LexicalFeaturizer.{name}: {getattr(self, name)!r} is not {allowed[name]}")

    @property
    def feature_names(self) -> list[str]:
        names = [f"{field.removesuffix('_tokens')}_{feature}" for field in self.fields for feature in FIELD_FEATURES]
        return names + [QUERY_LENGTH]

    # ---- fitting ---------------------------------------------------------------------------
    def fit(self, df: pd.DataFrame, y: Any = None) -> LexicalFeaturizer:
        """Learn document frequencies, collection frequencies and lengths of each field from `df`."""
        for name in ("n_documents_", "field_stats_", "feature_names_"):
            self.__dict__.pop(name, None)
        return self.partial_fit(df)

    def partial_fit(self, df: pd.DataFrame, y: Any = None) -> LexicalFeaturizer:
        """Add the statistics of `df` to those learned so far (one partition at a time)."""
        self._check_params()
        lists = {field: token_lists(df, field) for field in self.fields}
        if self.unique_documents and len(df):
            keys = pd.DataFrame({field: tokens.row_bytes() for field, tokens in lists.items()})
            first = ~keys.duplicated().to_numpy()
            if not first.all():
                lists = {field: _select_rows(tokens, first) for field, tokens in lists.items()}
        n_documents = int(next(iter(lists.values())).lengths.size)
        stats = {field: FieldStatistics.count(tokens) for field, tokens in lists.items()}
        if hasattr(self, "field_stats_"):
            stats = {field: self.field_stats_[field].merge(stats[field]) for field in self.fields}
            n_documents += self.n_documents_
        self.n_documents_ = n_documents
        self.field_stats_ = stats
        self.feature_names_ = self.feature_names
        return self

    def merge(self, other: LexicalFeaturizer) -> LexicalFeaturizer:
        """A new featurizer fitted on the union of the data `self` and `other` were fitted on."""
        for fitted in (self, other):
            fitted._check_fitted()
        mine, theirs = self.get_params(), other.get_params()
        differing = [key for key in mine if mine[key] != theirs[key]]
        if differing:
            raise ValueError("LexicalFeaturizer.merge: parameters differ: "
                             + ", ".join(f"{k}={mine[k]!r} vs {theirs[k]!r}" for k in differing))
        merged = LexicalFeaturizer(**mine)
        merged.n_documents_ = self.n_documents_ + other.n_documents_
        merged.field_stats_ = {field: self.field_stats_[field].merge(other.field_stats_[field])
                               for field in self.fields}
        merged.feature_names_ = merged.feature_names
        return merged

    def _check_fitted(self) -> None:
        if not hasattr(self, "field_stats_"):
            raise RuntimeError("LexicalFeaturizer is not fitted: call fit, partial_fit or load first")

    # ---- applying --------------------------------------------------------------------------
    def transform(self, df: pd.DataFrame) -> np.ndarray:
        """float32 array [len(df), len(feature_names_)]: the features of each row's query and document."""
        self._check_fitted()
        query = token_lists(df, self.query_field)
        columns = []
        for field in self.fields:
            columns.extend(self._field_features(query, token_lists(df, field), self.field_stats_[field]))
        columns.append(query.lengths.astype(np.float64))
        return np.column_stack(columns).astype(np.float32) if len(df) else np.zeros((0, len(columns)), np.float32)

    def _field_features(self, query: TokenLists, document: TokenLists, stats: FieldStatistics) -> list[np.ndarray]:
        """The FIELD_FEATURES columns of one field, in that order."""
        n_rows = document.lengths.size
        if query.lengths.size != n_rows:
            raise SchemaError(f"lexical: {query.lengths.size} query rows but {n_rows} document rows")
        row = query.row_of_token

        def per_row(weights: np.ndarray) -> np.ndarray:
            return np.bincount(row, weights=weights, minlength=n_rows)

        tf = term_frequencies(query, document).astype(np.float64)
        doc_freq, coll_freq = stats.lookup(query.values)
        doc_freq, coll_freq = doc_freq.astype(np.float64), coll_freq.astype(np.float64)
        n_docs = float(self.n_documents_)
        doc_length = document.lengths[row].astype(np.float64)
        avg_length = stats.total_length / n_docs if n_docs else 0.0

        # Robertson–Zaragoza idf, Lucene form
        bm25_idf = np.log1p((n_docs - doc_freq + 0.5) / (doc_freq + 0.5))
        length_norm = 1.0 - self.b + self.b * doc_length / avg_length if avg_length > 0 else np.ones_like(tf)
        bm25 = per_row(bm25_idf * tf * (self.k1 + 1.0) / (tf + self.k1 * length_norm))  # BM25

        matched = tf > 0
        log_tf = np.log1p(tf)                                                        # sublinear tf
        smooth_idf = np.log((1.0 + n_docs) / (1.0 + doc_freq))                       # smoothed idf
        tf_sum = per_row(np.where(matched, log_tf, 0.0))
        idf_sum = per_row(np.where(matched, smooth_idf, 0.0))
        tf_idf = per_row(log_tf * smooth_idf)

        in_collection = coll_freq > 0
        p_collection = coll_freq / stats.total_length if stats.total_length else np.zeros_like(tf)
        p_document = np.divide(tf, doc_length, out=np.zeros_like(tf), where=doc_length > 0)

        def log_likelihood(probability: np.ndarray) -> np.ndarray:
            safe = np.where(in_collection, probability, 1.0)
            return per_row(np.where(in_collection, np.log(safe), 0.0))

        jm = [log_likelihood((1.0 - lam) * p_document + lam * p_collection)         # Jelinek–Mercer
              for lam in (self.jm_lambda_short, self.jm_lambda_long)]
        dirichlet = log_likelihood((tf + self.mu * p_collection) / (doc_length + self.mu))  # Dirichlet prior
        return [bm25, tf_idf, tf_sum, idf_sum, jm[0], jm[1], dirichlet, document.lengths.astype(np.float64)]

    # ---- persistence (JSON + NPZ, no pickle) ------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the parameters and learned statistics into directory `path` (JSON + NPZ); return it."""
        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta = {"format": STATE_FORMAT, "params": self.get_params(), "n_documents": self.n_documents_,
                "total_length": {f: s.total_length for f, s in self.field_stats_.items()},
                "feature_names": self.feature_names_}
        arrays = {f"{field}/{name}": getattr(stats, name) for field, stats in self.field_stats_.items()
                  for name in ("token_ids", "doc_freq", "coll_freq")}
        tmp_npz, tmp_json = path / f".{STATE_NPZ}.tmp", path / f".{STATE_JSON}.tmp"
        with open(tmp_npz, "wb") as handle:
            np.savez(handle, **arrays)
        tmp_json.write_text(json.dumps(meta, indent=2))
        os.replace(tmp_npz, path / STATE_NPZ)
        os.replace(tmp_json, path / STATE_JSON)
        return path

    @classmethod
    def load(cls, path: str | Path) -> LexicalFeaturizer:
        """Read a featurizer written by `save`; errors name the file and key at fault."""
        path = Path(path)
        meta_path, npz_path = path / STATE_JSON, path / STATE_NPZ
        for required in (meta_path, npz_path):
            if not required.is_file():
                raise FileNotFoundError(f"{required}: no saved LexicalFeaturizer here")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != STATE_FORMAT:
            raise ValueError(f"{meta_path}: key 'format' is {meta.get('format')!r}, expected {STATE_FORMAT!r}")
        for key in ("params", "n_documents", "total_length"):
            if key not in meta:
                raise ValueError(f"{meta_path}: missing key {key!r}")
        featurizer = cls(**meta["params"])
        stats = {}
        with np.load(npz_path, allow_pickle=False) as arrays:
            for field in featurizer.fields:
                keys = [f"{field}/{name}" for name in ("token_ids", "doc_freq", "coll_freq")]
                missing = [k for k in keys if k not in arrays.files]
                if missing or field not in meta["total_length"]:
                    raise ValueError(f"{npz_path}: missing statistics {missing or [field]} of field {field!r}")
                stats[field] = FieldStatistics(*(arrays[k] for k in keys), int(meta["total_length"][field]))
        featurizer.n_documents_ = int(meta["n_documents"])
        featurizer.field_stats_ = stats
        featurizer.feature_names_ = featurizer.feature_names
        return featurizer


def _select_rows(tokens: TokenLists, keep: np.ndarray) -> TokenLists:
    return TokenLists(values=tokens.values[np.repeat(keep, tokens.lengths)], lengths=tokens.lengths[keep])


# ---------------------------------------------------------------------------------------------
# Per-partition functions, mappable over Parquet partitions with Dask
# ---------------------------------------------------------------------------------------------
def fit_partition(in_path: str | Path, featurizer: LexicalFeaturizer) -> LexicalFeaturizer:
    """A fresh featurizer with `featurizer`'s parameters, fitted on one Parquet partition."""
    fresh = LexicalFeaturizer(**featurizer.get_params())
    return fresh.fit(pd.read_parquet(in_path, columns=list(fresh.fields)))


def fit_partitions(in_paths: Sequence[str | Path], featurizer: LexicalFeaturizer,
                   client: Any | None = None) -> LexicalFeaturizer:
    """Fit one featurizer per partition (on the Dask `client` when given) and merge them."""
    if not in_paths:
        raise ValueError("fit_partitions: no input partitions")
    if client is None:
        fitted = [fit_partition(path, featurizer) for path in in_paths]
    else:
        fitted = client.gather(client.map(fit_partition, [str(p) for p in in_paths], featurizer=featurizer,
                                          pure=False))
    return reduce(LexicalFeaturizer.merge, fitted)


def featurize_partition(in_path: str | Path, out_path: str | Path, featurizer: LexicalFeaturizer) -> Path:
    """Write `in_path`'s table plus a float32 `features` vector column to `out_path` (write, then rename)."""
    in_path, out_path = Path(in_path), Path(out_path)
    table = pq.read_table(in_path)
    if FEATURES in table.column_names:
        raise SchemaError(f"{in_path}: already has a {FEATURES!r} column; lexical features would overwrite it")
    needed = [featurizer.query_field, *featurizer.fields]
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise SchemaError(f"{in_path}: missing token column(s) {missing}; present: {table.column_names}")
    try:
        matrix = featurizer.transform(table.select(needed).to_pandas())
    except SchemaError as err:
        raise SchemaError(f"{in_path}: {err}") from None
    offsets = pa.array(np.arange(0, matrix.size + 1, max(matrix.shape[1], 1), dtype=np.int32))
    vectors = pa.ListArray.from_arrays(offsets, pa.array(matrix.ravel(), pa.float32())).cast(FEATURE_VECTOR_TYPE)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.tmp")
    pq.write_table(table.append_column(pa.field(FEATURES, FEATURE_VECTOR_TYPE), vectors), tmp)
    os.replace(tmp, out_path)
    return out_path


def featurize_partitions(in_paths: Sequence[str | Path], out_dir: str | Path, featurizer: LexicalFeaturizer,
                         client: Any | None = None) -> list[Path]:
    """featurize_partition over every input, output named like its input in `out_dir`; on Dask if given."""
    out_dir = Path(out_dir)
    out_paths = [out_dir / Path(p).name for p in in_paths]
    if len(set(out_paths)) != len(out_paths):
        raise ValueError(f"featurize_partitions: input partitions share file names: {[str(p) for p in in_paths]}")
    if client is None:
        return [featurize_partition(i, o, featurizer) for i, o in zip(in_paths, out_paths, strict=True)]
    shared = client.scatter(featurizer, broadcast=True)
    futures = client.map(featurize_partition, [str(p) for p in in_paths], [str(p) for p in out_paths],
                         featurizer=shared, pure=False)
    return [Path(p) for p in client.gather(futures)]
