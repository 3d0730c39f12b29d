"""The production ranker that chose what users saw: it sorts a query's candidates by noisy relevance.

Because the shown order follows relevance, relevance causes position: the confounding BAL removes
(BAL Fig. 2a, relevance → position and relevance → click). A per-media-type boost (a ranker that
promotes videos, say) adds media type → position, BAL's second confounder case (Fig. 2b).
"""
from __future__ import annotations

import numpy as np


def logging_scores(label: np.ndarray, media_type: np.ndarray, media_boost: np.ndarray, noise: float,
                   rng: np.random.Generator) -> np.ndarray:
    """The logging ranker's score of each candidate: grade + media boost + N(0, noise^2), drawn per session."""
    return label + media_boost[media_type] + noise * rng.standard_normal(label.shape)


def shown_order(scores: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """(n_sessions, k) candidate columns in shown order: highest score first, ties in random order."""
    order = np.lexsort((rng.random(scores.shape), -scores), axis=-1)
    return order[:, :k]
