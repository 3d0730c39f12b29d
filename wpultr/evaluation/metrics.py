"""The one metric definition every wpultr method is scored by: DCG, ERR, nDCG, MAP and MCC.

Definitions follow the Baidu-ULTR evaluation (BAL §4.1): DCG@k with gain 2^y − 1 and discount
log2(i + 1) at 1-based rank i, ERR@k with maximum grade 4, i.e. R = (2^y − 1) / 2^4 (Chapelle
et al. 2009, the same as TREC's gdeval.pl). Conventions, chosen once for all methods:

* Ranking and ties: documents are sorted by score, descending; equal scores keep the order of the
  rows in the table (a stable sort). This is trec_eval's and gdeval's rule (score descending, then
  document name descending) whenever rows are listed in descending name order, so the metrics agree
  with those tools on tied scores too.
* nDCG@k divides by the ideal DCG@k over all judged documents of the query; a query with no document
  of label > 0 has IDCG 0 and scores nDCG 0 (as ranx and trec_eval do), not NaN.
* MAP: a document is relevant when label >= `relevance_threshold` (default 1, i.e. any grade above
  "bad"); AP divides by the number of relevant judged documents; a query with none scores 0.
* MCC (Identifiability paper §5.1): Pearson correlation between true and predicted relevance, pooled
  over all documents; see `mcc`.
* Click MSE (same paper): mean squared error between true and predicted click probability; see `click_mse`.
* Click log-likelihood and perplexity of held-out sessions (label-free; the click-model check of the
  Baidu-ULTR reproducibility study, Hager et al., SIGIR 2024): see `click_log_likelihood`, `click_perplexity`.
* A query is keyed by schema.query_key (its id plus its query tokens when the table has them):
  Baidu-ULTR reuses some annotation query ids for different queries, each a query of its own.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..schema import (
    BUCKET,
    DOC_ID,
    HIGH_BUCKETS,
    LABEL,
    MAX_LABEL,
    QUERY_ID,
    QUERY_KEY,
    TAIL_BUCKETS,
    SchemaError,
    query_key,
)

DEFAULT_KS: tuple[int, ...] = (1, 3, 5, 10)
MAP_COLUMN = "MAP"


# ---------------------------------------------------------------------------------------------
# One query: labels already in ranked order
# ---------------------------------------------------------------------------------------------
def _ranked_labels(labels_in_rank_order: Sequence[float] | np.ndarray) -> np.ndarray:
    labels = np.asarray(labels_in_rank_order, dtype=np.float64)
    if labels.ndim != 1:
        raise ValueError(f"expected a 1-D array of labels in ranked order, got shape {labels.shape}")
    return labels


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"cutoff k must be a positive integer, got {k!r}")


def dcg_at_k(labels_in_rank_order: Sequence[float] | np.ndarray, k: int) -> float:
    """DCG@k = sum_{i<=k} (2^y_i − 1) / log2(i + 1) over the labels listed in ranked order."""
    _check_k(k)
    top = _ranked_labels(labels_in_rank_order)[:k]
    ranks = np.arange(1, top.size + 1)
    return float(np.sum((np.exp2(top) - 1.0) / np.log2(ranks + 1.0)))  # DCG, Järvelin & Kekäläinen with exp. gain


def ndcg_at_k(labels_in_rank_order: Sequence[float] | np.ndarray, k: int) -> float:
    """nDCG@k: DCG@k over the ideal DCG@k of the same judged labels; 0 when no label is positive."""
    labels = _ranked_labels(labels_in_rank_order)
    ideal = dcg_at_k(np.sort(labels)[::-1], k)
    return dcg_at_k(labels, k) / ideal if ideal > 0 else 0.0


def err_at_k(labels_in_rank_order: Sequence[float] | np.ndarray, k: int, max_grade: int = MAX_LABEL) -> float:
    """ERR@k = sum_{i<=k} (1/i) R_i prod_{j<i} (1 − R_j), R = (2^y − 1) / 2^max_grade (cascade model)."""
    _check_k(k)
    top = _ranked_labels(labels_in_rank_order)[:k]
    if top.size and (top.max() > max_grade or top.min() < 0):
        raise ValueError(f"ERR needs labels in [0, {max_grade}], got range [{top.min()}, {top.max()}]")
    stop = (np.exp2(top) - 1.0) / 2.0 ** max_grade                       # R_i: stop probability (Chapelle et al. 2009)
    reach = np.concatenate(([1.0], np.cumprod(1.0 - stop)[:-1]))          # prod_{j<i} (1 − R_j)
    return float(np.sum(stop * reach / np.arange(1, top.size + 1)))       # ERR@k, Chapelle et al. 2009 (CIKM)


def average_precision(labels_in_rank_order: Sequence[float] | np.ndarray, relevance_threshold: float = 1) -> float:
    """AP: mean of precision@i over the ranks i of relevant documents (label >= threshold); 0 if none."""
    relevant = _ranked_labels(labels_in_rank_order) >= relevance_threshold
    n_relevant = int(relevant.sum())
    if n_relevant == 0:
        return 0.0
    precision = np.cumsum(relevant) / np.arange(1, relevant.size + 1)
    return float(precision[relevant].sum() / n_relevant)


def mcc(true_relevance: Sequence[float] | np.ndarray, predicted_relevance: Sequence[float] | np.ndarray) -> float:
    """Mean correlation coefficient: Pearson r between true and predicted relevance, pooled over documents.

    Identifiability paper §5.1 (its equation was lost in extraction): the authors' evaluation code
    takes one Pearson correlation over every document's true and predicted relevance probability, so
    MCC is invariant to the positive scaling that identifiability allows. NaN when either is constant.
    """
    true = np.asarray(true_relevance, dtype=np.float64).ravel()
    pred = np.asarray(predicted_relevance, dtype=np.float64).ravel()
    if true.shape != pred.shape:
        raise ValueError(f"mcc: true relevance has {true.size} values, predicted has {pred.size}")
    if true.size < 2:
        raise ValueError(f"mcc: needs at least 2 documents, got {true.size}")
    if not (np.isfinite(true).all() and np.isfinite(pred).all()):
        raise ValueError("mcc: relevance values must be finite")
    true_c, pred_c = true - true.mean(), pred - pred.mean()
    denom = np.sqrt(np.sum(true_c ** 2) * np.sum(pred_c ** 2))
    return float(np.sum(true_c * pred_c) / denom) if denom > 0 else float("nan")


def click_mse(true_click_prob: Sequence[float] | np.ndarray, predicted_click_prob: Sequence[float] | np.ndarray,
              fit_scale: bool = False) -> float:
    """Click MSE (Identifiability paper §5.1): mean squared error between true and predicted click probability.

    `fit_scale`: first multiply the prediction by the one least-squares constant c = Σ p·q / Σ q², for
    models whose loss leaves the scale of r̂·ô free (listwise and pairwise losses fit ratios only).
    """
    true = np.asarray(true_click_prob, dtype=np.float64).ravel()
    pred = np.asarray(predicted_click_prob, dtype=np.float64).ravel()
    if true.shape != pred.shape or true.size == 0:
        raise ValueError(f"click_mse: needs equally many true and predicted values (> 0), got {true.size}, {pred.size}")
    if fit_scale:
        norm = float(np.sum(pred * pred))
        pred = pred * (float(np.sum(true * pred)) / norm if norm > 0 else 0.0)
    return float(np.mean((true - pred) ** 2))


# ---------------------------------------------------------------------------------------------
# Many queries at once: one sort, then per-query sums with bincount
# ---------------------------------------------------------------------------------------------
def _metric_columns(ks: Sequence[int]) -> list[str]:
    return ([f"DCG@{k}" for k in ks] + [f"ERR@{k}" for k in ks] + [f"nDCG@{k}" for k in ks] + [MAP_COLUMN])


def _checked_ks(ks: Sequence[int]) -> tuple[int, ...]:
    ks = tuple(ks)
    if not ks:
        raise ValueError("ks: give at least one cutoff")
    for k in ks:
        _check_k(k)
    return ks


def _require(df: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise SchemaError(f"metrics: missing column(s) {missing}; present: {list(df.columns)}")


def _shown(value: object) -> str:
    """A cell value as a user would write it (numpy scalars unwrapped)."""
    return repr(value.item() if hasattr(value, "item") else value)


def _numeric_column(df: pd.DataFrame, column: str) -> np.ndarray:
    values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SchemaError(f"metrics: column {column!r} row {row} is {_shown(df[column].iloc[row])}, "
                          f"expected a finite number")
    return values


def _checked_labels(df: pd.DataFrame, label_col: str) -> np.ndarray:
    labels = _numeric_column(df, label_col)
    bad = (labels < 0) | (labels > MAX_LABEL) | (labels != np.floor(labels))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SchemaError(f"metrics: column {label_col!r} row {row} is {_shown(df[label_col].iloc[row])}, "
                          f"expected an integer grade in [0, {MAX_LABEL}]")
    return labels


def _rank_within_group(group_sorted: np.ndarray, n_groups: int) -> np.ndarray:
    """0-based rank of each row inside its group, for rows already sorted by group."""
    starts = np.concatenate(([0], np.cumsum(np.bincount(group_sorted, minlength=n_groups))[:-1]))
    return np.arange(group_sorted.size) - starts[group_sorted]


def _query_buckets(df: pd.DataFrame, codes: np.ndarray, n_queries: int, bucket_col: str,
                   query_col: str) -> np.ndarray:
    buckets = _numeric_column(df, bucket_col)
    _, first_row = np.unique(codes, return_index=True)       # codes are 0..n_queries-1, all present
    first = buckets[first_row]
    bad = buckets != first[codes]
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SchemaError(f"metrics: column {bucket_col!r} row {row} is {_shown(df[bucket_col].iloc[row])}, but query "
                          f"{_shown(df[query_col].iloc[row])} has bucket {first[codes[row]]:g} in an earlier row")
    return first.astype(np.int64)


def _check_judged_once(df: pd.DataFrame, codes: np.ndarray) -> None:
    """SchemaError when a query holds one document (doc_id) twice: DCG would count its gain twice."""
    if DOC_ID not in df.columns:
        return
    twice = (pd.DataFrame({"q": codes, "d": df[DOC_ID].to_numpy()}).duplicated().to_numpy()
             & df[DOC_ID].notna().to_numpy())
    if twice.any():
        row = int(np.flatnonzero(twice)[0])
        raise SchemaError(f"metrics: column {DOC_ID!r} row {row} is document {_shown(df[DOC_ID].iloc[row])} a second "
                          f"time for query {_shown(df[QUERY_ID].iloc[row]) if QUERY_ID in df.columns else row}; "
                          f"a document is judged once per query")


def per_query(df: pd.DataFrame, score_col: str, label_col: str = LABEL, query_col: str = QUERY_ID,
              ks: Sequence[int] = DEFAULT_KS, bucket_col: str = BUCKET,
              relevance_threshold: float = 1) -> pd.DataFrame:
    """One row per query: DCG@k, ERR@k, nDCG@k for each k, and MAP.

    With the default `query_col` (query_id) a query is keyed by schema.query_key, so two queries that
    share an id but not their tokens are two rows, and the table carries the QUERY_KEY column (rows in
    ascending key order); another `query_col` groups by that column alone (ascending). Carries the
    query's bucket when `bucket_col` is a column. Rows of a query may appear in any order; ties in
    `score_col` are broken by row order (see the module docstring).
    """
    ks = _checked_ks(ks)
    _require(df, [score_col, label_col, query_col])
    scores = _numeric_column(df, score_col)
    labels = _checked_labels(df, label_col)
    empty = df[query_col].isna().to_numpy()
    if empty.any():
        raise SchemaError(f"metrics: column {query_col!r} row {int(np.flatnonzero(empty)[0])} is empty")
    keyed = query_col == QUERY_ID
    codes, keys = pd.factorize(query_key(df) if keyed else df[query_col], sort=True)
    _check_judged_once(df, codes)
    n_queries = len(keys)
    first_row = np.unique(codes, return_index=True)[1]      # codes are 0..n_queries-1, all present

    by_score = np.lexsort((-scores, codes))                 # stable: ties keep row order
    by_label = np.lexsort((-labels, codes))                 # the ideal ranking of the judged documents
    group = codes[by_score]
    rank = _rank_within_group(group, n_queries)             # same for both orders: same group sizes
    ranked, ideal = labels[by_score], labels[by_label]
    gain, ideal_gain = np.exp2(ranked) - 1.0, np.exp2(ideal) - 1.0
    discount = 1.0 / np.log2(rank + 2.0)                    # 1 / log2(i + 1) at 1-based rank i

    stop = gain / 2.0 ** MAX_LABEL                          # ERR's R_i, Chapelle et al. 2009 (CIKM)
    log_continue = np.cumsum(np.log1p(-stop))               # running sum of log(1 − R_j) over all rows
    group_start = np.flatnonzero(rank == 0)
    before_group = np.concatenate(([0.0], log_continue))[group_start][group]
    reach = np.exp(log_continue - np.log1p(-stop) - before_group)   # prod_{j<i} (1 − R_j) within the query
    err_term = stop * reach / (rank + 1.0)

    out: dict[str, Any] = {query_col: df[query_col].to_numpy()[first_row]}
    if keyed:
        out[QUERY_KEY] = np.asarray(keys, dtype=object)
    if bucket_col in df.columns:
        out[bucket_col] = _query_buckets(df, codes, n_queries, bucket_col, query_col)
    dcg = {k: np.bincount(group, weights=np.where(rank < k, gain * discount, 0.0), minlength=n_queries) for k in ks}
    idcg = {k: np.bincount(group, weights=np.where(rank < k, ideal_gain * discount, 0.0), minlength=n_queries)
            for k in ks}
    for k in ks:
        out[f"DCG@{k}"] = dcg[k]
    for k in ks:
        out[f"ERR@{k}"] = np.bincount(group, weights=np.where(rank < k, err_term, 0.0), minlength=n_queries)
    for k in ks:
        out[f"nDCG@{k}"] = np.divide(dcg[k], idcg[k], out=np.zeros(n_queries), where=idcg[k] > 0)

    relevant = ranked >= relevance_threshold
    hits_before_group = np.concatenate(([0], np.cumsum(relevant)))[group_start][group]
    hits = np.cumsum(relevant) - hits_before_group          # relevant documents at ranks <= i
    precision_sum = np.bincount(group, weights=np.where(relevant, hits / (rank + 1.0), 0.0), minlength=n_queries)
    n_relevant = np.bincount(group, weights=relevant.astype(np.float64), minlength=n_queries)
    out[MAP_COLUMN] = np.divide(precision_sum, n_relevant, out=np.zeros(n_queries), where=n_relevant > 0)
    return pd.DataFrame(out)


def _group_summary(table: pd.DataFrame, columns: Sequence[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {"n_queries": int(len(table))}
    for column in columns:
        summary[column] = float(table[column].mean()) if len(table) else None
    return summary


def evaluate(df: pd.DataFrame, score_col: str, label_col: str = LABEL, query_col: str = QUERY_ID,
             ks: Sequence[int] = DEFAULT_KS, bucket_col: str = BUCKET,
             relevance_threshold: float = 1) -> dict[str, dict[str, Any]]:
    """Mean per-query metrics for "all" queries and, when `bucket_col` is present, "high" and "tail" ones.

    High = buckets HIGH_BUCKETS (0–4), tail = TAIL_BUCKETS (5–9), BAL §4.3. Each group holds n_queries
    and one float per metric (None when the group is empty), so the result is JSON-able as is.
    """
    table = per_query(df, score_col, label_col=label_col, query_col=query_col, ks=ks, bucket_col=bucket_col,
                      relevance_threshold=relevance_threshold)
    columns = _metric_columns(_checked_ks(ks))
    result = {"all": _group_summary(table, columns)}
    if bucket_col in table.columns:
        result["high"] = _group_summary(table[table[bucket_col].isin(HIGH_BUCKETS)], columns)
        result["tail"] = _group_summary(table[table[bucket_col].isin(TAIL_BUCKETS)], columns)
    return result


# ---------------------------------------------------------------------------------------------
# Label-free: how well a click model predicts held-out clicks
# ---------------------------------------------------------------------------------------------
CLICK_PROB_EPS = 1e-6          # predicted click probabilities are clipped into [eps, 1 − eps]: log 0 is undefined


def _click_arrays(clicks: Sequence[float] | np.ndarray, click_prob: Sequence[float] | np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Clicks (0/1) and predicted click probabilities as float arrays of one shape, probabilities clipped."""
    c = np.asarray(clicks, dtype=np.float64).ravel()
    p = np.asarray(click_prob, dtype=np.float64).ravel()
    if c.shape != p.shape or c.size == 0:
        raise ValueError(f"click metrics: need equally many clicks and click probabilities (> 0), "
                         f"got {c.size}, {p.size}")
    if not np.isin(c, (0.0, 1.0)).all():
        raise ValueError("click metrics: clicks must be 0 or 1")
    if not np.isfinite(p).all():
        raise ValueError("click metrics: click probabilities must be finite")
    return c, np.clip(p, CLICK_PROB_EPS, 1.0 - CLICK_PROB_EPS)


def click_log_likelihood(clicks: Sequence[float] | np.ndarray, click_prob: Sequence[float] | np.ndarray) -> float:
    """Mean over shown results of c·ln p + (1 − c)·ln(1 − p) (natural log; higher is better, 0 is perfect)."""
    c, p = _click_arrays(clicks, click_prob)
    return float(np.mean(c * np.log(p) + (1.0 - c) * np.log1p(-p)))


def click_perplexity(clicks: Sequence[float] | np.ndarray, click_prob: Sequence[float] | np.ndarray,
                     positions: Sequence[int] | np.ndarray) -> dict[str, Any]:
    """Perplexity by position and overall (Hager et al., SIGIR 2024; Dupret & Piwowarski 2008).

    At position k: PPL@k = 2^(−(1/N_k) Σ_s [c_sk·log2 p_sk + (1 − c_sk)·log2(1 − p_sk)]), the mean over the N_k
    sessions showing a result at k; overall = the mean of PPL@k over the positions. 1 is perfect, 2 is a coin
    flip; lower is better. Returns {"overall": float, "by_position": {"k": float}, "sessions_by_position": {"k": N_k}}.
    """
    c, p = _click_arrays(clicks, click_prob)
    pos = np.asarray(positions).ravel()
    if pos.shape != c.shape:
        raise ValueError(f"click_perplexity: {pos.size} positions for {c.size} clicks")
    log2_lik = (c * np.log2(p) + (1.0 - c) * np.log2(1.0 - p))
    levels, where = np.unique(pos, return_inverse=True)
    counts = np.bincount(where, minlength=len(levels))
    per_position = np.exp2(-np.bincount(where, log2_lik, minlength=len(levels)) / counts)
    return {"overall": float(per_position.mean()),
            "by_position": {str(int(k)): float(v) for k, v in zip(levels, per_position, strict=True)},
            "sessions_by_position": {str(int(k)): int(n) for k, n in zip(levels, counts, strict=True)}}


# ---------------------------------------------------------------------------------------------
# Two rankers on the same queries
# ---------------------------------------------------------------------------------------------
GROUP_BUCKETS = {"high": HIGH_BUCKETS, "tail": TAIL_BUCKETS}


def paired_test(method: pd.DataFrame, baseline: pd.DataFrame, metric: str, group: str) -> tuple[float, float, int]:
    """(p, mean difference method − baseline, n queries) of a paired t-test (scipy.stats.ttest_rel) over the
    queries both tables share, keyed by schema.query_key; used by the experiment tables and `wpultr compare`."""
    from scipy.stats import ttest_rel  # lazy: +2.5 s (scipy.stats); only paired tests need it
    a, b = method, baseline
    if group != "all":
        if BUCKET not in a.columns:
            return float("nan"), float("nan"), 0
        a = a[a[BUCKET].isin(GROUP_BUCKETS[group])]
        b = b[b[BUCKET].isin(GROUP_BUCKETS[group])]
    key = QUERY_KEY if QUERY_KEY in a.columns and QUERY_KEY in b.columns else QUERY_ID   # schema.query_key
    joined = a[[key, metric]].merge(b[[key, metric]], on=key, suffixes=("_m", "_b"))
    n = len(joined)
    if n < 2:
        return float("nan"), float("nan"), n
    x, y = joined[f"{metric}_m"].to_numpy(float), joined[f"{metric}_b"].to_numpy(float)
    diff = float(np.mean(x - y))
    if np.allclose(x, y):
        return 1.0, diff, n
    return float(ttest_rel(x, y).pvalue), diff, n
