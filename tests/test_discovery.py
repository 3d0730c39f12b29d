"""Causal discovery: parallel PC equals causal-learn's serial PC, the priors hold, sampling, the stage end to end."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from causallearn.search.ConstraintBased.PC import pc
from causallearn.utils.cit import FisherZ, register_ci_test
from scipy.special import expit

from wpultr.causal.biases import identify_biases
from wpultr.causal.click_evidence import REQUIRED_UNTESTED, holm_adjusted
from wpultr.causal.discover_stage import discover_epoch
from wpultr.causal.discovery import (
    DiscoveryConfig,
    PageFeatureCIT,
    ci_test_spec,
    discover,
    enforce_priors,
    one_row_per_session,
    prior_knowledge,
    prior_violations,
    query_strata,
    required_pairs,
    sample_session_ids,
    validate_discovery_config,
)
from wpultr.causal.graph import DIRECTED, UNDIRECTED, DiscoveredGraph, GraphEdge, to_text
from wpultr.causal.parallel_pc import CITestSpec, level_tests, parallel_pc
from wpultr.config import ConfigError
from wpultr.features.preprocess_stage import fit_page_encoder
from wpultr.schema import (
    CLICK,
    DOC_ID,
    POSITION,
    QUERY_ID,
    RELEVANCE_SCORE,
    SESSION_ID,
    FeatureKind,
    PageFeature,
    SchemaError,
)

FEATURES = (PageFeature(POSITION, FeatureKind.ORDINAL), PageFeature("media_type", FeatureKind.CATEGORICAL),
            PageFeature("serp_height", FeatureKind.CONTINUOUS))
NAMES = [RELEVANCE_SCORE, POSITION, "media_type", "serp_height", CLICK]
FEATURE_NAMES = NAMES[1:4]


def whole_page_rows(n: int, seed: int) -> pd.DataFrame:
    """Rows of a nonlinear SEM with known edges: r → p, r → c, p → c, m → c (non-monotone in m), m → h."""
    rng = np.random.default_rng(seed)
    r = rng.normal(size=n)
    p = np.clip(np.round(5.5 - 1.2 * r + 1.5 * rng.normal(size=n)), 1, 10)
    m = rng.choice([0, 1, 2], size=n, p=[0.4, 0.3, 0.3])
    h = (m == 2) + 0.4 * np.tanh(rng.normal(size=n))
    c = (rng.random(n) < expit(1.5 * r - 0.6 * (p - 5.5) + 2.5 * (m == 1) - 1.0)).astype(float)
    return pd.DataFrame({RELEVANCE_SCORE: r, POSITION: p, "media_type": m, "serp_height": h, CLICK: c})


def linear_dag_data(n: int, n_nodes: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros((n, n_nodes))
    for j in range(n_nodes):
        parents = [i for i in range(j) if rng.random() < 0.4]
        x[:, j] = sum(rng.uniform(0.5, 1.5) * x[:, i] for i in parents) + rng.normal(size=n)
    return x


def same_pc_result(a, b) -> bool:
    n = a.G.graph.shape[0]
    return np.array_equal(a.G.graph, b.G.graph) and all(a.sepset[i, j] == b.sepset[i, j]
                                                        for i in range(n) for j in range(n))


# ---------------------------------------------------------------------------------------------
def causallearn_kci_spec(categorical, seed) -> CITestSpec:
    """The reference: causal-learn's own KCI on every test (categorical nodes as the same one-hot groups)."""
    reference = DiscoveryConfig(ci_test="kci")
    reference.kci.engine = "causal-learn"
    return ci_test_spec(reference, categorical=categorical, seed=seed)


@pytest.mark.e2e
def test_parallel_pc_returns_exactly_the_serial_graph_kci(dask_client):
    """Our PC (level-parallel on Dask, cached KCI) against causal-learn's serial pc with its own KCI."""
    data = whole_page_rows(250, seed=1).to_numpy()
    spec = ci_test_spec(DiscoveryConfig(ci_test="kci"), categorical=[2], seed=7)
    reference = causallearn_kci_spec([2], seed=7)
    knowledge = prior_knowledge(FEATURE_NAMES)
    ours = parallel_pc([data], NAMES, 0.05, spec, client=dask_client, background_knowledge=knowledge)[0]
    serial = pc(data, 0.05, reference.name, background_knowledge=knowledge, show_progress=False, node_names=NAMES,
                **reference.options)
    assert same_pc_result(ours.graph, serial)
    assert ours.final_pass_tests == 0 and len(ours.levels) >= 2
    serial_p = {k: v for k, v in serial.test.pvalue_cache.items()
                if k not in ("data_hash", "method_name", "parameters_hash")}
    assert ours.p_values.keys() == serial_p.keys()             # the same tests, no more, no fewer
    for key, p in serial_p.items():                            # causal-learn's KCI p-value, to rounding
        assert abs(ours.p_values[key] - p) <= 1e-9, key


def kernel_test_data(n: int, seed: int) -> np.ndarray:
    """Columns: continuous a, b, c (c depends on a, b), one-hot levels 3..5, binary click 6, ordinal 7."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    c = np.tanh(a) + 0.5 * b ** 2 + 0.5 * rng.normal(size=n)
    m = rng.choice(3, size=n)
    click = (rng.random(n) < expit(a + (m == 1) - 0.5)).astype(float)
    ordinal = np.clip(np.round(3 + a + rng.normal(size=n)), 1, 6)
    return np.column_stack([a, b, c, m == 0, m == 1, m == 2, click, ordinal]).astype(float)


KERNEL_TESTS = [([0], [2], []), ([3, 4, 5], [6], []), ([0], [6], [2]), ([1], [6], [0]), ([0], [1], [2]),
                ([3, 4, 5], [6], [0]), ([7], [6], [3, 4, 5]), ([0], [7], [6]), ([1], [2], [0, 7]),
                ([7], [6], [0, 3, 4, 5]), ([2], [3, 4, 5], [1])]


@pytest.mark.parametrize("n", [150, 400, 1250])               # causal-learn's three kernel-width regimes
def test_cached_kci_equals_causallearn_kci(n):
    from causallearn.utils.cit import CIT

    from wpultr.causal.kci import CachedKCI, clear_store, store_stats
    data = kernel_test_data(n, seed=n)
    clear_store()
    ours, reference = CachedKCI(data), CIT(data, "kci")
    tests = KERNEL_TESTS if n < 1000 else [KERNEL_TESTS[0], KERNEL_TESTS[4]]   # causal-learn's are slow here
    for X, Y, S in tests:
        assert abs(ours(X, Y, S) - reference(X, Y, S)) <= 1e-9, (X, Y, S)
    assert store_stats()["hits"] > 0                           # kernels were shared between tests


def test_cached_kci_dense_path_equals_causallearn_kci(monkeypatch):
    """Sides whose kernel is not low-rank are kept as n × n matrices: the same p-values."""
    from causallearn.utils.cit import CIT

    import wpultr.causal.kci as kci
    data = kernel_test_data(150, seed=9)
    kci.clear_store()
    monkeypatch.setattr(kci, "pivoted_cholesky", lambda *args, **kwargs: None)
    ours, reference = kci.CachedKCI(data), CIT(data, "kci")
    for X, Y, S in KERNEL_TESTS[:6]:
        assert abs(ours(X, Y, S) - reference(X, Y, S)) <= 1e-9, (X, Y, S)
    kci.clear_store()


def test_pivoted_cholesky_bounds_the_residual():
    from causallearn.utils.KCI.GaussianKernel import GaussianKernel

    from wpultr.causal.kci import pivoted_cholesky
    x = np.random.default_rng(0).normal(size=(300, 2))
    kernel = GaussianKernel(0.7)
    K = kernel.kernel(x)
    L = pivoted_cholesky(x, kernel, tol=1e-10, max_rank=300)
    residual = K - L @ L.T
    assert np.trace(residual) <= 1e-10 and np.linalg.eigvalsh(residual).min() > -1e-12
    assert L.shape[1] < 300 and pivoted_cholesky(x, kernel, tol=1e-10, max_rank=10) is None


def test_cached_kci_is_a_causallearn_ci_test_and_falls_back_for_other_options():
    from causallearn.utils.cit import CIT

    from wpultr.causal.kci import CachedKCI, supports
    data = linear_dag_data(200, 4, seed=3) ** 3
    names = [f"x{i}" for i in range(4)]
    spec = CITestSpec(CachedKCI)
    assert same_pc_result(pc(data, 0.05, spec.name, show_progress=False, node_names=names),
                          pc(data, 0.05, "kci", show_progress=False, node_names=names))
    assert not supports({"kernelX": "Polynomial", "kernelY": "Polynomial", "kernelZ": "Polynomial"})
    poly = {"kernelX": "Polynomial", "kernelY": "Polynomial", "kernelZ": "Polynomial", "polyd": 2}
    assert CachedKCI(data, **poly)(0, 3, [1]) == CIT(data, "kci", **poly)(0, 3, [1])


def test_tasks_keep_a_conditioning_set_together_and_cover_every_test_once():
    from wpultr.causal.parallel_pc import _task_parts
    tests = [(x, y, S) for S in [(0,), (1,), (2,), (3, 4)] for x in range(5) for y in range(5)
             if x != y and x not in S and y not in S]
    parts = _task_parts(tests, 4)
    assert sorted(t for part in parts for t in part) == sorted(tests) and len(parts) == 4
    owners = {S: {i for i, part in enumerate(parts) if any(t[2] == S for t in part)} for _, _, S in tests}
    assert all(len(tasks) == 1 for tasks in owners.values())
    assert len(_task_parts(tests[:12], 8)) > 1                 # one big group is still spread out


@pytest.mark.e2e
def test_parallel_pc_equals_causallearn_builtin_tests_on_several_datasets(dask_client):
    datasets = [linear_dag_data(400, 8, seed) for seed in range(3)]
    names = [f"x{i}" for i in range(8)]
    runs = parallel_pc(datasets, names, 0.05, CITestSpec("fisherz"), client=dask_client)
    for data, run in zip(datasets, runs, strict=True):
        assert same_pc_result(run.graph, pc(data, 0.05, "fisherz", show_progress=False, node_names=names))
        assert run.final_pass_tests == 0
    assert max(len(r.levels) for r in runs) >= 3
    small = whole_page_rows(150, seed=2).drop(columns="media_type").to_numpy()
    names4 = [RELEVANCE_SCORE, POSITION, "serp_height", CLICK]
    kci = parallel_pc([small], names4, 0.05, CITestSpec("kci"), client=dask_client, max_depth=1)[0]
    assert same_pc_result(kci.graph, pc(small, 0.05, "kci", show_progress=False, node_names=names4, max_k=1))


def test_level_tests_follow_causallearn_rule():
    from causallearn.graph.GraphClass import CausalGraph
    cg = CausalGraph(4, ["a", "b", "c", "d"])
    assert len(level_tests(cg, 0)) == 12                       # every ordered pair, S = ()
    assert (0, 1, (2,)) in level_tests(cg, 1) and (0, 1, (2, 3)) in level_tests(cg, 2)


def test_categorical_node_is_tested_as_a_category():
    rows = whole_page_rows(200, seed=4)
    relabelled = rows.assign(media_type=rows["media_type"].map({0: 2, 1: 0, 2: 1}))
    p = [PageFeatureCIT(df.to_numpy(), base="kci", categorical=[2])(2, 4, [0]) for df in (rows, relabelled)]
    assert p[0] == pytest.approx(p[1], abs=1e-9)               # a category's code carries no order
    codes = [PageFeatureCIT(df.to_numpy(), base="kci")(2, 4, [0]) for df in (rows, relabelled)]
    assert codes[0] != pytest.approx(codes[1], abs=1e-6)


@pytest.mark.e2e
def test_randomised_tests_are_seeded_per_test(dask_client):
    data = whole_page_rows(200, seed=5).to_numpy()
    spec = ci_test_spec(DiscoveryConfig(ci_test="rcit"), categorical=[2], seed=11)
    local = [spec.build(data)(0, 4, [1]) for _ in range(2)]
    remote = dask_client.submit(lambda d: spec.build(d)(0, 4, [1]), data).result()
    assert local[0] == local[1] == remote
    other = ci_test_spec(DiscoveryConfig(ci_test="rcit"), categorical=[2], seed=12).build(data)(0, 4, [1])
    assert other != local[0]
    small = DiscoveryConfig(ci_test="fastkci")
    small.fastkci.n_clusters, small.fastkci.n_repeats = 3, 2
    fast = ci_test_spec(small, categorical=[2], seed=3)          # FastKCI runs joblib inside: made sequential
    p = [fast.build(data)(3, 0, [2]) for _ in range(2)]          # h ⫫ r | m holds, so p is a random draw
    assert p[0] == p[1] and 0 < p[0] < 1
    with pytest.raises(ValueError, match="FastKCI failed on test .* with 200 rows"):
        ci_test_spec(DiscoveryConfig(ci_test="fastkci"), categorical=[2], seed=3).build(data)(2, 4, [0])


# ---------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_kci_finds_clicks_parents_and_priors_hold_in_every_graph(dask_client):
    rows = whole_page_rows(300, seed=0)
    result = discover(rows, FEATURES, DiscoveryConfig(ci_test="kci", n_bootstrap=2), client=dask_client, seed=0)
    report = identify_biases(result.graph)
    assert set(report.click_parents) == {RELEVANCE_SCORE, POSITION, "media_type"}
    assert [c.feature for c in report.confounded] == [POSITION]
    for graph in [result.graph, *result.bootstrap]:
        assert prior_violations(graph, FEATURE_NAMES) == []
    assert all(e.stability is not None and 0 <= e.stability <= e.adjacency <= 1 for e in result.graph.edges)
    assert result.graph.meta["test"]["name"] == "kci" and result.graph.meta["sample"]["n_rows"] == 300


@pytest.mark.e2e
def test_priors_override_what_the_data_suggest(dask_client):
    rng = np.random.default_rng(3)
    n = 400
    c = rng.integers(0, 2, n).astype(float)
    after_click = c + 0.3 * rng.normal(size=n)                 # looks like click → feature
    r = after_click + 0.3 * rng.normal(size=n)                 # looks like feature → relevance; r ⫫ c | feature
    rows = pd.DataFrame({RELEVANCE_SCORE: r, "dwell": after_click, "pixels": rng.normal(size=n), CLICK: c})
    features = (PageFeature("dwell", FeatureKind.CONTINUOUS), PageFeature("pixels", FeatureKind.CONTINUOUS))
    result = discover(rows, features, DiscoveryConfig(ci_test="fisherz", n_bootstrap=3), client=dask_client, seed=1)
    for graph in [result.graph, *result.bootstrap]:
        assert prior_violations(graph, ["dwell", "pixels"]) == []
    rc = result.graph.edge(RELEVANCE_SCORE, CLICK)
    assert rc.source == RELEVANCE_SCORE and rc.type == DIRECTED            # r ⫫ c | dwell, but prior 1 keeps it
    assert result.graph.edge("dwell", CLICK).source == "dwell"
    pc_meta = result.graph.meta["pc"]
    assert pc_meta["kept_by_prior_untested"] > 0                          # PC asked for r̂ — c tests: none ran
    assert {0, 3} not in [pair_of(k) for k in result.runs[0].p_values]
    record = next(e for e in result.graph.meta["click_evidence"] if e["node"] == RELEVANCE_SCORE)
    assert record["by_prior"] and record["pc_tests"] == 0 and record["decision"].startswith(REQUIRED_UNTESTED)
    assert record["effect"]["p_value"] > 0.05 and "does not predict clicks" in record["decision"]


def pair_of(key: str) -> set[int]:
    """The two nodes a causal-learn cache key 'x;y|s…' tests (single-column nodes)."""
    return set(map(int, key.partition("|")[0].split(";")))


class _NeverSeparates15(FisherZ):
    """The reference for `kept_pairs`: causal-learn's Fisher-z, except that x1 and x5 are never found independent."""

    def __call__(self, X, Y, condition_set=None):
        key = self.get_formatted_XYZ_and_cachekey(X, Y, condition_set)[3]
        if {X, Y} == {1, 5}:
            self.pvalue_cache[key] = 0.0
            return 0.0
        return super().__call__(X, Y, condition_set)


@pytest.mark.e2e
def test_a_required_pair_is_never_tested_and_pc_is_otherwise_causallearns(dask_client):
    """`kept_pairs`: exactly causal-learn's serial pc with a test that never separates the pair, without its tests."""
    register_ci_test("never-separates-1-5", _NeverSeparates15)
    data = linear_dag_data(400, 6, seed=4)
    data[:, 1] = np.random.default_rng(1).normal(size=400)                  # x1 ⫫ everything: PC would cut x1 — x5
    names = [f"x{i}" for i in range(6)]
    ours = parallel_pc([data], names, 0.05, CITestSpec("fisherz"), client=dask_client, kept_pairs=[(5, 1)])[0]
    reference = pc(data, 0.05, "never-separates-1-5", show_progress=False, node_names=names)
    assert same_pc_result(ours.graph, reference)
    assert ours.graph.G.is_adjacent_to(ours.graph.G.nodes[1], ours.graph.G.nodes[5])
    plain = pc(data, 0.05, "fisherz", show_progress=False, node_names=names)
    assert not plain.G.is_adjacent_to(plain.G.nodes[1], plain.G.nodes[5])  # the pair is one PC alone would cut
    asked = {k for k in reference.test.pvalue_cache if k not in ("data_hash", "method_name", "parameters_hash")}
    pair = {k for k in asked if pair_of(k) == {1, 5}}
    assert ours.kept_untested == len(pair) > 1
    assert set(ours.p_values) == asked - pair                 # every other test ran, and only those


def test_the_pairs_pc_keeps_untested_are_the_priors_required_edges():
    names = [RELEVANCE_SCORE, "media_type", POSITION, CLICK]
    assert required_pairs(prior_knowledge(["media_type", POSITION]), names) == [(0, 3)]      # prior 1 only
    assert required_pairs(prior_knowledge([POSITION]), [POSITION, CLICK]) == []           # r̂ left out: none


def test_enforce_priors_on_hand_built_graph():
    graph = DiscoveredGraph(tuple(NAMES), (GraphEdge(POSITION, RELEVANCE_SCORE, DIRECTED),
                                           GraphEdge(CLICK, "media_type", DIRECTED),
                                           GraphEdge(POSITION, "serp_height", UNDIRECTED)))
    assert len(prior_violations(graph, FEATURE_NAMES)) == 3
    fixed = enforce_priors(graph, FEATURE_NAMES)
    assert prior_violations(fixed, FEATURE_NAMES) == []
    assert fixed.edge(POSITION, RELEVANCE_SCORE).source == RELEVANCE_SCORE
    assert fixed.edge(CLICK, "media_type").source == "media_type"
    assert fixed.edge(POSITION, "serp_height").type == UNDIRECTED and not fixed.edge(POSITION, "serp_height").enforced
    assert all(fixed.edge(*pair).enforced for pair in [(RELEVANCE_SCORE, CLICK), (POSITION, RELEVANCE_SCORE)])


def test_constant_features_are_left_out_and_bad_input_is_named():
    rows = whole_page_rows(120, seed=0).assign(serp_height=3.0)
    result = discover(rows, FEATURES, DiscoveryConfig(ci_test="fisherz", n_bootstrap=0), seed=0)
    assert "serp_height" not in result.graph.nodes
    assert result.graph.meta["constant_features_left_out"] == ["serp_height"]
    with pytest.raises(SchemaError, match=r"column 'position' row 4 is nan"):
        discover(rows.assign(position=rows[POSITION].where(rows.index != 4)), FEATURES, DiscoveryConfig())
    with pytest.raises(SchemaError, match="'click' is constant"):
        discover(rows.assign(click=0.0), FEATURES, DiscoveryConfig())
    with pytest.raises(ConfigError, match=r"discovery.alpha: must be in \(0, 1\), got 1.5"):
        validate_discovery_config(DiscoveryConfig(alpha=1.5))


# ---------------------------------------------------------------------------------------------
def zipf_sessions(n_sessions: int, n_queries: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_queries + 1) ** 1.2
    queries = rng.choice(n_queries, size=n_sessions, p=weights / weights.sum())
    return pd.DataFrame({SESSION_ID: np.arange(n_sessions), QUERY_ID: queries})


def test_stratified_sampling_keeps_tail_queries():
    sessions = zipf_sessions(5000, 400, seed=0)
    strata = query_strata(sessions, 4)
    sizes = strata.value_counts()
    assert sizes.sum() == sessions[QUERY_ID].nunique() and sizes.max() - sizes.min() <= 1
    frequency = sessions[QUERY_ID].value_counts()
    assert frequency[strata.index[strata == 0]].min() >= frequency[strata.index[strata == 3]].max()
    ids = sample_session_ids(sessions, 400, stratify=True, n_strata=4, seed=1)
    chosen = sessions.set_index(SESSION_ID).loc[ids, QUERY_ID].map(strata)
    counts = chosen.value_counts()
    assert len(ids) == len(set(ids)) == 400 and counts.sum() == 400
    tail_available = int(sessions[QUERY_ID].map(strata).eq(3).sum())
    assert counts[3] == min(100, tail_available) and counts.min() >= min(100, tail_available)
    uniform = sessions.set_index(SESSION_ID).loc[sample_session_ids(sessions, 400, stratify=False, n_strata=4, seed=1),
                                                  QUERY_ID].map(strata)
    assert uniform.eq(3).sum() < counts[3]
    np.testing.assert_array_equal(ids, sample_session_ids(sessions, 400, stratify=True, n_strata=4, seed=1))
    assert len(sample_session_ids(sessions, 10_000, stratify=True, n_strata=4, seed=1)) == 5000


def test_one_row_per_session_is_seeded():
    rows = pd.DataFrame({SESSION_ID: np.repeat(np.arange(50), 5), POSITION: np.tile(np.arange(1, 6), 50)})
    a, b = one_row_per_session(rows, 3), one_row_per_session(rows.sample(frac=1, random_state=0), 3)
    assert sorted(a[SESSION_ID]) == list(range(50))
    pd.testing.assert_frame_equal(a, b)
    assert a[POSITION].nunique() > 1


# ---------------------------------------------------------------------------------------------
def write_sessions(directory: Path, n_sessions: int, seed: int) -> None:
    """A small sessions table in two Parquet partitions, with a relevance score column."""
    rng = np.random.default_rng(seed)
    queries = zipf_sessions(n_sessions, 60, seed)[QUERY_ID].to_numpy()
    parts = []
    for s in range(n_sessions):
        r = rng.normal(size=5)
        order = np.argsort(-(r + 0.5 * rng.normal(size=5)))
        position = np.empty(5, int)
        position[order] = np.arange(1, 6)
        media = rng.choice([0, 1, 2], 5)
        click = rng.random(5) < expit(2 * r - 0.6 * position + 2.0 * (media == 1) + 1)
        parts.append(pd.DataFrame({SESSION_ID: s, QUERY_ID: queries[s], POSITION: position.astype("int16"),
                                   CLICK: click.astype("int8"), "media_type": media,
                                   "serp_height": 100 + 30 * (media == 2) + rng.normal(0, 5, 5), "score": r}))
    table = pd.concat(parts, ignore_index=True)
    directory.mkdir(parents=True)
    half = n_sessions // 2
    table[table[SESSION_ID] < half].to_parquet(directory / "part-0.parquet", index=False)
    table[table[SESSION_ID] >= half].to_parquet(directory / "part-1.parquet", index=False)


@pytest.mark.e2e
def test_discover_stage_writes_epoch_artifacts(tmp_path, dask_client):
    from wpultr.rundir.files import RunDir
    RunDir.create(tmp_path)           # the stage writes a run's directory (its files there are the run's own)
    sessions_dir = tmp_path / "data" / "sessions"
    write_sessions(sessions_dir, 600, seed=0)
    from wpultr.settings.discovery import PreprocessConfig
    encoder = fit_page_encoder(sessions_dir, FEATURES, PreprocessConfig(), tmp_path / "features", dask_client)
    assert (tmp_path / "features" / "page_features.json").is_file()
    assert np.all(np.diff(encoder.encoders_[POSITION].scores_) < 0)
    cfg = DiscoveryConfig(n_sessions=300, ci_test="fisherz", n_bootstrap=2)
    result = discover_epoch(sessions_dir, "score", FEATURES, cfg, tmp_path, 0, encoder_dir=tmp_path / "features",
                            client=dask_client, seed=5)
    out = tmp_path / "epoch_0"
    assert sorted(p.name for p in out.iterdir()) == ["biases.json", "graph.json", "sample.parquet"]
    loaded = DiscoveredGraph.load(out / "graph.json")
    assert loaded.edges == result.graph.edges and loaded.meta["sample"]["n_rows"] == 300
    sample = pd.read_parquet(out / "sample.parquet")
    assert sample[SESSION_ID].is_unique and len(sample) == 300
    scores = sample[[SESSION_ID, POSITION, RELEVANCE_SCORE]]
    scores.to_parquet(tmp_path / "scores.parquet")
    again = discover_epoch(sessions_dir, tmp_path / "scores.parquet", FEATURES, cfg, tmp_path, 0,
                           encoder_dir=tmp_path / "features", client=dask_client, seed=5)
    assert again.graph.edges == result.graph.edges              # same seed, scores from a file: same graph
    with pytest.raises(SchemaError, match="neither a column"):
        discover_epoch(sessions_dir, "no_such_scores", FEATURES, cfg, tmp_path, 1, encoder_dir=tmp_path / "features")


@pytest.mark.e2e
def test_discover_stage_hybrid_reads_whole_sessions_for_click_tests(tmp_path, dask_client):
    sessions_dir = tmp_path / "data" / "sessions"
    write_sessions(sessions_dir, 600, seed=1)
    from wpultr.settings.discovery import PreprocessConfig
    fit_page_encoder(sessions_dir, FEATURES, PreprocessConfig(), tmp_path / "features", dask_client)
    cfg = DiscoveryConfig(n_sessions=150, ci_test="hybrid", click_rows=1500, n_bootstrap=1, max_depth=1)
    result = discover_epoch(sessions_dir, "score", FEATURES, cfg, tmp_path, 0, encoder_dir=tmp_path / "features",
                            client=dask_client, seed=5)
    meta = DiscoveredGraph.load(tmp_path / "epoch_0" / "graph.json").meta
    assert meta["click_rows"] == {"n_rows": 1500, "n_sessions": 300,
                                  "source": "every shown result of the sampled sessions"}
    assert meta["sample"]["n_rows"] == 150 and meta["test"]["name"] == "hybrid"
    evidence = {e["node"]: e for e in meta["click_evidence"]}
    assert set(evidence) == {RELEVANCE_SCORE, POSITION, "media_type", "serp_height"}
    assert all(e["effect"]["rows"] == 1500 and e["stability"] in (0.0, 1.0) for e in evidence.values())
    assert evidence["media_type"]["in_graph"] and evidence["media_type"]["p_value"] < 1e-6
    assert result.graph.adjacent("media_type", CLICK)


@pytest.mark.e2e
def test_discover_command_writes_graph_and_biases(tmp_path, dask_client):
    """`wpultr discover`: sessions directory + scores (a column, then a file) + page features from a config."""
    import json

    import yaml
    from typer.testing import CliRunner

    from wpultr.cli import app
    sessions_dir = tmp_path / "sessions"
    write_sessions(sessions_dir, 400, seed=1)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "seed": 3,
        "data": {"page_features": {POSITION: "ordinal", "media_type": "categorical", "serp_height": "continuous"}},
        "discovery": {"ci_test": "fisherz", "n_sessions": 250, "n_bootstrap": 1}}))
    out = tmp_path / "run"
    runner = CliRunner()
    address = ["--scheduler", dask_client.scheduler.address]
    first = runner.invoke(app, ["discover", str(sessions_dir), "--scores", "score", "--out", str(out),
                                "--config", str(config), *address])
    assert first.exit_code == 0, first.output
    assert "fitted page-feature encoder" in first.output and "click parents:" in first.output
    assert (out / "page_features" / "page_features.json").is_file()
    graph = DiscoveredGraph.load(out / "epoch_0" / "graph.json")
    assert graph.meta["test"]["name"] == "fisherz" and graph.meta["sample"]["n_rows"] == 250
    biases = json.loads((out / "epoch_0" / "biases.json").read_text())
    assert RELEVANCE_SCORE in biases["click_parents"] and prior_violations(graph, FEATURE_NAMES) == []

    scores = pd.read_parquet(sessions_dir)[[SESSION_ID, POSITION, "score"]].rename(columns={"score": RELEVANCE_SCORE})
    scores.to_parquet(tmp_path / "scores.parquet")
    second = runner.invoke(app, ["discover", str(sessions_dir), "--scores", str(tmp_path / "scores.parquet"),
                                 "--out", str(out), "--config", str(config), "--epoch", "1",
                                 "--set", "discovery.n_bootstrap=0", *address])
    assert second.exit_code == 0, second.output
    assert "fitted page-feature encoder" not in second.output            # reused from OUT/page_features
    again = DiscoveredGraph.load(out / "epoch_1" / "graph.json")
    assert again.meta["n_bootstrap"] == 0 and again.meta["epoch"] == 1

    bad = runner.invoke(app, ["discover", str(sessions_dir), "--scores", "nope", "--out", str(out),
                              "--config", str(config), *address])
    assert bad.exit_code == 2 and "scores 'nope': neither a column" in bad.output
    other = runner.invoke(app, ["discover", str(sessions_dir), "--scores", "score", "--out", str(out)])
    assert other.exit_code == 2 and "was fitted for ['media_type', 'position', 'serp_height']" in other.output
    missing = runner.invoke(app, ["discover", str(tmp_path / "absent"), "--scores", "score", "--out", str(out)])
    assert missing.exit_code == 2 and "absent: sessions table directory not found" in missing.output


def test_tests_without_relevance_are_reused_and_give_the_graph_a_fresh_run_gives():
    from wpultr.causal.parallel_pc import p_values_without, test_nodes
    assert (test_nodes("0;3|1.2") == {0, 1, 2, 3} and test_nodes("1;4") == {1, 4}
            and test_nodes("1.2;5|0") == {0, 1, 2, 5})
    assert p_values_without({"0;3|1": 0.1, "1;3": 0.2, "2;3|0.1": 0.3, "data_hash": 1.0}, {0}) == {"1;3": 0.2}
    rows = whole_page_rows(600, seed=4)
    cfg = DiscoveryConfig(ci_test="fisherz", n_bootstrap=0)
    first = discover(rows, FEATURES, cfg, seed=0)
    reuse = first.reusable_p_values()
    assert reuse.p_values and all(0 not in test_nodes(k) for k in reuse.p_values)
    moved = rows.assign(**{RELEVANCE_SCORE: rows[RELEVANCE_SCORE] + np.random.default_rng(1).normal(size=len(rows))})
    fresh = discover(moved, FEATURES, cfg, seed=0)
    again = discover(moved, FEATURES, cfg, seed=0, reuse=reuse)
    assert again.graph.edges == fresh.graph.edges
    assert again.runs[0].p_values == pytest.approx(fresh.runs[0].p_values)
    assert again.graph.meta["pc"]["tests_reused"] == len(reuse.p_values) > 0
    assert sum(level["tests"] for level in again.runs[0].levels) < sum(level["tests"] for level in fresh.runs[0].levels)
    other_order = discover(moved, FEATURES[:2], cfg, seed=0, reuse=reuse)       # other nodes: nothing reused
    assert other_order.graph.meta["pc"]["tests_reused"] == 0


@pytest.mark.e2e
def test_discover_stage_tests_page_features_within_documents_when_the_logs_have_doc_ids(tmp_path, dask_client):
    sessions_dir = tmp_path / "data" / "sessions"
    write_sessions(sessions_dir, 600, seed=1)
    for part in sessions_dir.glob("*.parquet"):          # each result one of 4 documents of its query
        table = pd.read_parquet(part)
        table[DOC_ID] = table[QUERY_ID].astype(str) + "-" + (table[SESSION_ID] * 5 + table[POSITION]).mod(4).astype(str)
        table.to_parquet(part, index=False)
    from wpultr.settings.discovery import PreprocessConfig
    fit_page_encoder(sessions_dir, FEATURES, PreprocessConfig(), tmp_path / "features", dask_client)
    cfg = DiscoveryConfig(n_sessions=150, ci_test="hybrid", click_rows=1500, n_bootstrap=1, max_depth=1)
    result = discover_epoch(sessions_dir, "score", FEATURES, cfg, tmp_path, 0, encoder_dir=tmp_path / "features",
                            client=dask_client, seed=5)
    meta = DiscoveredGraph.load(tmp_path / "epoch_0" / "graph.json").meta
    assert meta["test"]["click_test"].startswith("within-document") and meta["click_rows"]["n_documents"] > 0
    evidence = {e["node"]: e for e in meta["click_evidence"]}
    assert "within_document" not in evidence[RELEVANCE_SCORE]
    media = evidence["media_type"]
    assert media["verdict"] == "edge" and result.graph.adjacent("media_type", CLICK)
    assert max(level["ratio"] for level in media["within_document"]["levels"]) > 1.5
    assert 0 < media["within_document"]["rows"] <= 1500


# --- discovery.click_error: page feature → click edges decided per graph (issue 30) -----------------------------
def test_holm_step_down_by_hand():
    # sorted 0.01 ≤ 0.05/3, 0.02 ≤ 0.05/2, 0.04 ≤ 0.05/1: all kept (adjusted 0.03, 0.04, 0.04)
    kept = holm_adjusted({"a": 0.04, "b": 0.01, "c": 0.02})
    assert kept == pytest.approx({"b": 0.03, "c": 0.04, "a": 0.04}) and all(p <= 0.05 for p in kept.values())
    # 0.02 > 0.05/3 stops at the first step: none kept (adjusted 0.06 each, made non-decreasing)
    none = holm_adjusted({"a": 0.02, "b": 0.03, "c": 0.04})
    assert none == pytest.approx({"a": 0.06, "b": 0.06, "c": 0.06})
    assert holm_adjusted({"a": 0.6, "b": 0.5}) == {"b": 1.0, "a": 1.0} and holm_adjusted({}) == {}


def chance_click_rows(n: int = 1000, seed: int = 0, k: float = 0.08) -> pd.DataFrame:
    """Clicks caused by r̂ and shown_as_video; font_size and snippet_length do not cause them but correlate with
    the click's residual given its parents at k exactly (each test's p ≈ 0.04: what a null feature shows in 1 of 25
    graphs), and with nothing else."""
    rng = np.random.default_rng(seed)
    r, a = rng.normal(size=n), rng.normal(size=n)
    c = (rng.random(n) < expit(1.5 * r + a)).astype(float)
    basis = np.linalg.qr(np.column_stack([np.ones(n), r, a, c, rng.normal(size=(n, 2))]))[0] * np.sqrt(n)
    chance = [k * basis[:, 3] + np.sqrt(1 - k * k) * basis[:, j] for j in (4, 5)]
    return pd.DataFrame({RELEVANCE_SCORE: r, "shown_as_video": a, "font_size": chance[0],
                         "snippet_length": chance[1], CLICK: c})


def test_per_graph_click_error_removes_the_chance_click_parents_per_edge_keeps(tmp_path):
    rows = chance_click_rows()
    features = tuple(PageFeature(n, FeatureKind.CONTINUOUS) for n in ("shown_as_video", "font_size", "snippet_length"))
    per_edge = discover(rows, features, DiscoveryConfig(ci_test="fisherz", n_bootstrap=0, click_error="per_edge")).graph
    assert set(identify_biases(per_edge).click_parents) == {RELEVANCE_SCORE, "shown_as_video", "font_size",
                                                             "snippet_length"}
    assert all("holm" not in e for e in per_edge.meta["click_evidence"])

    graph = discover(rows, features, DiscoveryConfig(ci_test="fisherz", n_bootstrap=0)).graph   # the default
    assert graph.meta["test"]["click_error"] == "per_graph"
    assert set(identify_biases(graph).click_parents) == {RELEVANCE_SCORE, "shown_as_video"}     # what BAL reads
    graph.save(tmp_path / "graph.json")
    evidence = {e["node"]: e for e in DiscoveredGraph.load(tmp_path / "graph.json").meta["click_evidence"]}
    assert "holm" not in evidence[RELEVANCE_SCORE] and evidence[RELEVANCE_SCORE]["verdict"] == "edge"   # the prior
    assert evidence["shown_as_video"]["holm"]["kept"] and evidence["shown_as_video"]["verdict"] == "edge"
    for name in ("font_size", "snippet_length"):
        holm = evidence[name]["holm"]
        assert 0.025 < holm["p_value"] <= 0.05 and holm["adjusted_p"] == pytest.approx(2 * holm["p_value"])
        assert holm["family"] == 3 and not holm["kept"] and "Holm" in holm["rule"]
        assert evidence[name]["verdict"] == f"no edge (Holm: adjusted p {holm['adjusted_p']:.2g} > 0.05)"
        assert not evidence[name]["in_graph"]
    assert "removed by Holm" in to_text(graph) and "decided per graph" in to_text(graph)


def test_click_error_is_checked():
    with pytest.raises(ConfigError, match=r"discovery.click_error: must be 'per_graph' or 'per_edge', got 'per_test'"):
        DiscoveryConfig(click_error="per_test")


@pytest.mark.parametrize("ci_test", ["hybrid", "fisherz"])
def test_bal_and_the_discover_stage_draw_discovery_rows_with_one_sampler(tmp_path, ci_test):
    """BAL's in-memory rows (`bal.rows.GraphRows`) and the discover stage's sample read from the partitions
    (`discover_stage.sample_rows`) come from one sampler with one seed rule (`draw_discovery_sessions`): the same
    seed draws the same shown results for the KCI sample and the same whole sessions for hybrid's click tests."""
    from wpultr.bal.rows import GraphRows, discovery_seed
    from wpultr.causal.discover_stage import sample_rows
    from wpultr.config import RunConfig
    sessions_dir = tmp_path / "sessions"
    write_sessions(sessions_dir, 400, seed=1)
    frame = pd.concat([pd.read_parquet(sessions_dir / f"part-{i}.parquet") for i in (0, 1)], ignore_index=True)
    cfg = RunConfig(seed=2)
    cfg.discovery = DiscoveryConfig(n_sessions=100, ci_test=ci_test, click_rows=600)
    in_memory = GraphRows.draw(frame, cfg)
    kci, whole = sample_rows(sessions_dir, "score", FEATURES, cfg.discovery, discovery_seed(cfg))
    keys = [SESSION_ID, POSITION]
    pd.testing.assert_frame_equal(kci[keys].reset_index(drop=True),
                                  frame.iloc[in_memory.kci][keys].reset_index(drop=True))
    if ci_test != "hybrid":
        assert whole is None and in_memory.click_rows is None
        return
    click = frame.iloc[in_memory.click_rows][keys]              # in training order; the stage's by session, position
    pd.testing.assert_frame_equal(whole[keys].reset_index(drop=True),
                                  click.sort_values(keys).reset_index(drop=True))
    assert np.array_equal(in_memory.click_sessions, click[SESSION_ID].to_numpy()) and len(whole) == 600
