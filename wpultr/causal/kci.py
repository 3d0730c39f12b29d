"""causal-learn's KCI p-values with every kernel computed once per data set, not once per test.

KCI (Zhang et al. 2011, the test BAL §3.1 uses) as causal-learn computes it, for x ⫫ y | S on n rows:

* S empty (HSIC): centred Gaussian kernels Kxc, Kyc of the z-scored columns; V = Σ Kxc∘Kyc and a
  gamma null with mean tr Kxc · tr Kyc / n and variance 2 Σ Kxc² Σ Kyc² / n².
* S given: Rz = ε (Kz + εI)⁺ (Kz the centred kernel of S, ε = 1e-3); KxR = Rz Kx Rz with Kx the kernel
  of [x, S/2], KyR = Rz Ky Rz; V = Σ KxR∘KyR; the null's moments come from the eigenpairs of KxR and
  KyR above 1e-5 × the largest (uu = their row-wise products): mean tr(uu uu'), variance 2 tr((uu uu')²).

causal-learn redoes all of it per test: two n×n kernels, a pseudo-inverse (an n×n SVD), four n×n
products and two full eigendecompositions. PC asks many tests that share S, x or y, so here

1. each kernel, Rz (per S), KxR / KyR and their kept eigenpairs (per role, columns and S) are computed
   once and kept in a per-process store bounded in bytes (`cache_mib`), keyed by a digest of the data;
2. only the kept eigenpairs are computed (LAPACK syevr over the value range above 1e-5 × λmax, with
   λmax bounded from below by Lanczos), instead of all n;
3. tr(uu uu') and tr((uu uu')²) use uu uu' = Ax∘Ay with Ax = Vx Vx' (O(n²) per test) instead of
   forming uu (n × kx·ky columns, up to n³ per test); when kx·ky ≤ n, uu'uu is formed as causal-learn does.

Every formula, width rule and constant is causal-learn's own (its GaussianKernel and Kernel classes
are called), so the p-values equal causal-learn's KCI up to floating-point rounding (the test suite
checks 1e-9 on every test of a PC run). Options the shortcut does not cover (a non-Gaussian kernel,
median or manual widths, the spectral null, GP-fitted widths) fall back to causal-learn's KCI itself.
"""
from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import scipy.linalg
from causallearn.utils.cit import KCI, CIT_Base
from causallearn.utils.KCI.GaussianKernel import GaussianKernel
from causallearn.utils.KCI.Kernel import Kernel
from scipy import stats
from scipy.sparse.linalg import eigsh

EPSILON = 1e-3          # causal-learn KCI_CInd.epsilon_x / epsilon_y (Kernel.center_kernel_matrix_regression)
EIG_THRESHOLD = 1e-5    # causal-learn KCI_CInd.thresh: eigenpairs kept above thresh × the largest eigenvalue
DEFAULT_CACHE_MIB = 1024
FEW_LEVELS_FACTOR = 8   # a side whose input has at most n / 8 distinct rows is factored through them


def supports(options: dict[str, Any]) -> bool:
    """Whether the shortcut reproduces causal-learn's KCI for these options (else causal-learn runs)."""
    return (all(options.get(k, "Gaussian") == "Gaussian" for k in ("kernelX", "kernelY", "kernelZ"))
            and options.get("est_width", "empirical") == "empirical" and options.get("approx", True)
            and not options.get("use_gp", False))


# ---------------------------------------------------------------------------------------------
# A per-process store of matrices, bounded in bytes (a Dask worker keeps its kernels between tasks)
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
        size = int(getattr(value, "nbytes", 0))
        with self.lock:
            self.sizes[key] = size
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
    """Drop every kernel this process holds (tests and benchmarks that want a cold start)."""
    _STORE.clear()
    _STORE.hits = _STORE.misses = 0


def store_stats() -> dict[str, int]:
    return {"entries": len(_STORE.items), "bytes": sum(_STORE.sizes.values()), "hits": _STORE.hits,
            "misses": _STORE.misses}


@dataclass
class _Centred:
    """An unconditional test's side: centred kernel with the two sums the gamma null needs."""

    K: np.ndarray
    trace: float
    sumsq: float

    @property
    def nbytes(self) -> int:
        return self.K.nbytes


@dataclass
class _Regressed:
    """A conditional test's side: RKR = Rz K Rz and its eigenpairs above the threshold, scaled by √λ."""

    KR: np.ndarray
    V: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.KR.nbytes + self.V.nbytes


def _zscore(x: np.ndarray) -> np.ndarray:
    """causal-learn's standardisation: ddof 1, a constant column becomes 0."""
    z = stats.zscore(x, ddof=1, axis=0)
    z[np.isnan(z)] = 0.0
    return z


def kept_eigenpairs(K: np.ndarray, thresh: float = EIG_THRESHOLD) -> np.ndarray:
    """Eigenvectors of (K + K')/2 scaled by √λ for λ > thresh × λmax, largest first (causal-learn's get_uuprod).

    Lanczos gives a lower bound on λmax, so the syevr value range (bound × thresh, ∞) holds every pair
    causal-learn keeps; the exact cut is then applied with the largest eigenvalue syevr returns.
    """
    sym = 0.5 * (K + K.T)
    n = sym.shape[0]
    if n <= 64:
        w, v = np.linalg.eigh(sym)
    else:
        bound = float(eigsh(sym, k=1, which="LA", v0=np.ones(n), tol=1e-6, return_eigenvectors=False)[0])
        if bound > 0:
            low = bound * thresh * (1.0 - 1e-6)
            w, v = scipy.linalg.eigh(sym, subset_by_value=(low, np.inf), driver="evr", check_finite=False)
        else:
            w, v = np.linalg.eigh(sym)
    order = np.argsort(-w)
    w, v = w[order], v[:, order]
    keep = w > np.max(w) * thresh
    return v[:, keep] * np.sqrt(w[keep])[None, :]        # = vx.dot(np.diag(np.sqrt(wx))) in causal-learn


def _spd_inverse(A: np.ndarray) -> np.ndarray:
    """A⁻¹ of a symmetric positive definite matrix by Cholesky (causal-learn: pinv by SVD, ~7x slower).

    Kz + εI has eigenvalues in [ε, n + ε], so the pseudo-inverse is the inverse; the two agree to
    rounding (~1e-10 relative at n = 2000, the conditioning ~n/ε times machine precision).
    """
    try:
        return scipy.linalg.cho_solve(scipy.linalg.cho_factor(A, lower=True, check_finite=False),
                                      np.eye(A.shape[0]), check_finite=False)
    except np.linalg.LinAlgError:
        return np.linalg.pinv(A)


def _regressed_low_rank(Ku: np.ndarray, index: np.ndarray, Rz: np.ndarray) -> _Regressed:
    """Rz (H K H) Rz and its kept eigenpairs when K = P Ku P' (P: n × u indicator of each row's level).

    With G = Rz H P (n × u) and Ku = Q Λ Q', RKR = G Ku G' = B B' for B = G Q Λ^½; the eigenpairs of
    RKR are B's singular pairs (λ = σ²). Exact algebra; O(n²u) instead of O(n³).
    """
    n, u = len(index), Ku.shape[0]
    P = np.zeros((n, u))
    P[np.arange(n), index] = 1.0
    counts = P.sum(axis=0)
    G = Rz.dot(P) - np.outer(Rz.sum(axis=1), counts / n)          # Rz (P - 1 counts'/n) = Rz H P
    KR = (G.dot(Ku)).dot(G.T)
    w, Q = np.linalg.eigh(0.5 * (Ku + Ku.T))
    B = G.dot(Q * np.sqrt(np.clip(w, 0.0, None))[None, :])
    U, sigma, _ = np.linalg.svd(B, full_matrices=False)
    lam = sigma ** 2
    keep = lam > np.max(lam) * EIG_THRESHOLD
    return _Regressed(KR, U[:, keep] * sigma[keep][None, :])


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

    # -- the test ---------------------------------------------------------------------------------
    def pvalue(self, xs: Sequence[int], ys: Sequence[int], zs: Sequence[int] = ()) -> float:
        """p-value of data[:, xs] ⫫ data[:, ys] | data[:, zs], as causal-learn's KCI computes it."""
        xs, ys, zs = tuple(xs), tuple(ys), tuple(zs)
        if self.fallback is not None:
            return float(self.fallback(list(xs), list(ys), list(zs)))
        n = self.n
        if not zs:                                            # KCI_UInd.compute_pvalue, approx=True
            a, b = self._centred(xs), self._centred(ys)
            stat = np.sum(a.K * b.K)
            mean = a.trace * b.trace / n
            var = 2 * a.sumsq * b.sumsq / n / n
        else:                                                 # KCI_CInd.compute_pvalue, approx=True
            a, b = self._regressed("x", xs, zs), self._regressed("y", ys, zs)
            stat = np.sum(a.KR * b.KR)
            kx, ky = a.V.shape[1], b.V.shape[1]
            if kx * ky <= n:                                   # causal-learn's uu'uu, small
                uu = (a.V[:, :, None] * b.V[:, None, :]).reshape(n, kx * ky)
                prod = uu.T.dot(uu)
                mean, var = np.trace(prod), 2 * np.trace(prod.dot(prod))
            else:                                             # uu uu' = Ax ∘ Ay, symmetric
                prod = self._outer("x", xs, zs, a) * self._outer("y", ys, zs, b)
                mean, var = np.trace(prod), 2 * np.sum(prod * prod)
        k_appr, theta_appr = mean ** 2 / var, var / mean
        return float(1 - stats.gamma.cdf(stat, k_appr, 0, theta_appr))

    # -- shared pieces ----------------------------------------------------------------------------
    def _key(self, *parts: Any) -> tuple:
        return (self.digest, *parts)

    def _centred(self, cols: tuple[int, ...]) -> _Centred:
        def make() -> _Centred:
            x = self.data[:, list(cols)]
            kernel = GaussianKernel()
            kernel.set_width_empirical_hsic(x)
            K = Kernel.center_kernel_matrix(kernel.kernel(_zscore(x)))
            return _Centred(K, np.trace(K), np.sum(K ** 2))
        return _STORE.get(self._key("hsic", cols), make)

    def _width_kernel(self, zs: tuple[int, ...]) -> GaussianKernel:
        kernel = GaussianKernel()
        kernel.set_width_empirical_kci(self.data[:, list(zs)])      # depends on n and |S| only
        return kernel

    def _rz(self, zs: tuple[int, ...]) -> np.ndarray:
        def make() -> np.ndarray:
            z = _zscore(self.data[:, list(zs)])
            Kz = Kernel.center_kernel_matrix(self._width_kernel(zs).kernel(z))
            return EPSILON * _spd_inverse(Kz + EPSILON * np.eye(self.n))   # ε (Kz + εI)⁺, SPD: ⁺ = ⁻¹
        return _STORE.get(self._key("rz", zs), make)

    def _outer(self, role: str, cols: tuple[int, ...], zs: tuple[int, ...], side: _Regressed) -> np.ndarray:
        """V V': the part of RKR above the eigenvalue threshold (uu uu' = Ax ∘ Ay)."""
        return _STORE.get(self._key("outer", role, cols, zs), lambda: side.V.dot(side.V.T))

    def _regressed(self, role: str, cols: tuple[int, ...], zs: tuple[int, ...]) -> _Regressed:
        def make() -> _Regressed:
            x = _zscore(self.data[:, list(cols)])
            if role == "x":                                   # KCI_CInd.kernel_matrix: x joined by S / 2
                x = np.concatenate((x, 0.5 * _zscore(self.data[:, list(zs)])), axis=1)
            kernel, Rz = self._width_kernel(zs), self._rz(zs)
            levels, index = np.unique(x, axis=0, return_inverse=True)
            if len(levels) * FEW_LEVELS_FACTOR <= self.n:     # few distinct rows: K = P Ku P' exactly
                return _regressed_low_rank(kernel.kernel(levels), index.ravel(), Rz)
            K = Kernel.center_kernel_matrix(kernel.kernel(x))
            KR = Rz.dot(K.dot(Rz))
            return _Regressed(KR, kept_eigenpairs(KR))
        return _STORE.get(self._key(role, cols, zs), make)
