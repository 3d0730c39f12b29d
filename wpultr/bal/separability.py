"""Which page features the logs can tell apart from relevance: those that vary for the same document.

A page feature's effect on clicks is learnable only from impressions of one (query, document) pair that
show it with different values (position is the classic case: the same result at rank 2 in one session and
rank 5 in another). A feature fixed per document — a media type that never changes for a URL — moves with
the document's relevance: any click model fitted to the logs gives its "effect" whatever relevance the ranker
missed on documents of that type, and in a finite log, where only a few thousand documents stand behind a
type, that chance correlation is large enough for the click test to find (a page feature → click edge on
logs whose users ignore it). Correcting such an effect takes real relevance out of the ranker.

So BAL keeps every discovered edge in the graph (what the logs show) but corrects only the separable
features: those with at least `discovery.min_within_document_share` of their variance within (query, document)
pairs. The others are recorded as set aside, with every feature's share, in `train/bias.json` (`separability`)
and shown by `wpultr graph show`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..causal.within_document_ci import within_document_share  # the measure, shared with discovery
from ..schema import DOC_ID, QUERY_ID, FeatureKind, PageFeature, query_document_pairs


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
        return Separability({}, threshold, checked=False, reason="discovery.min_within_document_share is 0")
    if not has_documents:
        return Separability({}, threshold, checked=False, reason="the sessions have no doc_id")
    return None


class SeparabilityCheck:
    """The check one page feature at a time, for a caller that holds one column at a time (BAL's out-of-core
    training rows, bal/rows.py) as for one that holds the frame (`separability`): the same shares either way.
    `pairs`: each row's (query, document) code, None when the logs carry no doc_id."""

    def __init__(self, threshold: float, pairs: np.ndarray | None):
        self.threshold, self.pairs = threshold, pairs
        self.off = unchecked(threshold, pairs is not None)
        self.shares: dict[str, float] = {}

    @property
    def runs(self) -> bool:
        """The check runs (on, and doc_ids to group by): a caller need not read a column for it otherwise."""
        return self.off is None

    def add(self, feature: PageFeature, values: np.ndarray) -> None:
        """Measure `feature`'s within-document share from its values on every row (nothing when the check is off)."""
        if self.off is None:
            self.shares[feature.name] = within_document_share(self.pairs, np.asarray(values),
                                                              feature.kind is FeatureKind.CATEGORICAL)

    def result(self) -> Separability:
        return Separability(dict(self.shares), self.threshold) if self.off is None else self.off


def separability(train: pd.DataFrame, features: Sequence[PageFeature], threshold: float,
                 pairs: np.ndarray | None = None) -> Separability:
    """Every page feature's within-document share on the training logs, and the ones set aside; nothing is set
    aside when the check is off (threshold 0) or the logs carry no doc_id to group impressions by (`pairs`:
    `schema.query_document_pairs` of `train` when the caller already has them)."""
    has_documents = DOC_ID in train.columns and QUERY_ID in train.columns
    if pairs is None and has_documents and threshold > 0.0:
        pairs = query_document_pairs(train)
    check = SeparabilityCheck(threshold, pairs if has_documents else None)
    for f in features:
        if check.runs:
            check.add(f, train[f.name].to_numpy())
    return check.result()
