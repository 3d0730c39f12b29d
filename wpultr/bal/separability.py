"""Which page features the logs can tell apart from relevance: those that vary for the same document.

A page feature's effect on clicks is learnable only from impressions of one (query, document) pair that
show it with different values (position is the classic case: the same result at rank 2 in one session and
rank 5 in another). A feature fixed per document — a media type that never changes for a URL — moves with
the document's relevance: any click model fitted to the logs gives its "effect" whatever relevance the ranker
missed on documents of that type, and in a finite log, where only a few thousand documents stand behind a
type, that chance correlation is large enough for the click test to find (a page feature → click edge on
logs whose users ignore it). Correcting such an effect takes real relevance out of the ranker.

So BAL keeps every discovered edge in the graph (what the logs show) but corrects only the separable
features: those with at least `bal.min_within_document_share` of their variance within (query, document)
pairs. The others are recorded as set aside, with every feature's share, in `train/bias.json` (`separability`)
and shown by `wpultr graph show`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..schema import CHUNK_ROWS, DOC_ID, QUERY_ID, FeatureKind, PageFeature, query_document_pairs, row_spans


def within_document_share(pairs: np.ndarray, values: np.ndarray, categorical: bool,
                          chunk_rows: int = CHUNK_ROWS) -> float:
    """The share of a feature's variance that lies within (query, document) pairs (ANOVA's within-group sum of
    squares over the total; a categorical feature as its one-hot indicators, summed). 0: fixed per document;
    1: nothing to do with the document. A feature with no variance at all is 0 (there is nothing to learn).
    Sums are gathered `chunk_rows` rows at a time (same numbers below a chunk, float rounding above)."""
    n = len(pairs)
    if n == 0:
        return 0.0
    spans = row_spans(n, chunk_rows)
    n_pairs = int(max(int(np.max(pairs[s])) for s in spans)) + 1
    counts = sum(np.bincount(pairs[s], minlength=n_pairs) for s in spans)
    if categorical:          # Σ_j SS_j of the indicators, from the (pair, level) counts c_pj, never a one-hot matrix
        levels = np.sort(pd.unique(np.asarray(values)))        # codes in sorted order, as np.unique gives
        index = pd.Index(levels)
        k = len(levels)
        by_level = np.zeros(k, np.int64)
        cells: dict[int, int] | np.ndarray = np.zeros(n_pairs * k, np.int64) if n_pairs * k <= 4 * n + 1024 else {}
        for s in spans:
            codes = index.get_indexer(np.asarray(values[s]))
            by_level += np.bincount(codes, minlength=k)
            cell = np.asarray(pairs[s], np.int64) * k + codes
            if isinstance(cells, np.ndarray):
                cells += np.bincount(cell, minlength=n_pairs * k)
            else:                                      # too many (pair, level) cells for a dense count
                found, c = np.unique(cell, return_counts=True)
                for key, count in zip(found.tolist(), c.tolist()):
                    cells[key] = cells.get(key, 0) + count
        if isinstance(cells, np.ndarray):
            cell_ids = np.flatnonzero(cells)
            c = cells[cell_ids]
        else:
            cell_ids = np.array(sorted(cells), np.int64)
            c = np.array([cells[i] for i in cell_ids.tolist()], np.int64)
        total = n - float(np.sum(np.sort(by_level).astype(np.float64) ** 2)) / n   # integers: exact in any order
        within = n - float(np.sum(c.astype(np.float64) ** 2 / counts[cell_ids // k]))
    else:
        lo = min(float(np.min(values[s])) for s in spans)
        hi = max(float(np.max(values[s])) for s in spans)
        if hi == lo:
            return 0.0
        mean = _chunked_sum(values, spans, lambda x: x) / n
        total = _chunked_sum(values, spans, lambda x: (x - mean) ** 2) if len(spans) > 1 \
            else float(np.sum((np.asarray(values, np.float64) - np.asarray(values, np.float64).mean()) ** 2))
        sums = sum(np.bincount(pairs[s], np.asarray(values[s], np.float64), minlength=n_pairs) for s in spans)
        means = sums / np.maximum(counts, 1)
        within = sum(float(np.sum((np.asarray(values[s], np.float64) - means[pairs[s]]) ** 2)) for s in spans)
    return within / total if total > 0.0 else 0.0


def _chunked_sum(values: np.ndarray, spans: Sequence[slice], term: Any) -> float:
    return float(sum(float(np.sum(term(np.asarray(values[s], np.float64)))) for s in spans))


@dataclass(frozen=True)
class Separability:
    """Each page feature's within-document share, the threshold, and (`set_aside`) the ones BAL does not correct."""

    shares: dict[str, float]
    threshold: float
    checked: bool = True
    reason: str = ""

    @property
    def set_aside(self) -> tuple[str, ...]:
        return tuple(name for name, share in self.shares.items() if share < self.threshold)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"checked": self.checked, "min_within_document_share": self.threshold,
                               "within_document_share": {k: round(v, 4) for k, v in self.shares.items()},
                               "set_aside": list(self.set_aside)}
        if self.reason:
            out["reason"] = self.reason
        return out


def unchecked(threshold: float, has_documents: bool) -> Separability | None:
    """The record of a check that does not run — off (threshold 0) or no doc_id to group impressions by — or
    None when it runs."""
    if threshold <= 0.0:
        return Separability({}, threshold, checked=False, reason="bal.min_within_document_share is 0")
    if not has_documents:
        return Separability({}, threshold, checked=False, reason="the sessions have no doc_id")
    return None


def separability(train: pd.DataFrame, features: Sequence[PageFeature], threshold: float,
                 pairs: np.ndarray | None = None) -> Separability:
    """Every page feature's within-document share on the training logs, and the ones set aside; nothing is set
    aside when the check is off (threshold 0) or the logs carry no doc_id to group impressions by (`pairs`:
    `schema.query_document_pairs` of `train` when the caller already has them)."""
    off = unchecked(threshold, DOC_ID in train.columns and QUERY_ID in train.columns)
    if off is not None:
        return off
    pairs = query_document_pairs(train) if pairs is None else pairs
    shares = {f.name: within_document_share(pairs, train[f.name].to_numpy(), f.kind is FeatureKind.CATEGORICAL)
              for f in features}
    return Separability(shares, threshold)
