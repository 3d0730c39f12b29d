"""The one place that defines wpultr's tables: columns, dtypes, feature kinds and the Baidu-ULTR layout.

Every reader, writer, simulator and stage imports its column names from here, so a change to
the log schema is a change to this file only.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa


class SchemaError(ValueError):
    """A table does not match its declared schema; the message names the column and row at fault."""


class FeatureKind(str, Enum):
    """How a page (SEPP) feature is modelled downstream (BAL §3.1: three SEPP feature types)."""

    ORDINAL = "ordinal"          # e.g. position: Bradley–Terry scored before use
    CONTINUOUS = "continuous"    # e.g. SERP height: standardised
    CATEGORICAL = "categorical"  # e.g. multimedia type: vocabulary + embedding


@dataclass(frozen=True)
class PageFeature:
    """A page feature column of the sessions table and the kind it is modelled as."""

    name: str
    kind: FeatureKind

    @classmethod
    def parse(cls, name: str, kind: str | FeatureKind, where: str = "page_features") -> "PageFeature":
        try:
            return cls(name=name, kind=FeatureKind(kind))
        except ValueError:
            allowed = ", ".join(k.value for k in FeatureKind)
            raise SchemaError(f"{where}.{name}: kind {kind!r} is not one of: {allowed}") from None


# ---------------------------------------------------------------------------------------------
# Sessions table (long form: one row per shown result)
# ---------------------------------------------------------------------------------------------
SESSION_ID = "session_id"
QUERY_ID = "query_id"
POSITION = "position"
CLICK = "click"
QUERY_TOKENS = "query_tokens"
TITLE_TOKENS = "title_tokens"
ABSTRACT_TOKENS = "abstract_tokens"
FEATURES = "features"
DOC_ID = "doc_id"
LABEL = "label"
BUCKET = "bucket"

# Nodes the causal graph adds to the table's columns.
RELEVANCE_SCORE = "relevance_score"

TOKEN_COLUMNS: tuple[str, ...] = (QUERY_TOKENS, TITLE_TOKENS, ABSTRACT_TOKENS)

TOKEN_TYPE = pa.list_(pa.int32())
FEATURE_VECTOR_TYPE = pa.list_(pa.float32())

SESSION_CORE_FIELDS: tuple[pa.Field, ...] = (
    pa.field(SESSION_ID, pa.int64(), nullable=False),
    pa.field(QUERY_ID, pa.int64(), nullable=False),
    pa.field(POSITION, pa.int16(), nullable=False),
    pa.field(CLICK, pa.int8(), nullable=False),
)
SESSION_OPTIONAL_FIELDS: tuple[pa.Field, ...] = (
    pa.field(DOC_ID, pa.string()),
    pa.field(QUERY_TOKENS, TOKEN_TYPE),
    pa.field(TITLE_TOKENS, TOKEN_TYPE),
    pa.field(ABSTRACT_TOKENS, TOKEN_TYPE),
    pa.field(FEATURES, FEATURE_VECTOR_TYPE),
)

ANNOTATION_CORE_FIELDS: tuple[pa.Field, ...] = (
    pa.field(QUERY_ID, pa.int64(), nullable=False),
    pa.field(LABEL, pa.int8(), nullable=False),
    pa.field(BUCKET, pa.int8(), nullable=False),
)
ANNOTATION_OPTIONAL_FIELDS: tuple[pa.Field, ...] = (
    pa.field(DOC_ID, pa.string()),
    pa.field(QUERY_TOKENS, TOKEN_TYPE),
    pa.field(TITLE_TOKENS, TOKEN_TYPE),
    pa.field(ABSTRACT_TOKENS, TOKEN_TYPE),
    pa.field(FEATURES, FEATURE_VECTOR_TYPE),
)

MAX_LABEL = 4
N_BUCKETS = 10
HIGH_BUCKETS: tuple[int, ...] = (0, 1, 2, 3, 4)  # BAL §4.3: high-frequency queries
TAIL_BUCKETS: tuple[int, ...] = (5, 6, 7, 8, 9)  # tail-frequency queries

# ---------------------------------------------------------------------------------------------
# Baidu-ULTR raw layout (gzip text, tab-separated; token ids joined by \x01)
# ---------------------------------------------------------------------------------------------
BAIDU_TOKEN_SEP = "\x01"
BAIDU_QUERY_FIELDS: tuple[str, ...] = ("query_id", "query_tokens", "query_reformulation")

# Result-line columns in file order. None marks a column the dataset documents as "-" (unused).
# The dataset documents "displayed count" twice (columns 14 and 27); the second keeps its index.
BAIDU_RESULT_FIELDS: tuple[str | None, ...] = (
    "position", "url_md5", "title_tokens", "abstract_tokens", "media_type", "click",
    None, None, "skip", "serp_height", "displayed_time", "displayed_time_middle",
    "first_click", "displayed_count", "serp_max_show_height", "slipoff_count_after_click",
    "dwelling_time", "displayed_time_top", "serp_to_top", "displayed_count_top",
    "displayed_count_bottom", "slipoff_count", None, "final_click", "displayed_time_bottom",
    "click_count", "displayed_count_27", None, "last_click", "reverse_display_count",
    "displayed_count_middle", None,
)
BAIDU_N_RESULT_FIELDS = len(BAIDU_RESULT_FIELDS)  # 32
BAIDU_MAX_POSITION = 30
# Behaviour columns kept as float64 (NaN where the log has "-" or nothing); never required.
BAIDU_BEHAVIOUR_COLUMNS: tuple[str, ...] = tuple(
    name for name in BAIDU_RESULT_FIELDS
    if name is not None and name not in ("position", "url_md5", "title_tokens", "abstract_tokens", "media_type", "click")
)
BAIDU_ANNOTATION_FIELDS: tuple[str, ...] = ("query_id", "query_tokens", "title_tokens", "abstract_tokens", "label", "bucket")

# The page features the Baidu layout carries, with the kind BAL models them as (BAL §4.1).
BAIDU_PAGE_FEATURES: tuple[PageFeature, ...] = (
    PageFeature(POSITION, FeatureKind.ORDINAL),
    PageFeature("media_type", FeatureKind.CATEGORICAL),
    PageFeature("serp_height", FeatureKind.CONTINUOUS),
    PageFeature("serp_max_show_height", FeatureKind.CONTINUOUS),
)


def baidu_sessions_arrow_schema() -> pa.Schema:
    """Arrow schema of the sessions table written by the Baidu reader."""
    fields = list(SESSION_CORE_FIELDS) + [
        pa.field(DOC_ID, pa.string()),
        pa.field(QUERY_TOKENS, TOKEN_TYPE),
        pa.field(TITLE_TOKENS, TOKEN_TYPE),
        pa.field(ABSTRACT_TOKENS, TOKEN_TYPE),
        pa.field("media_type", pa.int64()),
    ] + [pa.field(name, pa.float64()) for name in BAIDU_BEHAVIOUR_COLUMNS]
    return pa.schema(fields)


def baidu_annotations_arrow_schema() -> pa.Schema:
    return pa.schema(list(ANNOTATION_CORE_FIELDS) + [
        pa.field(QUERY_TOKENS, TOKEN_TYPE),
        pa.field(TITLE_TOKENS, TOKEN_TYPE),
        pa.field(ABSTRACT_TOKENS, TOKEN_TYPE),
    ])


QUARANTINE_SCHEMA = pa.schema([
    pa.field("file", pa.string(), nullable=False),
    pa.field("line", pa.int64(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("text", pa.string()),
])


# ---------------------------------------------------------------------------------------------
# Validation of tables users bring themselves
# ---------------------------------------------------------------------------------------------
_FEATURE_DTYPE_CHECK = {
    FeatureKind.ORDINAL: lambda s: pd.api.types.is_integer_dtype(s) or pd.api.types.is_float_dtype(s),
    FeatureKind.CONTINUOUS: lambda s: pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s),
    FeatureKind.CATEGORICAL: lambda s: True,  # any hashable level: ints, strings, categories
}


def _first_bad_row(mask: np.ndarray | pd.Series) -> int:
    return int(np.flatnonzero(np.asarray(mask))[0])


def _shown(value: object) -> str:
    """A cell value as a user would write it (numpy scalars unwrapped)."""
    return repr(value.item() if hasattr(value, "item") else value)


def _require_columns(df: pd.DataFrame, columns: Iterable[str], table: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise SchemaError(f"{table}: missing column(s) {missing}; present: {list(df.columns)}")


def _check_integer_column(df: pd.DataFrame, column: str, table: str, low: int | None = None,
                          high: int | None = None) -> None:
    s = df[column]
    if s.isna().any():
        raise SchemaError(f"{table}: column {column!r} row {_first_bad_row(s.isna())} is empty")
    numeric = pd.to_numeric(s, errors="coerce")
    bad = numeric.isna() | (numeric != np.floor(numeric))
    if bad.any():
        row = _first_bad_row(bad)
        raise SchemaError(f"{table}: column {column!r} row {row} is {_shown(s.iloc[row])}, expected an integer")
    if low is not None and (numeric < low).any():
        row = _first_bad_row(numeric < low)
        raise SchemaError(f"{table}: column {column!r} row {row} is {_shown(s.iloc[row])}, expected >= {low}")
    if high is not None and (numeric > high).any():
        row = _first_bad_row(numeric > high)
        raise SchemaError(f"{table}: column {column!r} row {row} is {_shown(s.iloc[row])}, expected <= {high}")


def _check_text_or_features(df: pd.DataFrame, table: str) -> None:
    has_tokens = all(c in df.columns for c in (QUERY_TOKENS, TITLE_TOKENS))
    if not has_tokens and FEATURES not in df.columns:
        raise SchemaError(
            f"{table}: needs token-id columns ({QUERY_TOKENS}, {TITLE_TOKENS}[, {ABSTRACT_TOKENS}]) "
            f"or a dense {FEATURES!r} vector column; present: {list(df.columns)}")
    if FEATURES in df.columns:
        lengths = df[FEATURES].map(lambda v: -1 if v is None else len(v))
        if (lengths < 0).any():
            raise SchemaError(f"{table}: column {FEATURES!r} row {_first_bad_row(lengths < 0)} is empty")
        if lengths.nunique() > 1:
            row = _first_bad_row(lengths != lengths.iloc[0])
            raise SchemaError(f"{table}: column {FEATURES!r} row {row} has {lengths.iloc[row]} values, "
                              f"row 0 has {lengths.iloc[0]}")


def validate_sessions(df: pd.DataFrame, page_features: Sequence[PageFeature], table: str = "sessions") -> None:
    """Raise SchemaError naming the column and row of the first violation of the sessions contract."""
    _require_columns(df, [f.name for f in SESSION_CORE_FIELDS] + [p.name for p in page_features], table)
    _check_integer_column(df, SESSION_ID, table)
    _check_integer_column(df, QUERY_ID, table)
    _check_integer_column(df, POSITION, table, low=1)
    _check_integer_column(df, CLICK, table, low=0, high=1)
    for feature in page_features:
        s = df[feature.name]
        if s.isna().any():
            raise SchemaError(f"{table}: page feature {feature.name!r} row {_first_bad_row(s.isna())} is empty")
        if not _FEATURE_DTYPE_CHECK[feature.kind](s):
            raise SchemaError(f"{table}: page feature {feature.name!r} is declared {feature.kind.value} "
                              f"but has dtype {s.dtype}")
    _check_text_or_features(df, table)


def validate_annotations(df: pd.DataFrame, table: str = "annotations") -> None:
    """Raise SchemaError naming the column and row of the first violation of the annotations contract."""
    _require_columns(df, [f.name for f in ANNOTATION_CORE_FIELDS], table)
    _check_integer_column(df, QUERY_ID, table)
    _check_integer_column(df, LABEL, table, low=0, high=MAX_LABEL)
    _check_integer_column(df, BUCKET, table, low=0, high=N_BUCKETS - 1)
    _check_text_or_features(df, table)


def coerce_sessions(df: pd.DataFrame, page_features: Sequence[PageFeature]) -> pd.DataFrame:
    """Cast a validated sessions frame to the canonical dtypes (ids int64, position int16, click int8)."""
    out = df.copy()
    out[SESSION_ID] = out[SESSION_ID].astype("int64")
    out[QUERY_ID] = out[QUERY_ID].astype("int64")
    out[POSITION] = out[POSITION].astype("int16")
    out[CLICK] = out[CLICK].astype("int8")
    for feature in page_features:
        if feature.kind is FeatureKind.CONTINUOUS:
            out[feature.name] = out[feature.name].astype("float64")
    return out


def coerce_annotations(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    out[QUERY_ID] = out[QUERY_ID].astype("int64")
    out[LABEL] = out[LABEL].astype("int8")
    out[BUCKET] = out[BUCKET].astype("int8")
    return out


def page_features_from_config(spec: Mapping[str, str] | Sequence[Mapping[str, str]],
                              where: str = "page_features") -> tuple[PageFeature, ...]:
    """Parse the run config's page-feature declaration: {name: kind} or [{name:, kind:}, ...]."""
    if isinstance(spec, Mapping):
        items = list(spec.items())
    else:
        items = []
        for i, entry in enumerate(spec):
            if not isinstance(entry, Mapping) or "name" not in entry or "kind" not in entry:
                raise SchemaError(f"{where}[{i}]: expected a mapping with 'name' and 'kind', got {entry!r}")
            items.append((entry["name"], entry["kind"]))
    features = tuple(PageFeature.parse(str(name), kind, where) for name, kind in items)
    names = [f.name for f in features]
    if len(set(names)) != len(names):
        raise SchemaError(f"{where}: duplicate page feature names {names}")
    return features
