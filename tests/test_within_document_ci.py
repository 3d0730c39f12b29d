"""The within-document click test (issue 30): it finds a real page-feature effect, it does not mistake a page
feature that tracks relevance for one, and it calls a feature fixed per document untestable."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from wpultr.causal.click_ci import ClickCITest
from wpultr.causal.discovery import DiscoveryConfig, discover
from wpultr.causal.graph import GRAPH_FILE, DiscoveredGraph, epoch_dir, to_text, within_document_rows
from wpultr.causal.hybrid_ci import split_click_rows, stack_click_rows
from wpultr.causal.within_document_ci import (
    DOCUMENT_CODE,
    NOT_TESTABLE,
    WithinDocumentTest,
    browsing_covariates,
    fit_stratum_poisson,
)
from wpultr.features.encoders import PageFeatureEncoder
from wpultr.report.html import click_edges_section
from wpultr.schema import BAIDU_PAGE_FEATURES, CLICK, POSITION, RELEVANCE_SCORE, SESSION_ID, query_document_pairs
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate
from wpultr.simulate.generate import TRUE_LABEL

NAMES = [RELEVANCE_SCORE] + [f.name for f in BAIDU_PAGE_FEATURES] + [CLICK]
MEDIA, POS, SHOWN = NAMES.index("media_type"), NAMES.index(POSITION), NAMES.index("serp_max_show_height")
VIDEO_FIRST = [0.0, 1.0, 2.0, 0.0]          # relevant documents are more often images and videos
PROMOTED = [0.0, 0.0, 1.0, 1.5]             # the logging ranker promotes videos and ads


def _rows(seed: int, n_sessions: int, **world) -> tuple[pd.DataFrame, np.ndarray]:
    """Every shown result of a simulated log as encoded nodes, r̂ = grade + N(0, 1) per (query, document)
    (an imperfect ranker: its score is a function of the document), with session_id and document codes."""
    logs = simulate(SimulateConfig(n_sessions=n_sessions, **world), seed=seed)
    s = logs.sessions.merge(logs.truth_sessions[[SESSION_ID, POSITION, TRUE_LABEL]], on=[SESSION_ID, POSITION])
    s = s.sort_values([SESSION_ID, POSITION]).reset_index(drop=True)
    codes = query_document_pairs(s)
    score = s[TRUE_LABEL].to_numpy() + np.random.default_rng(seed).normal(size=codes.max() + 1)[codes]
    nodes = pd.concat([pd.DataFrame({RELEVANCE_SCORE: score}), PageFeatureEncoder(BAIDU_PAGE_FEATURES).fit(s)
                       .transform(s).reset_index(drop=True), s[[CLICK]].astype(float)], axis=1)
    return nodes.assign(**{SESSION_ID: s[SESSION_ID].to_numpy(), DOCUMENT_CODE: codes}), codes


def _within(nodes: pd.DataFrame) -> WithinDocumentTest:
    return WithinDocumentTest(nodes[NAMES].to_numpy(float), NAMES.index(CLICK), nodes[SESSION_ID].to_numpy(),
                              nodes[DOCUMENT_CODE].to_numpy(), [MEDIA], POS, NAMES.index(RELEVANCE_SCORE))


def _relevance_conditioned(nodes: pd.DataFrame) -> ClickCITest:
    return ClickCITest(nodes[NAMES].to_numpy(float), NAMES.index(CLICK), nodes[SESSION_ID].to_numpy(), [MEDIA],
                       NAMES.index(RELEVANCE_SCORE))


@pytest.fixture(scope="module")
def tracking_null() -> pd.DataFrame:
    """Cascade users who ignore the media type; relevant documents are more often shown as videos and the logger
    promotes videos: the world where the r̂-conditioned test drew media_type → click."""
    return _rows(3, 12_000, user_model="cascade", media_type_consistency=0.5, media_label_tilt=VIDEO_FIRST,
                 logging_media_boost=PROMOTED)[0]


def test_it_accepts_a_null_where_the_feature_tracks_relevance(tracking_null):
    nodes = tracking_null
    given = [POS, SHOWN]
    old = _relevance_conditioned(nodes).p_value(MEDIA, given + [NAMES.index(RELEVANCE_SCORE)])
    assert old < 1e-3                                  # the failure: r̂ misses relevance the media type tracks
    within = _within(nodes)
    assert within.p_value(MEDIA, given) > 0.05
    effect = within.effect(MEDIA, given)
    assert effect["strata"] == "(query, document, position)"
    for level in effect["levels"]:                     # every type's click-rate ratio near 1, inside its interval
        assert 0.9 < level["ratio"] < 1.1 and level["ci95"][0] < level["ratio"] < level["ci95"][1]
    assert 0 < effect["documents"] < effect["sessions"] < effect["rows"] < len(nodes)


@pytest.mark.parametrize("user_model", ["pbm", "cascade"])
def test_it_rejects_a_real_effect_and_measures_it(user_model):
    nodes, _ = _rows(4, 8_000, user_model=user_model, media_type_consistency=0.5, media_label_tilt=VIDEO_FIRST,
                     logging_media_boost=PROMOTED, media_click_scale=[0.5, 0.5, 1.0, 0.5])   # videos read 2× as often
    within = _within(nodes)
    assert within.p_value(MEDIA, [POS, SHOWN]) < 1e-6
    levels = within.effect(MEDIA, [POS, SHOWN])["levels"]
    video = max(levels, key=lambda lv: lv["ratio"])
    assert video["ci95"][0] < 2.0 < video["ci95"][1] and video["ci95"][0] > 1.5
    assert within.p_value(POS, [MEDIA, SHOWN]) < 1e-6     # position: tested within documents, its own strata


def test_a_feature_fixed_per_document_is_not_testable_and_gets_no_edge(tmp_path):
    nodes, _ = _rows(5, 6_000, user_model="pbm", media_type_consistency=1.0, media_label_tilt=VIDEO_FIRST,
                     logging_media_boost=[0.0] * 4)
    sample = nodes.sample(frac=1.0, random_state=0).drop_duplicates(SESSION_ID).head(400).reset_index(drop=True)
    cfg = DiscoveryConfig(n_sessions=400, n_bootstrap=0, max_depth=1)
    graph = discover(sample[NAMES], BAIDU_PAGE_FEATURES, cfg, click_nodes=nodes).graph
    record = {e["node"]: e for e in graph.meta["click_evidence"]}
    assert record["media_type"]["verdict"] == NOT_TESTABLE and not graph.adjacent("media_type", CLICK)
    assert "media_type" in graph.meta["test"]["not_testable_within_documents"]
    assert record[POSITION]["verdict"] == "edge" and record[POSITION]["within_document"]["rows"] > 0
    old = discover(sample[NAMES], BAIDU_PAGE_FEATURES, DiscoveryConfig(n_sessions=400, n_bootstrap=0, max_depth=1,
                                                                       click_test="relevance"), click_nodes=nodes).graph
    assert "within_document" not in old.meta["click_evidence"][1]

    text = to_text(DiscoveredGraph.from_dict(graph.to_dict()))       # graph.json keeps it; graph show prints it
    assert "within documents" in text and NOT_TESTABLE in text
    rows = {r[0]: r for r in within_document_rows(graph.meta)}
    assert rows["media_type"][1] == NOT_TESTABLE and rows[POSITION][1] == "edge"
    graph.save(epoch_dir(tmp_path, 0) / GRAPH_FILE)                  # the run report's table
    section = click_edges_section(tmp_path)
    assert "how sure the graph is" in section and NOT_TESTABLE in section and "(query, document" in section


def test_browsing_covariates_read_the_clicks_above():
    clicks = np.array([0, 1, 0, 0, 1, 1, 0, 0])
    sessions = np.array([7, 7, 7, 7, 7, 3, 3, 3])          # a session's rows in position order; sessions in any order
    relevance = np.array([1.0, 0, 2, 3, 0, 0, 0, 0])
    b = browsing_covariates(clicks, sessions, relevance)
    assert b[:, 0].tolist() == [0, 0, 1, 1, 1, 0, 1, 1]      # one click above
    assert b[:, 2].tolist() == [0, 0, 1, 0, 0, 0, 1, 0]      # the result just above was clicked
    assert b[:, 3].tolist() == [0, 0, 0, 1, 2, 0, 0, 1]      # results skipped since the last click (0: none above)
    z = (relevance - relevance.mean()) / relevance.std()
    assert b[4, 4] == pytest.approx(z[2] + z[3]) and b[1, 4] == pytest.approx(z[0])


def test_stratum_poisson_recovers_a_rate_ratio_whatever_the_strata_levels():
    rng = np.random.default_rng(0)
    strata = rng.integers(0, 3000, 60_000)
    x = rng.integers(0, 2, 60_000).astype(float)
    base = rng.uniform(0.02, 0.4, 3000)[strata]               # each stratum its own rate (its relevance)
    y = (rng.random(60_000) < base * np.where(x == 1, 1.0, 0.6)).astype(float)
    fit = fit_stratum_poisson(x[:, None] - x.mean(), y, strata)
    assert np.exp(fit.beta[0]) == pytest.approx(1 / 0.6, rel=0.06)


def test_documents_travel_in_the_click_code():
    rows = np.array([[0.1, 1.0], [0.2, 0.0], [0.3, 1.0]])
    stacked = stack_click_rows(np.zeros((2, 2)), rows, np.array([5, 5, 9]), click=1, documents=np.array([40, 7, 40]))
    _, back, sessions, documents = split_click_rows(stacked, 2, click=1, n_sessions=2)
    assert back.tolist() == rows.tolist() and sessions.tolist() == [0, 0, 1] and documents.tolist() == [1, 0, 1]


def _small_trust_log(rng: np.random.Generator, media_effect: float, n_queries: int = 40, docs: int = 6, k: int = 5,
                     n_sessions: int = 400) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A small trust-bias log (examination 1/p; a non-relevant result clicked with 0.65/p) whose logger promotes
    results shown as type 2, so within a document the type moves with position; a result shown as type 2 is examined
    `media_effect` times as often; its height is its type's mean times log-normal noise (a child of the type only).
    Columns: r̂ (unused), position, type, height, click; then sessions and (query, document) codes."""
    relevance = rng.random((n_queries, docs))
    query = rng.integers(0, n_queries, n_sessions)
    shown_as = rng.integers(0, 3, (n_sessions, docs))
    order = np.argsort(-(relevance[query] + 0.5 * rng.standard_normal((n_sessions, docs)) + 0.4 * (shown_as == 2)),
                       axis=1)[:, :k]
    position = np.broadcast_to(np.arange(1, k + 1), (n_sessions, k))
    r = np.take_along_axis(relevance[query], order, axis=1)
    media = np.take_along_axis(shown_as, order, axis=1)
    p = position ** -1.0 * np.where(media == 2, media_effect, 1.0) / media_effect * (r + (1 - r) * 0.65 / position)
    click = (rng.random((n_sessions, k)) < p).astype(float)
    height = np.array([130.0, 260.0, 330.0])[media] * np.exp(0.25 * rng.standard_normal(media.shape))
    data = np.column_stack([np.zeros(click.size), position.ravel(), media.ravel(), height.ravel(), click.ravel()])
    return data, np.repeat(np.arange(n_sessions), k), (query[:, None] * docs + order).ravel()


@pytest.mark.parametrize("feature, given, media_effect", [(2, [1], 1.0), (3, [1, 2], 2.0)],
                         ids=["type given position, no effect", "height given type and position, a real type effect"])
def test_its_null_p_values_are_calibrated_over_many_small_logs(feature, given, media_effect):
    """Rejections at alpha 0.05 over 200 small null logs (strata of a few impressions, where an uncorrected
    sandwich rejects ~16 %): within [0.02, 0.09] for a calibrated test."""
    rng = np.random.default_rng(30)
    p = []
    for _ in range(200):
        data, sessions, documents = _small_trust_log(rng, media_effect)
        p.append(WithinDocumentTest(data, 4, sessions, documents, [2], position=1).p_value(feature, given))
    assert 0.02 <= np.mean(np.asarray(p) < 0.05) <= 0.09


def test_per_graph_decisions_count_only_the_features_the_click_test_can_test():
    nodes, _ = _rows(5, 6_000, user_model="pbm", media_type_consistency=1.0, media_label_tilt=VIDEO_FIRST,
                     logging_media_boost=[0.0] * 4)
    sample = nodes.sample(frac=1.0, random_state=0).drop_duplicates(SESSION_ID).head(400).reset_index(drop=True)
    graph = discover(sample[NAMES], BAIDU_PAGE_FEATURES, DiscoveryConfig(n_sessions=400, n_bootstrap=0, max_depth=1),
                     click_nodes=nodes).graph
    record = {e["node"]: e for e in graph.meta["click_evidence"]}
    assert "holm" not in record["media_type"] and "holm" not in record[RELEVANCE_SCORE]   # not testable; the prior
    testable = [f.name for f in BAIDU_PAGE_FEATURES if f.name != "media_type"]
    assert all(record[f]["holm"]["family"] == len(testable) for f in testable)
    holm = record[POSITION]["holm"]
    assert holm["kept"] and holm["adjusted_p"] <= 0.05 and graph.adjacent(POSITION, CLICK)
    assert "Holm: adjusted p" in record[POSITION]["decision"]
