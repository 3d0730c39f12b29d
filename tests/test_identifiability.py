"""The identifiability graph, node intervention and merging, the pre-flight, the simulator's position
blocks and `wpultr identifiability check` (Identifiability Matters, ICML 2024)."""
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from wpultr.cli import app
from wpultr.config import config_from_dict
from wpultr.errors import ConfigError
from wpultr.evaluation import metrics
from wpultr.identifiability.factor_graph import build_graph
from wpultr.identifiability.intervention import append_sessions, simulate_interventions
from wpultr.identifiability.preflight import IdentifiabilityError, bias_factors, preflight, summary_entry
from wpultr.identifiability.repair import apply_merges, merged_mapping, plan_interventions, plan_merges, swap_cost
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate
from wpultr.simulate.logging_policy import candidate_blocks, shown_order


def _log(rows):
    """A sessions table from (doc, position[, click[, extra columns]]) rows, one session per row."""
    frame = pd.DataFrame(rows, columns=["doc_id", "position", "click"][:len(rows[0])])
    if "click" not in frame:
        frame["click"] = 0
    frame.insert(0, "query_id", "q")
    frame.insert(0, "session_id", np.arange(len(frame)))
    return frame


def _components(ig):
    return [[ig.node_name(n) for n in members] for members in ig.components()]


# ---------------------------------------------------------------------------------------------
# Theorem 1 on the paper's Figure 1
# ---------------------------------------------------------------------------------------------
def test_figure_1_left_is_connected_through_features_1_and_3():
    # bias factors 1-2 share feature 1, 2-3 share feature 3: one component, identifiable
    ig = build_graph(_log([("x1", 1), ("x1", 2), ("x2", 1), ("x3", 2), ("x3", 3)]), ["position"])
    assert ig.connected and _components(ig) == [["1", "2", "3"]]
    assert ig.summary()["n_edges"] == 2            # 1-2 and 2-3, no 1-3


def test_figure_1_right_leaves_bias_factor_3_isolated():
    ig = build_graph(_log([("x1", 1), ("x1", 2), ("x2", 1), ("x3", 3)]), ["position"])
    assert not ig.connected
    assert _components(ig) == [["1", "2"], ["3"]]


def test_one_document_under_all_factors_is_a_clique():
    ig = build_graph(_log([("x", p) for p in (1, 2, 3, 4)]), ["position"])
    assert ig.connected and ig.summary()["n_edges"] == 6


def test_without_doc_id_the_feature_vector_identifies_a_document():
    frame = pd.DataFrame({"session_id": [0, 1, 2], "position": [1, 2, 3], "click": [1, 0, 0],
                          "features": [[0.5, 1.0], [0.5, 1.0], [0.25, 1.0]]})
    ig = build_graph(frame, ["position"])
    assert _components(ig) == [["1", "2"], ["3"]]


def test_click_share_of_the_largest_component():
    ig = build_graph(_log([("a", 1, 1), ("a", 2, 1), ("b", 3, 1), ("b", 4, 0), ("c", 5, 1)]), ["position"])
    summary = ig.summary()
    assert summary["n_components"] == 3
    assert summary["largest_click_share"] == pytest.approx(0.5)       # 2 of 4 clicks under {1, 2}


# ---------------------------------------------------------------------------------------------
# Node intervention (Eq. 3-6) and node merging (Eq. 7-8)
# ---------------------------------------------------------------------------------------------
def _blocks_log(blocks, docs_per_block=3, sessions=4, seed=0):
    """Documents of block b only ever shown within positions `blocks[b]`: one component per block."""
    rng = np.random.default_rng(seed)
    rows = []
    for b, positions in enumerate(blocks):
        for d in range(docs_per_block):
            for _ in range(sessions):
                p = int(rng.choice(positions))
                rows.append((f"b{b}d{d}", p, int(rng.random() < 0.6 / p)))
    return _log(rows)


def test_intervention_connects_k_components_with_k_minus_1_swaps():
    frame = _blocks_log([[1, 2], [3, 4], [5, 6], [7, 8]])
    ig = build_graph(frame, ["position"])
    assert ig.n_components == 4
    swaps = plan_interventions(ig)
    assert len(swaps) == 3
    # run each swap once: the document shows under the target bias factor
    shown = pd.DataFrame([(s.doc_id, int(s.to_values[0]), 0) for s in swaps], columns=["doc_id", "position", "click"])
    after = build_graph(pd.concat([frame, _log(list(shown.itertuples(index=False, name=None)))]), ["position"])
    assert after.connected
    joined = {tuple(sorted(s.joins)) for s in swaps}
    assert len(joined) == 3                       # a spanning tree: every swap joins a new pair


def test_intervention_cost_prefers_likely_clicks_and_picks_the_cheapest_pair():
    # Eq. 3 (derived): 1/p1 + 1/p2 - 2 falls as the click probabilities rise
    assert swap_cost(0.9, 1.0, 0.5) < swap_cost(0.3, 1.0, 0.5) < swap_cost(0.3, 0.2, 0.5)
    assert swap_cost(0.5, 1.0, 1.0) == pytest.approx(2.0)
    # two components; the best swap moves the document clicked most into the other's most-examined node
    frame = _log([("hot", 1, 1), ("hot", 2, 1), ("cold", 1, 0), ("cold", 2, 0), ("hot", 1, 1),
                  ("far", 3, 1), ("far", 4, 0), ("far", 3, 0)])
    ig = build_graph(frame, ["position"])
    relevance = np.zeros(len(ig.doc_keys))
    relevance[ig.doc_keys.index[ig.doc_keys["doc_id"] == "hot"][0]] = 0.9
    relevance[ig.doc_keys.index[ig.doc_keys["doc_id"] == "cold"][0]] = 0.1
    relevance[ig.doc_keys.index[ig.doc_keys["doc_id"] == "far"][0]] = 0.2
    observation = np.array([1.0, 0.6, 0.5, 0.2])     # positions 1..4
    (swap,) = plan_interventions(ig, relevance, observation)
    assert (swap.doc_id, swap.from_node, swap.to_node) == ("hot", "1", "3")
    assert swap.cost == pytest.approx(float(swap_cost(0.9, 1.0, 0.5)))


def test_a_document_clicked_once_by_luck_is_no_anchor_when_swaps_get_n_sessions():
    # "lucky": one impression, one click (plug-in r̂ = 1); "steady": 40 impressions at position 1, 30 clicks
    frame = _log([("lucky", 2, 1)] + [("steady", 1, int(i < 30)) for i in range(40)] + [("steady", 2, 0)]
                 + [("far", 3, 1), ("far", 3, 0)])
    ig = build_graph(frame, ["position"])
    (paper_form,) = plan_interventions(ig)                 # both rates averaged over N: r̂ alone decides
    (with_n,) = plan_interventions(ig, sessions=40)        # the logged side has only n(x, t1) impressions
    assert paper_form.doc_id == "lucky"
    assert with_n.doc_id == "steady" and with_n.from_node == "1"
    assert swap_cost(0.5, 1.0, 1.0, source_share=0.25) == pytest.approx(4 * 1.0 + 1.0)


def test_merging_joins_the_closest_positions_and_the_mapping_connects_the_graph():
    frame = _blocks_log([[1, 2], [3, 4], [5]])
    ig = build_graph(frame, ["position"])
    merges = plan_merges(ig)
    assert sorted((m.a, m.b) for m in merges) == [("2", "3"), ("4", "5")]     # Eq. 7: |Δposition| = 1
    mapping = merged_mapping(ig, merges)
    assert len(mapping) == 2
    merged = apply_merges(frame, ig, mapping)
    assert build_graph(merged, ["position"]).connected
    assert len(merged) == len(frame) and merged["click"].equals(frame["click"])


def test_merging_prefers_media_types_at_one_position_over_positions():
    # media type fixed per document: one component per media type
    frame = _log([("a", 1), ("a", 2), ("b", 1), ("b", 2)])
    frame["media_type"] = np.where(frame["doc_id"] == "a", 0, 2)
    ig = build_graph(frame, ["position", "media_type"])
    assert ig.n_components == 2
    (merge,) = plan_merges(ig, {"media_type": "categorical"})
    assert merge.a_values[0] == merge.b_values[0]          # same position, media types 0 and 2
    assert {merge.a_values[1], merge.b_values[1]} == {0, 2}


# ---------------------------------------------------------------------------------------------
# The pre-flight (train stage) on a log where media type is fixed per document
# ---------------------------------------------------------------------------------------------
def _media_fixed_log():
    rng = np.random.default_rng(3)
    rows = []
    for s in range(60):
        docs = rng.permutation(6)
        for p, d in enumerate(docs[:4], start=1):
            rows.append((s, "q", f"d{d}", p, int(rng.random() < 0.3), int(d % 2)))
    return pd.DataFrame(rows, columns=["session_id", "query_id", "doc_id", "position", "click", "media_type"])


def _bal_config(on_disconnected):
    return config_from_dict({"train": {"method": "bal"},
                             "data": {"page_features": {"position": "ordinal", "media_type": "categorical"}},
                             "identifiability": {"on_disconnected": on_disconnected}})


def test_preflight_warns_when_media_type_is_fixed_per_document(tmp_path, caplog):
    frame = _media_fixed_log()
    cfg = _bal_config("warn")
    assert bias_factors(cfg) == ["position", "media_type"]
    out, report = preflight(frame, cfg, tmp_path)
    assert out is frame
    assert report["n_components"] == 2 and not report["connected"]
    assert "2 disconnected components" in report["warning"] and "media_type=1" in report["warning"]
    assert "disconnected components" in caplog.text
    assert (tmp_path / "train" / "identifiability.png").stat().st_size > 1000
    entry = summary_entry(report)
    assert entry["action"] == "none" and len(entry["components"]) == 2
    # position alone varies for every document: connected, nothing to say
    _, position_only = preflight(frame, config_from_dict({"train": {"method": "dla"}}))
    assert position_only["connected"] and "warning" not in position_only


def test_preflight_merge_rewrites_the_factor_columns_and_records_the_mapping():
    frame = _media_fixed_log()
    out, report = preflight(frame, _bal_config("merge"))
    assert report["action"] == "merge" and report["components_after"] == 1
    assert len(report["mapping"]) == 1
    moved = report["mapping"][0]
    assert moved["values"][0] == moved["as_values"][0]          # same position, other media type
    assert (out["media_type"] != frame["media_type"]).sum() == ((frame["position"] == moved["values"][0])
                                                               & (frame["media_type"] == moved["values"][1])).sum()


def test_preflight_fail_raises_naming_the_components():
    with pytest.raises(IdentifiabilityError, match=r"2 disconnected components \{position=1, media_type=0"):
        preflight(_media_fixed_log(), _bal_config("fail"))


def test_bal_variants_check_the_factors_they_model():
    pages = {"position": "ordinal", "media_type": "categorical", "serp_height": "continuous"}
    def cfg(bal):
        return config_from_dict({"train": {"method": "bal"}, "data": {"page_features": pages}, "bal": bal})
    assert bias_factors(cfg({})) == ["position", "media_type"]              # continuous features are no nodes
    assert bias_factors(cfg({"graph": "position"})) == ["position"]         # PB-BAL
    assert bias_factors(cfg({"features": ["media_type"]})) == ["media_type"]   # BAL-MM
    explicit = config_from_dict({"train": {"method": "naive"}, "identifiability": {"factors": ["position"]}})
    assert bias_factors(explicit) == ["position"]


def test_intervene_on_logs_that_were_not_simulated_names_the_key():
    cfg = config_from_dict({"train": {"method": "dla"}, "identifiability": {"on_disconnected": "intervene"},
                            "data": {"source": "parquet", "train": ["logs/*.parquet"],
                                     "page_features": {"position": "ordinal"}}})
    with pytest.raises(ConfigError, match=r"on_disconnected: 'intervene' needs data.source 'simulate'"):
        preflight(_blocks_log([[1, 2], [3, 4]]), cfg)


def test_methods_that_model_no_bias_are_not_checked():
    out, report = preflight(_media_fixed_log(), config_from_dict({"train": {"method": "naive"}}))
    assert report == {"checked": False, "reason": "method 'naive' models no bias factor"}


# ---------------------------------------------------------------------------------------------
# Simulator: K position blocks, and the intervention replayed through it
# ---------------------------------------------------------------------------------------------
def _sim_cfg(blocks):
    return SimulateConfig(n_queries=20, docs_per_query=10, results_per_page=10, n_sessions=200,
                          n_annotated_queries=10, user_model="pbm", position_blocks=blocks)


@pytest.mark.parametrize("blocks", [1, 2, 3, 4])
def test_position_blocks_give_that_many_components(blocks):
    ig = build_graph(simulate(_sim_cfg(blocks), seed=1).sessions, ["position"])
    assert ig.n_components == blocks
    # each component is one contiguous block of positions
    expected = sorted([[str(p + 1) for p in block] for block in np.array_split(np.arange(10), blocks)])
    assert sorted(_components(ig)) == expected


def test_one_block_keeps_the_logging_order_and_its_random_draws():
    scores = np.random.default_rng(0).normal(size=(50, 10)).round(1)      # ties broken by the random draws
    plain = np.lexsort((np.random.default_rng(5).random(scores.shape), -scores), axis=-1)[:, :6]
    assert np.array_equal(shown_order(scores, 6, np.random.default_rng(5)), plain)
    assert candidate_blocks(scores, 1) is None
    blocks = candidate_blocks(scores, 2)
    order = shown_order(scores, 6, np.random.default_rng(5), blocks)
    assert (np.take_along_axis(blocks, order, axis=1) == np.array([0, 0, 0, 1, 1, 1])).all()


def test_simulated_intervention_connects_the_logs():
    cfg = _sim_cfg(3)
    frame = simulate(cfg, seed=2).sessions
    ig = build_graph(frame, ["position"])
    swaps = plan_interventions(ig)
    assert len(swaps) == 2
    extra = simulate_interventions(cfg, 2, swaps, ["position"], 5, int(frame["session_id"].max()) + 1)
    assert extra["session_id"].nunique() == 10 and extra["session_id"].min() > frame["session_id"].max()
    for swap in swaps:
        at_target = extra[(extra["doc_id"] == swap.doc_id) & (extra["position"] == int(swap.to_values[0]))]
        assert at_target["session_id"].nunique() == 5
    assert build_graph(append_sessions(frame, extra), ["position"]).connected


def test_preflight_intervene_adds_the_swap_sessions():
    cfg = config_from_dict({"train": {"method": "dla"}, "data": {"simulate": {
        "n_queries": 20, "docs_per_query": 10, "results_per_page": 10, "n_sessions": 200, "n_annotated_queries": 10,
        "user_model": "pbm", "position_blocks": 2}},
        "identifiability": {"on_disconnected": "intervene", "intervention_sessions": 7}})
    frame = simulate(cfg.data.simulate, seed=cfg.seed).sessions
    out, report = preflight(frame, cfg)
    assert report["action"] == "intervene" and report["components_after"] == 1
    assert report["intervention_sessions"] == 7 and len(out) == len(frame) + 70


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------
def test_mcc_on_a_hand_computed_case():
    # means 2 and 2; Σ(t-2)(p-2) = 1; Σ(t-2)^2 = Σ(p-2)^2 = 2  ->  1/2
    assert metrics.mcc([1.0, 2.0, 3.0], [1.0, 3.0, 2.0]) == pytest.approx(0.5)
    # scale invariance (Definition 1: identifiable up to a scaling transformation) and an independent formula
    rng = np.random.default_rng(0)
    true, pred = rng.random(50), rng.random(50)
    assert metrics.mcc(true, 3.0 * true) == pytest.approx(1.0)
    z = lambda v: (v - v.mean()) / v.std()          # noqa: E731
    assert metrics.mcc(true, pred) == pytest.approx(float(np.mean(z(true) * z(pred))))


def test_click_mse_with_and_without_the_free_scale():
    assert metrics.click_mse([0.2, 0.4], [0.1, 0.2]) == pytest.approx((0.1 ** 2 + 0.2 ** 2) / 2)
    assert metrics.click_mse([0.2, 0.4], [0.1, 0.2], fit_scale=True) == pytest.approx(0.0)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
def test_cli_check_prints_json_and_a_table(tmp_path):
    path = tmp_path / "sessions.parquet"
    frame = _media_fixed_log()
    frame.to_parquet(path)
    result = CliRunner().invoke(app, ["identifiability", "check", str(path), "--factors", "position,media_type",
                                      "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["n_components"] == 2 and report["factors"] == ["position", "media_type"]
    assert [c["size"] for c in report["components"]] == [4, 4]
    assert sum(c["click_share"] for c in report["components"]) == pytest.approx(1.0, abs=1e-3)
    assert len(report["interventions"]) == 1 and len(report["merges"]) == 1
    table = CliRunner().invoke(app, ["identifiability", "check", str(path), "--factors", "position"])
    assert table.exit_code == 0 and "components: 1 (connected: identifiable)" in table.output


def test_cli_check_fail_exits_2_naming_the_components(tmp_path):
    path = tmp_path / "sessions.parquet"
    _log([("x1", 1), ("x1", 2), ("x2", 3)]).to_parquet(path)
    result = CliRunner().invoke(app, ["identifiability", "check", str(path), "--on-disconnected", "fail"])
    assert result.exit_code == 2
    assert "2 disconnected components {1; 2} | {3}" in result.output


# ---------------------------------------------------------------------------------------------
# The fully synthetic study's corpus (§5.1, Appendix C.1: data.simulate.corpus: onehot)
# ---------------------------------------------------------------------------------------------
ONEHOT = {"corpus": "onehot", "n_documents": 1000, "n_queries": 115, "docs_per_query": 10, "results_per_page": 10,
          "n_sessions": 1150, "n_annotated_queries": 20, "zipf_exponent": 0.0, "n_dense_features": 1,
          "user_model": "lbd", "user_model_params": {"eta": 0.0, "n_crux": 1},
          "logging_media_boost": [0.0, 0.0, 0.0, 0.0]}
PAPER_COMPONENTS = {1: [list(range(1, 11))], 2: [[1, 2, 3, 4], [5, 6, 7, 8, 9, 10]],
                    3: [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10]], 4: [[1, 2, 3], [4, 5, 6], [7, 8], [9, 10]]}


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_onehot_corpus_has_the_papers_k_component_designs_over_documents(k):
    logs = simulate(SimulateConfig(**ONEHOT, position_blocks=k), seed=5)
    sessions = logs.sessions
    ig = build_graph(sessions, ["position"], per_document=True)
    assert sorted(sorted(int(ig.node_name(n)) for n in c) for c in ig.components()) == PAPER_COMPONENTS[k]
    # a document keeps one grade and shows in one component only; each query always shows its designed order
    labels = logs.truth_sessions.groupby("doc_id")["true_label"].nunique()
    assert (labels == 1).all()
    first = sessions.groupby(["query_id", "position"])["doc_id"].nunique()
    assert (first == 1).all()
    # the eye-tracking PBM of Appendix C.2 (lbd at η = 0)
    exam = logs.truth_sessions.groupby("position")["examination_prob"].agg(["min", "max"])
    np.testing.assert_allclose(exam["min"], [0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06])
    np.testing.assert_allclose(exam["min"], exam["max"])


def test_query_document_pairs_never_join_positions_in_the_onehot_corpus():
    """Keyed by (query, doc), every pair sits at one position: the ranker that reads the doc_id alone is what
    makes shared documents join positions — the pre-flight keys by document for it."""
    sessions = simulate(SimulateConfig(**ONEHOT, position_blocks=1), seed=5).sessions
    assert build_graph(sessions, ["position"]).n_components == 10
    assert build_graph(sessions, ["position"], per_document=True).n_components == 1


def test_preflight_keys_documents_by_doc_id_for_the_embedding_backbone(tmp_path):
    sessions = simulate(SimulateConfig(**ONEHOT, position_blocks=2), seed=5).sessions
    cfg = {"data": {"source": "simulate", "page_features": {"position": "ordinal"}, "simulate": ONEHOT},
           "train": {"method": "dla"}, "identifiability": {"on_disconnected": "merge"}}
    _, embedding = preflight(sessions, config_from_dict({**cfg, "ranker": {"backbone": "embedding"}}))
    _, mlp = preflight(sessions, config_from_dict(cfg))
    assert (embedding["n_components"], embedding["components_after"]) == (2, 1)
    assert [m["a_values"][0] + m["b_values"][0] for m in embedding["merges"]] == [9]   # positions 4 and 5
    assert mlp["n_components"] == 10


def test_node_intervention_joins_the_onehot_designs_components():
    """K = 4: the K - 1 planned swaps, replayed by the simulator in the run's world (its seed), connect the IG."""
    sim = {**ONEHOT, "position_blocks": 4}
    sessions = simulate(SimulateConfig(**sim), seed=5).sessions
    cfg = config_from_dict({"seed": 5, "data": {"source": "simulate", "page_features": {"position": "ordinal"},
                                                "simulate": sim},
                            "train": {"method": "regression_em"}, "ranker": {"backbone": "embedding"},
                            "identifiability": {"on_disconnected": "intervene", "intervention_sessions": 50}})
    frame, report = preflight(sessions, cfg)
    assert (report["n_components"], len(report["interventions"]), report["components_after"]) == (4, 3, 1)
    assert len(frame) == len(sessions) + 3 * 50 * 10


def test_onehot_corpus_settings_are_checked():
    with pytest.raises(ConfigError, match=r"data\.simulate\.results_per_page: must equal docs_per_query"):
        SimulateConfig(**{**ONEHOT, "results_per_page": 5})
    with pytest.raises(ConfigError, match=r"data\.simulate\.n_documents: must be an integer in "
                                          r"\[docs_per_query \(10\), n_queries x docs_per_query \(1150\)\]"):
        SimulateConfig(**{**ONEHOT, "n_documents": 5000})
