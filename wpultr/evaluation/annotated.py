"""Scoring annotated queries with a saved ranker and measuring them (the evaluate stage's and `wpultr evaluate`'s
one route from a ranker directory to metrics; the metrics themselves are `metrics.py`)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ..rankers.base import score_frame
from ..rankers.precision import scoring_precision
from ..rankers.registry import load_ranker
from ..schema import QUERY_ID, QUERY_KEY, query_key
from .metrics import evaluate as evaluate_scores
from .metrics import per_query

if TYPE_CHECKING:
    from ..config import RunConfig


def evaluate_ranker(ranker_dir: Path, annotations: pd.DataFrame, cfg: RunConfig):
    """Score `annotations` with the ranker saved in `ranker_dir`: (metrics dict, per-query table, scores)."""
    ranker = load_ranker(ranker_dir)
    scored = annotations.copy()     # scored in the precision the ranker trained in on the device it sits on
    scored["score"] = score_frame(ranker, annotations, cfg.train.batch_size,
                                  scoring_precision(cfg.train.precision, ranker.device))
    ks = tuple(cfg.evaluation.ks)
    metrics = evaluate_scores(scored, "score", ks=ks)
    table = per_query(scored, "score", ks=ks)
    scored[QUERY_KEY] = query_key(scored)
    keep = [c for c in (QUERY_ID, QUERY_KEY, "doc_id", "label", "bucket", "score") if c in scored.columns]
    return metrics, table, scored[keep]
