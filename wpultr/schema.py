"""The one place that defines wpultr's tables: columns, dtypes, feature kinds and the Baidu-ULTR layout.

Every reader, writer, simulator and stage imports its column names from here, so a change to
the log schema is a change to this file only.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .errors import SchemaError  # re-exported: the schema's own error


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
    def parse(cls, name: str, kind: str | FeatureKind, where: str = "page_features") -> PageFeature:
        try:
            return cls(name=name, kind=FeatureKind(kind))
        except ValueError:
            allowed = ", ".join(k.value for k in FeatureKind)
            raise SchemaError(f"{where}.{name}: kind {kind!r} is not one of: {allowed}") from None


# ---------------------------------------------------------------------------------------------
# Sessions table (long form: one row per shown result)
# ---------------------------------------------------------------------------------------------
# the names live in wpultr.columns (no imports, for the quick commands); re-exported here with the types
from .columns import (  # noqa: E402,F401
    ABSTRACT_TOKENS,
    BUCKET,
    CLICK,
    DOC_ID,
    FEATURES,
    LABEL,
    POSITION,
    QUERY_ID,
    QUERY_TOKENS,
    RELEVANCE_SCORE,
    SESSION_ID,
    TITLE_TOKENS,
)

TOKEN_COLUMNS: tuple[str, ...] = (QUERY_TOKENS, TITLE_TOKENS, ABSTRACT_TOKENS)

TOKEN_TYPE = pa.list_(pa.int32())
FEATURE_VECTOR_TYPE = pa.list_(pa.float32())

# query_id is the exact decimal text of the id (Baidu-ULTR ids have 20 digits, above int64; digits
# are kept as written, leading zeros included), the same type in the sessions and annotation tables.
QUERY_ID_TYPE = pa.string()
QUERY_ID_MAX_DIGITS = 64

SESSION_CORE_FIELDS: tuple[pa.Field, ...] = (
    pa.field(SESSION_ID, pa.int64(), nullable=False),
    pa.field(QUERY_ID, QUERY_ID_TYPE, nullable=False),
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
    pa.field(QUERY_ID, QUERY_ID_TYPE, nullable=False),
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
QUERY_REFORMULATION = "query_reformulation"   # 3rd field of a query line, kept as written (string)
BAIDU_QUERY_FIELDS: tuple[str, ...] = ("query_id", "query_tokens", QUERY_REFORMULATION)
MEDIA_TYPE = "media_type"
# A '-' in the multimedia-type column is a media type of its own (as public Baidu-ULTR parsers
# treat it), stored as this reserved code; the writer writes the code back as '-'.
BAIDU_MEDIA_TYPE_DASH = -1

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
    if name is not None
    and name not in ("position", "url_md5", "title_tokens", "abstract_tokens", "media_type", "click")
)
BAIDU_ANNOTATION_FIELDS: tuple[str, ...] = (
    "query_id", "query_tokens", "title_tokens", "abstract_tokens", "label", "bucket")

# The page features the Baidu layout carries, with the kind BAL models them as (BAL §4.1).
BAIDU_PAGE_FEATURES: tuple[PageFeature, ...] = (
    PageFeature(POSITION, FeatureKind.ORDINAL),
    PageFeature("media_type", FeatureKind.CATEGORICAL),
    PageFeature("serp_height", FeatureKind.CONTINUOUS),
    PageFeature("serp_max_show_height", FeatureKind.CONTINUOUS),
)


# ---------------------------------------------------------------------------------------------
# Baidu-ULTR embedding datasets (Hager et al., SIGIR 2024: the reproducibility study's reranking datasets)
# ---------------------------------------------------------------------------------------------
# Column names as published. Stored either per session (one record, a list per shown result: the hub's Parquet)
# or flat (one row per shown result, EMBEDDING_QUERY_NO grouping a session's rows: the Feather parts).
EMBEDDING_COLUMN = "query_document_embedding"   # n x EMBEDDING_WIDTH float16: the cross-encoder's [CLS] vector
EMBEDDING_WIDTH = 768
EMBEDDING_QUERY_NO = "query_no"                 # flat form: the session's ordinal, shared by its rows
EMBEDDING_N = "n"                               # per-session form: results shown (every list's length)
EMBEDDING_DOC_ID = "text_md5"                   # md5 of title and abstract: the document, as doc_id
EMBEDDING_QUERY_TOKENS = "query"                # token ids, as query_tokens
EMBEDDING_TITLE, EMBEDDING_ABSTRACT = "title", "abstract"   # token ids, as title_tokens / abstract_tokens
EMBEDDING_BUCKET = "frequency_bucket"           # annotations: as bucket
EMBEDDING_IDS: tuple[str, ...] = ("query_md5", "url_md5")   # kept as written (strings); no method reads them
DISPLAYED_TIME, SERP_HEIGHT, SLIPOFF_AFTER_CLICK = "displayed_time", "serp_height", "slipoff_count_after_click"
# The SERP features with the kind each is modelled as; slipoff_count_after_click is a post-click signal (it follows
# the click it would explain), kept as a behaviour column (BAIDU_BEHAVIOUR_COLUMNS), never a page feature.
EMBEDDING_PAGE_FEATURES: tuple[PageFeature, ...] = (
    PageFeature(POSITION, FeatureKind.ORDINAL),
    PageFeature(MEDIA_TYPE, FeatureKind.CATEGORICAL),
    PageFeature(SERP_HEIGHT, FeatureKind.CONTINUOUS),
    PageFeature(DISPLAYED_TIME, FeatureKind.CONTINUOUS),
)
# The thirteen classic LTR features per shown result (query_length is one per session, repeated on its rows);
# stored as float32 columns of these names, and appended to `features` when data.embeddings.ltr_features names them.
EMBEDDING_LTR_FEATURES: tuple[str, ...] = (
    "bm25", "bm25_title", "bm25_abstract", "tf_idf", "tf", "idf", "ql_jelinek_mercer_short",
    "ql_jelinek_mercer_long", "ql_dirichlet", "query_length", "document_length", "title_length", "abstract_length")
EMBEDDING_SESSION_LEVEL: tuple[str, ...] = (QUERY_ID, "query_md5", EMBEDDING_QUERY_TOKENS, "query_length",
                                            EMBEDDING_N, EMBEDDING_BUCKET, EMBEDDING_QUERY_NO)
# Columns of the ingested tables no method reads (the train stage leaves them out: io.train_input.training_columns).
EMBEDDING_EXTRA_COLUMNS: tuple[str, ...] = EMBEDDING_IDS + EMBEDDING_LTR_FEATURES


def baidu_sessions_arrow_schema() -> pa.Schema:
    """Arrow schema of the sessions table written by the Baidu reader."""
    fields = list(SESSION_CORE_FIELDS) + [
        pa.field(DOC_ID, pa.string()),
        pa.field(QUERY_TOKENS, TOKEN_TYPE),
        pa.field(QUERY_REFORMULATION, pa.string()),
        pa.field(TITLE_TOKENS, TOKEN_TYPE),
        pa.field(ABSTRACT_TOKENS, TOKEN_TYPE),
        pa.field(MEDIA_TYPE, pa.int64()),
    ] + [pa.field(name, pa.float64()) for name in BAIDU_BEHAVIOUR_COLUMNS]
    return pa.schema(fields)


def baidu_annotations_arrow_schema() -> pa.Schema:
    return pa.schema(list(ANNOTATION_CORE_FIELDS) + [
        pa.field(QUERY_TOKENS, TOKEN_TYPE),
        pa.field(TITLE_TOKENS, TOKEN_TYPE),
        pa.field(ABSTRACT_TOKENS, TOKEN_TYPE),
    ])


# ---------------------------------------------------------------------------------------------
# Ids held as codes
# ---------------------------------------------------------------------------------------------
# `DataFrame.attrs` key of a frame whose id columns hold int codes instead of text (a streamed BAL's own columns,
# `methods.streaming.column_table`): an `IdText`, so what a user reads (swaps to run, documents) names the ids.
ID_TEXT = "id_text"


class IdText:
    """{column: the text of each code, by code} of id columns held as codes. Shared, never copied: pandas
    deep-copies a frame's attrs into every frame derived from it, and a log has millions of ids."""

    def __init__(self, levels: dict[str, list]):
        self.levels = levels

    def __deepcopy__(self, memo: dict) -> IdText:
        return self


def ids_as_text(frame: pd.DataFrame, codes_of: pd.DataFrame) -> pd.DataFrame:
    """`frame` (a few rows: documents, swaps) with its id columns that `codes_of` holds as codes turned back into
    text."""
    held = codes_of.attrs.get(ID_TEXT)
    levels = held.levels if held is not None else {}
    coded = [c for c in frame.columns if c in levels and pd.api.types.is_integer_dtype(frame[c])]
    if not coded:
        return frame
    return frame.assign(**{c: np.asarray(levels[c], dtype=object)[frame[c].to_numpy()] for c in coded})


# ---------------------------------------------------------------------------------------------
# The key of an annotated query
# ---------------------------------------------------------------------------------------------
QUERY_KEY = "query_key"


def query_key(df: pd.DataFrame) -> pd.Series:
    """The key annotated queries are grouped, split and evaluated by: the query id text, plus a tab and
    the query token ids joined by spaces when the frame has query tokens (Baidu-ULTR reuses ~8% of
    annotation query ids for different queries; its README keys queries by their text)."""
    ids = pa.array(df[QUERY_ID].astype(str).to_numpy(dtype=object), type=pa.string())
    if QUERY_TOKENS not in df.columns:
        return pd.Series(ids.to_numpy(zero_copy_only=False), index=df.index, name=QUERY_KEY, dtype=object)
    tokens = pa.array(df[QUERY_TOKENS], type=pa.list_(pa.int64()), from_pandas=True)
    text = pc.fill_null(pc.binary_join(pc.cast(tokens, pa.list_(pa.string())), " "), "")
    keys = pc.binary_join_element_wise(ids, text, "\t")
    return pd.Series(keys.to_numpy(zero_copy_only=False), index=df.index, name=QUERY_KEY, dtype=object)


def pair_codes(first: Sequence | np.ndarray | pd.Series, second: Sequence | np.ndarray | pd.Series) -> np.ndarray:
    """Codes 0..n-1 of each row's (first, second) pair, in order of first appearance (as factorising the
    pairs would give), from the two columns' own codes: no tuple or string per row. Nulls are values."""
    a = pd.factorize(np.asarray(first), use_na_sentinel=False)[0].astype(np.int64)
    b = pd.factorize(np.asarray(second), use_na_sentinel=False)[0].astype(np.int64)
    return pd.factorize(a * (int(b.max(initial=-1)) + 1) + b)[0]


CHUNK_ROWS = 1 << 20   # rows a pass over a whole log handles at once: its temporaries are a chunk's, not the log's


def row_spans(n_rows: int, chunk_rows: int = CHUNK_ROWS) -> list[slice]:
    """Consecutive slices of at most `chunk_rows` rows covering 0..n_rows."""
    return [slice(start, start + chunk_rows) for start in range(0, n_rows, chunk_rows)]


def query_document_pairs(df: pd.DataFrame, chunk_rows: int = CHUNK_ROWS) -> np.ndarray:
    """Codes 0..n-1 of each row's (query_id, doc_id): the same document shown for the same query in another
    session is the same pair. What intervention harvesting and BAL's document effects group impressions by.

    Ids that are already integer codes (a streamed BAL's, `methods.streaming.column_table`) are paired `chunk_rows`
    rows at a time, each chunk's new pairs appended in order of first appearance: the codes `pair_codes` gives,
    without its whole-table hash tables."""
    query, doc = df[QUERY_ID].to_numpy(), df[DOC_ID].to_numpy()
    if len(df) <= chunk_rows or not (np.issubdtype(query.dtype, np.integer) and np.issubdtype(doc.dtype, np.integer)):
        return pair_codes(query, doc)
    width = int(doc.max()) - int(doc.min()) + 1
    low_q, low_d = int(query.min()), int(doc.min())
    if (int(query.max()) - low_q + 1) * width >= 1 << 62:       # the combined key would not fit an int64
        return pair_codes(query, doc)
    seen = pd.Index(np.zeros(0, np.int64))
    out = np.empty(len(df), dtype=np.int64)
    for span in row_spans(len(df), chunk_rows):
        key = (query[span].astype(np.int64) - low_q) * width + (doc[span] - low_d)
        fresh = pd.unique(key)
        fresh = fresh[~pd.Index(fresh).isin(seen)]
        if len(fresh):
            seen = seen.append(pd.Index(fresh))
        out[span] = seen.get_indexer(key)
    return out


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


# Bounds checked before any cast, so a value never wraps: positions are stored as int16, session
# ids as int64, and a float holds every integer below 2^53 exactly (and no longer all above it).
MAX_POSITION = int(np.iinfo(np.int16).max)
INT64_MIN, INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
EXACT_FLOAT_LIMIT = 2 ** 53
MAX_QUERY_ID_CHARS = 256


def _integral_float_problem(value: float) -> str | None:
    """Why a float cannot be taken as an exact integer (None when it can)."""
    if not np.isfinite(value):
        return "expected a finite integer"
    if value != np.floor(value):
        return "expected an integer"
    if abs(value) >= EXACT_FLOAT_LIMIT:
        return "a float above 2^53 cannot be stored exactly; write the column as integers"
    return None


def _integer_cell(cell: object) -> tuple[int | None, str | None]:
    """One cell of an object/string column as an exact int, or the reason it is not one."""
    if isinstance(cell, (bool, np.bool_)):
        return int(cell), None
    if isinstance(cell, (int, np.integer)):
        return int(cell), None
    if isinstance(cell, (float, np.floating)):
        problem = _integral_float_problem(float(cell))
        return (None, problem) if problem else (int(cell), None)
    if isinstance(cell, str):
        text = cell.strip()
        try:
            return int(text), None
        except ValueError:
            pass
        try:
            value = float(text)
        except ValueError:
            return None, "expected an integer"
        problem = _integral_float_problem(value)
        return (None, problem) if problem else (int(value), None)
    return None, "expected an integer"


def _check_integer_column(df: pd.DataFrame, column: str, table: str, low: int = INT64_MIN,
                          high: int = INT64_MAX) -> np.ndarray:
    """The column as int64 after checking every cell is a present integer in [low, high] (checked
    before the cast, so nothing wraps); SchemaError names the column, row and value otherwise."""
    s = df[column]
    missing = np.asarray(s.isna())
    if missing.any():
        raise SchemaError(f"{table}: column {column!r} row {_first_bad_row(missing)} is empty")

    def fail(row: int, why: str) -> SchemaError:
        return SchemaError(f"{table}: column {column!r} row {row} is {_shown(s.iloc[row])}, {why}")

    if pd.api.types.is_bool_dtype(s) or pd.api.types.is_integer_dtype(s):
        raw = s.to_numpy(dtype=np.uint64 if str(s.dtype).lower().startswith("uint") else
                         (np.bool_ if pd.api.types.is_bool_dtype(s) else np.int64))
    elif pd.api.types.is_float_dtype(s):
        raw = s.to_numpy(dtype=np.float64)
        for row in np.flatnonzero(~np.isfinite(raw) | (raw != np.floor(raw)) | (np.abs(raw) >= EXACT_FLOAT_LIMIT)):
            raise fail(int(row), _integral_float_problem(float(raw[row])) or "expected an integer")
    else:
        values = []
        for row, cell in enumerate(s.to_numpy(dtype=object)):
            value, problem = _integer_cell(cell)
            if problem:
                raise fail(row, problem)
            values.append(value)
        raw = np.array(values, dtype=object)
    below, above = raw < low, raw > high
    if np.any(below):
        raise fail(_first_bad_row(below), f"expected >= {low}")
    if np.any(above):
        raise fail(_first_bad_row(above), f"expected <= {high}")
    return raw.astype(np.int64)


def _query_id_cell(cell: object) -> tuple[str | None, str | None]:
    """One query id as its exact decimal text (or the string as written), or the reason it cannot be one."""
    if isinstance(cell, (bool, np.bool_)):
        return None, "expected an integer or string id, not a boolean"
    if isinstance(cell, (int, np.integer)):
        return str(int(cell)), None
    if isinstance(cell, (float, np.floating)):
        value = float(cell)
        if not np.isfinite(value):
            return None, "expected a finite integral id"
        if value != np.floor(value):
            return None, "expected an integral id"
        if abs(value) >= EXACT_FLOAT_LIMIT:
            return None, "a float id above 2^53 cannot be stored exactly; write query ids as integers or strings"
        return str(int(value)), None
    if isinstance(cell, str):
        if not cell.strip():
            return None, "expected a non-empty id"
        if len(cell) > MAX_QUERY_ID_CHARS:
            return None, f"expected an id of at most {MAX_QUERY_ID_CHARS} characters"
        return cell, None
    return None, "expected an integer or string id"


def _check_query_id(df: pd.DataFrame, table: str) -> np.ndarray:
    """query_id as exact decimal text (an object array of str): integers converted exactly, strings
    kept, floats only where finite, integral and below 2^53; SchemaError names the row otherwise."""
    s = df[QUERY_ID]
    missing = np.asarray(s.isna())
    if missing.any():
        raise SchemaError(f"{table}: column {QUERY_ID!r} row {_first_bad_row(missing)} is empty")
    if pd.api.types.is_integer_dtype(s) and not pd.api.types.is_bool_dtype(s):
        numpy_type = np.uint64 if str(s.dtype).lower().startswith("uint") else np.int64
        return s.to_numpy(dtype=numpy_type).astype(str).astype(object)
    texts = np.empty(len(s), dtype=object)
    for row, cell in enumerate(s.to_numpy(dtype=object)):
        text, problem = _query_id_cell(cell)
        if problem:
            raise SchemaError(f"{table}: column {QUERY_ID!r} row {row} is {_shown(cell)}: {problem}")
        texts[row] = text
    return texts


def _check_unique_positions(sessions: np.ndarray, positions: np.ndarray, table: str) -> None:
    """A session shows one result per position: a repeated (session_id, position) names both rows."""
    keys = pd.DataFrame({SESSION_ID: sessions, POSITION: positions})
    repeated = keys.duplicated(keep="first").to_numpy()
    if repeated.any():
        second = _first_bad_row(repeated)
        first = _first_bad_row((sessions == sessions[second]) & (positions == positions[second]))
        raise SchemaError(f"{table}: rows {first} and {second} both hold {SESSION_ID} {sessions[second]} "
                          f"{POSITION} {positions[second]}; a session shows one result per position")


def _check_text_or_features(df: pd.DataFrame, table: str) -> None:
    has_tokens = all(c in df.columns for c in (QUERY_TOKENS, TITLE_TOKENS))
    if not has_tokens and FEATURES not in df.columns:
        raise SchemaError(
            f"{table}: needs token-id columns ({QUERY_TOKENS}, {TITLE_TOKENS}[, {ABSTRACT_TOKENS}]) "
            f"or a dense {FEATURES!r} vector column; present: {list(df.columns)}")
    if FEATURES in df.columns:
        lengths = df[FEATURES].map(lambda v: -1 if v is None or (isinstance(v, float) and np.isnan(v)) else len(v))
        if (lengths < 0).any():
            raise SchemaError(f"{table}: column {FEATURES!r} row {_first_bad_row(lengths < 0)} is empty")
        if lengths.nunique() > 1:
            row = _first_bad_row(lengths != lengths.iloc[0])
            raise SchemaError(f"{table}: column {FEATURES!r} row {row} has {lengths.iloc[row]} values, "
                              f"row 0 has {lengths.iloc[0]}")


def _checked_sessions(df: pd.DataFrame, page_features: Sequence[PageFeature], table: str) -> dict[str, np.ndarray]:
    """Every check of the sessions contract; the core columns in their canonical types."""
    _require_columns(df, [f.name for f in SESSION_CORE_FIELDS] + [p.name for p in page_features], table)
    columns = {SESSION_ID: _check_integer_column(df, SESSION_ID, table),
               QUERY_ID: _check_query_id(df, table),
               POSITION: _check_integer_column(df, POSITION, table, low=1, high=MAX_POSITION).astype(np.int16),
               CLICK: _check_integer_column(df, CLICK, table, low=0, high=1).astype(np.int8)}
    for feature in page_features:
        s = df[feature.name]
        if s.isna().any():
            raise SchemaError(f"{table}: page feature {feature.name!r} row {_first_bad_row(s.isna())} is empty")
        if not _FEATURE_DTYPE_CHECK[feature.kind](s):
            raise SchemaError(f"{table}: page feature {feature.name!r} is declared {feature.kind.value} "
                              f"but has dtype {s.dtype}")
        if pd.api.types.is_float_dtype(s) and not np.isfinite(s.to_numpy()).all():
            row = _first_bad_row(~np.isfinite(s.to_numpy()))
            raise SchemaError(f"{table}: page feature {feature.name!r} row {row} is {_shown(s.iloc[row])}, "
                              f"expected a finite number")
    _check_unique_positions(columns[SESSION_ID], columns[POSITION], table)
    _check_text_or_features(df, table)
    return columns


def _checked_annotations(df: pd.DataFrame, table: str) -> dict[str, np.ndarray]:
    """Every check of the annotations contract; the core columns in their canonical types."""
    _require_columns(df, [f.name for f in ANNOTATION_CORE_FIELDS], table)
    columns = {QUERY_ID: _check_query_id(df, table),
               LABEL: _check_integer_column(df, LABEL, table, low=0, high=MAX_LABEL).astype(np.int8),
               BUCKET: _check_integer_column(df, BUCKET, table, low=0, high=N_BUCKETS - 1).astype(np.int8)}
    _check_text_or_features(df, table)
    _check_judged_once(df, columns[QUERY_ID], table)
    return columns


def _check_judged_once(df: pd.DataFrame, query_ids: np.ndarray, table: str) -> None:
    """SchemaError naming both rows when a query (query_key) labels one document (doc_id) twice: evaluation
    would count its gain twice, and two labels cannot both be right."""
    if DOC_ID not in df.columns:
        return
    keyed = df[[c for c in (QUERY_TOKENS,) if c in df.columns]].assign(**{QUERY_ID: query_ids})
    pairs = pd.DataFrame({"q": query_key(keyed).to_numpy(), "d": df[DOC_ID].to_numpy()})
    again = pairs.duplicated().to_numpy() & df[DOC_ID].notna().to_numpy()
    if again.any():
        group = pairs.groupby(["q", "d"], sort=False).ngroup().to_numpy()
        second = int(np.flatnonzero(again)[0])
        first = int(np.flatnonzero(group == group[second])[0])
        raise SchemaError(f"{table}: column {DOC_ID!r} rows {first} and {second} label document "
                          f"{_shown(df[DOC_ID].iloc[first])} of one query twice; each (query, doc_id) once")


def validate_sessions(df: pd.DataFrame, page_features: Sequence[PageFeature], table: str = "sessions") -> None:
    """Raise SchemaError naming the column and row of the first violation of the sessions contract
    (ranges checked before any cast; one result per (session_id, position))."""
    _checked_sessions(df, page_features, table)


def validate_annotations(df: pd.DataFrame, table: str = "annotations") -> None:
    """Raise SchemaError naming the column and row of the first violation of the annotations contract."""
    _checked_annotations(df, table)


def coerce_sessions(df: pd.DataFrame, page_features: Sequence[PageFeature], table: str = "sessions") -> pd.DataFrame:
    """A sessions frame in the canonical types (session_id int64, query_id exact text, position int16,
    click int8), validated first: it never casts a value it has not range-checked."""
    out = df.copy()
    for column, values in _checked_sessions(df, page_features, table).items():
        out[column] = pd.Series(values, index=df.index, dtype=str if column == QUERY_ID else values.dtype)
    for feature in page_features:
        if feature.kind is FeatureKind.CONTINUOUS:
            out[feature.name] = out[feature.name].astype("float64")
    return out


def coerce_annotations(df: pd.DataFrame, table: str = "annotations") -> pd.DataFrame:
    """An annotations frame in the canonical types (query_id exact text, label and bucket int8), validated first."""
    out = df.copy()
    for column, values in _checked_annotations(df, table).items():
        out[column] = pd.Series(values, index=df.index, dtype=str if column == QUERY_ID else values.dtype)
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
