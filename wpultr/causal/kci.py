"""causal-learn's KCI p-values with every kernel computed once per data set, in factored form.

KCI (Zhang et al. 2011, the test BAL §3.1 uses) as causal-learn computes it, for x ⫫ y | S on n rows:

* S empty (HSIC): centred Gaussian kernels Kxc, Kyc of the z-scored columns; V = Σ Kxc∘Kyc and a
  gamma null with mean tr Kxc · tr Kyc / n and variance 2 Σ Kxc² Σ Kyc² / n².
* S given: Rz = ε (Kz + εI)⁺ (Kz the centred kernel of S, ε = 1e-3); KxR = Rz Kx Rz with Kx the centred
  kernel of [x, S/2], KyR = Rz Ky Rz; V = Σ KxR∘KyR; the null's moments come from the eigenpairs of
  KxR and KyR above 1e-5 × the largest (uu = their row-wise products): mean tr(uu uu'), variance
  2 tr((uu uu')²).

causal-learn redoes all of it per test: three n×n kernels, a pseudo-inverse (an n×n SVD), four n×n
products and two full n×n eigendecompositions. PC asks many tests that share S, x or y, and Gaussian
kernels of a few columns have low numerical rank, so here

1. each side's kernel is factored once, K = L L' + E, by pivoted Cholesky stopped when tr E ≤ 1e-13·n
   (below LAPACK's own backward error on these matrices, ~n·ε_mach·‖K‖; a side needing rank > n/2
   is kept dense). Centring is H L; Rz is applied through the Cholesky factor of Kz + εI, computed once
   per S (Kz + εI is SPD, so ⁺ = ⁻¹); G = Rz H L gives KR = G G', its eigenpairs from the thin SVD of G
   (λ = σ²) and V = Σ KxR∘KyR = ‖Gx' Gy‖²_F;
2. tr(uu uu') = Σ_t |Vx_t|² |Vy_t|² and tr((uu uu')²) = Σ (Ax∘Ay)² with Ax = Vx Vx' (row blocks), or
   causal-learn's uu'uu when that is cheaper — never the n × kx·ky matrix uu with an n×n product;
3. factors, kept eigenvectors and Cholesky factors live in a per-process store bounded in bytes
   (`cache_mib`), keyed by a digest of the data, so a Dask worker reuses them across its tasks.

Every formula, width rule and constant is causal-learn's (its GaussianKernel and Kernel classes are
called), so the p-values equal causal-learn's KCI up to rounding; the test suite checks |Δp| ≤ 1e-9
on every test of PC runs. Options the shortcut does not cover (a non-Gaussian kernel, median or
manual widths, the spectral null, GP-fitted widths) fall back to causal-learn's KCI itself.
"""
from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg
from causallearn.utils.cit import KCI, CIT_Base
from causallearn.utils.KCI.GaussianKernel import GaussianKernel
from causallearn.utils.KCI.Kernel import Kernel
from scipy import stats
from scipy.sparse.linalg import eigsh

EPSILON = 1e-3          # causal-learn KCI_CInd.epsilon_x / epsilon_y (Kernel.center_kernel_matrix_regression)
EIG_THRESHOLD = 1e-5    # causal-learn KCI_CInd.thresh: eigenpairs kept above thresh × the largest eigenvalue
RESIDUAL_PER_ROW = 1e-13  # pivoted Cholesky stops when the residual kernel's trace is below this × n
DEFAULT_CACHE_MIB = 1024
PIVOT_SHARE = 0.5         # a block's pivots stay within this share of the largest residual (greedy: 1)
_BLOCK_ROWS = 512


def supports(options: dict[str, Any]) -> bool:
    """Whether the shortcut reproduces causal-learn's KCI for these options (else causal-learn runs)."""
    return (all(options.get(k, "Gaussian") == "Gaussian" for k in ("kernelX", "kernelY", "kernelZ"))
            and options.get("est_width", "empirical") == "empirical" and options.get("approx", True)
            and not options.get("use_gp", False))


# ---------------------------------------------------------------------------------------------
# A per-process store bounded in bytes (a Dask worker keeps its factors between tasks)
# ---------------------------------------------------------------------------------------------
class _Store:
    """Least-recently-used values with a byte budget; values report their size through `nbytes`."""

    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self.items: OrderedDict[tuple, Any] = OrderedDict()
        self.sizes: dict[tuple, int] = {}
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple, make: Callable[[], Any]) -> Any:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                self.hits += 1
                return self.items[key]
            self.misses += 1
        value = make()                       # outside the lock: a second thread may compute it too
        self.put(key, value)
        return value

    def put(self, key: tuple, value: Any) -> None:
        with self.lock:
            self.sizes[key] = int(getattr(value, "nbytes", 0))
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > 1 and sum(self.sizes.values()) > self.budget:
                old, _ = self.items.popitem(last=False)
                del self.sizes[old]

    def clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.sizes.clear()


_STORE = _Store(DEFAULT_CACHE_MIB << 20)


def clear_store() -> None:
    """Drop every factor this process holds (tests and benchmarks that want a cold start)."""
    _STORE.clear()
    _STORE.hits = _STORE.misses = 0


def store_stats() -> dict[str, int]:
    return {"entries": len(_STORE.items), "bytes": sum(_STORE.sizes.values()), "hits": _STORE.hits,
            "misses": _STORE.misses}


# ---------------------------------------------------------------------------------------------
# Linear algebra
# ---------------------------------------------------------------------------------------------
@dataclass
class _Side:
    """One side of a test: a PSD matrix M = F F' (F: n × r, factored) or M itself (dense, F None).

    Unconditional tests: M = Kc with `trace` and `sumsq` (Σ M²). Conditional: M = RKR with V, its
    eigenvectors above the threshold scaled by √λ (causal-learn's vx.dot(diag(sqrt(wx)))).
    """

    F: np.ndarray | None = None
    M: np.ndarray | None = None
    V: np.ndarray | None = None
    trace: float = 0.0
    sumsq: float = 0.0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.F, self.M, self.V) if a is not None)


def _inner(a: _Side, b: _Side) -> float:
    """Σ Ma ∘ Mb (the KCI / HSIC statistic) from whichever forms the two sides have."""
    if a.F is not None and b.F is not None:
        return float(np.sum(a.F.T.dot(b.F) ** 2))                     # ‖Fa' Fb‖²_F
    if a.F is not None or b.F is not None:
        f, dense = (a.F, b.M) if a.F is not None else (b.F, a.M)
        return float(np.sum(dense.dot(f) * f))                        # tr(F' M F)
    return float(np.sum(a.M * b.M))


def _zscore(x: np.ndarray) -> np.ndarray:
    """causal-learn's standardisation: ddof 1, a constant column becomes 0."""
    z = stats.zscore(x, ddof=1, axis=0)
    z[np.isnan(z)] = 0.0
    return z


def pivoted_cholesky(x: np.ndarray, kernel: GaussianKernel, tol: float, max_rank: int,
                     block: int = 32) -> np.ndarray | None:
    """L (n × r) with K = L L' + E, E ⪰ 0, tr E ≤ tol, for K = kernel(x); None if that needs rank > max_rank.

    Greedy on the residual diagonal, a block at a time: the `block` rows with the largest residual
    diagonal are the candidates, their kernel columns come from causal-learn's kernel and are brought up
    to date by one product with L (BLAS 3), then pivots are taken among them greedily while they stay
    within PIVOT_SHARE of the largest residual (a small pivot would amplify rounding). A candidate whose
    residual falls to tol / n or below is skipped; once every residual is there, tr E ≤ tol. The
    residual diagonal is recomputed at the end, and a factorization that broke down returns None.
    """
    n = x.shape[0]
    floor = tol / n
    d = np.ones(n)                          # a Gaussian kernel's diagonal is exp(0) = 1
    L = np.zeros((n, min(max(max_rank, 1), 4 * block)))
    k = 0
    while d.sum() > tol:
        if k >= max_rank:
            return None
        b = min(block, max_rank - k, n)
        cand = np.argpartition(-d, b - 1)[:b] if b < n else np.arange(n)
        cand = cand[d[cand] > floor]
        if L.shape[1] < k + len(cand):
            L = np.hstack([L, np.zeros((n, min(max(L.shape[1], len(cand)), max_rank - L.shape[1])))])
        C = kernel.kernel(x, x[cand])                          # K[:, cand]
        if k:
            C -= L[:, :k].dot(L[cand, :k].T)                   # residual columns
        dc = d[cand].copy()
        for _ in range(len(cand)):
            j = int(np.argmax(dc))
            if dc[j] <= floor or k >= max_rank or dc[j] < PIVOT_SHARE * d.max():
                break                        # a pivot far below the largest residual would amplify rounding
            col = C[:, j] / np.sqrt(dc[j])
            L[:, k] = col
            k += 1
            C -= np.outer(col, col[cand])
            dc -= col[cand] ** 2
            dc[j] = 0.0
            d -= col * col
            d[cand[j]] = 0.0
        np.maximum(d, 0.0, out=d)
    L = L[:, :k].copy()
    residual = 1.0 - np.einsum("ij,ij->i", L, L)       # recomputed, not tracked: a breakdown shows here
    if residual.sum() > 10 * tol or residual.min() < -1e-10:
        return None
    return L


def _thin_eigenpairs(G: np.ndarray) -> np.ndarray:
    """Eigenpairs of G G' above the threshold, scaled by √λ: G W for the eigenpairs (λ, W) of G'G kept.

    G w = σ u, so G W is U σ (the scaled eigenvectors causal-learn keeps) without an n-row SVD; λ from
    the r × r Gram matrix carries absolute error ~ε_mach·λmax, 1e-11 relative at the 1e-5 cut.
    """
    if G.shape[1] == 0:
        return np.zeros((G.shape[0], 0))
    lam, W = np.linalg.eigh(G.T.dot(G))
    keep = lam > np.max(lam) * EIG_THRESHOLD
    return G.dot(W[:, keep][:, ::-1])


def kept_eigenpairs(K: np.ndarray, thresh: float = EIG_THRESHOLD) -> np.ndarray:
    """Eigenvectors of (K + K')/2 scaled by √λ for λ > thresh × λmax (causal-learn's get_uuprod), dense.

    Lanczos gives a lower bound on λmax, so the syevr value range (bound × thresh, ∞) holds every pair
    causal-learn keeps; the exact cut is then applied with the largest eigenvalue syevr returns.
    """
    sym = 0.5 * (K + K.T)
    n = sym.shape[0]
    bound = 0.0
    if n > 64:
        bound = float(eigsh(sym, k=1, which="LA", v0=np.ones(n), tol=1e-6, return_eigenvectors=False)[0])
    if bound > 0:
        w, v = scipy.linalg.eigh(sym, subset_by_value=(bound * thresh * (1.0 - 1e-6), np.inf), driver="evr",
                                 check_finite=False)
    else:
        w, v = np.linalg.eigh(sym)
    keep = w > np.max(w) * thresh
    return v[:, keep] * np.sqrt(w[keep])[None, :]


def _null_moments(a: _Side, b: _Side) -> tuple[float, float]:
    """tr(uu uu') and 2 tr((uu uu')²) for uu's columns Vx_i ∘ Vy_j (causal-learn's get_uuprod + get_kappa)."""
    n, kx, ky = a.V.shape[0], a.V.shape[1], b.V.shape[1]
    if n * (kx * ky) ** 2 <= n * n * (kx + ky):               # causal-learn's way: uu'uu, small here
        uu = (a.V[:, :, None] * b.V[:, None, :]).reshape(n, kx * ky)
        prod = uu.T.dot(uu)
        return float(np.trace(prod)), float(2 * np.trace(prod.dot(prod)))
    mean = float(np.sum(np.sum(a.V ** 2, axis=1) * np.sum(b.V ** 2, axis=1)))
    square = 0.0                                              # Σ (Ax ∘ Ay)², by row blocks
    for start in range(0, n, _BLOCK_ROWS):
        rows = slice(start, start + _BLOCK_ROWS)
        square += float(np.sum((a.V[rows].dot(a.V.T) * b.V[rows].dot(b.V.T)) ** 2))
    return mean, 2 * square


# ---------------------------------------------------------------------------------------------
# The CI test
# ---------------------------------------------------------------------------------------------
class CachedKCI(CIT_Base):
    """causal-learn's KCI (Gaussian kernels, empirical widths, gamma null) sharing its kernels across tests.

    A causal-learn CI test (registered as `wpultr_kci`): `pc(data, alpha, "wpultr_kci")` runs PC with it,
    and X, Y may be column lists as for causal-learn's KCI. `pvalue(xs, ys, zs)` is the test itself.
    """

    registry_name = "wpultr_kci"

    def __init__(self, data: np.ndarray, cache_mib: int = DEFAULT_CACHE_MIB, **kwargs: Any):
        super().__init__(data, cache_path=kwargs.pop("cache_path", None))
        options = {k: v for k, v in kwargs.items() if k in ("kernelX", "kernelY", "kernelZ", "approx", "est_width",
                                                             "use_gp", "polyd", "null_ss")}
        # method "kci": causal-learn's key formatting then accepts column lists for X and Y
        self.check_cache_method_consistent("kci", hashlib.md5(json.dumps(
            {**options, "engine": "wpultr_kci"}, sort_keys=True).encode()).hexdigest())
        self.assert_input_data_is_valid()
        self.fallback = None if supports(options) else KCI(data, **options)
        _STORE.budget = int(cache_mib) << 20
        self.digest = hashlib.sha1(np.ascontiguousarray(data).tobytes()).hexdigest()
        self.n = data.shape[0]

    def __call__(self, X, Y, condition_set=None) -> float:
        Xs, Ys, S, key = self.get_formatted_XYZ_and_cachekey(X, Y, condition_set)
        if key not in self.pvalue_cache:
            self.pvalue_cache[key] = self.pvalue(Xs, Ys, S)
        return self.pvalue_cache[key]

    def pvalue(self, xs: Sequence[int], ys: Sequence[int], zs: Sequence[int] = ()) -> float:
        """p-value of data[:, xs] ⫫ data[:, ys] | data[:, zs], as causal-learn's KCI computes it."""
        xs, ys, zs = tuple(xs), tuple(ys), tuple(zs)
        if self.fallback is not None:
            return float(self.fallback(list(xs), list(ys), list(zs)))
        n = self.n
        if not zs:                                            # KCI_UInd.compute_pvalue, approx=True
            a, b = self._centred(xs), self._centred(ys)
            stat = _inner(a, b)
            mean = a.trace * b.trace / n
            var = 2 * a.sumsq * b.sumsq / n / n
        else:                                                 # KCI_CInd.compute_pvalue, approx=True
            a, b = self._regressed("x", xs, zs), self._regressed("y", ys, zs)
            stat = _inner(a, b)
            mean, var = _null_moments(a, b)
        k_appr, theta_appr = mean ** 2 / var, var / mean
        return float(1 - stats.gamma.cdf(stat, k_appr, 0, theta_appr))

    # -- shared pieces ----------------------------------------------------------------------------
    def _key(self, *parts: Any) -> tuple:
        return (self.digest, *parts)

    def _factor(self, x: np.ndarray, kernel: GaussianKernel) -> np.ndarray | None:
        """Centred factor H L of kernel(x) (K = L L' + E, tr E ≤ 1e-13 n), None when it is not low-rank."""
        L = pivoted_cholesky(x, kernel, RESIDUAL_PER_ROW * self.n, self.n // 2)
        return None if L is None else L - L.mean(axis=0, keepdims=True)

    def _centred(self, cols: tuple[int, ...]) -> _Side:
        def make() -> _Side:
            x = self.data[:, list(cols)]
            kernel = GaussianKernel()
            kernel.set_width_empirical_hsic(x)
            z = _zscore(x)
            F = self._factor(z, kernel)
            if F is not None:
                gram = F.T.dot(F)
                return _Side(F=F, trace=float(np.trace(gram)), sumsq=float(np.sum(gram ** 2)))
            K = Kernel.center_kernel_matrix(kernel.kernel(z))
            return _Side(M=K, trace=float(np.trace(K)), sumsq=float(np.sum(K ** 2)))
        return _STORE.get(self._key("hsic", cols), make)

    def _width_kernel(self, zs: tuple[int, ...]) -> GaussianKernel:
        kernel = GaussianKernel()
        kernel.set_width_empirical_kci(self.data[:, list(zs)])      # depends on n and |S| only
        return kernel

    def _kz_cholesky(self, zs: tuple[int, ...]) -> np.ndarray:
        """Cholesky factor of Kz + εI (lower), so that Rz B = ε (Kz + εI)⁻¹ B is two triangular solves."""
        def make() -> np.ndarray:
            z = _zscore(self.data[:, list(zs)])
            Kz = Kernel.center_kernel_matrix(self._width_kernel(zs).kernel(z))
            Kz[np.diag_indices_from(Kz)] += EPSILON
            return scipy.linalg.cholesky(Kz, lower=True, overwrite_a=True, check_finite=False)
        return _STORE.get(self._key("kz", zs), make)

    def _apply_rz(self, zs: tuple[int, ...], B: np.ndarray) -> np.ndarray:
        return EPSILON * scipy.linalg.cho_solve((self._kz_cholesky(zs), True), B, check_finite=False)

    def _regressed(self, role: str, cols: tuple[int, ...], zs: tuple[int, ...]) -> _Side:
        def make() -> _Side:
            x = _zscore(self.data[:, list(cols)])
            if role == "x":                                   # KCI_CInd.kernel_matrix: x joined by S / 2
                x = np.concatenate((x, 0.5 * _zscore(self.data[:, list(zs)])), axis=1)
            kernel = self._width_kernel(zs)
            F = self._factor(x, kernel)
            if F is not None:
                G = self._apply_rz(zs, F)                      # RKR = G G'
                return _Side(F=G, V=_thin_eigenpairs(G))
            K = Kernel.center_kernel_matrix(kernel.kernel(x))
            KR = self._apply_rz(zs, self._apply_rz(zs, K).T)   # Rz K Rz (Rz, K symmetric)
            return _Side(M=KR, V=kept_eigenpairs(KR))
        return _STORE.get(self._key(role, cols, zs), make)
