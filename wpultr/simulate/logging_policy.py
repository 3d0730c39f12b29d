"""The production ranker that chose what users saw: it sorts a query's candidates by a noisy relevance score.

Because the shown order follows relevance, relevance causes position: the confounding BAL removes
(BAL Fig. 2a, relevance → position and relevance → click). A per-media-type boost (a ranker that
promotes videos, say) adds media type → position, BAL's second confounder case (Fig. 2b).

What it scores (`data.simulate.logging_ranker`): the true grade ("grade"), or ("linear") a linear pairwise
ranker on the dense features fitted on the grades of a few random queries — the feature-based production ranker
of 004 §6.1 (a Ranking SVM trained on 1 % of the labelled queries, via Hu et al. 2019 and Ai et al. 2018), whose
errors follow the features the learner sees, and whose lists repeat exactly when `logging_noise` is 0.

Position blocks (`data.simulate.position_blocks: K`, Identifiability paper §5.1): the K contiguous
blocks of positions each take their own share of a query's candidates, so a document is only ever
shown inside its block and the identifiability graph over positions has K components. Which block a
candidate belongs to follows its query-wise rank on the last dense feature (a pure-noise column of
the synthetic corpus): the split is independent of relevance, yet a ranker reading that feature can
tell the blocks apart, which is what lets a click model trade the blocks' examination against relevance.
"""
from __future__ import annotations

import numpy as np

LINEAR_RANKER_C = 1.0      # the Ranking SVM's C: squared hinge loss summed over pairs, C·Σ + ½‖w‖²


def logging_scores(base: np.ndarray, media_type: np.ndarray, media_boost: np.ndarray, noise: float,
                   rng: np.random.Generator) -> np.ndarray:
    """The logging ranker's score of each candidate: `base` (`Corpus.logging_base`: the grade or the linear score)
    + media boost + N(0, noise^2), drawn per session."""
    return base + media_boost[media_type] + noise * rng.standard_normal(base.shape)


def linear_logging_score(features: np.ndarray, label: np.ndarray, doc_query: np.ndarray, n_train_queries: int,
                         rng: np.random.Generator) -> np.ndarray:
    """Each document's score under a Ranking SVM (linear, squared hinge on every within-query pair of unequal
    grades, C = LINEAR_RANKER_C) fitted on `n_train_queries` queries drawn by `rng`; on standardised features,
    rescaled to the grades' spread so that `logging_noise` means the same in both rankers."""
    from scipy.optimize import minimize  # lazy: +1.0 s (scipy)
    x = np.asarray(features, dtype=np.float64)
    std = x.std(axis=0)
    x = (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)
    queries = rng.choice(int(doc_query.max()) + 1, size=n_train_queries, replace=False)
    rows = np.flatnonzero(np.isin(doc_query, queries))
    hi, lo = _ordered_pairs(doc_query[rows], label[rows])
    diff = x[rows[hi]] - x[rows[lo]]
    if len(diff) == 0:                     # every training query holds one grade only: nothing to order
        return np.zeros(len(x))

    def objective(w: np.ndarray) -> tuple[float, np.ndarray]:
        slack = np.maximum(0.0, 1.0 - diff @ w)
        return (LINEAR_RANKER_C * float(slack @ slack) + 0.5 * float(w @ w),
                w - 2.0 * LINEAR_RANKER_C * (diff.T @ slack))

    w = minimize(objective, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B").x
    score = x @ w
    spread = score.std()
    return score * (float(np.std(label)) / spread if spread > 0 else 1.0)


def _ordered_pairs(query: np.ndarray, label: np.ndarray, block: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) of every pair of rows of one query with label[i] > label[j], in row-major order; `block` rows of i at a
    time, so memory stays block × rows however many queries fit the ranker."""
    his, los = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    for a in range(0, len(query), block):
        i, j = np.nonzero((query[a:a + block, None] == query[None, :]) & (label[a:a + block, None] > label[None, :]))
        his.append(i + a)
        los.append(j)
    return np.concatenate(his), np.concatenate(los)


def block_sizes(n: int, n_blocks: int) -> np.ndarray:
    """Sizes of `n_blocks` contiguous blocks of `n` items, the first ones one larger when n does not divide."""
    return np.array([len(b) for b in np.array_split(np.arange(n), n_blocks)], dtype=np.int64)


def candidate_blocks(block_feature: np.ndarray, n_blocks: int) -> np.ndarray | None:
    """(n_sessions, n_candidates) block of each candidate: its rank on `block_feature` (descending) within
    its query, cut into `n_blocks` contiguous groups; None when there is one block."""
    if n_blocks <= 1:
        return None
    n_candidates = block_feature.shape[-1]
    rank = np.argsort(np.argsort(-block_feature, axis=-1, kind="stable"), axis=-1, kind="stable")
    group_of_rank = np.repeat(np.arange(n_blocks), block_sizes(n_candidates, n_blocks))
    return group_of_rank[rank]


def shown_order(scores: np.ndarray, k: int, rng: np.random.Generator, blocks: np.ndarray | None = None) -> np.ndarray:
    """(n_sessions, k) candidate columns in shown order: highest score first, ties in random order.

    With `blocks` (from `candidate_blocks`), block b's positions show block b's best candidates only.
    """
    ties = rng.random(scores.shape)
    if blocks is None:
        return np.lexsort((ties, -scores), axis=-1)[:, :k]
    n_blocks = int(blocks.max()) + 1
    order = np.lexsort((ties, -scores, blocks), axis=-1)          # block first, then score within it
    starts = np.concatenate(([0], np.cumsum(block_sizes(scores.shape[-1], n_blocks))[:-1]))
    slots = np.concatenate([start + np.arange(size)
                            for start, size in zip(starts, block_sizes(k, n_blocks), strict=True)])
    return order[:, slots]
