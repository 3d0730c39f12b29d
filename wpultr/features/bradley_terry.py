"""Bradley–Terry scores for ordinal page features (BAL §3.1, "SEPP feature preprocessing").

BAL turns an ordinal feature such as the position into a continuous score s fitted by maximum
likelihood over all pairs (i, j) of results of one page where i is shown above j (the paper's
"position i lower than position j": the smaller position number), with
p_ij = e^{s_i} / (e^{s_i} + e^{s_j}); its example fixes the direction: s(2) > s(p) for every p > 2.
For another ordinal feature the same pairs compare the feature's levels of the two results.

The data enter only through the win matrix W[a, b] = number of pairs where a result with level a
was shown above one with level b (ties a = b carry no information and are skipped). W is additive
over partitions, so it is counted per partition and summed (`PairCounts.merge`). A consistent
order (a always above b, as for positions) has no finite maximum-likelihood solution, so a small
ridge on s makes the fit unique and finite, also for levels seen only in ties.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..schema import POSITION, SESSION_ID, SchemaError


@dataclass(frozen=True)
class PairCounts:
    """The sufficient statistic of a Bradley–Terry fit: sorted levels and W[a, b] (a shown above b)."""

    levels: np.ndarray  # float64, sorted, unique
    wins: np.ndarray    # int64, (len(levels), len(levels))

    def merge(self, other: PairCounts) -> PairCounts:
        """Counts of the union of both tables' pairs (levels re-indexed onto their union)."""
        levels = np.union1d(self.levels, other.levels)
        wins = np.zeros((levels.size, levels.size), dtype=np.int64)
        for part in (self, other):
            idx = np.searchsorted(levels, part.levels)
            wins[np.ix_(idx, idx)] += part.wins
        return PairCounts(levels, wins)


def _numeric_levels(values: pd.Series, column: str) -> np.ndarray:
    numeric = pd.to_numeric(values, errors="coerce")
    bad = numeric.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SchemaError(f"ordinal feature {column!r} row {row} is {values.iloc[row]!r}, expected a number")
    return numeric.to_numpy(dtype=np.float64)


def pair_counts(df: pd.DataFrame, column: str) -> PairCounts:
    """Count, within each session, every pair of results by (level of the one shown above, level below)."""
    missing = [c for c in (SESSION_ID, POSITION, column) if c not in df.columns]
    if missing:
        raise SchemaError(f"Bradley–Terry fit of {column!r}: missing column(s) {missing}; present: {list(df.columns)}")
    values = _numeric_levels(df[column], column)
    levels, level_idx = np.unique(values, return_inverse=True)
    order = np.lexsort((df[POSITION].to_numpy(), df[SESSION_ID].to_numpy()))
    session = df[SESSION_ID].to_numpy()[order]
    position = df[POSITION].to_numpy()[order]
    level_idx = level_idx[order]
    n_levels = levels.size
    wins = np.zeros(n_levels * n_levels, dtype=np.int64)
    if session.size:
        longest = int(np.unique(session, return_counts=True)[1].max())
        for offset in range(1, longest):  # row r and row r + offset: same session, r shown above
            upper, lower = slice(0, -offset), slice(offset, None)
            keep = (session[upper] == session[lower]) & (position[upper] < position[lower])
            a, b = level_idx[upper][keep], level_idx[lower][keep]
            informative = a != b
            wins += np.bincount(a[informative] * n_levels + b[informative], minlength=n_levels * n_levels)
    return PairCounts(levels, wins.reshape(n_levels, n_levels))


def _neg_log_likelihood(scores: np.ndarray, wins: np.ndarray, ridge: float) -> tuple[float, np.ndarray]:
    """Mean negative log-likelihood of the pairs plus (ridge / 2)·||s||², and its gradient."""
    total = wins.sum()
    diff = scores[:, None] - scores[None, :]
    # BAL §3.1: p_ab = e^{s_a} / (e^{s_a} + e^{s_b}) = sigmoid(s_a - s_b); log p_ab = -log(1 + e^{-(s_a - s_b)})
    log_p = -np.logaddexp(0.0, -diff)
    loss = -(wins * log_p).sum() / total + 0.5 * ridge * scores @ scores
    miss = wins * (1.0 - np.exp(log_p))            # W_ab (1 - p_ab)
    grad = -(miss.sum(axis=1) - miss.sum(axis=0)) / total + ridge * scores
    return float(loss), grad


class BradleyTerryEncoder:
    """Fitted transformer: an ordinal feature's levels → Bradley–Terry scores (larger = shown higher)."""

    def __init__(self, column: str = POSITION, ridge: float = 1e-2, tol: float = 1e-10, max_iter: int = 2000):
        self.column = column
        self.ridge = ridge
        self.tol = tol
        self.max_iter = max_iter

    def fit(self, X: pd.DataFrame, y: Any = None) -> BradleyTerryEncoder:
        """Fit the scores on a sessions frame (session id, position and the feature's column)."""
        return self.fit_counts(pair_counts(X, self.column))

    def fit_counts(self, counts: PairCounts) -> BradleyTerryEncoder:
        """Fit the scores from (merged) pair counts: argmax of the ridge-penalised log-likelihood."""
        if self.ridge <= 0:
            raise ValueError(f"Bradley–Terry ridge must be > 0, got {self.ridge}")
        if counts.levels.size == 0:
            raise ValueError(f"Bradley–Terry fit of {self.column!r}: no levels to fit")
        wins = counts.wins.astype(np.float64)
        if wins.sum() == 0:
            scores = np.zeros(counts.levels.size)
        else:
            from scipy.optimize import minimize  # lazy: +1.0 s (scipy); the config holds this module's settings
            result = minimize(_neg_log_likelihood, np.zeros(counts.levels.size), args=(wins, self.ridge),
                              jac=True, method="L-BFGS-B",
                              options={"maxiter": self.max_iter, "ftol": self.tol, "gtol": self.tol})
            scores = result.x
        self.levels_ = counts.levels.astype(np.float64)
        self.scores_ = scores.astype(np.float64)
        self.n_pairs_ = int(counts.wins.sum())
        return self

    def transform(self, X: pd.DataFrame | pd.Series | np.ndarray) -> np.ndarray:
        """Scores of the levels; a level unseen in the fit is interpolated between its neighbours (clamped at the
        ends)."""
        values = X[self.column] if isinstance(X, pd.DataFrame) else pd.Series(np.asarray(X))
        levels = _numeric_levels(values, self.column)
        return np.interp(levels, self.levels_, self.scores_)

    def score_table(self) -> pd.DataFrame:
        """The learned table: level → score, in level order."""
        return pd.DataFrame({self.column: self.levels_, "score": self.scores_})

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "ridge": self.ridge, "n_pairs": self.n_pairs_,
                "levels": self.levels_.tolist(), "scores": self.scores_.tolist()}

    @classmethod
    def from_dict(cls, state: dict[str, Any], where: str = "bradley_terry") -> BradleyTerryEncoder:
        try:
            encoder = cls(column=state["column"], ridge=float(state["ridge"]))
            encoder.levels_ = np.asarray(state["levels"], dtype=np.float64)
            encoder.scores_ = np.asarray(state["scores"], dtype=np.float64)
            encoder.n_pairs_ = int(state["n_pairs"])
        except KeyError as e:
            raise ValueError(f"{where}: saved Bradley–Terry state lacks key {e.args[0]!r}") from None
        if encoder.levels_.shape != encoder.scores_.shape or encoder.levels_.size == 0:
            raise ValueError(f"{where}: levels and scores must be non-empty and of equal length")
        return encoder
