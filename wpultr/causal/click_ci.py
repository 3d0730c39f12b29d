"""Conditional independence of the binary click and one candidate parent, on every shown result (issue 14).

H0: click ⫫ X | Z. The click is modelled by a flexible logistic regression, logit p(c | Z) = f(Z):
natural cubic splines of each numeric column (knots at quantiles), one-hot levels of each categorical
column (and of a numeric column with few distinct values: position), and each of those columns times
the relevance score r̂ when r̂ is in the model (BAL's click model multiplies a relevance term by a page
term, so on the logit scale a page feature's effect varies with r̂). X enters as its own block, with its
r̂ interactions; categorical codes are never used as numbers.

The test is Rao's score test of adding X's block to the null model (fitted by Newton–IRLS), with the
score's variance estimated by the cluster-robust sandwich over sessions:

    u_i = B̃_i (y_i − μ̂_i),  B̃ = B − A (A'WA)⁻¹ A'WB,  g_s = Σ_{i ∈ session s} u_i,
    T = (Σ_s g_s)' (Σ_s g_s g_s')⁻¹ (Σ_s g_s)  ~  χ²_q under H0 (q = rank of the middle matrix).

Why this one: (1) the score test needs only the null model, which every candidate tested given the same
Z shares (PC asks many such tests), so one test costs one projection, and 10^5 rows take well under a
second; (2) the results of one page are dependent (shared user, one permutation of positions), pages
of different sessions are not, so sessions are the independent units: the sandwich over session sums
is the robust score test of Kent (1982) and Boos (1992), valid as the number of sessions grows (10^4
here) whatever the within-session dependence; the projection B̃ uses the Hessian, which is what the
nuisance estimate's first-order effect on the score needs even when the variance model is wrong. A
session bootstrap would cost hundreds of refits per test for the same guarantee.
Caveat, shared by every regression-based CI test: the p-value is calibrated as far as the null model
captures E[c | Z]; tests/test_click_ci.py checks the calibration on a world with within-session
correlated clicks and features.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy import stats
from scipy.special import expit
from threadpoolctl import ThreadpoolController

RIDGE = 1e-3            # absolute ridge on the non-intercept coefficients: bounds them under separation
MAX_NEWTON = 60
_EIG_FLOOR = 1e-10      # eigenvalues of the score variance below this × the largest count as zero
_CONTROLLER: ThreadpoolController | None = None


def _one_blas_thread():
    """A context with BLAS on one thread (the controller, slow to build, is built once per process)."""
    global _CONTROLLER
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1, user_api="blas")


# ---------------------------------------------------------------------------------------------
# Bases
# ---------------------------------------------------------------------------------------------
def natural_spline_basis(x: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Natural cubic spline basis (ESL Eq. 5.4–5.5): x and K − 2 truncated-cube differences, linear beyond the end
    knots."""
    k = np.asarray(knots, dtype=np.float64)
    span = k[-1] - k[0]
    z, k = (x - k[0]) / span, (k - k[0]) / span          # unit scale keeps the cubes well conditioned

    def d(j: int) -> np.ndarray:
        return (np.clip(z - k[j], 0, None) ** 3 - np.clip(z - k[-1], 0, None) ** 3) / (k[-1] - k[j])

    last = d(len(k) - 2)
    return np.column_stack([z] + [d(j) - last for j in range(len(k) - 2)])


def level_basis(x: np.ndarray) -> np.ndarray:
    """One indicator per level but the most frequent (the reference, absorbed by the intercept)."""
    levels, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    keep = [j for j in range(levels.size) if j != int(np.argmax(counts))]
    return (inverse.ravel()[:, None] == np.asarray(keep)[None, :]).astype(np.float64)


def column_basis(x: np.ndarray, categorical: bool, n_knots: int) -> np.ndarray:
    """Main-effect columns of one variable, each standardised (the score test is invariant to that)."""
    distinct = np.unique(x)
    if categorical or distinct.size <= n_knots + 1:
        b = level_basis(x)
    else:
        knots = np.unique(np.quantile(x, np.linspace(0.0, 1.0, n_knots)))
        b = natural_spline_basis(x, knots) if knots.size >= 3 else x[:, None].astype(np.float64)
    sd = b.std(axis=0)
    keep = sd > 1e-12
    return (b[:, keep] - b[:, keep].mean(axis=0)) / sd[keep]


# ---------------------------------------------------------------------------------------------
# Logistic regression by Newton–IRLS
# ---------------------------------------------------------------------------------------------
@dataclass
class LogisticFit:
    """A fitted logistic model: coefficients, fitted probabilities, log-likelihood, Cholesky of A'WA + ridge."""

    beta: np.ndarray
    mu: np.ndarray
    loglik: float
    chol: tuple[np.ndarray, bool]


def _loglik(y: np.ndarray, eta: np.ndarray) -> float:
    return float(np.sum(y * eta - np.logaddexp(0.0, eta)))


def fit_logistic(A: np.ndarray, y: np.ndarray, ridge: float = RIDGE, max_iter: int = MAX_NEWTON,
                 tol: float = 1e-9, start: np.ndarray | None = None) -> LogisticFit:
    """Maximise Σ log-likelihood − ridge/2 ‖β₁:‖² by Newton steps with step halving; A's first column is the intercept.

    `start` (optional) is where Newton begins, e.g. a nested model's fit padded with zeros: the same maximum
    (the objective is strictly concave), in fewer steps.
    """
    n, p = A.shape
    penalty = np.full(p, ridge)
    penalty[0] = 0.0
    if start is not None:
        beta = np.array(start, dtype=np.float64, copy=True)
    else:
        beta = np.zeros(p)
        rate = np.clip(y.mean(), 1e-6, 1 - 1e-6)
        beta[0] = np.log(rate / (1 - rate))
    eta = A @ beta
    objective = _loglik(y, eta)
    for _ in range(max_iter):
        mu = expit(eta)
        w = mu * (1.0 - mu)
        grad = A.T @ (y - mu) - penalty * beta
        H = (A * w[:, None]).T @ A + np.diag(penalty)
        H[np.diag_indices(p)] += 1e-12 * (np.trace(H) / p)
        chol = scipy.linalg.cho_factor(H, lower=True, check_finite=False)
        step = scipy.linalg.cho_solve(chol, grad, check_finite=False)
        t = 1.0
        while True:
            candidate = beta + t * step
            eta_c = A @ candidate
            value = _loglik(y, eta_c) - 0.5 * float(np.sum(penalty * candidate ** 2))
            if value >= objective - 1e-12 * abs(objective) or t < 1e-6:
                break
            t *= 0.5
        gain = value - objective
        beta, eta, objective = candidate, eta_c, value
        if np.max(np.abs(t * step)) < tol or abs(gain) < tol * max(1.0, abs(objective)) * 1e-3:
            break
    mu = expit(eta)
    w = mu * (1.0 - mu)
    H = (A * w[:, None]).T @ A + np.diag(penalty)
    H[np.diag_indices(p)] += 1e-12 * (np.trace(H) / p)
    return LogisticFit(beta, mu, _loglik(y, eta), scipy.linalg.cho_factor(H, lower=True, check_finite=False))


# ---------------------------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScoreTest:
    """Result of one test: p-value, robust score statistic and its degrees of freedom."""

    p_value: float
    statistic: float
    df: int


def robust_score_test(A: np.ndarray, B: np.ndarray, y: np.ndarray, null: LogisticFit,
                      cluster_starts: np.ndarray, order: np.ndarray | None) -> ScoreTest:
    """Score test of adding block B to the null model on A, variance summed over clusters (module docstring)."""
    if B.shape[1] == 0:
        return ScoreTest(1.0, 0.0, 0)
    w = null.mu * (1.0 - null.mu)
    AWB = (A * w[:, None]).T @ B
    B_tilde = B - A @ scipy.linalg.cho_solve(null.chol, AWB, check_finite=False)
    return clustered_score_statistic(B_tilde * (y - null.mu)[:, None], cluster_starts, order)


def clustered_score_statistic(u: np.ndarray, cluster_starts: np.ndarray, order: np.ndarray | None,
                              u_variance: np.ndarray | None = None) -> ScoreTest:
    """T = U'V⁺U of per-row score contributions `u`, V summed over clusters (rows in `order` start at
    `cluster_starts`), χ² on V's rank (the module docstring's robust score test, after the projection);
    `u_variance`, when given, are the contributions V is summed from (leverage-corrected ones, say)."""
    if u.shape[1] == 0 or len(u) == 0:
        return ScoreTest(1.0, 0.0, 0)
    v = u if u_variance is None else u_variance
    if order is not None:
        u, v = u[order], v[order]
    U = u.sum(axis=0)
    g = np.add.reduceat(v, cluster_starts, axis=0)
    V = g.T @ g
    lam, vec = np.linalg.eigh(V)
    keep = lam > _EIG_FLOOR * max(lam.max(), 1e-300)
    if not keep.any():
        return ScoreTest(1.0, 0.0, 0)
    proj = vec[:, keep].T @ U
    statistic = float(np.sum(proj ** 2 / lam[keep]))
    df = int(keep.sum())
    return ScoreTest(float(stats.chi2.sf(statistic, df)), statistic, df)


class ClickCITest:
    """click ⫫ X | Z on rows grouped by session: flexible logistic models of the click, robust score test.

    `data` holds one column per node (categorical ones as codes), `click` is the binary column's
    index, `clusters` the session of each row, `relevance` the index of r̂ (its linear term multiplies
    every other variable's basis) or None. Bases and null fits are cached per conditioning set.
    """

    def __init__(self, data: np.ndarray, click: int, clusters: np.ndarray, categorical: Sequence[int] = (),
                 relevance: int | None = None, n_knots: int = 5):
        self.data = np.asarray(data, dtype=np.float64)
        self.y = self.data[:, click]
        if not np.isin(self.y, (0.0, 1.0)).all():
            raise ValueError("click CI test: the click column must hold 0/1 values")
        self.click, self.relevance, self.n_knots = click, relevance, n_knots
        self.categorical = set(int(c) for c in categorical)
        clusters = np.asarray(clusters)
        if clusters.shape != self.y.shape:
            raise ValueError(f"click CI test: {clusters.shape[0]} cluster ids for {self.y.shape[0]} rows")
        if np.all(clusters[1:] >= clusters[:-1]):
            self.order = None
            sorted_ids = clusters
        else:
            self.order = np.argsort(clusters, kind="stable")
            sorted_ids = clusters[self.order]
        self.cluster_starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
        self.n_rows, self.n_clusters = int(self.y.size), int(self.cluster_starts.size)
        self._main: dict[int, np.ndarray] = {}
        self._r: np.ndarray | None = None
        self._fits: dict[tuple[int, ...], tuple[np.ndarray, LogisticFit]] = {}

    # --- design -------------------------------------------------------------------------------
    def _main_effect(self, j: int) -> np.ndarray:
        if j not in self._main:
            self._main[j] = column_basis(self.data[:, j], j in self.categorical, self.n_knots)
        return self._main[j]

    def _pieces(self, variables: Sequence[int]) -> list[tuple[str, int]]:
        """Named column blocks of the model on `variables`: main effects, and r̂ × each other variable."""
        pieces = [("main", j) for j in sorted(variables)]
        if self.relevance is not None and self.relevance in variables:
            pieces += [("by_relevance", j) for j in sorted(variables) if j != self.relevance]
        return pieces

    def _columns(self, piece: tuple[str, int]) -> np.ndarray:
        kind, j = piece
        main = self._main_effect(j)
        if kind == "main":
            return main
        if self._r is None:
            r = self.data[:, self.relevance]
            self._r = (r - r.mean()) / max(r.std(), 1e-12)
        return main * self._r[:, None]

    def design(self, variables: Sequence[int]) -> np.ndarray:
        cols = [np.ones((self.n_rows, 1))] + [self._columns(p) for p in self._pieces(variables)]
        return np.hstack(cols)

    def _model(self, variables: Sequence[int]) -> tuple[np.ndarray, LogisticFit]:
        """Design and fit of the click model on `variables`, cached: a test's null, or an effect's full model."""
        key = tuple(sorted(int(v) for v in variables))
        if key not in self._fits:
            A = self.design(key)
            self._fits[key] = (A, fit_logistic(A, self.y, start=self._start(key)))
        return self._fits[key]

    def _start(self, key: tuple[int, ...]) -> np.ndarray | None:
        """Newton's start for the model on `key`: the largest cached nested model's coefficients, zeros for the
        pieces it lacks (None when no nested model is cached)."""
        nested = [k for k in self._fits if set(k) < set(key)]
        if not nested:
            return None
        sub = max(nested, key=len)
        placed = {}
        offset = 1
        for piece in self._pieces(sub):
            width = self._main_effect(piece[1]).shape[1]       # an r̂ interaction is as wide as its main effect
            placed[piece] = self._fits[sub][1].beta[offset: offset + width]
            offset += width
        parts = [self._fits[sub][1].beta[:1]]
        for piece in self._pieces(key):
            parts.append(placed.get(piece, np.zeros(self._main_effect(piece[1]).shape[1])))
        return np.concatenate(parts)

    def _block(self, x: int, Z: Sequence[int]) -> np.ndarray:
        have = set(self._pieces(Z))
        new = [p for p in self._pieces(list(Z) + [x]) if p not in have]
        return np.hstack([self._columns(p) for p in new]) if new else np.zeros((self.n_rows, 0))

    # --- tests --------------------------------------------------------------------------------
    def _check(self, x: int, Z: Sequence[int]) -> list[int]:
        Z = [int(z) for z in Z]
        if x == self.click or self.click in Z or x in Z:
            raise ValueError(f"click CI test: candidate {x} and conditioning set {Z} must exclude the click "
                             f"column {self.click} and each other")
        return Z

    def test(self, x: int, Z: Sequence[int] = ()) -> ScoreTest:
        """Robust score test of click ⫫ data[:, x] | data[:, Z].

        BLAS runs on one thread: the matrices are thin (rows × tens of columns), and threaded BLAS
        next to busy Dask workers on the same cores ran ~10× slower in measurement.
        """
        Z = self._check(int(x), Z)
        with _one_blas_thread():
            A, null = self._model(Z)
            return robust_score_test(A, self._block(int(x), Z), self.y, null, self.cluster_starts, self.order)

    def p_value(self, x: int, Z: Sequence[int] = ()) -> float:
        return self.test(x, Z).p_value

    def effect(self, x: int, Z: Sequence[int] = ()) -> dict[str, float | int]:
        """Effect size of x on the click given Z: log-likelihood gain per row and mean |Δ click probability|."""
        Z = self._check(int(x), Z)
        result = self.test(int(x), Z)
        with _one_blas_thread():
            _, null = self._model(Z)
            _, full = self._model(list(Z) + [int(x)])   # the model on Z ∪ {x}: cached, shared by x's siblings
        return {"p_value": result.p_value, "statistic": result.statistic, "df": result.df,
                "loglik_gain_per_row": (full.loglik - null.loglik) / self.n_rows,
                "click_rate_change": float(np.mean(np.abs(full.mu - null.mu))),
                "rows": self.n_rows, "sessions": self.n_clusters}
