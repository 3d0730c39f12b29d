"""Settings of causal discovery (run config key `discovery`), apart from the code that runs it.

Kept free of causal-learn and torch so loading a run config (and the CLI) stays fast. Each section checks
itself when built and raises ConfigError naming its dotted key (`KEY`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ..errors import require


@dataclass
class PreprocessConfig:
    """Page-feature preprocessing settings (run config key `discovery.preprocess`)."""

    bradley_terry_ridge: float = 1e-2   # ridge on the Bradley–Terry scores (per-pair mean likelihood)
    embedding_dim: int = 8              # width of each categorical feature's embedding table
    seed: int = 0                       # seed of the embedding tables' initial values


@dataclass
class KCIOptions:
    """causal-learn KCI settings (same kernel for X, Y and Z) and which implementation computes it."""

    KEY: ClassVar[str] = "discovery.kci"

    kernel: Literal["Gaussian", "Polynomial", "Linear"] = "Gaussian"
    est_width: Literal["empirical", "median"] = "empirical"
    approx: bool = True            # gamma approximation of the null (False: spectral null samples)
    use_gp: bool = False           # fit the conditioning kernel's width by a Gaussian process
    polyd: int = 2                 # degree of the polynomial kernel
    # "cached": causal-learn's p-values with kernels shared across tests (wpultr.causal.kci; Gaussian,
    # empirical width, gamma null; other settings run causal-learn's KCI); "causal-learn": its KCI per test
    engine: Literal["cached", "causal-learn"] = "cached"
    cache_mib: int = 1024          # kernel store per process (each Dask worker) for the cached engine

    def __post_init__(self) -> None:
        require(self.polyd > 0, f"{self.KEY}.polyd", "> 0", self.polyd)
        require(self.engine in ("cached", "causal-learn"), f"{self.KEY}.engine", "'cached' or 'causal-learn'",
                self.engine)
        require(self.cache_mib > 0, f"{self.KEY}.cache_mib", "> 0", self.cache_mib)


@dataclass
class RCITOptions:
    """causal-learn RCIT settings (randomised Fourier features)."""

    KEY: ClassVar[str] = "discovery.rcit"

    approx: Literal["lpd4", "hbe", "gamma", "chi2", "perm"] = "lpd4"
    num_f: int = 100               # features for the conditioning set
    num_f2: int = 5                # features for X and Y

    def __post_init__(self) -> None:
        require(self.num_f > 0, f"{self.KEY}.num_f", "> 0", self.num_f)
        require(self.num_f2 > 0, f"{self.KEY}.num_f2", "> 0", self.num_f2)


@dataclass
class FastKCIOptions:
    """causal-learn FastKCI settings (KCI on a mixture partition of the conditioning set)."""

    KEY: ClassVar[str] = "discovery.fastkci"

    n_clusters: int = 10           # causal-learn's K
    n_repeats: int = 8             # causal-learn's J
    use_gp: bool = False

    def __post_init__(self) -> None:
        require(self.n_clusters > 0, f"{self.KEY}.n_clusters", "> 0", self.n_clusters)
        require(self.n_repeats > 0, f"{self.KEY}.n_repeats", "> 0", self.n_repeats)


@dataclass
class DiscoveryConfig:
    """How each epoch's click-model graph is discovered (BAL §3.1)."""

    KEY: ClassVar[str] = "discovery"

    n_sessions: int = 1000                 # sessions sampled per epoch; one displayed result each
    stratify: bool = True                  # equal shares for query-frequency strata (tail queries present)
    n_strata: int = 4
    # hybrid: edges into click by a cluster-robust logistic score test on click_rows shown results
    # (wpultr.causal.click_ci), the others by KCI on n_sessions rows; kci: the paper's test on every edge
    ci_test: Literal["hybrid", "kci", "rcit", "fastkci", "fisherz"] = "hybrid"
    click_rows: int | None = 100_000       # hybrid: shown results (whole sessions) for click tests (null: all)
    # hybrid: a page feature's click test. within_document: impressions of the same (query, document) compared
    # (wpultr.causal.within_document_ci; needs doc_id, else relevance is used and graph.json says so);
    # relevance: the r̂-conditioned test of wpultr.causal.click_ci (a feature tracking relevance r̂ misses passes)
    click_test: Literal["within_document", "relevance"] = "within_document"
    # which error rate alpha bounds for the page feature → click edges: per_graph, the chance of any false click
    # parent in a graph (Holm's step-down over the page features' click tests, whatever the test; the graph's click
    # parents are read as one claim); per_edge: each edge's own test at alpha
    click_error: Literal["per_graph", "per_edge"] = "per_graph"
    click_knots: int = 5                   # hybrid: spline knots per numeric variable of the click model
    # a page feature with less of its variance within (query, document) pairs has no within-document click test
    # (no edge into click) and is not corrected: its effect cannot be told from relevance (bal/separability; 0 tests
    # and corrects every feature; the key moved here from `bal`: config.MOVED_KEYS)
    min_within_document_share: float = 0.05
    near_deterministic: float = 0.9        # d(B | A) from which B counts as a proxy of A (near_determinism)
    alpha: float = 0.05
    max_depth: int | None = None           # largest conditioning-set size PC tries (None: no limit)
    n_bootstrap: int = 5                   # resamples behind the per-edge stabilities (0: none)
    seed_offset: int = 0                   # added to the run seed (and the epoch) for sampling and tests
    kci: KCIOptions = field(default_factory=KCIOptions)
    rcit: RCITOptions = field(default_factory=RCITOptions)
    fastkci: FastKCIOptions = field(default_factory=FastKCIOptions)
    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig)

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.n_sessions > 0, f"{k}.n_sessions", "> 0", self.n_sessions)
        require(self.n_strata > 0, f"{k}.n_strata", "> 0", self.n_strata)
        require(self.ci_test in ("hybrid", "kci", "rcit", "fastkci", "fisherz"), f"{k}.ci_test",
                "one of 'hybrid', 'kci', 'rcit', 'fastkci', 'fisherz'", self.ci_test)
        require(self.click_rows is None or self.click_rows >= 10, f"{k}.click_rows", ">= 10 or null",
                self.click_rows)
        require(self.click_test in ("within_document", "relevance"), f"{k}.click_test",
                "'within_document' or 'relevance'", self.click_test)
        require(self.click_error in ("per_graph", "per_edge"), f"{k}.click_error", "'per_graph' or 'per_edge'",
                self.click_error)
        require(self.click_knots >= 3, f"{k}.click_knots", ">= 3", self.click_knots)
        require(0.0 <= self.min_within_document_share < 1.0, f"{k}.min_within_document_share", "a share in [0, 1)",
                self.min_within_document_share)
        require(0.0 < self.near_deterministic <= 1.0, f"{k}.near_deterministic", "in (0, 1]",
                self.near_deterministic)
        require(0.0 < self.alpha < 1.0, f"{k}.alpha", "in (0, 1)", self.alpha)
        require(self.max_depth is None or self.max_depth >= 0, f"{k}.max_depth", ">= 0 or null", self.max_depth)
        require(self.n_bootstrap >= 0, f"{k}.n_bootstrap", ">= 0", self.n_bootstrap)
        require(self.seed_offset >= 0, f"{k}.seed_offset", ">= 0", self.seed_offset)
        # PreprocessConfig lives with the encoders it configures: its keys are checked here
        pre = self.preprocess
        require(0.0 < pre.bradley_terry_ridge < float("inf"), f"{k}.preprocess.bradley_terry_ridge",
                "a finite number > 0", pre.bradley_terry_ridge)
        require(pre.embedding_dim > 0, f"{k}.preprocess.embedding_dim", "> 0", pre.embedding_dim)
        require(pre.seed >= 0, f"{k}.preprocess.seed", ">= 0", pre.seed)


def validate_discovery_config(cfg: DiscoveryConfig) -> None:
    """Check a config again (it may have been changed after it was built); ConfigError names the key."""
    for section in (cfg.kci, cfg.rcit, cfg.fastkci, cfg):
        section.__post_init__()
