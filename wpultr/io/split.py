"""The split stage's logic: a seeded share of the annotated queries (by schema.query_key) validates, the rest is the
test set (written to the run's split.json); with `evaluation.heldout_sessions`, a seeded share of whole sessions moves
out of the sessions tables, scored label-free by the evaluate stage."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..rundir.files import RunDir, atomic_path, read_json, write_json
from ..rundir.layout import HELDOUT_SESSIONS_DIR, SESSIONS_DIR, SPLIT
from ..rundir.tables import training_tables
from ..schema import SESSION_ID, query_key
from .parquet import partition_paths, row_count


def split_queries(annotations: pd.DataFrame, valid_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(validation, test) query keys (schema.query_key): a seeded `valid_fraction` of the annotated queries validate."""
    queries = np.sort(query_key(annotations).unique())
    n_valid = int(round(len(queries) * valid_fraction))
    valid = (np.sort(np.random.default_rng(seed).choice(queries, size=n_valid, replace=False)) if n_valid
             else np.array([], dtype=object))
    return valid, np.setdiff1d(queries, valid)


def write_split(run: RunDir, annotations: pd.DataFrame, valid_fraction: float, seed: int,
                heldout_sessions: float) -> dict[str, Any]:
    """Split `annotations`' queries into the run's split.json (and hold out `heldout_sessions` of the sessions, when
    above 0); what the split stage reports."""
    valid, test = split_queries(annotations, valid_fraction, seed)
    write_json(run.path(SPLIT), {"valid_queries": valid.tolist(), "test_queries": test.tolist(), "seed": seed})
    info: dict[str, Any] = {"valid_queries": int(len(valid)), "test_queries": int(len(test))}
    if heldout_sessions > 0:
        info["heldout_rows"] = hold_out_sessions(run, heldout_sessions, seed)
    return info


def annotation_split(run: RunDir, annotations: pd.DataFrame, which: str) -> pd.DataFrame:
    """The rows of `annotations` whose queries the run's split put in `which` (valid | test)."""
    queries = read_json(run.path(SPLIT))[f"{which}_queries"]
    return annotations[query_key(annotations).isin(queries)].reset_index(drop=True)


def split_test_queries(run_root: Path) -> set[str]:
    """The query keys (schema.query_key) of the run's test queries; empty before the split stage."""
    path = Path(run_root) / SPLIT
    return set(json.loads(path.read_text())["test_queries"]) if path.is_file() else set()


def heldout_session_mask(session_ids: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Whether each session is held out: a seeded hash of its id (splitmix64) below `fraction`, so the choice
    depends on the id alone — the same in every partition and on a rerun of a split that stopped midway."""
    with np.errstate(over="ignore"):
        x = np.asarray(session_ids).astype(np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53) < fraction


def hold_out_sessions(run: RunDir, fraction: float, seed: int) -> int:
    """Move the held-out sessions' rows out of the sessions tables (ingested and featured) into
    HELDOUT_SESSIONS_DIR (the training table's rows, one file per partition); the rows held out.

    Each partition is rewritten only after its held-out rows are written, so a rerun finds them there."""

    def write(path: Path, table: pa.Table) -> None:
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp)

    training, _ = training_tables(run)
    tables = [run.path(SESSIONS_DIR)] + ([training] if training != run.path(SESSIONS_DIR) else [])
    heldout = run.path(HELDOUT_SESSIONS_DIR)
    for table in reversed(tables):                              # the training table first: its rows are kept
        for part in partition_paths(table):
            rows = pq.read_table(part)
            mask = heldout_session_mask(rows.column(SESSION_ID).to_numpy(), fraction, seed)
            if not mask.any():
                continue
            if table == training:
                write(heldout / part.name, rows.filter(pa.array(mask)))
            write(part, rows.filter(pa.array(~mask)))
    return row_count(partition_paths(heldout)) if heldout.is_dir() else 0
