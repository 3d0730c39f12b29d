"""Causal discovery of the click model (BAL §3.1, "Causal discovery"): PC with a kernel CI test and three priors.

The variables are the ranker's relevance score r̂, the click c and every declared page feature. PC
(causal-learn, stable, run level-parallel on Dask by `parallel_pc`) uses one of causal-learn's CI
tests: KCI (the paper's choice; by default computed by `kci.CachedKCI`, which returns causal-learn's
p-values while computing each kernel once per run), its fast approximations RCIT and FastKCI, or
Fisher-z; or, the default, `hybrid_ci.HybridCIT`: edges into click tested on every shown result of
`click_rows` — a page feature's within (query, document) strata (`within_document_ci`, `click_test:
within_document`, when the rows carry their documents), r̂'s by a session-robust logistic score test
(`click_ci`) — the other pairs by KCI, with
near-deterministic proxies kept out of a feature's click tests (`near_determinism`); the evidence of
every candidate edge into click goes into graph.json (`click_evidence`). The priors of BAL §3.1
enter as causal-learn background knowledge:

1. r̂ → c is required (users click only what is relevant);
2. c is never a parent of a page feature (the page is shown before the click);
3. a page feature is never a parent of r̂ (the page is laid out after the ranker scored).

causal-learn's caveats are handled here: its skeleton phase tests a required edge and may remove it, so
PC is run with r̂ — c never tested (`parallel_pc`'s `kept_pairs`: the adjacency stays, and r̂'s record in
the click evidence carries its effect given the other click parents instead); forbidden orientations do not
stop the tests, so `enforce_priors` adds or re-orients what the priors dictate (marked `enforced`) and
`prior_violations` checks every returned graph.

Rows (of every test but hybrid's click tests, which see whole sessions): one displayed result per
sampled session. KCI assumes i.i.d. rows and costs O(n³); results of one session are dependent (their
positions form a permutation), results of different sessions are not. Sessions are sampled stratified by
query frequency (equal shares for `n_strata` groups of queries ranked by their number of sessions), so tail
queries are present in every sample.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from causallearn.graph.GraphNode import GraphNode
from causallearn.utils.PCUtils.BackgroundKnowledge import BackgroundKnowledge

from ..schema import CLICK, POSITION, QUERY_ID, RELEVANCE_SCORE, SESSION_ID, FeatureKind, PageFeature, SchemaError
from ..settings.discovery import DiscoveryConfig, validate_discovery_config
from .click_ci import ClickCITest
from .click_evidence import click_evidence, decide_per_graph
from .graph import (
    BIDIRECTED,
    DIRECTED,
    UNDIRECTED,
    DiscoveredGraph,
    GraphEdge,
    PairStability,
    edges_from_matrix,
    sepsets_from_causallearn,
)
from .hybrid_ci import HybridCIT, resample_sessions, stack_click_rows
from .near_determinism import find_near_deterministic
from .page_feature_cit import PageFeatureCIT
from .parallel_pc import CITestSpec, PCRun, p_values_without, parallel_pc, test_nodes
from .within_document_ci import DOCUMENT_CODE, within_document_share

log = logging.getLogger(__name__)


def base_test_options(cfg: DiscoveryConfig) -> dict[str, Any]:
    """The keyword options causal-learn's CIT factory takes for the configured test (they fix the p-values)."""
    if cfg.ci_test in ("kci", "hybrid"):          # hybrid: the options of its KCI part
        k = cfg.kci
        return {"kernelX": k.kernel, "kernelY": k.kernel, "kernelZ": k.kernel, "est_width": k.est_width,
                "approx": k.approx, "use_gp": k.use_gp, "polyd": k.polyd}
    if cfg.ci_test == "rcit":
        return {"approx": cfg.rcit.approx, "num_f": cfg.rcit.num_f, "num_f2": cfg.rcit.num_f2}
    if cfg.ci_test == "fastkci":
        return {"K": cfg.fastkci.n_clusters, "J": cfg.fastkci.n_repeats, "use_gp": cfg.fastkci.use_gp}
    return {}


def ci_test_spec(cfg: DiscoveryConfig, categorical: Sequence[int], seed: int) -> CITestSpec:
    """The CI test `cfg` asks for, over node columns whose `categorical` indices are categories."""
    return CITestSpec(PageFeatureCIT, {"base": cfg.ci_test, "categorical": list(categorical), "seed": seed,
                                     "base_options": base_test_options(cfg), "engine": cfg.kci.engine,
                                     "cache_mib": cfg.kci.cache_mib})


# ---------------------------------------------------------------------------------------------
# The three priors
# ---------------------------------------------------------------------------------------------
PRIORS = (f"{RELEVANCE_SCORE} -> {CLICK} required",
          f"{CLICK} is never a parent of a page feature",
          f"a page feature is never a parent of {RELEVANCE_SCORE}")


def prior_knowledge(page_features: Sequence[str]) -> BackgroundKnowledge:
    """BAL §3.1's three priors as causal-learn background knowledge (node names as in the data)."""
    r, c = GraphNode(RELEVANCE_SCORE), GraphNode(CLICK)
    knowledge = BackgroundKnowledge()
    knowledge.add_required_by_node(r, c)             # prior 1
    knowledge.add_forbidden_by_node(c, r)
    for name in page_features:
        x = GraphNode(name)
        knowledge.add_forbidden_by_node(c, x)        # prior 2
        knowledge.add_forbidden_by_node(x, r)        # prior 3
    return knowledge


def required_pairs(knowledge: BackgroundKnowledge, names: Sequence[str]) -> list[tuple[int, int]]:
    """The node index pairs (in `names`) between which `knowledge` requires an edge (prior 1's r̂ → c): the
    adjacencies PC keeps without testing them (`parallel_pc`'s `kept_pairs`)."""
    return [(names.index(a.get_name()), names.index(b.get_name())) for a, b in knowledge.required_rules_specs
            if a.get_name() in names and b.get_name() in names]


def enforce_priors(graph: DiscoveredGraph, page_features: Sequence[str]) -> DiscoveredGraph:
    """Add r̂ → c if PC removed it and orient r̂ → x and x → c on every such adjacency (marked `enforced`)."""
    features = set(page_features)

    def dictated(e: GraphEdge) -> tuple[str, str] | None:
        if e.pair == frozenset((RELEVANCE_SCORE, CLICK)):
            return RELEVANCE_SCORE, CLICK
        other = next(iter(e.pair - {RELEVANCE_SCORE, CLICK}), None)
        if other in features and RELEVANCE_SCORE in e.pair:
            return RELEVANCE_SCORE, other
        if other in features and CLICK in e.pair:
            return other, CLICK
        return None

    edges = []
    for e in graph.edges:
        want = dictated(e)
        if want is None or (e.type == DIRECTED and (e.source, e.target) == want):
            edges.append(e)
        else:
            edges.append(GraphEdge(want[0], want[1], DIRECTED, enforced=True))
    if not graph.adjacent(RELEVANCE_SCORE, CLICK):
        edges.append(GraphEdge(RELEVANCE_SCORE, CLICK, DIRECTED, enforced=True))
    return graph.with_edges(edges)


def prior_violations(graph: DiscoveredGraph, page_features: Sequence[str]) -> list[str]:
    """Each way `graph` breaks a prior (an undirected edge counts: it leaves the forbidden parent possible)."""
    problems = []
    rc = graph.edge(RELEVANCE_SCORE, CLICK)
    if rc is None or rc.type != DIRECTED or rc.source != RELEVANCE_SCORE:
        problems.append(f"prior 1: expected {RELEVANCE_SCORE} -> {CLICK}, found {rc}")
    for x in page_features:
        for parent, child, prior in ((CLICK, x, 2), (x, RELEVANCE_SCORE, 3)):
            e = graph.edge(parent, child)
            if e is not None and (e.type == UNDIRECTED or (e.type == DIRECTED and e.source == parent)):
                problems.append(f"prior {prior}: {parent} may be a parent of {child} ({e.arrow()})")
    return problems


# ---------------------------------------------------------------------------------------------
# Sampling sessions
# ---------------------------------------------------------------------------------------------
def one_row_each(sessions: pd.DataFrame) -> pd.DataFrame:
    """(session_id, query_id) of each session, its first row's, sorted by session_id. A log whose sessions are
    each one run of rows (ingest's partitions) is read off the run starts: no hash of every row's id."""
    ids = sessions[SESSION_ID].to_numpy()
    starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]])) if len(ids) else np.zeros(0, np.int64)
    if len(starts) == len(ids) or len(pd.unique(ids[starts])) == len(starts):   # one run per session
        firsts = sessions[[SESSION_ID, QUERY_ID]].iloc[starts]
    else:
        firsts = sessions[[SESSION_ID, QUERY_ID]].drop_duplicates(SESSION_ID)
    return firsts.sort_values(SESSION_ID)


def query_strata(sessions: pd.DataFrame, n_strata: int) -> pd.Series:
    """Stratum of each query (0 = most sessions): queries ranked by session count, cut into equal groups."""
    per_query = sessions.groupby(QUERY_ID)[SESSION_ID].nunique()
    ranked = per_query.reset_index().sort_values([SESSION_ID, QUERY_ID], ascending=[False, True])
    groups = np.array_split(np.arange(len(ranked)), min(n_strata, len(ranked)))
    stratum = np.empty(len(ranked), dtype=np.int64)
    for s, idx in enumerate(groups):
        stratum[idx] = s
    return pd.Series(stratum, index=ranked[QUERY_ID].to_numpy(), name="stratum")


def _equal_allocation(available: np.ndarray, n: int) -> np.ndarray:
    """Split n as evenly as the strata allow; what a small stratum cannot take goes to the others."""
    take = np.zeros_like(available)
    left = n
    while left > 0 and (room := available - take).sum() > 0:
        open_strata = np.flatnonzero(room > 0)
        share = np.full(open_strata.size, left // open_strata.size)
        share[: left % open_strata.size] += 1
        give = np.minimum(share, room[open_strata])
        take[open_strata] += give
        left -= int(give.sum())
    return take


def sample_session_ids(sessions: pd.DataFrame, n_sessions: int, *, stratify: bool, n_strata: int,
                       seed: int) -> np.ndarray:
    """Session ids to run discovery on (sorted): uniform, or equal shares per query-frequency stratum."""
    per_session = one_row_each(sessions)
    rng = np.random.default_rng(seed)
    if len(per_session) <= n_sessions:
        return per_session[SESSION_ID].to_numpy()
    if not stratify:
        return np.sort(rng.choice(per_session[SESSION_ID].to_numpy(), size=n_sessions, replace=False))
    strata = per_session[QUERY_ID].map(query_strata(per_session, n_strata)).to_numpy()
    ids = per_session[SESSION_ID].to_numpy()
    n_groups = strata.max() + 1
    take = _equal_allocation(np.bincount(strata, minlength=n_groups), n_sessions)
    chosen = [rng.choice(ids[strata == s], size=int(take[s]), replace=False) for s in range(n_groups)]
    return np.sort(np.concatenate(chosen))


def sample_click_rows(sessions: pd.DataFrame, click_rows: int | None, *, n_strata: int, seed: int,
                      stratify: bool = True) -> np.ndarray:
    """Session ids whose shown results (about `click_rows` rows in all; None: every session) feed hybrid's click tests.

    `sessions` has one row per shown result (session_id, query_id); whole sessions are drawn, as
    `sample_session_ids` draws them, so the click test's clusters are complete pages.
    """
    per_session = one_row_each(sessions)
    if click_rows is None or click_rows >= len(sessions):
        return per_session[SESSION_ID].to_numpy()
    wanted = max(1, int(np.ceil(click_rows * len(per_session) / len(sessions))))
    return sample_session_ids(per_session, wanted, stratify=stratify, n_strata=n_strata, seed=seed)


@dataclass(frozen=True)
class DiscoverySessions:
    """The session ids one discovery reads: `kci`'s (one shown result of each is then drawn, `one_row_per_session`)
    and `click`'s (every shown result, for hybrid's click tests; None for the other CI tests)."""

    kci: np.ndarray
    click: np.ndarray | None


def draw_discovery_sessions(sessions: pd.DataFrame, cfg: DiscoveryConfig, seed: int) -> DiscoverySessions:
    """The one sampler of discovery's sessions, for BAL's in-memory rows and the discover stage's alike: `kci` by
    `sample_session_ids` with `seed`, `click` by `sample_click_rows` with `seed + 1` (hybrid only). `sessions` has one
    row per shown result with session_id and query_id."""
    kci = sample_session_ids(sessions, cfg.n_sessions, stratify=cfg.stratify, n_strata=cfg.n_strata, seed=seed)
    click = None if cfg.ci_test != "hybrid" else \
        sample_click_rows(sessions, cfg.click_rows, n_strata=cfg.n_strata, seed=seed + 1, stratify=cfg.stratify)
    return DiscoverySessions(kci, click)


def one_row_per_session(rows: pd.DataFrame, seed: int) -> pd.DataFrame:
    """One displayed result drawn uniformly from each session, in a seeded random row order."""
    ordered = rows.sort_values([SESSION_ID, POSITION], kind="stable").reset_index(drop=True)
    rng = np.random.default_rng(seed)
    keyed = ordered.assign(_draw=rng.random(len(ordered)))
    picked = keyed.sort_values([SESSION_ID, "_draw"], kind="stable").drop_duplicates(SESSION_ID)
    return picked.drop(columns="_draw").sample(frac=1.0, random_state=rng).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReusableTests:
    """p-values of CI tests that do not involve r̂, with the node order their indices refer to."""

    names: tuple[str, ...]
    p_values: dict[str, float]


@dataclass
class DiscoveryResult:
    """The epoch's graph (priors enforced, stabilities attached), the bootstrap graphs and PC's runs."""

    graph: DiscoveredGraph
    bootstrap: list[DiscoveredGraph]
    runs: list[PCRun]

    def reusable_p_values(self) -> ReusableTests:
        """The main run's p-values of tests without r̂: valid again on the same rows whatever the ranker."""
        names = tuple(self.graph.nodes)
        return ReusableTests(names, p_values_without(self.runs[0].p_values, {names.index(RELEVANCE_SCORE)}))


def node_order(page_features: Sequence[PageFeature]) -> list[str]:
    return [RELEVANCE_SCORE] + [f.name for f in page_features] + [CLICK]


def _check_nodes(nodes: pd.DataFrame, names: list[str]) -> np.ndarray:
    missing = [n for n in names if n not in nodes.columns]
    if missing:
        raise SchemaError(f"discovery: missing column(s) {missing}; present: {list(nodes.columns)}")
    data = nodes[names].to_numpy(dtype=np.float64)
    bad = ~np.isfinite(data)
    if bad.any():
        row, col = (int(v[0]) for v in np.nonzero(bad))
        raise SchemaError(f"discovery: column {names[col]!r} row {row} is {data[row, col]}, expected a finite number")
    if len(data) < 10:
        raise SchemaError(f"discovery: {len(data)} rows is too few for CI tests (need at least 10)")
    for required in (RELEVANCE_SCORE, CLICK):
        if np.ptp(data[:, names.index(required)]) == 0:
            raise SchemaError(f"discovery: column {required!r} is constant in the sample; nothing can be learned")
    return data


def _stabilities(graph: DiscoveredGraph, boots: list[DiscoveredGraph],
                 ) -> tuple[DiscoveredGraph, tuple[PairStability, ...]]:
    """Each pair's bootstrap frequencies, and each edge of `graph` annotated with its own."""
    if not boots:
        return graph, ()
    n = len(boots)
    pairs = []
    for i, a in enumerate(graph.nodes):
        for b in graph.nodes[i + 1:]:
            found = [g.edge(a, b) for g in boots]
            counts = {"a_to_b": 0, "b_to_a": 0, UNDIRECTED: 0, BIDIRECTED: 0}
            for e in found:
                if e is None:
                    continue
                kind = e.type if e.type != DIRECTED else ("a_to_b" if e.source == a else "b_to_a")
                counts[kind] += 1
            adjacent = sum(e is not None for e in found)
            if adjacent:
                pairs.append(PairStability(a, b, adjacent / n, counts["a_to_b"] / n, counts["b_to_a"] / n,
                                           counts[UNDIRECTED] / n, counts[BIDIRECTED] / n))
    edges = []
    for e in graph.edges:
        same = sum(1 for g in boots
                   if (o := g.edge(e.source, e.target)) is not None and o.orientation() == e.orientation())
        adjacent = sum(1 for g in boots if g.adjacent(e.source, e.target))
        edges.append(GraphEdge(e.source, e.target, e.type, same / n, adjacent / n, e.enforced))
    return graph.with_edges(edges), tuple(pairs)


def _to_graph(run: PCRun, names: tuple[str, ...], kinds: dict[str, str], features: list[str]) -> DiscoveredGraph:
    graph = DiscoveredGraph(names, edges_from_matrix(run.graph.G.graph, names), kinds,
                            sepsets_from_causallearn(run.graph, names))
    return enforce_priors(graph, features)


def _click_block(click_nodes: pd.DataFrame | None, sample: np.ndarray, wanted: list[str],
                 keep: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, str]:
    """The hybrid test's click rows, their sessions and (column `DOCUMENT_CODE`, when present) their (query,
    document) codes: `click_nodes` (with session_id), else the sample itself."""
    if click_nodes is None:
        return sample, np.arange(len(sample)), None, "the discovery sample (one shown result per session)"
    if SESSION_ID not in click_nodes.columns:
        raise SchemaError(f"discovery: the click rows need a {SESSION_ID!r} column (sessions are the clusters of "
                          f"the click test); present: {list(click_nodes.columns)}")
    rows = _check_nodes(click_nodes, wanted)[:, keep]
    sessions = click_nodes[SESSION_ID].to_numpy()
    if not np.isin(rows[:, -1], (0.0, 1.0)).all():
        raise SchemaError(f"discovery: column {CLICK!r} of the click rows must hold 0/1 values")
    documents = click_nodes[DOCUMENT_CODE].to_numpy() if DOCUMENT_CODE in click_nodes.columns else None
    return rows, sessions, documents, "every shown result of the sampled sessions"


def untestable_features(click_rows: np.ndarray, documents: np.ndarray, names: Sequence[str], features: Sequence[str],
                        categorical: Sequence[int], min_share: float) -> dict[str, float]:
    """Each page feature's within-document share on the click rows; those under `min_share` cannot be tested
    within documents (the separability rule, `discovery.min_within_document_share`)."""
    codes = np.unique(documents, return_inverse=True)[1].ravel()
    return {f: within_document_share(codes, click_rows[:, names.index(f)], names.index(f) in categorical)
            for f in features}


def _click_test_meta(cfg: DiscoveryConfig, within: bool, shares: dict[str, float], min_share: float) -> dict[str, Any]:
    """graph.json's account of how edges into click were tested."""
    relevance_test = ("cluster-robust score test of nested spline-logistic click models "
                      f"(wpultr.causal.click_ci, {cfg.click_knots} knots), sessions as clusters")
    if not within:
        why = "" if cfg.click_test == "relevance" else \
            " (discovery.click_test is within_document, but the click rows carry no (query, document): no doc_id)"
        return {"click_test": relevance_test + ", conditioning on r̂" + why}
    return {"click_test": "within-document: score test of a log-link model with a fixed effect per (query, "
                          "document) — per (query, document, position) when position is conditioned on — and the "
                          "session's clicks above as covariates, sessions as clusters "
                          "(wpultr.causal.within_document_ci)",
            "relevance_click_test": relevance_test,
            "within_document_share": {k: round(v, 4) for k, v in shares.items()},
            "min_within_document_share": min_share,
            "not_testable_within_documents": sorted(k for k, v in shares.items() if v < min_share)}


def discover(nodes: pd.DataFrame, page_features: Sequence[PageFeature], cfg: DiscoveryConfig, *,
             client: Any = None, seed: int = 0, timeout: float | None = None,
             click_nodes: pd.DataFrame | None = None, reuse: ReusableTests | None = None) -> DiscoveryResult:
    """PC over r̂, the page features and c (one row per sampled result), plus bootstrap stabilities.

    `nodes` holds the encoded columns: relevance_score, each page feature (categorical ones as
    integer codes) and click. A page feature constant in the sample is left out (recorded in meta).
    With `ci_test: hybrid`, `click_nodes` (the same columns plus session_id, every shown result of
    whole sessions) feeds the tests of edges into click; without it those tests use `nodes`. With a
    `DOCUMENT_CODE` column too (each row's (query, document) code) and `cfg.click_test: within_document`, a page
    feature's click test compares impressions of the same document, and one with under
    `cfg.min_within_document_share` of its variance within documents is not testable (no edge into click).
    `timeout` (seconds) makes PC raise TimeoutError when passed (see `parallel_pc`).
    `reuse` (an earlier `DiscoveryResult.reusable_p_values()` on the SAME rows and seed, only r̂ changed)
    skips the tests it holds when the node order matches; it applies to the main run, not to resamples.
    """
    validate_discovery_config(cfg)
    wanted = node_order(page_features)
    data = _check_nodes(nodes, wanted)
    constant = [f.name for f in page_features if np.ptp(data[:, wanted.index(f.name)]) == 0]
    features = [f for f in page_features if f.name not in constant]
    names = tuple(node_order(features))
    keep = [wanted.index(n) for n in names]
    data = data[:, keep]
    kinds = {RELEVANCE_SCORE: "relevance", CLICK: "click", **{f.name: f.kind.value for f in features}}
    categorical = [names.index(f.name) for f in features if f.kind is FeatureKind.CATEGORICAL]
    click, relevance = names.index(CLICK), names.index(RELEVANCE_SCORE)
    feature_names = [f.name for f in features]
    rng = np.random.default_rng([seed, 1])
    hybrid = cfg.ci_test == "hybrid"

    click_rows, sessions, documents, click_source = _click_block(click_nodes if hybrid else None, data, wanted, keep)
    pairs = find_near_deterministic(click_rows, names, [names.index(f) for f in feature_names], categorical,
                                    cfg.near_deterministic, handled=hybrid)
    protect = [(names.index(p.feature), names.index(p.proxy)) for p in pairs] if hybrid else []
    within = hybrid and cfg.click_test == "within_document" and documents is not None
    if hybrid and cfg.click_test == "within_document" and documents is None:
        log.warning("discovery: the click rows carry no (query, document) codes (no doc_id): page-feature click "
                    "tests condition on r̂ instead of the document")
    min_within_document_share = cfg.min_within_document_share
    shares = untestable_features(click_rows, documents, names, feature_names, categorical,
                                 min_within_document_share) if within else {}
    untestable = sorted(names.index(f) for f, share in shares.items() if share < min_within_document_share)
    if hybrid:
        n_click_sessions = int(np.unique(sessions).size) if within else None
        spec = CITestSpec(HybridCIT, {"n_sample": len(data), "click": click, "relevance": relevance,
                                      "categorical": categorical, "protect": protect, "n_knots": cfg.click_knots,
                                      "seed": seed, "kci_options": base_test_options(cfg), "engine": cfg.kci.engine,
                                      "cache_mib": cfg.kci.cache_mib, "n_click_sessions": n_click_sessions,
                                      "position": names.index(POSITION) if POSITION in names else None,
                                      "untestable": untestable})
        main = stack_click_rows(data, click_rows, sessions, click, documents if within else None)
        resamples = []
        for _ in range(cfg.n_bootstrap):
            if within:      # the documents travel with their rows (a last column, split off again)
                rows, ids = resample_sessions(np.column_stack([click_rows, documents]), sessions, rng)
                rows, docs = rows[:, :-1], rows[:, -1]
            else:
                (rows, ids), docs = resample_sessions(click_rows, sessions, rng), None
            resamples.append(stack_click_rows(data[rng.integers(0, len(data), len(data))], rows, ids, click, docs))
    else:
        spec = ci_test_spec(cfg, categorical, seed)
        main = data
        resamples = [data[rng.integers(0, len(data), len(data))] for _ in range(cfg.n_bootstrap)]

    start = time.perf_counter()
    known = reuse.p_values if reuse is not None and reuse.names == names else None
    if known is not None and within:      # within-document click tests read r̂ (the skipped results' r̂): re-run
        known = {k: v for k, v in known.items() if click not in test_nodes(k)}
    knowledge = prior_knowledge(feature_names)
    runs = parallel_pc([main] + resamples, names, cfg.alpha, spec, client=client,
                       background_knowledge=knowledge, max_depth=cfg.max_depth, timeout=timeout,
                       known_p_values=[known], kept_pairs=required_pairs(knowledge, names))
    seconds = time.perf_counter() - start
    graphs = [_to_graph(run, names, kinds, feature_names) for run in runs]
    graph, pair_stability = _stabilities(graphs[0], graphs[1:])
    graph.pair_stability = pair_stability
    tester = runs[0].test.click_test if isinstance(runs[0].test, HybridCIT) else \
        ClickCITest(click_rows, click, sessions, categorical, relevance, cfg.click_knots)   # hybrid: its fits reused
    proxies: dict[int, set[int]] = {}
    for feature, proxy in protect:
        proxies.setdefault(feature, set()).add(proxy)
    within_tester = runs[0].test.within_test if within else None
    evidence = click_evidence(graph, runs[0].p_values, graphs[1:], tester, proxies, cfg.alpha,
                              {name: "constant in the sample" for name in constant}, within=within_tester,
                              untestable={names[u] for u in untestable})
    if cfg.click_error == "per_graph":
        graph = decide_per_graph(graph, evidence, cfg.alpha)
    graph.meta = {
        "test": {"name": cfg.ci_test, "alpha": cfg.alpha, "click_error": cfg.click_error,
                 "options": base_test_options(cfg),
                 **({"engine": cfg.kci.engine} if cfg.ci_test in ("kci", "hybrid") else {}),
                 **({**_click_test_meta(cfg, within, shares, min_within_document_share),
                     "other_tests": "kci on the one-result-per-session sample"} if hybrid else {}),
                 "categorical_as": "one-hot groups" if cfg.ci_test != "fisherz" else "codes"},
        "sample": {"n_rows": int(len(data))},
        "click_rows": {"n_rows": int(len(click_rows)), "n_sessions": int(np.unique(sessions).size),
                       "source": click_source,
                       **({"n_documents": int(np.unique(documents).size)} if documents is not None else {})},
        "near_deterministic": {"threshold": cfg.near_deterministic, "pairs": [p.to_dict() for p in pairs]},
        "click_evidence": evidence,
        "n_bootstrap": cfg.n_bootstrap,
        "max_depth": cfg.max_depth,
        "seed": seed,
        "priors": list(PRIORS),
        "constant_features_left_out": constant,
        "pc": {"stable": True, "uc_rule": 0, "uc_priority": 2, "tests": runs[0].n_tests,
               "kept_by_prior_untested": runs[0].kept_untested,
               "levels": runs[0].levels, "seconds": round(seconds, 3),
               "tests_all_resamples": sum(r.n_tests for r in runs),
               "tests_reused": len(known or {})},
        "config": asdict(cfg),
    }
    return DiscoveryResult(graph, graphs[1:], runs)
