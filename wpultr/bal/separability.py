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

from ..schema import DOC_ID, QUERY_ID, FeatureKind, PageFeature, query_document_pairs


def within_document_share(pairs: np.ndarray, values: np.ndarray, categorical: bool) -> float:
    """The share of a feature's variance that lies within (query, document) pairs (ANOVA's within-group sum of
    squares over the total; a categorical feature as its one-hot indicators, summed). 0: fixed per document;
    1: nothing to do with the document. A feature with no variance at all is 0 (there is nothing to learn)."""
    pairs = np.asarray(pairs, np.int64)
    n = len(pairs)
    if n == 0:
        return 0.0
    counts = np.bincount(pairs)
    if categorical:          # Σ_j SS_j of the indicators, from the (pair, level) counts c_pj, never a one-hot matrix
        _, codes = np.unique(np.asarray(values), return_inverse=True)
        _, cells = np.unique(pairs * (int(codes.max()) + 1) + codes, return_inverse=True)
        c = np.bincount(cells)
        cell_pair = np.zeros(len(c), np.int64)
        cell_pair[cells] = pairs
        total = n - float(np.sum(np.bincount(codes).astype(np.float64) ** 2)) / n
        within = n - float(np.sum(c.astype(np.float64) ** 2 / counts[cell_pair]))
    else:
        x = np.asarray(values, np.float64)
        if np.ptp(x) == 0.0:
            return 0.0
        total = float(np.sum((x - x.mean()) ** 2))
        means = np.bincount(pairs, x, minlength=len(counts)) / np.maximum(counts, 1)
        within = float(np.sum((x - means[pairs]) ** 2))
    return within / total if total > 0.0 else 0.0


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


def separability(train: pd.DataFrame, features: Sequence[PageFeature], threshold: float,
                 pairs: np.ndarray | None = None) -> Separability:
    """Every page feature's within-document share on the training logs, and the ones set aside; nothing is set
    aside when the check is off (threshold 0) or the logs carry no doc_id to group impressions by (`pairs`:
    `schema.query_document_pairs` of `train` when the caller already has them)."""
    if threshold <= 0.0:
        return Separability({}, threshold, checked=False, reason="bal.min_within_document_share is 0")
    if DOC_ID not in train.columns or QUERY_ID not in train.columns:
        return Separability({}, threshold, checked=False, reason="the sessions have no doc_id")
    pairs = query_document_pairs(train) if pairs is None else pairs
    shares = {f.name: within_document_share(pairs, train[f.name].to_numpy(), f.kind is FeatureKind.CATEGORICAL)
              for f in features}
    return Separability(shares, threshold)
