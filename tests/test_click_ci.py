"""The click CI test of the hybrid discovery: calibrated under session-correlated nulls, powerful at log scale,
categories as categories, near-deterministic proxies that do not erase a true parent, evidence per click edge."""
import numpy as np
import pandas as pd
import pytest
from causallearn.utils.cit import CIT
from scipy import stats
from scipy.special import expit

from wpultr.causal.click_ci import ClickCITest, natural_spline_basis
from wpultr.causal.discovery import DiscoveryConfig, PageFeatureCIT, discover, one_row_per_session, sample_click_rows
from wpultr.causal.hybrid_ci import HybridCIT, resample_sessions, split_click_rows, stack_click_rows
from wpultr.causal.near_determinism import determination
from wpultr.config import ConfigError
from wpultr.schema import CLICK, POSITION, RELEVANCE_SCORE, SESSION_ID, FeatureKind, PageFeature

MEDIA, HEIGHT = "media_type", "serp_height"


def session_world(n_sessions: int, k: int, rng: np.random.Generator, media_effect: float = 1.0,
                  session_sd: float = 1.5) -> tuple[np.ndarray, np.ndarray]:
    """Columns (r̂, position, media code, click); media is drawn per session (shared by its results) and
    clicks share a session random effect, so rows of one session are dependent; media multiplies the
    click odds of code 2 by `media_effect` (1: click ⫫ media | r̂, position)."""
    sessions = np.repeat(np.arange(n_sessions), k)
    position = np.tile(np.arange(1.0, k + 1), n_sessions)
    session_effect = session_sd * rng.normal(size=n_sessions)[sessions]
    r = rng.normal(size=n_sessions * k) + 0.5 * session_effect
    media = np.where(rng.random(n_sessions) < 0.3, 2, rng.integers(0, 2, n_sessions))[sessions].astype(float)
    logit = -1.0 + 0.8 * r - 0.25 * position + session_effect + np.log(media_effect) * (media == 2)
    click = (rng.random(sessions.size) < expit(logit)).astype(float)
    return np.column_stack([r, position, media, click]), sessions


def test_p_values_are_uniform_under_a_session_correlated_null_and_rows_as_units_are_not():
    rng = np.random.default_rng(0)
    robust, naive = [], []
    for _ in range(200):
        data, sessions = session_world(120, 8, rng)
        robust.append(ClickCITest(data, 3, sessions, categorical=[2], relevance=0).p_value(2, [0, 1]))
        naive.append(ClickCITest(data, 3, np.arange(len(data)), categorical=[2], relevance=0).p_value(2, [0, 1]))
    robust, naive = np.array(robust), np.array(naive)
    low, high = stats.binom.ppf([0.0005, 0.9995], 200, 0.05)
    assert low <= np.sum(robust < 0.05) <= high
    assert stats.kstest(robust, "uniform").pvalue > 0.01
    assert np.sum(naive < 0.05) > high          # treating rows as independent rejects far too often here


def test_a_two_fold_media_effect_is_found_at_log_scale():
    data, sessions = session_world(12_500, 8, np.random.default_rng(1), media_effect=2.0, session_sd=0.5)
    test = ClickCITest(data, 3, sessions, categorical=[2], relevance=0)
    assert test.p_value(2, [0, 1]) < 1e-6
    effect = test.effect(2, [0, 1])
    assert effect["rows"] == 100_000 and effect["sessions"] == 12_500 and effect["df"] == 4
    assert effect["loglik_gain_per_row"] > 0 and effect["click_rate_change"] > 0.01


def test_a_non_monotone_category_is_tested_as_a_category():
    """Click rates 0.1, 0.3, 0.3, 0.1 over codes 0–3: as categories the effect is plain; a linear test of
    the integer codes (what `ci_test: fisherz` does) sees no trend."""
    rng = np.random.default_rng(2)
    n = 4000
    code = rng.integers(0, 4, n).astype(float)
    click = (rng.random(n) < np.array([0.1, 0.3, 0.3, 0.1])[code.astype(int)]).astype(float)
    r = rng.normal(size=n)
    data = np.column_stack([r, code, click])
    assert ClickCITest(data, 2, np.arange(n), categorical=[1], relevance=0).p_value(1, [0]) < 1e-10
    assert CIT(data, "fisherz")(1, 2, [0]) > 1e-3


def test_natural_spline_basis_is_linear_beyond_the_end_knots():
    x = np.linspace(-3, 3, 61)
    b = natural_spline_basis(x, np.array([-1.0, 0.0, 0.5, 1.0]))
    outside = x >= 1.0
    assert b.shape == (61, 3)
    assert np.allclose(np.diff(b[outside], n=2, axis=0), 0.0, atol=1e-10)
    assert not np.allclose(np.diff(b[(x > -1) & (x < 1)], n=2, axis=0), 0.0, atol=1e-6)


# ---------------------------------------------------------------------------------------------
def proxy_world(n_sessions: int, k: int, seed: int) -> pd.DataFrame:
    """Media type nearly fixes the height (±2 %); media → click (videos twice the clicks); height is no parent."""
    rng = np.random.default_rng(seed)
    n = n_sessions * k
    r = rng.normal(size=n)
    position = np.tile(np.arange(1.0, k + 1), n_sessions)
    media = rng.choice(3, size=n, p=[0.6, 0.25, 0.15])
    height = np.array([130.0, 200.0, 330.0])[media] * np.exp(0.02 * rng.normal(size=n))
    p = expit(1.2 * r - 1.0) / position ** 0.5 * np.array([0.5, 0.5, 1.0])[media]
    click = (rng.random(n) < p).astype(float)
    return pd.DataFrame({RELEVANCE_SCORE: r, POSITION: position, MEDIA: media.astype(float), HEIGHT: height,
                         CLICK: click, SESSION_ID: np.repeat(np.arange(n_sessions), k)})


PROXY_FEATURES = (PageFeature(POSITION, FeatureKind.ORDINAL), PageFeature(MEDIA, FeatureKind.CATEGORICAL),
                  PageFeature(HEIGHT, FeatureKind.CONTINUOUS))


def test_a_near_deterministic_proxy_does_not_erase_the_true_parent_and_the_graph_says_so():
    rows = proxy_world(2000, 10, seed=3)
    sample = one_row_per_session(rows, seed=0).iloc[:300].drop(columns=SESSION_ID).reset_index(drop=True)
    cfg = DiscoveryConfig(ci_test="hybrid", n_bootstrap=2, max_depth=2)
    result = discover(sample, PROXY_FEATURES, cfg, seed=0, click_nodes=rows)
    graph = result.graph
    assert graph.adjacent(MEDIA, CLICK) and not graph.adjacent(HEIGHT, CLICK)
    [pair] = graph.meta["near_deterministic"]["pairs"]
    assert (pair["feature"], pair["proxy"]) == (MEDIA, HEIGHT) and min(pair["determination"], pair["reverse"]) > 0.9
    assert "leave serp_height out" in pair["handling"]
    assert "media_type, the coarser, is the one protected" in pair["handling"]
    evidence = {e["node"]: e for e in graph.meta["click_evidence"]}
    media = evidence[MEDIA]
    assert media["in_graph"] and media["p_value"] < 1e-6 and media["effect"]["rows"] == 20_000
    assert HEIGHT not in media["effect"]["given"] and media["effect"]["loglik_gain_per_row"] > 0
    assert media["stability"] == 1.0
    assert not evidence[HEIGHT]["in_graph"] and evidence[HEIGHT]["decision"].startswith("removed: independent given")
    assert graph.meta["click_rows"] == {"n_rows": 20_000, "n_sessions": 2000,
                                        "source": "every shown result of the sampled sessions"}

    # without the handling, conditioning on the proxy removes the true edge
    plain = discover(sample, PROXY_FEATURES, DiscoveryConfig(ci_test="hybrid", n_bootstrap=0, max_depth=2,
                                                             near_deterministic=1.0), seed=0, click_nodes=rows)
    assert plain.graph.meta["near_deterministic"]["pairs"] == [] and not plain.graph.adjacent(MEDIA, CLICK)


def test_determination_measures_both_kinds():
    rng = np.random.default_rng(4)
    media = rng.integers(0, 3, 5000).astype(float)
    height = np.array([100.0, 200.0, 300.0])[media.astype(int)] * np.exp(0.02 * rng.normal(size=5000))
    assert determination(height, media, False, True) > 0.95           # η² of the height within types
    assert determination(media, height, True, False) > 0.95           # uncertainty coefficient of the type
    assert determination(rng.normal(size=5000), media, False, True) < 0.01


# ---------------------------------------------------------------------------------------------
def test_hybrid_test_dispatches_click_tests_to_the_click_rows_and_the_rest_to_kci():
    rows = proxy_world(500, 10, seed=5)
    names = [RELEVANCE_SCORE, POSITION, MEDIA, HEIGHT, CLICK]
    sample = one_row_per_session(rows, seed=0)[names].to_numpy()
    click_rows, sessions = rows[names].to_numpy(), rows[SESSION_ID].to_numpy()
    stacked = stack_click_rows(sample, click_rows, sessions, click=4)
    back_sample, back_rows, back_sessions, _ = split_click_rows(stacked, len(sample), click=4)
    assert np.array_equal(back_sample, sample) and np.array_equal(back_rows, click_rows)
    assert np.array_equal(back_sessions, sessions)
    hybrid = HybridCIT(stacked, n_sample=len(sample), click=4, relevance=0, categorical=[2], protect=[(2, 3)])
    direct = ClickCITest(click_rows, 4, sessions, categorical=[2], relevance=0)
    assert hybrid(2, 4, [0, 3]) == direct.p_value(2, [0])              # the proxy left out of media's test
    assert hybrid(3, 4, [0, 2]) == direct.p_value(3, [0, 2])           # the proxy's own test keeps media
    kci = PageFeatureCIT(sample, base="kci", categorical=[2])
    assert hybrid(0, 1, [2]) == kci(0, 1, [2])


def test_session_resamples_keep_sessions_whole():
    rows = proxy_world(50, 4, seed=6)
    data, sessions = rows.drop(columns=SESSION_ID).to_numpy(), rows[SESSION_ID].to_numpy()
    resampled, ids = resample_sessions(data, sessions, np.random.default_rng(0))
    assert len(resampled) == len(data) and np.unique(ids).size == 50
    for s in np.unique(ids):
        assert np.array_equal(resampled[ids == s, 1], [1.0, 2.0, 3.0, 4.0])      # positions of one page, in order


def test_click_rows_are_whole_sessions_and_keys_are_validated():
    frame = pd.DataFrame({SESSION_ID: np.repeat(np.arange(100), 10), "query_id": np.repeat(np.arange(100) % 7, 10)})
    ids = sample_click_rows(frame, 300, n_strata=2, seed=0)
    assert ids.size == 30
    assert sample_click_rows(frame, None, n_strata=2, seed=0).size == 100
    with pytest.raises(ConfigError, match=r"discovery.click_rows: must be >= 10 or null, got 5"):
        DiscoveryConfig(click_rows=5)
    with pytest.raises(ConfigError, match=r"discovery.near_deterministic: must be in \(0, 1\], got 1.5"):
        DiscoveryConfig(near_deterministic=1.5)
    with pytest.raises(ConfigError, match=r"discovery.ci_test: must be one of 'hybrid', 'kci'"):
        DiscoveryConfig(ci_test="gsq")
