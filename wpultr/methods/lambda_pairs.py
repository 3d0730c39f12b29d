"""A weighted pairwise logistic loss over explicit (i, j) pairs, its per-document gradient and Hessian, and the
LambdaMART |ΔNDCG| pair factor, as pure numpy functions for LightGBM custom objectives.

The loss of pairs (i, j) — i should rank above j — with weights w_ij ≥ 0 is

    L(s) = Σ_pairs w_ij log(1 + exp(−σ (s_i − s_j)))                     (RankNet; PRS 2020 Eq. 9 with δ logistic)

and with ρ_ij = 1 / (1 + exp(σ (s_i − s_j))) its per-document gradient and Hessian diagonal are

    ∂L/∂s_d  = Σ_{pairs (d, j)} −σ w ρ  +  Σ_{pairs (i, d)} σ w ρ           (the lambdas λ_ij = −σ ρ_ij, Burges 2010)
    ∂²L/∂s_d² = Σ_{pairs touching d} σ² w ρ (1 − ρ)                          (LambdaMART's Newton diagonal)

LambdaMART multiplies w_ij by |ΔNDCG_ij| (`delta_ndcg`), treated as a constant of the round: the pair weights
handed to `pair_grad_hess` are then exactly the gradient of `pair_loss` with those weights. Rows in no pair get
gradient 0 and the Hessian floor (`min_hess`), so LightGBM's Newton step never divides by zero.

Pairs are index arrays into the score vector (dataset row order); `session_pairs` enumerates the clicked /
non-clicked pairs of every session of contiguous rows (LightGBM's query groups).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

GradHess = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]   # a booster objective: raw scores -> (g, h)
Loss = Callable[[np.ndarray], float]
MIN_HESS = 1e-12      # Hessian floor of a row: LightGBM divides leaf gradient sums by Hessian sums


def _pair_arrays(scores: np.ndarray, pair_i: np.ndarray, pair_j: np.ndarray,
                 pair_weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64)
    i, j = np.asarray(pair_i, dtype=np.int64), np.asarray(pair_j, dtype=np.int64)
    w = np.broadcast_to(np.asarray(pair_weight, dtype=np.float64), i.shape)
    if i.shape != j.shape or i.ndim != 1:
        raise ValueError(f"pair_i and pair_j must be 1-d arrays of one length, got shapes {i.shape} and {j.shape}")
    return s, i, j, w


def pair_loss(scores: np.ndarray, pair_i: np.ndarray, pair_j: np.ndarray, pair_weight: np.ndarray,
              sigma: float = 1.0) -> float:
    """L = Σ w_ij log(1 + exp(−σ(s_i − s_j))) over the given pairs (stable for large |s_i − s_j|)."""
    s, i, j, w = _pair_arrays(scores, pair_i, pair_j, pair_weight)
    return float((w * np.logaddexp(0.0, -sigma * (s[i] - s[j]))).sum())


def pair_grad_hess(scores: np.ndarray, pair_i: np.ndarray, pair_j: np.ndarray, pair_weight: np.ndarray,
                   sigma: float = 1.0, min_hess: float = MIN_HESS) -> tuple[np.ndarray, np.ndarray]:
    """(∂L/∂s, diagonal ∂²L/∂s²) of `pair_loss` per document, float64 arrays of len(scores); Hessian ≥ `min_hess`."""
    s, i, j, w = _pair_arrays(scores, pair_i, pair_j, pair_weight)
    n = len(s)
    z = sigma * (s[i] - s[j])
    rho = np.exp(-np.logaddexp(0.0, z))                                  # 1 / (1 + e^{σ(s_i − s_j)}), stable
    lam = sigma * w * rho                                                # |λ_ij| · w_ij
    curv = sigma * sigma * w * rho * (1.0 - rho)                         # σ² w ρ (1 − ρ)
    grad = np.bincount(j, lam, minlength=n) - np.bincount(i, lam, minlength=n)
    hess = np.bincount(i, curv, minlength=n) + np.bincount(j, curv, minlength=n)
    return grad, np.maximum(hess, min_hess)


def _session_index(group_sizes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sizes, start row of each session, session of each row) for contiguous groups summing to n."""
    sizes = np.asarray(group_sizes, dtype=np.int64)
    if sizes.ndim != 1 or (sizes < 0).any() or int(sizes.sum()) != n:
        raise ValueError(f"group_sizes must be >= 0 and sum to the number of rows ({n}), got sum {int(sizes.sum())}")
    starts = np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64)
    return sizes, starts, np.repeat(np.arange(len(sizes)), sizes)


def session_pairs(group_sizes: np.ndarray, clicks: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pair_i, pair_j, pos_i, pos_j): every clicked row i with every non-clicked row j of the same session.

    Sessions are contiguous row groups of `group_sizes`, rows in display order, so pos_* is the 1-based
    rank of the row within its session (the logged position when no position is missing). Pairs come
    session by session, clicked rows in order, each with its session's non-clicked rows in order.
    """
    c = np.asarray(clicks) > 0
    _, starts, session = _session_index(group_sizes, len(c))
    n_sessions = len(starts)
    clicked, skipped = np.flatnonzero(c), np.flatnonzero(~c)
    skipped_per = np.bincount(session[skipped], minlength=n_sessions)
    skipped_start = np.r_[0, np.cumsum(skipped_per)[:-1]]                # first index into `skipped` per session
    reps = skipped_per[session[clicked]]                                 # pairs of each clicked row
    pair_i = np.repeat(clicked, reps)
    within = np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps)
    pair_j = skipped[np.repeat(skipped_start[session[clicked]], reps) + within]
    rank = np.arange(len(c)) - starts[session] + 1
    return pair_i, pair_j, rank[pair_i], rank[pair_j]


def _ranks(scores: np.ndarray, starts: np.ndarray, session: np.ndarray) -> np.ndarray:
    """1-based rank within the session (descending score, ties by row order): two stable sorts, no lexsort."""
    by_score = np.argsort(-scores, kind="stable")
    order = by_score[np.argsort(session[by_score], kind="stable")]       # by session, then score descending
    rank = np.empty(len(scores), dtype=np.int64)
    rank[order] = np.arange(len(scores)) - starts[session[order]] + 1
    return rank


def session_ranks(scores: np.ndarray, group_sizes: np.ndarray) -> np.ndarray:
    """1-based rank of each row within its session under `scores` (descending; ties by row order)."""
    s = np.asarray(scores, dtype=np.float64)
    _, starts, session = _session_index(group_sizes, len(s))
    return _ranks(s, starts, session)


class SwapNDCG:
    """|ΔNDCG_ij| of fixed pairs as a function of the scores (LambdaMART's pair factor), with what does not
    depend on the scores (sessions, IDCG, |g_i − g_j|) computed once: call it once per boosting round.

    |ΔNDCG_ij| = |g_i − g_j| · |D(rank_i) − D(rank_j)| / IDCG_session, D(r) = 1/log2(1 + r) (0 beyond
    `truncation` when given), IDCG the DCG of the session's gains sorted descending (cut at `truncation`).
    `gains` are per row (2^label − 1, or the click itself); sessions with IDCG = 0 give 0.
    """

    def __init__(self, group_sizes: np.ndarray, gains: np.ndarray, pair_i: np.ndarray, pair_j: np.ndarray,
                 truncation: int | None = None):
        g = np.asarray(gains, dtype=np.float64)
        self.i, self.j = np.asarray(pair_i, dtype=np.int64), np.asarray(pair_j, dtype=np.int64)
        sizes, self.starts, self.session = _session_index(group_sizes, len(g))
        self.truncation = truncation
        ideal_rank = _ranks(g, self.starts, self.session)                # gains descending within each session
        idcg = np.bincount(self.session, g * self.discount(ideal_rank), minlength=len(sizes))
        norm = idcg[self.session[self.i]]
        gap = np.abs(g[self.i] - g[self.j])
        self.scale = np.divide(gap, norm, out=np.zeros_like(gap), where=norm > 0)

    def discount(self, rank: np.ndarray) -> np.ndarray:
        d = 1.0 / np.log2(1.0 + rank)
        return d if self.truncation is None else np.where(rank <= self.truncation, d, 0.0)

    def __call__(self, scores: np.ndarray) -> np.ndarray:
        rank = _ranks(np.asarray(scores, dtype=np.float64), self.starts, self.session)
        return self.scale * np.abs(self.discount(rank[self.i]) - self.discount(rank[self.j]))


def delta_ndcg(scores: np.ndarray, group_sizes: np.ndarray, gains: np.ndarray, pair_i: np.ndarray,
               pair_j: np.ndarray, truncation: int | None = None) -> np.ndarray:
    """|ΔNDCG_ij| of swapping rows i and j in their session's ranking by the current `scores` (LambdaMART);
    see `SwapNDCG` (use it directly to reuse the score-free parts across rounds)."""
    return SwapNDCG(group_sizes, gains, pair_i, pair_j, truncation)(scores)


def normalised_pair_weights(scores: np.ndarray, group_sizes: np.ndarray, pair_i: np.ndarray, pair_j: np.ndarray,
                            swap: np.ndarray, sigma: float = 1.0) -> np.ndarray:
    """LightGBM's `lambdarank_norm` applied to the pair factors |ΔNDCG_ij| (`swap`) at the round's scores.

    In a session whose scores are not all equal each factor is divided by 0.01 + |s_i − s_j| (pairs already far
    apart count less); then the session's factors are scaled by log2(1 + Λ_q) / Λ_q, Λ_q = Σ 2σ ρ_ij × factor
    (ρ_ij = 1 / (1 + exp(σ(s_i − s_j)))) — the query's total |λ| squashed, so sessions with many pairs do not
    dominate the gradient. As in LightGBM's LambdarankNDCG (rank_objective.hpp); the result are pair weights
    for `pair_grad_hess`, held constant during the round.
    """
    s = np.asarray(scores, dtype=np.float64)
    i, j = np.asarray(pair_i, dtype=np.int64), np.asarray(pair_j, dtype=np.int64)
    sizes, _, session = _session_index(group_sizes, len(s))
    n_sessions = len(sizes)
    spread = np.zeros(n_sessions, dtype=bool)
    if len(s):
        highest = np.full(n_sessions, -np.inf)
        lowest = np.full(n_sessions, np.inf)
        np.maximum.at(highest, session, s)
        np.minimum.at(lowest, session, s)
        spread = highest > lowest
    q = session[i]
    diff = s[i] - s[j]
    factor = np.where(spread[q], swap / (0.01 + np.abs(diff)), swap)
    rho = 0.5 * (1.0 - np.tanh(0.5 * sigma * diff))                       # 1 / (1 + e^{σ(s_i − s_j)}), stable
    total = np.bincount(q, 2.0 * sigma * rho * factor, minlength=n_sessions)
    scale = np.divide(np.log2(1.0 + total), total, out=np.ones_like(total), where=total > 0)
    return factor * scale[q]


def lambda_objective(group_sizes: np.ndarray, gains: np.ndarray, base_weights: np.ndarray, pair_i: np.ndarray,
                     pair_j: np.ndarray, normalise: bool = False) -> tuple[GradHess, Loss]:
    """(grad_hess, loss) of the weighted λ-pairs for `BoostingTrainer.boost`: w × |ΔNDCG| at the given scores,
    with LightGBM's lambdarank normalisation of the |ΔNDCG| factors when `normalise` (`normalised_pair_weights`)."""
    swap = SwapNDCG(group_sizes, gains, pair_i, pair_j)                # IDCG and |g_i − g_j| once

    def weights(f: np.ndarray) -> np.ndarray:
        factor = swap(f)
        if normalise:
            factor = normalised_pair_weights(f, group_sizes, pair_i, pair_j, factor)
        return base_weights * factor

    return (lambda f: pair_grad_hess(f, pair_i, pair_j, weights(f))), \
        (lambda f: pair_loss(f, pair_i, pair_j, weights(f)))
