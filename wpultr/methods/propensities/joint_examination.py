"""Individual and joint examination probabilities, the A matrix and the unbiased pair weights (paper 004).

Kurennoy et al., "A General Framework for Pairwise Unbiased Learning to Rank" (ICTIR 2022):

* `joint_examination(theta, model, ...)`: ψ(k1, k2) = P(e_k1 e_k2 = 1) for every pair of positions from
  the individual θ_k, under one of three browsing models (§4): independent (Eq. 21, ψ = θ_i θ_j),
  continuous (ψ = min(θ_i, θ_j)) and row skipping on a grid (Eqs. 23–24, with γ and C). The diagonal is θ.
* `a_matrix(p_i, p_j, p_ij)`: the 4×4 matrix of Eq. 9, the inverse of E[B(e_i, e_j)] (Eq. 13).
* `unbiased_pairs(...)`: the ordered pairs and weights of the unbiased pairwise loss (Eq. 10) with the
  RankNet terms of Eq. 5 (ℓ11 = ℓ00 = 0): for a clicked i, the term ℓ(s_i − s_j) carries a_i when j
  was not clicked and a_i − a_ij when it was. Summing zᵀ A s(c) over every ordered pair gives each such
  term twice, so the loss here is half of Eq. 10's sum (the same minimiser).

Probabilities are on the scale of Eq. 20 (position 1 always examined: θ_1 = 1), the scale of every
propensity table in the project; the row-skipping joint is linear in θ(h), so it scales with the table.
Pure numpy: shared by the neural loss, the LightGBM objective and the tests.
"""
from __future__ import annotations

import numpy as np

from ...settings.pairwise import JOINT_MODELS


def _row_skipping_factor(n: int, columns: int, skip_row: float, continue_prob: float) -> np.ndarray:
    """F[h, w] with ψ(h, w) = θ(h)·F[h, w] for h < w (0-based ranks): Eq. 24 in one row, Eq. 23 across rows."""
    rank = np.arange(n)
    row, col = rank // columns, rank % columns
    sizes = np.bincount(row, minlength=row.max() + 1 if n else 0)
    passed = (1.0 - skip_row) * continue_prob ** sizes + skip_row
    log_passed = np.concatenate(([0.0], np.cumsum(np.log(passed))))       # Σ_{m < r} log passed_m
    out = np.ones((n, n))
    for h in range(n):
        for w in range(h + 1, n):
            if row[h] == row[w]:
                out[h, w] = continue_prob ** (w - h)                                        # Eq. (24)
            else:
                rest_of_row = continue_prob ** (sizes[row[h]] - col[h])                     # v = h .. end of row(h)
                between = np.exp(log_passed[row[w]] - log_passed[row[h] + 1])               # rows strictly between
                out[h, w] = rest_of_row * between * (1.0 - skip_row) * continue_prob ** col[w]   # Eq. (23)
    return out


def joint_examination(theta: np.ndarray, model: str, columns: int = 2, skip_row: float = 0.2,
                      continue_prob: float = 0.9) -> np.ndarray:
    """(n, n) matrix ψ[k1 − 1, k2 − 1] = P(e_k1 e_k2 = 1) from θ[k − 1] = P(e_k = 1); its diagonal is θ.

    `columns`, `skip_row` (γ) and `continue_prob` (C) are read by the row-skipping model only.
    """
    theta = np.asarray(theta, dtype=np.float64)
    if model == "independent":
        psi = np.outer(theta, theta)                                      # Eq. (21)
    elif model == "continuous":
        psi = np.minimum(theta[:, None], theta[None, :])                  # §4, continuous examination
    elif model == "row_skipping":
        upper = theta[:, None] * _row_skipping_factor(len(theta), columns, skip_row, continue_prob)
        psi = np.triu(upper, 1)
        psi = psi + psi.T
    else:
        raise ValueError(f"joint examination model {model!r} is not one of {', '.join(JOINT_MODELS)}")
    np.fill_diagonal(psi, theta)
    return psi


def expected_b(p_i: float, p_j: float, p_ij: float) -> np.ndarray:
    """E[B(e_i, e_j)] of Eq. 13: entry (t1, t2) is the chance a pair of relevance type t2 shows as click type t1."""
    return np.array([[p_ij, 0, 0, 0],
                     [p_i - p_ij, p_i, 0, 0],
                     [p_j - p_ij, 0, p_j, 0],
                     [1 - p_i - p_j + p_ij, 1 - p_i, 1 - p_j, 1]], dtype=np.float64)


def a_matrix(p_i: float, p_j: float, p_ij: float) -> np.ndarray:
    """A of Eq. 9 from the individual and joint examination probabilities (no inversion needed)."""
    a_i, a_j, a_ij = 1.0 / p_i, 1.0 / p_j, 1.0 / p_ij
    return np.array([[a_ij, 0, 0, 0],
                     [a_i - a_ij, a_i, 0, 0],
                     [a_j - a_ij, 0, a_j, 0],
                     [1 - a_i - a_j + a_ij, 1 - a_i, 1 - a_j, 1]], dtype=np.float64)


def pair_type(b_1: np.ndarray, b_2: np.ndarray) -> np.ndarray:
    """s(b1, b2) of Eq. 6: the one-hot pair type (both, first only, second only, neither) along the last axis."""
    b_1, b_2 = np.asarray(b_1, dtype=np.float64), np.asarray(b_2, dtype=np.float64)
    return np.stack([b_1 * b_2, b_1 * (1 - b_2), (1 - b_1) * b_2, (1 - b_1) * (1 - b_2)], axis=-1)


def unbiased_pairs(group_sizes: np.ndarray, clicks: np.ndarray, positions: np.ndarray, theta: np.ndarray,
                   psi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair_i, pair_j, weight) of the unbiased pairwise loss (Eq. 10, RankNet terms) over flat rows.

    Rows are sessions laid out contiguously (`group_sizes`); `positions` are 1-based and index
    `theta` / `psi` at position − 1. Every ordered pair (i, j) of one session with i clicked, j ≠ i:
    weight a_i = 1/θ_i when j was not clicked, a_i − a_ij = 1/θ_i − 1/ψ_ij when it was (Eq. 9's first
    column; negative where ψ_ij < θ_i). The term of each pair is ℓ(s_i − s_j) = log(1 + e^{−σ(s_i − s_j)}).
    """
    clicks = np.asarray(clicks) > 0
    index = np.asarray(positions, dtype=np.int64) - 1
    sizes = np.asarray(group_sizes, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    width = int(sizes.max()) if sizes.size else 0
    slot = np.arange(width)
    valid = slot[None, :] < sizes[:, None]                                   # (S, K) padded layout
    rows = np.where(valid, starts[:, None] + slot[None, :], 0)
    clicked = valid & clicks[rows]
    pairs = clicked[:, :, None] & valid[:, None, :] & ~np.eye(width, dtype=bool)[None]
    s, i, j = np.nonzero(pairs)
    pair_i, pair_j = rows[s, i], rows[s, j]
    a_i = 1.0 / theta[index[pair_i]]
    a_ij = 1.0 / psi[index[pair_i], index[pair_j]]
    weight = np.where(clicks[pair_j], a_i - a_ij, a_i)
    return pair_i, pair_j, weight
