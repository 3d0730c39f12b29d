"""Fitted encoders for page (SEPP) features, one per feature kind (BAL §3.1, "SEPP feature preprocessing").

* ordinal: Bradley–Terry scores (`bradley_terry.py`), position first;
* continuous: standardised with the mean and standard deviation of the fitted rows;
* categorical: a stable vocabulary (code 0 = a level never seen in the fit, known levels 1..K in
  sorted order) and a seeded embedding table (K + 1 rows) that the neural stages start from. For the
  CI tests the codes are expanded to one-hot column groups (`one_hot`): a Gaussian kernel over
  standardised one-hot columns puts every two distinct levels far apart, so it acts as the delta
  kernel of a categorical variable rather than ordering the codes.

Every statistic is mergeable (`summarise` per partition, `merge_summaries`, `fit_summary`), so the
encoder is fitted over all partitions on the Dask cluster. `save`/`load` write JSON plus a
safetensors file of the embedding tables (no pickle).
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from safetensors.numpy import load_file, save_file

from ..schema import CHUNK_ROWS, SESSION_ID, FeatureKind, PageFeature, SchemaError, row_spans
from ..settings.discovery import PreprocessConfig
from .bradley_terry import BradleyTerryEncoder, PairCounts, pair_counts

UNKNOWN_CODE = 0
ENCODER_JSON = "page_features.json"
EMBEDDINGS_FILE = "embeddings.safetensors"
ENCODER_FORMAT = "wpultr.page_feature_encoder/1"


# ---------------------------------------------------------------------------------------------
# Mergeable statistics
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Moments:
    """Count, mean and sum of squared deviations of a column (Chan et al.'s parallel update)."""

    count: int
    mean: float
    m2: float

    @classmethod
    def of(cls, values: np.ndarray) -> Moments:
        if values.size == 0:
            return cls(0, 0.0, 0.0)
        mean = float(values.mean())
        return cls(int(values.size), mean, float(((values - mean) ** 2).sum()))

    def merge(self, other: Moments) -> Moments:
        count = self.count + other.count
        if count == 0:
            return self
        delta = other.mean - self.mean
        mean = self.mean + delta * other.count / count
        return Moments(count, mean, self.m2 + other.m2 + delta * delta * self.count * other.count / count)


@dataclass(frozen=True)
class LevelCounts:
    """How often each level of a categorical column occurs."""

    counts: dict[Any, int] = field(default_factory=dict)

    def merge(self, other: LevelCounts) -> LevelCounts:
        merged = dict(self.counts)
        for level, n in other.counts.items():
            merged[level] = merged.get(level, 0) + n
        return LevelCounts(merged)


def _plain(level: Any) -> Any:
    """A level as a JSON-able Python value (numpy scalars unwrapped)."""
    return level.item() if hasattr(level, "item") else level


def _level_sort_key(level: Any) -> tuple[str, Any]:
    """Numbers sort numerically, strings lexically, numbers before strings: a stable vocabulary order."""
    if isinstance(level, (int, float)) and not isinstance(level, bool):
        return ("0", float(level), "")
    return ("1", 0.0, str(level))


# ---------------------------------------------------------------------------------------------
# One encoder per kind
# ---------------------------------------------------------------------------------------------
class ContinuousScaler:
    """Fitted transformer: (x - mean_) / scale_ (scale_ = 1 for a constant column)."""

    def __init__(self, column: str):
        self.column = column

    def summarise(self, X: pd.DataFrame) -> Moments:
        return Moments.of(_numeric(X, self.column))

    def fit(self, X: pd.DataFrame, y: Any = None) -> ContinuousScaler:
        return self.fit_summary(self.summarise(X))

    def fit_summary(self, moments: Moments) -> ContinuousScaler:
        if moments.count == 0:
            raise ValueError(f"continuous feature {self.column!r}: no rows to fit")
        std = float(np.sqrt(moments.m2 / moments.count))
        self.mean_ = moments.mean
        self.scale_ = std if std > 0 else 1.0
        self.n_rows_ = moments.count
        return self

    def transform(self, X: pd.DataFrame) -> np.ndarray:
        return (_numeric(X, self.column) - self.mean_) / self.scale_

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "mean": self.mean_, "scale": self.scale_, "n_rows": self.n_rows_}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> ContinuousScaler:
        scaler = cls(state["column"])
        scaler.mean_, scaler.scale_, scaler.n_rows_ = float(state["mean"]), float(state["scale"]), int(state["n_rows"])
        return scaler


class CategoricalEncoder:
    """Fitted transformer: levels → codes (0 = unknown, 1..K = sorted known levels) plus an embedding table."""

    def __init__(self, column: str, embedding_dim: int = 8, seed: int = 0):
        self.column = column
        self.embedding_dim = embedding_dim
        self.seed = seed

    def summarise(self, X: pd.DataFrame) -> LevelCounts:
        _require(X, self.column)
        counts = X[self.column].value_counts(dropna=False)
        return LevelCounts({_plain(level): int(n) for level, n in counts.items()})

    def fit(self, X: pd.DataFrame, y: Any = None) -> CategoricalEncoder:
        return self.fit_summary(self.summarise(X))

    def fit_summary(self, levels: LevelCounts) -> CategoricalEncoder:
        if not levels.counts:
            raise ValueError(f"categorical feature {self.column!r}: no rows to fit")
        if any(pd.isna(level) for level in levels.counts):
            raise SchemaError(f"categorical feature {self.column!r} has empty values")
        self.vocabulary_ = sorted(levels.counts, key=_level_sort_key)
        self.counts_ = [levels.counts[level] for level in self.vocabulary_]
        rng = np.random.default_rng(self.seed)
        scale = 1.0 / np.sqrt(self.embedding_dim)
        self.embedding_ = (rng.standard_normal((len(self.vocabulary_) + 1, self.embedding_dim))
                           * scale).astype(np.float32)
        return self

    def transform(self, X: pd.DataFrame) -> np.ndarray:
        """Codes of the column's levels; a level unseen in the fit gets UNKNOWN_CODE."""
        _require(X, self.column)
        index = {level: code for code, level in enumerate(self.vocabulary_, start=1)}
        inverse, uniques = pd.factorize(X[self.column], use_na_sentinel=False)
        codes = np.array([index.get(_plain(level), UNKNOWN_CODE) for level in uniques], dtype=np.int64)
        return codes[inverse]

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "embedding_dim": self.embedding_dim, "seed": self.seed,
                "vocabulary": list(self.vocabulary_), "counts": list(self.counts_)}

    @classmethod
    def from_dict(cls, state: dict[str, Any], embedding: np.ndarray) -> CategoricalEncoder:
        encoder = cls(state["column"], int(state["embedding_dim"]), int(state["seed"]))
        encoder.vocabulary_ = list(state["vocabulary"])
        encoder.counts_ = [int(n) for n in state["counts"]]
        if embedding.shape != (len(encoder.vocabulary_) + 1, encoder.embedding_dim):
            raise ValueError(f"categorical feature {encoder.column!r}: embedding table has shape {embedding.shape}, "
                             f"expected {(len(encoder.vocabulary_) + 1, encoder.embedding_dim)}")
        encoder.embedding_ = embedding
        return encoder


def _require(X: pd.DataFrame, column: str) -> None:
    if column not in X.columns:
        raise SchemaError(f"page feature {column!r} is missing; present: {list(X.columns)}")


def _numeric(X: pd.DataFrame, column: str) -> np.ndarray:
    _require(X, column)
    values = pd.to_numeric(X[column], errors="coerce")
    bad = values.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SchemaError(f"page feature {column!r} row {row} is {X[column].iloc[row]!r}, expected a number")
    return values.to_numpy(dtype=np.float64)


def one_hot(codes: np.ndarray) -> np.ndarray:
    """One column per level present in `codes` (absent levels would be constant columns)."""
    present, inverse = np.unique(codes, return_inverse=True)
    return (inverse.ravel()[:, None] == np.arange(present.size)[None, :]).astype(np.float64)


def session_spans(X: pd.DataFrame, chunk_rows: int) -> list[slice]:
    """Row ranges of about `chunk_rows` rows that each hold whole sessions (the Bradley–Terry counts pair results
    within a session); one range for a table of at most `chunk_rows` rows, without a session_id, or whose sessions
    are not each one contiguous run of rows."""
    n = len(X)
    if n <= chunk_rows or SESSION_ID not in X.columns:
        return [slice(0, n)]
    ids = X[SESSION_ID].to_numpy()
    starts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    if len(pd.unique(ids[np.concatenate([[0], starts])])) != len(starts) + 1:   # a session in several runs
        return [slice(0, n)]
    cuts = np.unique(starts[np.minimum(np.searchsorted(starts, np.arange(chunk_rows, n, chunk_rows)),
                                       len(starts) - 1)]) if len(starts) else np.zeros(0, np.int64)
    bounds = [0, *cuts.tolist(), n]
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


# ---------------------------------------------------------------------------------------------
# All declared page features together
# ---------------------------------------------------------------------------------------------
class PageFeatureEncoder:
    """Fitted transformer over every declared page feature: BT scores, standardised values, category codes."""

    def __init__(self, page_features: Sequence[PageFeature], config: PreprocessConfig | None = None):
        self.page_features = tuple(page_features)
        self.config = config or PreprocessConfig()

    def _encoder(self, feature: PageFeature):
        cfg = self.config
        if feature.kind is FeatureKind.ORDINAL:
            return BradleyTerryEncoder(column=feature.name, ridge=cfg.bradley_terry_ridge)
        if feature.kind is FeatureKind.CONTINUOUS:
            return ContinuousScaler(feature.name)
        return CategoricalEncoder(feature.name, cfg.embedding_dim, cfg.seed)

    def summarise(self, X: pd.DataFrame) -> dict[str, PairCounts | Moments | LevelCounts]:
        """Mergeable statistics of one partition, per feature."""
        out: dict[str, PairCounts | Moments | LevelCounts] = {}
        for feature in self.page_features:
            if feature.kind is FeatureKind.ORDINAL:
                out[feature.name] = pair_counts(X, feature.name)
            else:
                out[feature.name] = self._encoder(feature).summarise(X)
        return out

    @staticmethod
    def merge_summaries(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {name: a[name].merge(b[name]) for name in a}

    def fit(self, X: pd.DataFrame, y: Any = None, chunk_rows: int = CHUNK_ROWS,
            spans: Sequence[slice] | None = None) -> PageFeatureEncoder:
        """Fitted on `X`'s statistics, summarised about `chunk_rows` rows (whole sessions) at a time and merged:
        the same statistics as one pass (sums of counts; moments to float rounding), a chunk's temporaries.
        `spans`: those row ranges (`session_spans`) when `X` holds no session_id (one feature's column)."""
        summary = None
        for span in session_spans(X, chunk_rows) if spans is None else spans:
            part = self.summarise(X.iloc[span])
            summary = part if summary is None else self.merge_summaries(summary, part)
        return self.fit_summary(summary)

    def fit_summary(self, summary: dict[str, Any]) -> PageFeatureEncoder:
        encoders = {}
        for feature in self.page_features:
            encoder = self._encoder(feature)
            stats = summary[feature.name]
            encoders[feature.name] = encoder.fit_counts(stats) if isinstance(stats, PairCounts) \
                else encoder.fit_summary(stats)
        self.encoders_ = encoders
        return self

    def transform(self, X: pd.DataFrame, chunk_rows: int = CHUNK_ROWS) -> pd.DataFrame:
        """One numeric column per page feature: float64 scores/standardised values, int64 category codes;
        `chunk_rows` rows at a time into the columns (each value is its row's alone: the same numbers)."""
        if len(X) <= chunk_rows:
            return pd.DataFrame({f.name: self.encoders_[f.name].transform(X) for f in self.page_features},
                                index=X.index)
        return pd.DataFrame(dict(self.transform_columns(X, chunk_rows)), index=X.index, copy=False)

    def transform_columns(self, X: pd.DataFrame, chunk_rows: int = CHUNK_ROWS, drop: bool = False
                          ) -> Iterator[tuple[str, np.ndarray]]:
        """`transform`'s columns one feature at a time, as (name, values): a caller that stores each elsewhere
        (BAL's spilled rows) never holds two encoded columns; `drop` deletes each raw column once it is encoded."""
        for f in self.page_features:
            values = None
            for span in row_spans(len(X), chunk_rows):
                part = self.encoders_[f.name].transform(X.iloc[span])
                if values is None:
                    values = np.empty(len(X), dtype=part.dtype)
                values[span] = part
            if values is None:                                        # no rows
                values = self.encoders_[f.name].transform(X)
            if drop:
                del X[f.name]
            yield f.name, values
            del values

    def categorical_names(self) -> list[str]:
        return [f.name for f in self.page_features if f.kind is FeatureKind.CATEGORICAL]

    def save(self, directory: str | Path) -> None:
        """Write page_features.json and embeddings.safetensors into `directory` (created if needed)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {"format": ENCODER_FORMAT,
                 "config": {"bradley_terry_ridge": self.config.bradley_terry_ridge,
                            "embedding_dim": self.config.embedding_dim, "seed": self.config.seed},
                 "features": [{"name": f.name, "kind": f.kind.value, "state": self.encoders_[f.name].to_dict()}
                              for f in self.page_features]}
        (directory / ENCODER_JSON).write_text(json.dumps(state, indent=2) + "\n")
        tables = {name: self.encoders_[name].embedding_ for name in self.categorical_names()}
        save_file(tables or {"_none": np.zeros((0,), np.float32)}, str(directory / EMBEDDINGS_FILE))

    @classmethod
    def load(cls, directory: str | Path) -> PageFeatureEncoder:
        directory = Path(directory)
        path = directory / ENCODER_JSON
        state = json.loads(path.read_text())
        if state.get("format") != ENCODER_FORMAT:
            raise ValueError(f"{path}: format {state.get('format')!r} is not {ENCODER_FORMAT!r}")
        tables = load_file(str(directory / EMBEDDINGS_FILE))
        features = [PageFeature.parse(item["name"], item["kind"], f"{path}: features") for item in state["features"]]
        encoder = cls(features, PreprocessConfig(**state["config"]))
        fitted = {}
        for feature, item in zip(features, state["features"], strict=True):
            where = f"{path}: feature {feature.name!r}"
            if feature.kind is FeatureKind.ORDINAL:
                fitted[feature.name] = BradleyTerryEncoder.from_dict(item["state"], where)
            elif feature.kind is FeatureKind.CONTINUOUS:
                fitted[feature.name] = ContinuousScaler.from_dict(item["state"])
            else:
                if feature.name not in tables:
                    raise ValueError(f"{where}: no embedding table in {directory / EMBEDDINGS_FILE}")
                fitted[feature.name] = CategoricalEncoder.from_dict(item["state"], tables[feature.name])
        encoder.encoders_ = fitted
        return encoder
