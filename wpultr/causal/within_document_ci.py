"""A click test that conditions on the document (issue 30): does a page feature move clicks of the SAME result?

H0: click ⫫ X | Z, tested within (query, document) strata, so no relevance — which is a property of the
(query, document), whatever part of it the ranker's r̂ misses — can leak into X's effect. The click is
modelled on the log scale, E[c | stratum s, covariates a] = exp(α_s + a'β) (Poisson quasi-likelihood with a
fixed effect per stratum, the conditional-multinomial model: no incidental-parameter bias however few
impressions a stratum holds), and X's block is tested by the score test of the fixed-effect model, its
variance summed over sessions (the cluster-robust sandwich of `click_ci`, valid whatever the within-session
dependence and the Poisson variance's misfit).

Why these strata and covariates (measured on bench/discovery.py's null worlds; the earlier within-document
test, stratified by document alone with logistic position effects, passed media type → click on the cascade
logs):

* the logging ranker moves a result by its presented type (a video is promoted), so within a document the type
  changes with position; position's effect is not the same for every document (trust bias: a non-relevant
  result's clicks fall with position faster than a relevant one's), so a shared position curve leaves a
  residual that follows the type. With position in Z the strata are (document, position): only impressions
  of the same result at the same rank are compared.
* in a cascade, examination depends on the clicks above (a user stops after a click), and a promoted result
  has different results above it. The session's clicks above each row enter as covariates: clicks above
  (0, 1, 2+), whether the result just above was clicked, results skipped since the last click, and the summed
  r̂ of the results skipped since the last click or the top (a relevant result skipped says the user had
  stopped). Results skipped since the top would be position itself, whose own test they would absorb.
* r̂ is constant within a document: the strata absorb it, so it takes no part here.

`within_document_share` (the separability rule's measure) says how much of a feature varies within
documents; one below `discovery.min_within_document_share` is "not testable within documents".
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ..schema import CHUNK_ROWS, row_spans
from .click_ci import ScoreTest, _one_blas_thread, clustered_score_statistic, column_basis

DOCUMENT_CODE = "_document"        # click rows' (query, document) code column, beside the graph's nodes
NOT_TESTABLE = "not testable within documents"
RIDGE = 1e-6                       # relative ridge on the demeaned Hessian: a covariate constant in every stratum
MAX_NEWTON = 50
Z_95 = float(stats.norm.ppf(0.975))


# ---------------------------------------------------------------------------------------------
# How much of a feature varies within documents (the separability rule's measure)
# ---------------------------------------------------------------------------------------------
def within_document_share(pairs: np.ndarray, values: np.ndarray, categorical: bool,
                          chunk_rows: int = CHUNK_ROWS) -> float:
    """The share of a feature's variance that lies within (query, document) pairs (ANOVA's within-group sum of
    squares over the total; a categorical feature as its one-hot indicators, summed). 0: fixed per document;
    1: nothing to do with the document. A feature with no variance at all is 0 (there is nothing to learn).
    Sums are gathered `chunk_rows` rows at a time (same numbers below a chunk, float rounding above)."""
    n = len(pairs)
    if n == 0:
        return 0.0
    spans = row_spans(n, chunk_rows)
    n_pairs = int(max(int(np.max(pairs[s])) for s in spans)) + 1
    counts = sum(np.bincount(pairs[s], minlength=n_pairs) for s in spans)
    if categorical:          # Σ_j SS_j of the indicators, from the (pair, level) counts c_pj, never a one-hot matrix
        levels = np.sort(pd.unique(np.asarray(values)))        # codes in sorted order, as np.unique gives
        index = pd.Index(levels)
        k = len(levels)
        by_level = np.zeros(k, np.int64)
        cells: dict[int, int] | np.ndarray = np.zeros(n_pairs * k, np.int64) if n_pairs * k <= 4 * n + 1024 else {}
        for s in spans:
            codes = index.get_indexer(np.asarray(values[s]))
            by_level += np.bincount(codes, minlength=k)
            cell = np.asarray(pairs[s], np.int64) * k + codes
            if isinstance(cells, np.ndarray):
                cells += np.bincount(cell, minlength=n_pairs * k)
            else:                                      # too many (pair, level) cells for a dense count
                found, c = np.unique(cell, return_counts=True)
                for key, count in zip(found.tolist(), c.tolist(), strict=True):
                    cells[key] = cells.get(key, 0) + count
        if isinstance(cells, np.ndarray):
            cell_ids = np.flatnonzero(cells)
            c = cells[cell_ids]
        else:
            cell_ids = np.array(sorted(cells), np.int64)
            c = np.array([cells[i] for i in cell_ids.tolist()], np.int64)
        total = n - float(np.sum(np.sort(by_level).astype(np.float64) ** 2)) / n   # integers: exact in any order
        within = n - float(np.sum(c.astype(np.float64) ** 2 / counts[cell_ids // k]))
    else:
        lo = min(float(np.min(values[s])) for s in spans)
        hi = max(float(np.max(values[s])) for s in spans)
        if hi == lo:
            return 0.0
        mean = _chunked_sum(values, spans, lambda x: x) / n
        total = _chunked_sum(values, spans, lambda x: (x - mean) ** 2) if len(spans) > 1 \
            else float(np.sum((np.asarray(values, np.float64) - np.asarray(values, np.float64).mean()) ** 2))
        sums = sum(np.bincount(pairs[s], np.asarray(values[s], np.float64), minlength=n_pairs) for s in spans)
        means = sums / np.maximum(counts, 1)
        within = sum(float(np.sum((np.asarray(values[s], np.float64) - means[pairs[s]]) ** 2)) for s in spans)
    return within / total if total > 0.0 else 0.0


def _chunked_sum(values: np.ndarray, spans: Sequence[slice], term: Any) -> float:
    return float(sum(float(np.sum(term(np.asarray(values[s], np.float64)))) for s in spans))


# ---------------------------------------------------------------------------------------------
# The session's clicks above each row
# ---------------------------------------------------------------------------------------------
def browsing_covariates(clicks: np.ndarray, sessions: np.ndarray, relevance: np.ndarray | None) -> np.ndarray:
    """Per row, from the rows above it in its session (rows of a session in position order): clicks above 1 and
    2+ (indicators), result just above clicked, results skipped since the last click (0 without one; capped at 4),
    and the summed standardised r̂ of the results skipped since the last click or the top (when r̂ is given)."""
    order = np.argsort(sessions, kind="stable")
    c = np.asarray(clicks, np.float64)[order]
    s = np.asarray(sessions)[order]
    n = len(c)
    first = np.r_[True, s[1:] != s[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    cum = np.cumsum(c)
    above = cum - c - (cum[start] - c[start])                              # clicks before the row, in its session
    prev = np.r_[0.0, c[:-1]] * ~first
    idx = np.arange(n)
    last_click = np.maximum.accumulate(np.where(c > 0, idx, -1))          # latest click at or before the row
    last_above = np.r_[-1, last_click[:-1]]
    clicked_above = last_above >= start
    last_above = np.where(clicked_above, last_above, start - 1)           # none in the session: the top
    skipped = np.where(clicked_above, idx - last_above - 1, 0)            # since the last click (never the top:
    cols = [(above == 1), (above >= 2), prev, np.minimum(skipped, 4)]     # that would be position itself)
    if relevance is not None:
        r = np.asarray(relevance, np.float64)[order]
        r = (r - r.mean()) / max(r.std(), 1e-12)
        csum = np.cumsum(r)

        def at(j):
            return np.where(j >= 0, csum[np.maximum(j, 0)], 0.0)        # Σ r̂ of rows 0..j

        cols.append(at(idx - 1) - at(last_above))                       # Σ r̂ of the skipped rows above
    out = np.empty((n, len(cols)))
    out[order] = np.column_stack([np.asarray(v, np.float64) for v in cols])
    return out


# ---------------------------------------------------------------------------------------------
# The fixed-effect Poisson model
# ---------------------------------------------------------------------------------------------
@dataclass
class StratumFit:
    """A fitted fixed-effect model on the rows it kept: their strata, fitted means, demeaned design and Hessian."""

    keep: np.ndarray            # row indices the fit used (strata with a click, a non-click and two rows)
    strata: np.ndarray          # stratum code 0..S-1 of each kept row
    mu: np.ndarray
    A_dm: np.ndarray            # design, minus its μ-weighted stratum means
    hessian: np.ndarray         # A_dm' diag(μ) A_dm (+ ridge)
    beta: np.ndarray
    y: np.ndarray

    def residuals(self) -> np.ndarray:
        """y − μ̂, each divided by √(1 − h): h = μ̂ / Σ_stratum μ̂ is the row's leverage on its stratum's effect.
        A stratum of few rows fits its own residuals partly away; uncorrected, the sandwich then understates the
        score's variance by about 1/T for a stratum of T rows (measured: p-values too small on (document,
        position) strata). The HC2-style correction restores it."""
        total = np.bincount(self.strata, self.mu)[self.strata]
        return (self.y - self.mu) / np.sqrt(np.clip(1.0 - self.mu / total, 1e-6, None))


def _demean(X: np.ndarray, strata: np.ndarray, mu: np.ndarray, n_strata: int) -> np.ndarray:
    """X minus its μ-weighted mean within each stratum (the projection off the stratum effects)."""
    if X.shape[1] == 0:
        return X
    w = np.bincount(strata, mu, minlength=n_strata)
    means = np.column_stack([np.bincount(strata, mu * X[:, j], minlength=n_strata) for j in range(X.shape[1])])
    return X - (means / np.maximum(w, 1e-300)[:, None])[strata]


def fit_stratum_poisson(A: np.ndarray, y: np.ndarray, strata: np.ndarray) -> StratumFit:
    """E[y] = exp(α_stratum + Aβ) by Newton on β with each α profiled out (α_s = log Σ_s y − log Σ_s e^{Aβ});
    rows of strata that cannot inform it (no click, every row clicked, one row) are dropped first."""
    codes = np.unique(strata, return_inverse=True)[1].ravel()
    n_s = codes.max() + 1 if len(codes) else 0
    sy, cnt = np.bincount(codes, y, minlength=n_s), np.bincount(codes, minlength=n_s)
    useful = (sy > 0) & (sy < cnt) & (cnt >= 2)
    keep = np.flatnonzero(useful[codes])
    codes = np.unique(codes[keep], return_inverse=True)[1].ravel()
    A, y = A[keep], y[keep]
    n_s = int(codes.max()) + 1 if len(codes) else 0
    sy = np.bincount(codes, y, minlength=n_s)
    p = A.shape[1]
    beta = np.zeros(p)

    def state(b: np.ndarray) -> tuple[np.ndarray, float]:
        eta = A @ b if p else np.zeros(len(y))
        sm = np.bincount(codes, np.exp(eta), minlength=n_s)
        mu = np.exp(eta) * (sy / sm)[codes]
        return mu, float(y @ eta - sy @ np.log(sm))              # the profiled log-likelihood (+ a constant)

    mu, value = state(beta)
    for _ in range(MAX_NEWTON if p else 0):
        A_dm = _demean(A, codes, mu, n_s)
        H = (A_dm * mu[:, None]).T @ A_dm
        H[np.diag_indices(p)] += RIDGE * max(np.trace(H) / p, 1e-12)
        step = np.linalg.solve(H, A_dm.T @ (y - mu))
        t = 1.0
        while True:
            mu_c, value_c = state(beta + t * step)
            if value_c >= value - 1e-10 * abs(value) or t < 1e-6:
                break
            t *= 0.5
        beta, mu, gain, value = beta + t * step, mu_c, value_c - value, value_c
        if np.max(np.abs(t * step)) < 1e-8 or abs(gain) < 1e-10 * max(1.0, abs(value)):
            break
    A_dm = _demean(A, codes, mu, n_s)
    H = (A_dm * mu[:, None]).T @ A_dm
    if p:
        H[np.diag_indices(p)] += RIDGE * max(np.trace(H) / p, 1e-12)
    return StratumFit(keep, codes, mu, A_dm, H, beta, y)


def _clusters(sessions: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """(order sorting rows by session, or None when sorted; each session's first row in that order)."""
    if np.all(sessions[1:] >= sessions[:-1]):
        order, ids = None, sessions
    else:
        order = np.argsort(sessions, kind="stable")
        ids = sessions[order]
    return order, np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.zeros(0, np.int64)


# ---------------------------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------------------------
class WithinDocumentTest:
    """click ⫫ X | Z within (query, document) strata, as the module docstring says.

    `data` holds one column per node (categorical ones as codes), `click` the binary column's index, `clusters`
    each row's session (a session's rows in position order), `documents` each row's (query, document) code,
    `position` the position node's index (None: no position node), `relevance` r̂'s index (its only use: the
    skipped results' r̂ among the browsing covariates). Fits are cached per (strata, conditioning set).
    """

    def __init__(self, data: np.ndarray, click: int, clusters: np.ndarray, documents: np.ndarray,
                 categorical: Sequence[int] = (), position: int | None = None, relevance: int | None = None,
                 n_knots: int = 5):
        self.data = np.asarray(data, dtype=np.float64)
        self.y = self.data[:, click]
        if not np.isin(self.y, (0.0, 1.0)).all():
            raise ValueError("within-document click test: the click column must hold 0/1 values")
        self.click, self.position, self.relevance, self.n_knots = click, position, relevance, n_knots
        self.categorical = set(int(c) for c in categorical)
        self.sessions = np.asarray(clusters)
        self.documents = np.unique(np.asarray(documents), return_inverse=True)[1].ravel()
        if self.sessions.shape != self.y.shape or self.documents.shape != self.y.shape:
            raise ValueError("within-document click test: one session and one document per row")
        self.browsing = browsing_covariates(self.y, self.sessions,
                                            None if relevance is None else self.data[:, relevance])
        self._levels: dict[int, np.ndarray] = {}
        self._fits: dict[tuple[bool, tuple[int, ...]], StratumFit] = {}

    # --- design -------------------------------------------------------------------------------
    def _strata(self, by_position: bool) -> np.ndarray:
        if not by_position:
            return self.documents
        pos = np.unique(self.data[:, self.position], return_inverse=True)[1].ravel()
        return self.documents * (int(pos.max()) + 1) + pos

    def _basis(self, j: int) -> np.ndarray:
        if j not in self._levels:
            self._levels[j] = column_basis(self.data[:, j], j in self.categorical, self.n_knots)
        return self._levels[j]

    def _plan(self, x: int, Z: Sequence[int]) -> tuple[bool, tuple[int, ...]]:
        """(strata by position too?, the conditioning variables that enter as covariates)."""
        Z = [int(z) for z in Z if int(z) not in (self.relevance, self.click, x)]
        by_position = self.position is not None and self.position in Z and x != self.position
        return by_position, tuple(sorted(z for z in Z if not (by_position and z == self.position)))

    def _covariates(self, variables: Sequence[int]) -> np.ndarray:
        return np.hstack([self.browsing] + [self._basis(j) for j in variables])

    def _null(self, by_position: bool, variables: tuple[int, ...]) -> StratumFit:
        key = (by_position, variables)
        if key not in self._fits:
            self._fits[key] = fit_stratum_poisson(self._covariates(variables), self.y, self._strata(by_position))
        return self._fits[key]

    # --- tests --------------------------------------------------------------------------------
    def test(self, x: int, Z: Sequence[int] = ()) -> ScoreTest:
        """Score test of X's block (its main-effect basis) in the fixed-effect model on Z, robust over sessions."""
        x = int(x)
        if x in (self.click, self.relevance):
            raise ValueError(f"within-document click test: {x} is the click or r̂ (constant within a document)")
        by_position, variables = self._plan(x, Z)
        with _one_blas_thread():
            fit = self._null(by_position, variables)
            if len(fit.keep) == 0:
                return ScoreTest(1.0, 0.0, 0)
            n_s = int(fit.strata.max()) + 1
            B = _demean(self._basis(x)[fit.keep], fit.strata, fit.mu, n_s)
            if fit.A_dm.shape[1]:
                B = B - fit.A_dm @ np.linalg.solve(fit.hessian, (fit.A_dm * fit.mu[:, None]).T @ B)
            u = B * (fit.y - fit.mu)[:, None]
            order, starts = _clusters(self.sessions[fit.keep])
            return clustered_score_statistic(u, starts, order, B * fit.residuals()[:, None])

    def p_value(self, x: int, Z: Sequence[int] = ()) -> float:
        return self.test(x, Z).p_value

    def effect(self, x: int, Z: Sequence[int] = ()) -> dict[str, Any]:
        """X's within-document click-rate ratio(s) with 95% confidence intervals (cluster-robust over sessions):
        per level against the most frequent one (categorical, few-valued), or per standard deviation (numeric);
        and the rows, sessions and documents that carried it (strata where X varies, with a click and a non-click)."""
        x = int(x)
        by_position, variables = self._plan(x, Z)
        strata = self._strata(by_position)
        values = self.data[:, x]
        categorical = x in self.categorical or np.unique(values).size <= self.n_knots + 1
        if categorical:
            levels, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
            reference = int(np.argmax(counts))
            others = [j for j in range(levels.size) if j != reference]
            X = (inverse.ravel()[:, None] == np.asarray(others)[None, :]).astype(np.float64)
            names = [_level_name(levels[j]) for j in others]
            unit = f"against {_level_name(levels[reference])}"
        else:
            X = ((values - values.mean()) / max(values.std(), 1e-12))[:, None]
            names, unit = ["per sd"], "per standard deviation"
        covariates = self._covariates(variables)
        with _one_blas_thread():
            fit = fit_stratum_poisson(np.hstack([X, covariates]), self.y, strata)
        p_test = self.test(x, Z)
        carried = self._carried(fit, values)
        if len(fit.keep) == 0:
            return {"ratio": "click-rate ratio", "unit": unit, "levels": [], "p_value": p_test.p_value, **carried}
        g = fit.A_dm * fit.residuals()[:, None]
        order, starts = _clusters(self.sessions[fit.keep])
        sums = np.add.reduceat(g if order is None else g[order], starts, axis=0)
        bread = np.linalg.inv(fit.hessian)
        cov = bread @ (sums.T @ sums) @ bread
        out = []
        for j, name in enumerate(names):
            b, se = float(fit.beta[j]), float(np.sqrt(max(cov[j, j], 0.0)))
            out.append({"level": name, "ratio": float(np.exp(b)), "ci95": [float(np.exp(b - Z_95 * se)),
                                                                         float(np.exp(b + Z_95 * se))]})
        return {"ratio": "click-rate ratio", "unit": unit, "levels": out, "p_value": p_test.p_value,
                "statistic": p_test.statistic, "df": p_test.df,
                "strata": "(query, document, position)" if by_position else "(query, document)", **carried}

    def _carried(self, fit: StratumFit, values: np.ndarray) -> dict[str, int]:
        """Rows, sessions and documents of the strata where X varies (the only ones its effect is read from)."""
        if len(fit.keep) == 0:
            return {"rows": 0, "sessions": 0, "documents": 0}
        v = values[fit.keep]
        n_s = int(fit.strata.max()) + 1
        lo = np.full(n_s, np.inf)
        hi = np.full(n_s, -np.inf)
        np.minimum.at(lo, fit.strata, v)
        np.maximum.at(hi, fit.strata, v)
        rows = fit.keep[(hi > lo)[fit.strata]]
        return {"rows": int(len(rows)), "sessions": int(np.unique(self.sessions[rows]).size),
                "documents": int(np.unique(self.documents[rows]).size)}


def _level_name(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
