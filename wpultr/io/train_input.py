"""What the train stage (and the click metrics' fit sample) read of the sessions table: the columns a method
trains on, the list columns kept as Arrow arrays, and a seeded sample of sessions read without the rest."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..schema import (
    ABSTRACT_TOKENS,
    BAIDU_BEHAVIOUR_COLUMNS,
    DOC_ID,
    EMBEDDING_EXTRA_COLUMNS,
    FEATURES,
    QUERY_REFORMULATION,
    QUERY_TOKENS,
    SESSION_ID,
    TITLE_TOKENS,
)
from .parquet import partition_paths, read_table, table_to_pandas

if TYPE_CHECKING:
    from ..config import RunConfig


def training_columns(cfg: RunConfig, available: list[str]) -> list[str]:
    """The sessions' columns the train stage hands a method: all but what no method reads — Baidu behaviour
    columns no page feature declares and, when a dense `features` vector and a `doc_id` serve a non-BERT ranker,
    the title and abstract token lists (Python objects per row: much of the train stage's memory). The query
    tokens stay: they are part of the query key (schema.query_key) that keeps test queries out of training."""
    declared = set(cfg.data.declared_page_features())
    drop = {c for c in (*BAIDU_BEHAVIOUR_COLUMNS, QUERY_REFORMULATION, *EMBEDDING_EXTRA_COLUMNS) if c not in declared}
    if cfg.ranker.backbone != "bert" and FEATURES in available and DOC_ID in available:
        drop |= {TITLE_TOKENS, ABSTRACT_TOKENS}
    return [c for c in available if c not in drop]


def arrow_lists(cfg: RunConfig) -> tuple[str, ...]:
    """The list columns the train stage keeps as Arrow arrays (io.parquet.read_table): the dense `features`
    (the rankers read them as one matrix, rankers.mlp.feature_matrix) and, but for BERT (which reads each
    row's token ids), the query tokens (read only by schema.query_key, through Arrow)."""
    return (FEATURES,) if cfg.ranker.backbone == "bert" else (FEATURES, QUERY_TOKENS)


def read_sampled_sessions(directory: Path, max_sessions: int | None, seed: int,
                          columns: list[str] | None = None, arrow_lists: tuple[str, ...] = ()) -> pd.DataFrame:
    """`io.parquet.sample_sessions(read_table(directory), max_sessions, seed)` without reading unsampled rows.

    The session ids are chosen from the session_id column alone (same ids, same draw), then only their rows
    are read, the choice pushed down to the Parquet scan as a filter. `columns` (None: all) are read;
    `arrow_lists` as in `read_table`.
    """
    if max_sessions is None:
        return read_table(directory, columns, arrow_lists)
    ids = read_table(directory, columns=[SESSION_ID])[SESSION_ID].unique()
    if len(ids) <= max_sessions:
        return read_table(directory, columns, arrow_lists)
    keep = np.random.default_rng(seed).choice(ids, size=max_sessions, replace=False)
    del ids
    dataset = ds.dataset([str(p) for p in partition_paths(directory)], format="parquet")
    table = dataset.to_table(columns=columns, filter=pc.field(SESSION_ID).isin(pa.array(keep)))
    return table_to_pandas(table, arrow_lists).reset_index(drop=True)
