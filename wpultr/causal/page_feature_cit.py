"""The KCI-family CI test over page-feature nodes (`PageFeatureCIT`): causal-learn's tests with categorical
nodes as one-hot groups and a seed per test, so a p-value is the same on a Dask worker as here.

Used by discovery.py (every pair, for kci/rcit/fastkci/fisherz) and hybrid_ci.py (pairs not into click).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from causallearn.utils.cit import CIT, CIT_Base
from joblib import parallel_config
from threadpoolctl import threadpool_limits

from ..features.encoders import one_hot
from .kci import DEFAULT_CACHE_MIB, CachedKCI

# ---------------------------------------------------------------------------------------------
# The CI test: causal-learn's, with categorical nodes as one-hot groups and a seed per test
# ---------------------------------------------------------------------------------------------
_GLOBAL_RNG_LOCK = threading.Lock()


@contextlib.contextmanager
def _seeded(seed: int, key: str) -> Iterator[None]:
    """Seed numpy's global generator (which RCIT/FastKCI draw from) per test and restore it afterwards.

    BLAS runs on one thread and joblib sequentially meanwhile: RCIT's p-value moves by ~1e-4 relative
    with the BLAS thread count, and FastKCI's joblib worker processes would draw from unseeded
    generators; a test must give the same p-value on a Dask worker as in this process.
    """
    digest = hashlib.sha256(f"{seed}|{key}".encode()).digest()
    with _GLOBAL_RNG_LOCK, threadpool_limits(limits=1), parallel_config(backend="sequential"):
        state = np.random.get_state()
        np.random.seed(int.from_bytes(digest[:4], "little"))
        try:
            yield
        finally:
            np.random.set_state(state)


class PageFeatureCIT(CIT_Base):
    """causal-learn CI test over node columns; categorical nodes enter kernel tests as one-hot column groups.

    The p-value of (x, y | S) depends only on the data, the options and `seed` (randomised tests
    are seeded from the test's cache key), so a test computed on a Dask worker equals the serial one
    (deterministic KCI up to BLAS rounding, ~1e-12 relative, between processes with different thread counts).
    KCI runs through `CachedKCI` (engine "cached": causal-learn's p-values to rounding, kernels shared
    across tests) or causal-learn's own KCI (engine "causal-learn").
    """

    registry_name = "wpultr"

    def __init__(self, data: np.ndarray, base: str = "kci", categorical: Sequence[int] = (), seed: int = 0,
                 base_options: dict[str, Any] | None = None, engine: str = "cached",
                 cache_mib: int = DEFAULT_CACHE_MIB, **kwargs: Any):
        super().__init__(data, **kwargs)
        options = dict(base_options or {})
        fingerprint = json.dumps({"base": base, "options": options, "categorical": sorted(categorical),
                                  "seed": seed, "engine": engine if base == "kci" else None}, sort_keys=True)
        self.check_cache_method_consistent(f"wpultr-{base}", hashlib.md5(fingerprint.encode()).hexdigest())
        self.assert_input_data_is_valid()
        self.base, self.seed = base, seed
        self.grouped = base != "fisherz"   # Fisher-z is linear: categorical codes enter as numbers
        blocks, self.columns = [], []
        width = 0
        for i in range(data.shape[1]):
            block = one_hot(data[:, i]) if (self.grouped and i in set(categorical)) else data[:, [i]]
            blocks.append(block)
            self.columns.append(list(range(width, width + block.shape[1])))
            width += block.shape[1]
        if base == "kci" and engine == "cached":          # the same p-values, kernels shared across tests
            self.inner = CachedKCI(np.hstack(blocks), cache_mib=cache_mib, **options)
        else:
            self.inner = CIT(np.hstack(blocks), base, **options)
        self.randomised = base in ("rcit", "fastkci") or (
            base == "kci" and (not options.get("approx", True) or options.get("est_width") == "median"))

    def __call__(self, X, Y, condition_set=None):
        Xs, Ys, S, key = self.get_formatted_XYZ_and_cachekey(X, Y, condition_set)
        if key in self.pvalue_cache:
            return self.pvalue_cache[key]
        if self.grouped:
            args = ([c for i in Xs for c in self.columns[i]], [c for i in Ys for c in self.columns[i]],
                    [c for i in S for c in self.columns[i]])
        else:
            args = (Xs[0], Ys[0], S)
        try:
            if self.randomised:
                with _seeded(self.seed, key):
                    p = self.inner(*args)
            else:
                p = self.inner(*args)
        except ValueError as e:
            if self.base != "fastkci":
                raise
            raise ValueError(f"FastKCI failed on test {key} with {self.sample_size} rows ({e}); it needs many "
                             f"rows per mixture cluster: lower discovery.fastkci.n_clusters or use kci/rcit") from e
        self.pvalue_cache[key] = p
        return p
