"""MCC and click MSE of a finished run against the simulator's truth (Identifiability paper §5.1).

Over the training logs (the run's ingested sessions, before any merge or intervention) of the queries every
method trains on: the sessions of the run's test queries (`data/split.json`) are left out, as the true-label
oracle leaves them out of its training (methods/oracle.py), so that no method is scored on documents whose
relevance it was kept from and another method was not (the paper's MCC is over its training set):
* MCC (`metrics.mcc`): Pearson correlation between each distinct query–document's true relevance
  probability — click_prob / examination_prob of the simulator, the examination hypothesis's P(R=1) —
  and the ranker's predicted relevance: σ(score) for pointwise-trained methods, exp(score − max) for
  listwise/pairwise ones (their scores are log-relevance up to a constant).
* Click MSE (`metrics.click_mse`): true click probability against r̂(x)·ô(position), ô the method's
  learned propensities (`train/bias.json`, merged positions read through the recorded mapping; 1 for a
  method that learns none), scaled by the one least-squares constant the losses leave free.

Out of core: the sessions are read partition by partition, key columns only (session, position, query,
document); the full rows (what the ranker scores) are read back only for each document's first row.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from ..io.parquet import partition_paths
from ..io.split import split_test_queries
from ..rankers.base import score_frame
from ..rankers.registry import load_ranker
from ..rundir.files import read_json
from ..rundir.layout import BIAS, IDENTIFIABILITY, RANKER_DIR, TRUTH_DIR, TRUTH_SESSIONS
from ..schema import DOC_ID, POSITION, QUERY_ID, QUERY_TOKENS, SESSION_ID, query_key
from .metrics import click_mse, mcc

POINTWISE = frozenset({"pointwise"})
_PART, _ROW = "__partition", "__row"     # where a key row lives: partition index, row within the partition


def _key_rows(parts: list[Path], left_out: set[str]) -> pd.DataFrame:
    """Session, position, query and document (when logged) of every row not of a query in `left_out`
    (schema.query_key), with its partition and row index."""
    frames = []
    for i, part in enumerate(parts):
        present = pq.read_schema(part).names
        columns = [c for c in (SESSION_ID, POSITION, QUERY_ID, QUERY_TOKENS, DOC_ID) if c in present]
        frame = pd.read_parquet(part, columns=columns)
        frame = frame.assign(**{_PART: np.int32(i), _ROW: np.arange(len(frame), dtype=np.int64)})
        if left_out:
            frame = frame[~query_key(frame).isin(left_out).to_numpy()]
        frames.append(frame.drop(columns=[QUERY_TOKENS], errors="ignore"))
    return pd.concat(frames, ignore_index=True)


def _full_rows(parts: list[Path], where: pd.DataFrame) -> pd.DataFrame:
    """The full rows at (partition, row) positions `where`, in the order given, one partition read at a time."""
    pieces, order = [], []
    for i, chosen in where.groupby(_PART, sort=True):
        frame = pd.read_parquet(parts[int(i)])
        pieces.append(frame.iloc[chosen[_ROW].to_numpy()])
        order.append(chosen.index.to_numpy())
    rows = pd.concat(pieces, ignore_index=True)
    return rows.iloc[np.argsort(np.concatenate(order), kind="stable")].reset_index(drop=True)


def _position_map(run_root: Path) -> dict[int, int]:
    path = run_root / IDENTIFIABILITY
    if not path.exists():
        return {}
    report = read_json(path)
    if report.get("action") != "merge" or report.get("factors") != [POSITION]:
        return {}
    return {int(row["values"][0]): int(row["as_values"][0]) for row in report.get("mapping", [])}


def truth_metrics(run_root: Path, sessions_path: Path, batch_size: int = 1024) -> dict[str, Any] | None:
    """{"MCC", "click_MSE", "documents", "rows"} of the run's ranker, or None when the logs were not simulated."""
    run_root = Path(run_root)
    truth_path = run_root / TRUTH_DIR / TRUTH_SESSIONS
    if not truth_path.exists():
        return None
    truth = pd.read_parquet(truth_path, columns=[SESSION_ID, POSITION, "examination_prob", "click_prob"])
    parts = partition_paths(sessions_path) if Path(sessions_path).is_dir() else [Path(sessions_path)]
    rows = _key_rows(parts, split_test_queries(run_root)).merge(truth, on=[SESSION_ID, POSITION], how="inner")
    rows = rows[rows["examination_prob"] > 0].reset_index(drop=True)
    keys = [QUERY_ID, DOC_ID] if DOC_ID in rows.columns else [QUERY_ID]
    doc_code = rows.groupby(keys, sort=False).ngroup().to_numpy()
    first = np.unique(doc_code, return_index=True)[1]
    firsts = rows.iloc[first].reset_index(drop=True)
    true_relevance = (firsts["click_prob"] / firsts["examination_prob"]).to_numpy()
    docs = _full_rows(parts, firsts[[_PART, _ROW]])
    scores = np.asarray(score_frame(load_ranker(run_root / RANKER_DIR), docs, batch_size), dtype=np.float64)
    bias = read_json(run_root / BIAS) if (run_root / BIAS).exists() else {}
    predicted = (1.0 / (1.0 + np.exp(-scores)) if bias.get("loss") in POINTWISE
                 else np.exp(scores - scores.max()))
    propensities = {int(k): float(v) for k, v in (bias.get("propensities") or {}).items()}
    positions = rows[POSITION].to_numpy().astype(int)
    mapping = _position_map(run_root)
    trained_at = np.array([mapping.get(p, p) for p in positions])
    observation = np.array([propensities.get(p, 1.0) for p in trained_at]) if propensities else np.ones(len(rows))
    predicted_click = predicted[doc_code] * observation
    return {"MCC": mcc(true_relevance, predicted), "click_MSE": click_mse(rows["click_prob"], predicted_click,
                                                                         fit_scale=True),
            "documents": int(len(docs)), "rows": int(len(rows))}
