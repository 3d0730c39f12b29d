"""Settings of causal discovery (run config key `discovery`), apart from the code that runs it.

Kept free of causal-learn and torch so loading a run config (and the CLI) stays fast.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..features.encoders import PreprocessConfig


@dataclass
class KCIOptions:
    """causal-learn KCI settings (same kernel for X, Y and Z) and which implementation computes it."""

    kernel: Literal["Gaussian", "Polynomial", "Linear"] = "Gaussian"
    est_width: Literal["empirical", "median"] = "empirical"
    approx: bool = True            # gamma approximation of the null (False: spectral null samples)
    use_gp: bool = False           # fit the conditioning kernel's width by a Gaussian process
    polyd: int = 2                 # degree of the polynomial kernel
    # "cached": causal-learn's p-values with kernels shared across tests (wpultr.causal.kci; Gaussian,
    # empirical width, gamma null; other settings run causal-learn's KCI); "causal-learn": its KCI per test
    engine: Literal["cached", "causal-learn"] = "cached"
    cache_mib: int = 1024          # kernel store per process (each Dask worker) for the cached engine


@dataclass
class RCITOptions:
    """causal-learn RCIT settings (randomised Fourier features)."""

    approx: Literal["lpd4", "hbe", "gamma", "chi2", "perm"] = "lpd4"
    num_f: int = 100               # features for the conditioning set
    num_f2: int = 5                # features for X and Y


@dataclass
class FastKCIOptions:
    """causal-learn FastKCI settings (KCI on a mixture partition of the conditioning set)."""

    n_clusters: int = 10           # causal-learn's K
    n_repeats: int = 8             # causal-learn's J
    use_gp: bool = False


@dataclass
class DiscoveryConfig:
    """How each epoch's click-model graph is discovered (BAL §3.1)."""

    n_sessions: int = 1000                 # sessions sampled per epoch; one displayed result each
    stratify: bool = True                  # equal shares for query-frequency strata (tail queries present)
    n_strata: int = 4
    ci_test: Literal["kci", "rcit", "fastkci", "fisherz"] = "kci"
    alpha: float = 0.05
    max_depth: int | None = None           # largest conditioning-set size PC tries (None: no limit)
    n_bootstrap: int = 5                   # resamples behind the per-edge stabilities (0: none)
    seed_offset: int = 0                   # added to the run seed (and the epoch) for sampling and tests
    kci: KCIOptions = field(default_factory=KCIOptions)
    rcit: RCITOptions = field(default_factory=RCITOptions)
    fastkci: FastKCIOptions = field(default_factory=FastKCIOptions)
    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig)


def validate_discovery_config(cfg: DiscoveryConfig, key: str = "discovery") -> None:
    """Raise ConfigError naming the dotted key of the first value discovery cannot use."""
    from ..config import ConfigError  # here, not at import time: config.py will import this module
    checks = [
        (cfg.n_sessions > 0, "n_sessions", "must be > 0", cfg.n_sessions),
        (cfg.n_strata > 0, "n_strata", "must be > 0", cfg.n_strata),
        (0.0 < cfg.alpha < 1.0, "alpha", "must be in (0, 1)", cfg.alpha),
        (cfg.max_depth is None or cfg.max_depth >= 0, "max_depth", "must be >= 0 or null", cfg.max_depth),
        (cfg.n_bootstrap >= 0, "n_bootstrap", "must be >= 0", cfg.n_bootstrap),
        (cfg.kci.polyd > 0, "kci.polyd", "must be > 0", cfg.kci.polyd),
        (cfg.kci.engine in ("cached", "causal-learn"), "kci.engine", "must be 'cached' or 'causal-learn'",
         cfg.kci.engine),
        (cfg.kci.cache_mib > 0, "kci.cache_mib", "must be > 0", cfg.kci.cache_mib),
        (cfg.rcit.num_f > 0, "rcit.num_f", "must be > 0", cfg.rcit.num_f),
        (cfg.rcit.num_f2 > 0, "rcit.num_f2", "must be > 0", cfg.rcit.num_f2),
        (cfg.fastkci.n_clusters > 0, "fastkci.n_clusters", "must be > 0", cfg.fastkci.n_clusters),
        (cfg.fastkci.n_repeats > 0, "fastkci.n_repeats", "must be > 0", cfg.fastkci.n_repeats),
        (cfg.preprocess.bradley_terry_ridge > 0, "preprocess.bradley_terry_ridge", "must be > 0",
         cfg.preprocess.bradley_terry_ridge),
        (cfg.preprocess.embedding_dim > 0, "preprocess.embedding_dim", "must be > 0", cfg.preprocess.embedding_dim),
    ]
    for ok, name, rule, value in checks:
        if not ok:
            raise ConfigError(f"{key}.{name}: {rule}, got {value!r}")
