"""Page features that are almost a function of another (media type ↔ result height), found and recorded (issue 14).

When A is nearly a function of B, conditioning on B leaves A almost no variation, so `A ⫫ click | B`
nearly holds even when A → click is true, and PC deletes the true edge through the proxy B. The
handling (used by the hybrid test): A's tests against click leave B out of the conditioning set. B's
tests keep A, which is sound: they ask whether B adds anything beyond A. When each is nearly a function
of the other, the data cannot tell which one acts on the click; the coarser one (fewer distinct values,
as a media type against a height) is protected, and the record says so.

Determination of A by B, d(A | B) in [0, 1] (B grouped by its levels, or by quantile bins when numeric):
* numeric A: the correlation ratio η² = 1 − within-group variance / total variance;
* categorical A: the uncertainty coefficient 1 − H(A | B) / H(A).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

N_BINS = 20


def _groups(x: np.ndarray, categorical: bool, n_bins: int) -> np.ndarray:
    """Group index of each row: x's levels if categorical or few, else quantile bins."""
    levels, inverse = np.unique(x, return_inverse=True)
    if categorical or levels.size <= n_bins:
        return inverse.ravel()
    edges = np.unique(np.quantile(x, np.linspace(0, 1, n_bins + 1)[1:-1]))
    return np.searchsorted(edges, x, side="right")


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def determination(a: np.ndarray, b: np.ndarray, a_categorical: bool, b_categorical: bool,
                  n_bins: int = N_BINS) -> float:
    """d(A | B): the share of A's variance (numeric) or entropy (categorical) that B's groups explain."""
    g = _groups(b, b_categorical, n_bins)
    if a_categorical:
        levels, codes = np.unique(a, return_inverse=True)
        h_a = _entropy(np.bincount(codes.ravel()))
        if h_a == 0.0:
            return 0.0
        joint = np.bincount(g * levels.size + codes.ravel(), minlength=(g.max() + 1) * levels.size)
        joint = joint.reshape(g.max() + 1, levels.size)
        h_a_given_b = sum(row.sum() / len(a) * _entropy(row) for row in joint if row.sum() > 0)
        return 1.0 - h_a_given_b / h_a
    total = a.var()
    if total == 0.0:
        return 0.0
    n_g = np.bincount(g)
    means = np.bincount(g, weights=a) / np.maximum(n_g, 1)
    within = float(np.sum((a - means[g]) ** 2)) / len(a)
    return 1.0 - within / total


@dataclass(frozen=True)
class NearDeterministicPair:
    """A page feature nearly a function of another (its `proxy`), and what the CI tests do about it."""

    feature: str
    proxy: str
    determination: float          # d(feature | proxy)
    reverse: float                # d(proxy | feature)
    measure: str                  # how d(feature | proxy) was measured
    handling: str                 # what the CI tests do (or why nothing)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def find_near_deterministic(data: np.ndarray, names: Sequence[str], candidates: Sequence[int],
                            categorical: Sequence[int], threshold: float, handled: bool,
                            n_bins: int = N_BINS) -> list[NearDeterministicPair]:
    """Pairs among `candidates` (column indices) where one is nearly a function of the other (d ≥ threshold)."""
    cat = set(categorical)
    found = []
    for i, a in enumerate(candidates):
        for b in candidates[i + 1:]:
            d_ab = float(determination(data[:, a], data[:, b], a in cat, b in cat, n_bins))
            d_ba = float(determination(data[:, b], data[:, a], b in cat, a in cat, n_bins))
            if max(d_ab, d_ba) < threshold:
                continue
            mutual = min(d_ab, d_ba) >= threshold
            a_first = np.unique(data[:, a]).size <= np.unique(data[:, b]).size if mutual else d_ab >= threshold
            feat, prox, d, rev = (a, b, d_ab, d_ba) if a_first else (b, a, d_ba, d_ab)
            measure = ("uncertainty coefficient 1 - H(feature | proxy) / H(feature)" if feat in cat
                       else "correlation ratio of the feature within the proxy's "
                            + ("levels" if prox in cat else f"{n_bins} quantile bins"))
            f, p = names[feat], names[prox]
            if handled:
                handling = (f"{f} is nearly a function of {p}, so conditioning on {p} would leave {f} no variation "
                            f"and remove a true {f} -> click edge: tests of {f} against click leave {p} out of the "
                            f"conditioning set; tests of {p} against click keep {f} (does {p} add anything to it?)")
                if mutual:
                    handling += (f". Each is nearly a function of the other, so the data cannot tell which acts on "
                                 f"click: {f}, the coarser, is the one protected")
            else:
                handling = (f"detected only: the configured CI test runs the paper's tests unchanged, so PC may remove "
                            f"{f} -> click by conditioning on {p}")
            found.append(NearDeterministicPair(f, p, round(d, 4), round(rev, 4), measure, handling))
    return found
