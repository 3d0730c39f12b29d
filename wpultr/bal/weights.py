"""Importance weights that cut the backdoor path x ← r̂ → c (BAL §3.2, Eq. 8–10).

For a confounded page feature x the observed data follow Ĝ, p(r̂) p(x | r̂, m) p(c | x, r̂, …)
(Eq. 8); the target graph G drops the edge r̂ → x, p(r̂) q(x | m) p(c | x, r̂, …) (Eq. 9). Their
ratio is the weight w_x = q(x | m) / p(x | r̂, m):

* case 1, r̂ the only parent: w_x = p(x) / p(x | r̂) (Eq. 8–9);
* case 2, page features m are parents too: w_x = p(x | m) / p(x | r̂, m). The paper prints this
  ratio upside down (see /work/shared/papers/README.md); the form here is the one that turns the
  observed distribution into the unconfounded one, the same form as case 1.

The numerator is either a fitted model (influence.FeatureInfluence.numerator) or, as BAL does for
case 2, the average of the influence score over relevance scores drawn from the batch,
p(x | m) ≈ (1/K) Σ_k p(x | r̂_{π_k}, m), with π_k random permutations of the rows. That average is
Σ_{r̂'} p(r̂') p(x | r̂', m): x's mechanism with the edge r̂ → x cut; it equals p(x | m) when r̂ and
m are independent. Whatever the numerator, the weighted sample has x ⊥ r̂ | m as long as the
denominator is right; the numerator only sets which marginal of x the weighted sample keeps.

The total weight is the product over confounded features (Eq. 10), computed as a sum of logs. It is
then self-normalised to mean 1 and capped (a fixed maximum and/or a quantile of the weights), the
cap and the normalisation solved together so the result has mean 1 and no weight above the cap.
Diagnostics: Kish's effective sample size (Σw)²/Σw², before and after clipping, the share of
rows clipped and per-feature log-weight summaries.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..schema import CHUNK_ROWS, RELEVANCE_SCORE, row_spans
from ..settings.bal_weighting import WeightConfig
from .influence import FeatureInfluence

QUANTILE_COPY_ROWS = 1 << 20      # above this, summaries find quantiles by chunked order statistics, not a sorted copy

# `importance_weights` evaluates the densities schema.CHUNK_ROWS rows at a time: a multiple of influence._PREDICT_CHUNK,
# so the network sees the batches one pass over all rows would


# ---------------------------------------------------------------------------------------------
# Pure maths
# ---------------------------------------------------------------------------------------------
def log_mean_exp(a: np.ndarray, axis: int = 0) -> np.ndarray:
    """log of the mean of exp(a) along `axis`, computed stably."""
    a = np.asarray(a, dtype=np.float64)
    top = np.max(a, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return np.squeeze(top, axis=axis) + np.log(np.mean(np.exp(a - top), axis=axis))


def feature_log_weight(log_numerator: np.ndarray, log_denominator: np.ndarray) -> np.ndarray:
    """log w_x = log q(x | m) − log p(x | r̂, m): Eq. 8–9 (case 1, m empty) and case 2 of §3.2."""
    return np.asarray(log_numerator, np.float64) - np.asarray(log_denominator, np.float64)


def self_normalise(weights: np.ndarray) -> np.ndarray:
    """weights / mean(weights): mean 1."""
    weights = np.asarray(weights, np.float64)
    mean = weights.mean()
    if not (np.isfinite(mean) and mean > 0):
        raise ValueError(f"cannot self-normalise weights with mean {mean!r}")
    return weights / mean


def normalised_from_log(log_weights: np.ndarray) -> np.ndarray:
    """exp(log_weights) scaled to mean 1, without overflow (one new array, the steps in place)."""
    log_weights = np.asarray(log_weights, np.float64)
    out = log_weights - log_weights.max()
    np.exp(out, out=out)
    mean = out.mean()
    if not (np.isfinite(mean) and mean > 0):
        raise ValueError(f"cannot self-normalise weights with mean {mean!r}")
    out /= mean
    return out


def effective_sample_size(weights: np.ndarray) -> float:
    """Kish's effective sample size (Σw)² / Σw² (Σw² by chunks: no square of every row at once)."""
    weights = np.asarray(weights, np.float64)
    if weights.size == 0:
        return 0.0
    squares = sum(float(np.sum(weights[span] * weights[span])) for span in row_spans(weights.size))
    return float(weights.sum() ** 2 / squares)


def weight_histogram(weights: np.ndarray, bins: int = 30) -> dict[str, Any]:
    """Counts of the weights in `bins` equal bins of log10 w between the smallest positive weight and the largest
    (by chunks), and how many are 0: the distribution the run report draws."""
    w = np.asarray(weights, np.float64)
    spans = row_spans(w.size)
    lows = [float(w[s][w[s] > 0].min()) for s in spans if (w[s] > 0).any()]
    low = float(np.log10(min(lows))) if lows else 0.0
    edges = np.linspace(low, max(float(np.log10(w.max())) if lows else 0.0, low + 1e-9), bins + 1)
    counts = np.zeros(bins, np.int64)
    for span in spans:
        counts += np.histogram(np.log10(w[span][w[span] > 0]), edges)[0]
    return {"log10_edges": [round(float(e), 5) for e in edges], "counts": counts.tolist(),
            "zeros": int(w.size - counts.sum())}


def effective_sample_size_log(log_weights: np.ndarray) -> float:
    """Kish's effective sample size of exp(log_weights), from the logs by chunks: (Σe^(l−M))² / Σe^(2(l−M)),
    M the largest log (the ratio is scale-free), without the weights of every row at once."""
    lw = np.asarray(log_weights, np.float64)
    if lw.size == 0:
        return 0.0
    top, total, squares = float(lw.max()), 0.0, 0.0
    for span in row_spans(lw.size):
        e = np.exp(lw[span] - top)
        total += float(e.sum())
        e *= e
        squares += float(e.sum())
    return total * total / squares


def clip_cap(weights: np.ndarray, max_weight: float | None, quantile: float | None) -> float | None:
    """The cap for mean-1 weights: the smaller of max_weight and their `quantile`, never below 1."""
    caps = []
    if max_weight is not None:
        caps.append(float(max_weight))
    if quantile is not None:
        caps.append(float(np.quantile(weights, quantile)))
    return max(min(caps), 1.0) if caps else None


def clip_and_normalise(weights: np.ndarray, cap: float | None, in_place: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Mean-1 weights with none above `cap`: min(s·w, cap) with s solved so the mean is exactly 1.

    Returns (weights, clipped mask). Rows below the cap keep their ratios to each other. A cap of
    1 makes every weight 1; a cap below n / (number of positive weights) is impossible with mean 1
    and raises. `in_place` (a float64 array the caller gives up) writes the result into `weights`.
    """
    w = np.asarray(weights, np.float64)
    n = w.size
    if n == 0:
        return w.copy(), np.zeros(0, dtype=bool)
    if np.any(~np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError("weights must be finite, non-negative and not all zero")
    if cap is None:
        return self_normalise(w), np.zeros(n, dtype=bool)
    if cap < 1.0:
        raise ValueError(f"cap {cap!r} is below 1: mean-1 weights cannot all lie under it")
    n_positive = int(np.count_nonzero(w))
    if n_positive * cap < n * (1.0 - 1e-12):
        raise ValueError(f"cap {cap!r} is too low: only {n_positive} of {n} weights are positive, so mean-1 "
                         f"weights need a cap of at least {n / n_positive!r}")
    if in_place and w is weights:
        w /= w.max()                                                  # scale-free; keeps the sums below overflow
    else:
        w = w / w.max()
    solved = _clip_by_fixed_point(w, cap)
    if solved is None:                                                # adversarial tail: the sorted solve
        return _clip_sorted(w, cap)
    clipped, scale = solved
    # cap · n_positive = n: every positive row at the cap
    if scale is None:
        positive = w > 0
        return np.where(positive, cap, 0.0), positive
    w *= scale                                                        # w is this function's own array by now
    w[clipped] = cap
    return w, clipped


def _clip_by_fixed_point(w: np.ndarray, cap: float, max_rounds: int = 64
                         ) -> tuple[np.ndarray, float | None] | None:
    """(rows at the cap, the scale s of the others) by iterating s ← (n − k·cap) / Σ_unclipped w with
    k = #{s·w > cap}: s only grows, so the clipped set only grows and the loop stops when it is stable (a few
    O(n) passes on real weights, instead of a sort of every row). s is None when no unclipped mass is left;
    None after `max_rounds` (a tail built to add one row per round)."""
    n = w.size
    clipped, now = np.zeros(n, dtype=bool), np.empty(n, dtype=bool)
    spans = row_spans(n)                                              # a chunk's temporaries, not the log's
    k = 0
    for _ in range(max_rounds):
        rest = sum(w[span][~clipped[span]].sum() for span in spans)
        if not rest > 0:
            return clipped, None
        scale = (n - k * cap) / rest
        for span in spans:
            np.greater(scale * w[span], cap * (1.0 + 1e-12), out=now[span])
        k_now = int(np.count_nonzero(now))
        if k_now == k:
            return clipped, scale
        clipped, now, k = now, clipped, k_now
    return None


def _clip_sorted(w: np.ndarray, cap: float) -> tuple[np.ndarray, np.ndarray]:
    """`clip_and_normalise`'s solve over the weights sorted once: exact for any tail."""
    n = w.size
    order = np.argsort(-w, kind="stable")
    desc = w[order]
    # tail[k] = sum of desc[k:], the mass left unclipped when the k largest are clipped
    tail = np.concatenate([np.cumsum(desc[::-1])[::-1], [0.0]])
    k = np.arange(n + 1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scale = (n - k * cap) / tail[k]                                  # mean(min(s·w, cap)) = 1
        above = np.concatenate([[np.inf], desc])                      # desc[k-1], the smallest clipped
        below = np.concatenate([desc, [0.0]])                         # desc[k], the largest unclipped
        tol = 1e-12 * cap
        ok = ((tail[k] > 0) & np.isfinite(scale) & (scale > 0)
              & (scale * above >= cap - tol) & (scale * below <= cap + tol))
    # cap · n_positive = n: every positive row at the cap
    if not ok.any():
        positive = w > 0
        return np.where(positive, cap, 0.0), positive
    k0 = int(np.argmax(ok))
    out = np.empty(n)
    out[order] = np.minimum(scale[k0] * desc, cap)
    out[order[:k0]] = cap
    clipped = np.zeros(n, dtype=bool)
    clipped[order[:k0]] = True
    return out, clipped


def clip_and_normalise_log(log_weights: np.ndarray, cap: float, chunk_rows: int = CHUNK_ROWS
                           ) -> tuple[np.ndarray, np.ndarray]:
    """`clip_and_normalise` solved on log weights: for a spread beyond exp's range, where a few rows e^700 or more
    above the rest (a density near 0 in a denominator, met among tens of millions of rows) would leave every other
    weight exactly 0 after `normalised_from_log` and no mean-1 solution under the cap. The same solution as the
    linear solve wherever that one is defined.

    Mean 1 under the cap puts at most n / cap rows at the cap, so only the n / cap largest logs can be clipped: those
    candidates are found by chunks (a running top n / cap), sorted, and solved with the other rows' mass as one
    constant (`_solve_sorted_log`); the per-row arrays are the result and its mask. A tail that adds one clipped row
    per round of a fixed point (logs spread over thousands, met at 20 M rows) costs no more than any other."""
    lw = np.asarray(log_weights, np.float64)
    if cap < 1.0:
        raise ValueError(f"cap {cap!r} is below 1: mean-1 weights cannot all lie under it")
    n = lw.size
    if n == 0:
        return np.zeros(0), np.zeros(0, dtype=bool)
    if cap * (1.0 - 1e-12) <= 1.0:                                        # cap 1: every row at the cap
        return np.full(n, cap), np.ones(n, dtype=bool)
    spans = row_spans(n, chunk_rows)
    threshold = _kth_largest(lw, min(n, int(n // cap) + 1), spans)
    candidates = np.sort(np.concatenate([lw[span][lw[span] >= threshold] for span in spans]))[::-1]
    rest_top, log_rest = _below(lw, threshold, spans)
    solved = _solve_sorted_log(candidates, n, cap, log_rest, rest_top)
    if solved is None:                                                    # rounding at the boundary: the whole sort
        return _clip_sorted_log(lw, cap)
    k0, log_scale = solved
    out, clipped = np.empty(n), np.zeros(n, dtype=bool)
    for span in spans:
        if k0:
            np.greater_equal(lw[span], candidates[k0 - 1], out=clipped[span])
        with np.errstate(over="ignore"):                                  # the clipped rows: set to the cap below
            np.minimum(np.exp(log_scale + lw[span]), cap, out=out[span])
        out[span][clipped[span]] = cap
    return out, clipped


def _kth_largest(lw: np.ndarray, k: int, spans: list[slice]) -> float:
    """The k-th largest value of `lw`, from a running top k over the chunks (k + a chunk in memory at once)."""
    top = np.empty(0)
    for span in spans:
        part = np.concatenate([top, lw[span]]) if top.size else lw[span]
        top = np.partition(part, part.size - k)[part.size - k:].copy() if part.size > k else part.copy()
    return float(top.min())


def _below(lw: np.ndarray, threshold: float, spans: list[slice]) -> tuple[float, float]:
    """(largest value, log Σ e^l) over the logs l < threshold, by chunks; (−inf, −inf) when there are none."""
    top = -np.inf
    for span in spans:
        part = lw[span]
        kept = part[part < threshold]
        if kept.size:
            top = max(top, float(kept.max()))
    if not np.isfinite(top):
        return -np.inf, -np.inf
    total = 0.0
    for span in spans:
        part = lw[span]
        total += float(np.exp(part[part < threshold] - top).sum())
    return top, top + float(np.log(total))


def _solve_sorted_log(desc: np.ndarray, n: int, cap: float, log_rest: float = -np.inf, rest_top: float = -np.inf
                      ) -> tuple[int, float] | None:
    """(k, log s) with the k largest of the logs `desc` (sorted descending) at the cap and every other row at s·e^l,
    mean 1 over n rows; `log_rest` the log mass and `rest_top` the largest log of the rows not in `desc` (none may be
    clipped). None when no k fits (rounding at the boundary)."""
    log_tail = np.concatenate([np.logaddexp.accumulate(desc[::-1])[::-1], [-np.inf]])   # log Σ_{j ≥ k} e^desc[j]
    log_tail = np.logaddexp(log_tail, log_rest)
    k = np.arange(desc.size + 1)
    log_cap, tol = float(np.log(cap)), 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        log_scale = np.log(n - k * cap) - log_tail                       # mean(min(s·w, cap)) = 1
        above = np.concatenate([[np.inf], desc])                          # desc[k-1], the smallest clipped
        below = np.concatenate([desc, [rest_top]])                        # desc[k], the largest unclipped
        ok = np.isfinite(log_scale) & (log_scale + above >= log_cap - tol) & (log_scale + below <= log_cap + tol)
    if not ok.any():
        return None
    k0 = int(np.argmax(ok))
    return k0, float(log_scale[k0])


def _clip_sorted_log(lw: np.ndarray, cap: float) -> tuple[np.ndarray, np.ndarray]:
    """`clip_and_normalise_log` over every row sorted once (`_solve_sorted_log`): the reference the candidate solve is
    tested against, and its fallback."""
    n = lw.size
    order = np.argsort(-lw, kind="stable")
    solved = _solve_sorted_log(lw[order], n, cap)
    if solved is None:                                                    # cap 1: every row at the cap
        return np.full(n, cap), np.ones(n, dtype=bool)
    k0, log_scale = solved
    with np.errstate(over="ignore"):                                      # the clipped rows: set to the cap below
        out = np.minimum(np.exp(log_scale + lw), cap)
    clipped = np.zeros(n, dtype=bool)
    clipped[order[:k0]] = True
    out[clipped] = cap
    return out, clipped


def log_weight_summary(log_weights: np.ndarray, copy_rows: int = QUANTILE_COPY_ROWS) -> dict[str, float]:
    """Mean, std, min, 1/50/99 % quantiles and max of a log-weight column (quantiles as `np.quantile`'s, exactly;
    above `copy_rows` rows from `order_statistics`, never a sorted copy of the column)."""
    lw = np.asarray(log_weights, np.float64)
    if lw.size == 0:
        return {}
    qs = (0.01, 0.5, 0.99)
    q01, q50, q99 = np.quantile(lw, qs) if lw.size <= copy_rows else chunked_quantiles(lw, qs)
    mean = lw.mean()
    squares = sum(float(np.sum(np.square(lw[span] - mean))) for span in row_spans(lw.size))   # std by chunks
    return {"mean": float(mean), "std": float(np.sqrt(squares / lw.size)), "min": float(lw.min()),
            "q01": float(q01), "median": float(q50), "q99": float(q99), "max": float(lw.max())}


def chunked_quantiles(x: np.ndarray, qs: Sequence[float]) -> list[float]:
    """`np.quantile(x, qs)` (linear interpolation, finite x) from the order statistics either side of each
    quantile's position (`order_statistics`): the same numbers without a copy of x."""
    n = x.size
    positions = [q * (n - 1) for q in qs]                     # numpy's virtual index, computed as numpy does
    lows = [int(np.floor(p)) for p in positions]
    ranks = sorted({r for lo in lows for r in (lo, min(lo + 1, n - 1))})
    values = order_statistics(x, ranks)
    out = []
    for p, lo in zip(positions, lows, strict=True):
        a, b = values[lo], values[min(lo + 1, n - 1)]
        out.append(float(np.quantile(np.array([a, b]), p - lo)))   # numpy's own interpolation of the pair
    return out


def order_statistics(x: np.ndarray, ranks: Sequence[int], bins: int = 4096, gather_rows: int = 1 << 18,
                     chunk_rows: int = CHUNK_ROWS) -> dict[int, float]:
    """The k-th smallest values of a finite x (0-based `ranks`), exactly, by chunks: each round bins the values
    still in play (those in the bin every earlier round kept, binned as that round binned them) into `bins`
    equal bins over their range and keeps the bin holding rank k, until at most `gather_rows` values are left,
    which are gathered and sorted. A round costs a pass over x (two or three on real weights); memory, a chunk's
    temporaries and the gathered values."""
    spans = row_spans(x.size, chunk_rows)
    low, high = float(x.min()), float(x.max())
    out: dict[int, float] = {}
    first: np.ndarray | None = None
    for k in sorted(set(int(r) for r in ranks)):
        if not 0 <= k < x.size:
            raise IndexError(f"rank {k} outside 0..{x.size - 1}")
        chain: list[tuple[float, float, int]] = []      # each round's (lowest value, bins per unit, bin kept)
        lo, hi, inside, below = low, high, x.size, 0    # the range binned next; values in play; values below them
        for _ in range(16):
            if inside <= gather_rows or not hi > lo:
                break
            scale = bins / (hi - lo)
            counts = first if not chain and first is not None else np.zeros(bins, np.int64)
            if counts is not first:
                for s in spans:
                    counts += np.bincount(_bin_of(_in_play(x[s], chain, bins), lo, scale, bins), minlength=bins)
                if not chain:
                    first = counts                           # the first round is every rank's: counted once
            cumulative = np.cumsum(counts)
            b = int(np.searchsorted(cumulative, k - below, side="right"))    # the bin holding rank k
            if counts[b] == inside:                                          # no split (a few floats): gather
                break
            below += int(cumulative[b - 1]) if b > 0 else 0
            chain.append((lo, scale, b))
            inside = int(counts[b])
            lo, hi = max(lo + b / scale, low), min(lo + (b + 1) / scale, high)
        gathered = np.sort(np.concatenate([_in_play(x[s], chain, bins) for s in spans]))
        out[k] = float(gathered[k - below])
    return out


def _bin_of(values: np.ndarray, lo: float, scale: float, bins: int) -> np.ndarray:
    return np.clip(((values - lo) * scale).astype(np.int64), 0, bins - 1)


def _in_play(values: np.ndarray, chain: Sequence[tuple[float, float, int]], bins: int) -> np.ndarray:
    """The values in the bin every round of `chain` kept."""
    for lo, scale, b in chain:
        values = values[_bin_of(values, lo, scale, bins) == b]
    return values


# ---------------------------------------------------------------------------------------------
# Applying the fitted estimators
# ---------------------------------------------------------------------------------------------
def permutation_log_weight_parts(estimator: FeatureInfluence, nodes_df: pd.DataFrame, orders: Sequence[np.ndarray]
                                 ) -> tuple[np.ndarray, np.ndarray]:
    """(log p(x | r̂, m), log (1/K) Σ_k p(x | r̂_{π_k}, m)) of these rows: the denominator, and the numerator with
    r̂ marginalised over the batch's own relevance scores (§3.2; `orders` are K permutations of these rows). Both
    differ only in r̂'s column, so the rows' design matrix and targets are built once."""
    if RELEVANCE_SCORE not in nodes_df.columns:
        raise KeyError(f"column {RELEVANCE_SCORE!r} is missing; present: {list(nodes_df.columns)}")
    both = estimator.denominator.log_prob_permuted(nodes_df, RELEVANCE_SCORE, orders, observed=True)
    return both[0], log_mean_exp(both[1:], axis=0)


@dataclass
class ImportanceWeights:
    """Per-row weights (mean 1, clipped) for the click model's reweighted likelihood (Eq. 10), with diagnostics."""

    weights: np.ndarray                                   # final weights, aligned with the input rows
    log_weights: np.ndarray                               # Σ_i log w_i before normalisation and clipping
    feature_log_weights: dict[str, np.ndarray]            # log w_i per confounded feature (empty when not kept)
    clipped: np.ndarray                                   # rows held at the cap
    cap: float | None
    features: dict[str, dict[str, Any]] = field(default_factory=dict)   # case, numerator, log_weight summary

    @property
    def n_rows(self) -> int:
        return int(self.weights.size)

    @property
    def ess(self) -> float:
        return effective_sample_size(self.weights)

    @property
    def ess_fraction(self) -> float:
        return self.ess / self.n_rows if self.n_rows else 0.0

    @property
    def ess_unclipped(self) -> float:
        return effective_sample_size_log(self.log_weights) if self.n_rows else 0.0

    @property
    def share_clipped(self) -> float:
        return float(self.clipped.mean()) if self.n_rows else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able diagnostics (no per-row arrays)."""
        w = self.weights
        return {"n_rows": self.n_rows, "ess": self.ess, "ess_fraction": self.ess_fraction,
                "ess_unclipped": self.ess_unclipped,
                "ess_fraction_unclipped": self.ess_unclipped / self.n_rows if self.n_rows else 0.0,
                "share_clipped": self.share_clipped, "cap": self.cap,
                "weight_min": float(w.min()) if w.size else None, "weight_max": float(w.max()) if w.size else None,
                "total_log_weight": log_weight_summary(self.log_weights), "histogram": weight_histogram(w),
                "features": {name: dict(summary) for name, summary in self.features.items()}}


def importance_weights(nodes_df: pd.DataFrame, estimators: Mapping[str, FeatureInfluence],
                       config: WeightConfig | None = None, seed: int = 0,
                       chunk_rows: int = CHUNK_ROWS, keep_feature_log_weights: bool = True,
                       ranks: Any = None) -> ImportanceWeights:
    """w = Π_i w_i over the confounded features (Eq. 10), self-normalised and clipped, per row of nodes_df.

    The densities are evaluated `chunk_rows` rows at a time (their design matrices and class probabilities are
    several times a row's own size). A permutation numerator draws r̂ from the rows of the same chunk, as the paper
    draws it from the batch: K permutations of each chunk (one pass over all rows when they fit one chunk), never
    an index per row of the whole log. Each feature's log weights are summarised as soon as they are computed;
    without `keep_feature_log_weights` (BAL's epochs) they are added into the total and let go, so the per-row
    arrays past the densities are the total (the one feature's own array for one feature), one feature's log
    weights while they are computed, and the weights, each computed in place.
    With `ranks` (`training.distributed.RankBatches`, in a DDP rank) each rank evaluates the densities of its share
    of the chunks (every rank draws every chunk's permutations, so each chunk's are one process's) and the ranks
    sum each feature's log weights: every rank then holds them all."""
    config = config or WeightConfig()
    rng = np.random.default_rng(seed)
    n = len(nodes_df)
    per_feature: dict[str, np.ndarray] = {}
    info: dict[str, dict[str, Any]] = {}
    log_w: np.ndarray | None = None
    for name, est in estimators.items():
        permutations = config.permutations_for(n) if est.numerator is None else 0
        lw = np.empty(n, dtype=np.float64) if ranks is None else np.zeros(n, dtype=np.float64)
        for index, start in enumerate(range(0, n, chunk_rows)):
            size = min(chunk_rows, n - start)
            orders = [rng.permutation(size) for _ in range(permutations)] if est.numerator is None else []
            if ranks is not None and not ranks.owns(index):                 # another rank's chunk
                continue
            chunk = nodes_df.iloc[start: start + chunk_rows]
            if est.numerator is not None:
                log_den = est.denominator.log_prob(chunk)                   # influence score p(x | r̂, m), Eq. 6–7
                log_num = est.numerator.log_prob(chunk)                     # p(x) (case 1) or p(x | m)
            else:                                                           # case 2: r̂ from the chunk's own rows
                log_den, log_num = permutation_log_weight_parts(est, chunk, orders)
            lw[start: start + len(chunk)] = feature_log_weight(log_num, log_den)   # Eq. 8–9 / case 2
            bad = ~np.isfinite(lw[start: start + len(chunk)])
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise ValueError(f"importance weight of {name!r} is not finite at row {start + row} "
                                 f"(log numerator {log_num[row]!r}, log denominator {log_den[row]!r})")
        if ranks is not None:
            lw = ranks.sum(lw)                                              # every chunk's, on every rank
        info[name] = {"case": est.case, "parents": list(est.parents),
                      "numerator": "model" if est.numerator is not None else "permutation"}
        if est.numerator is None:
            info[name]["n_permutations"] = permutations
            if n > chunk_rows:
                info[name]["permuted_within_rows"] = chunk_rows
        info[name]["log_weight"] = log_weight_summary(lw)
        if keep_feature_log_weights:
            per_feature[name] = lw
        if log_w is None:                                                   # Eq. 10: Σ_i log w_i
            log_w = lw if not keep_feature_log_weights or len(estimators) == 1 else lw.copy()
        else:
            log_w += lw
        del lw
    if log_w is None:
        log_w = np.zeros(n)
    if n == 0:
        return ImportanceWeights(np.zeros(0), log_w, per_feature, np.zeros(0, dtype=bool), None, info)
    normalised = normalised_from_log(log_w)
    cap = clip_cap(normalised, config.max_weight, config.clip_quantile)
    if cap is not None and np.count_nonzero(normalised) * cap < n:     # a spread beyond exp's range
        del normalised
        weights, clipped = clip_and_normalise_log(log_w, cap, chunk_rows)
    else:
        weights, clipped = clip_and_normalise(normalised, cap, in_place=True)
    return ImportanceWeights(weights, log_w, per_feature, clipped, cap, info)
