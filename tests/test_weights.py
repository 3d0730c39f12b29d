"""Importance weights (BAL §3.2, Eq. 8–10): both confounder cases against known answers, clipping, ESS."""
import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from wpultr.bal.influence import FeatureInfluence, InfluenceConfig, fit_influence_estimators
from wpultr.bal.weights import (
    WeightConfig,
    clip_and_normalise,
    clip_and_normalise_log,
    clip_cap,
    effective_sample_size,
    feature_log_weight,
    importance_weights,
    log_mean_exp,
    log_weight_summary,
    normalised_from_log,
    self_normalise,
)
from wpultr.causal.biases import BiasReport, ConfoundedFeature
from wpultr.schema import RELEVANCE_SCORE

R = RELEVANCE_SCORE
N = 8000
MU = np.array([0.0, -1.0, 0.0, 1.5])       # E[x | m] offsets for codes 1..3 (case 2)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def weighted_corr(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> float:
    a = a - np.average(a, weights=w)
    b = b - np.average(b, weights=w)
    return float(np.average(a * b, weights=w) / np.sqrt(np.average(a * a, weights=w) * np.average(b * b, weights=w)))


def bin_means(x: np.ndarray, r: np.ndarray, w: np.ndarray, n_bins: int = 5) -> np.ndarray:
    """Weighted means of x within quantile bins of r."""
    edges = np.quantile(r, np.linspace(0, 1, n_bins + 1)[1:-1])
    idx = np.digitize(r, edges)
    return np.array([np.average(x[idx == b], weights=w[idx == b]) for b in range(n_bins)])


# ---------------------------------------------------------------------------------------------
# Case 1: r̂ → x is x's only parent; w = p(x) / p(x | r̂) (Eq. 8–9)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def case1():
    rng = np.random.default_rng(11)
    r = rng.normal(size=N)
    x = 0.5 * r + 0.9 * rng.normal(size=N)                     # x | r ~ N(0.5 r, 0.9²), x ~ N(0, 1.06)
    df = pd.DataFrame({R: r, "click": rng.integers(0, 2, N), "x": x})
    report = BiasReport((ConfoundedFeature("x", (R,), 1),), ("x",), (R, "x"))
    estimators = fit_influence_estimators(df, report, {"x": "continuous"}, seed=0)
    result = importance_weights(df, estimators, WeightConfig(), seed=0)
    true_log_w = norm.logpdf(x, 0.0, np.sqrt(1.06)) - norm.logpdf(x, 0.5 * r, 0.9)
    return df, result, true_log_w


def test_case1_reweighting_makes_x_independent_of_relevance(case1):
    df, result, _ = case1
    x, r, w = df["x"].to_numpy(), df[R].to_numpy(), result.weights
    assert np.corrcoef(x, r)[0, 1] > 0.45                           # confounded before
    assert abs(weighted_corr(x, r, w)) < 0.12                       # not after
    raw, weighted = bin_means(x, r, np.ones(N)), bin_means(x, r, w)
    assert np.ptp(raw) > 1.0
    np.testing.assert_allclose(weighted, np.average(x, weights=w), atol=0.2)
    np.testing.assert_allclose(np.average(x, weights=w), 0.0, atol=0.1)        # marginal E[x] = 0 kept
    # the weight upside down (the paper's printed case-2 form) makes the confounding worse
    assert weighted_corr(x, r, 1.0 / w) > np.corrcoef(x, r)[0, 1] + 0.15


def test_case1_weights_match_the_analytic_ratio(case1):
    _, result, true_log_w = case1
    assert {k: v for k, v in result.features["x"].items() if k != "log_weight"} == {"case": 1, "parents": [R],
                                                                                  "numerator": "model"}
    assert result.features["x"]["log_weight"] == log_weight_summary(result.feature_log_weights["x"])
    assert np.corrcoef(result.feature_log_weights["x"], true_log_w)[0, 1] > 0.95
    unclipped = ~result.clipped
    assert np.corrcoef(result.weights[unclipped], np.exp(true_log_w[unclipped]))[0, 1] > 0.9


# ---------------------------------------------------------------------------------------------
# Case 2: a page feature m is a parent too; w = p(x | m) / p(x | r̂, m), p(x | m) by permuting r̂
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def case2():
    rng = np.random.default_rng(12)
    r = rng.normal(size=N)
    m = rng.integers(1, 4, N)                                      # independent of r̂: Σ p(r̂') p(x|r̂',m) = p(x|m)
    x = 0.5 * r + MU[m] + 0.9 * rng.normal(size=N)
    df = pd.DataFrame({R: r, "m": m, "x": x})
    report = BiasReport((ConfoundedFeature("x", (R, "m"), 2),), ("x",), (R, "x"))
    estimators = fit_influence_estimators(df, report, {"x": "continuous", "m": "categorical"}, seed=0,
                                          n_categories={"m": 4})
    result = importance_weights(df, estimators, WeightConfig(n_permutations=16), seed=0)
    true_log_w = norm.logpdf(x, MU[m], np.sqrt(1.06)) - norm.logpdf(x, 0.5 * r + MU[m], 0.9)
    return df, result, true_log_w


def test_case2_reweighting_makes_x_independent_of_relevance_given_m(case2):
    df, result, _ = case2
    x, r, m, w = df["x"].to_numpy(), df[R].to_numpy(), df["m"].to_numpy(), result.weights
    for code in (1, 2, 3):
        s = m == code
        assert np.corrcoef(x[s], r[s])[0, 1] > 0.45
        assert abs(weighted_corr(x[s], r[s], w[s])) < 0.15
        # the paper's printed ratio p(x | r̂, m) / p(x | m) makes the confounding worse
        assert weighted_corr(x[s], r[s], 1.0 / w[s]) > np.corrcoef(x[s], r[s])[0, 1] + 0.15
        # E_w[x | r̂ bin, m] ≈ E[x | m]
        np.testing.assert_allclose(bin_means(x[s], r[s], w[s], 4), MU[code], atol=0.25)
        assert np.ptp(bin_means(x[s], r[s], np.ones(s.sum()), 4)) > 0.9
    # pooled over m: the residual x − E[x | m] no longer moves with r̂
    resid = x - MU[m]
    assert np.corrcoef(resid, r)[0, 1] > 0.45
    assert abs(weighted_corr(resid, r, w)) < 0.12
    np.testing.assert_allclose(bin_means(resid, r, w), 0.0, atol=0.2)
    # the weights cut r̂ → x only: m's effect on x stays
    means = [np.average(x[m == c], weights=w[m == c]) for c in (1, 2, 3)]
    np.testing.assert_allclose(means, MU[1:], atol=0.15)


def test_case2_weights_match_the_analytic_ratio(case2):
    _, result, true_log_w = case2
    assert result.features["x"]["numerator"] == "permutation" and result.features["x"]["case"] == 2
    assert np.corrcoef(result.feature_log_weights["x"], true_log_w)[0, 1] > 0.9


def test_diagnostics_are_consistent_and_json_ready(case1):
    _, result, _ = case1
    w = result.weights
    assert w.shape == (N,) and np.all(w > 0)
    assert w.mean() == pytest.approx(1.0, abs=1e-9)
    assert w.max() <= result.cap + 1e-9 and result.cap == 20.0
    assert result.ess == pytest.approx(w.sum() ** 2 / (w ** 2).sum())
    assert 0.0 < result.ess_fraction <= 1.0
    assert result.ess >= result.ess_unclipped - 1e-6                 # clipping never lowers the ESS
    d = json.loads(json.dumps(result.to_dict()))
    assert d["n_rows"] == N and d["share_clipped"] == pytest.approx(result.clipped.mean())
    assert set(d["features"]["x"]["log_weight"]) == {"mean", "std", "min", "q01", "median", "q99", "max"}
    assert d["features"]["x"]["case"] == 1


def test_a_tighter_cap_clips_more_and_keeps_mean_one(case1):
    df, result, _ = case1
    # reuse the fitted log weights through the pure functions: the cap and share follow the config
    normalised = normalised_from_log(result.log_weights)
    w, clipped = clip_and_normalise(normalised, clip_cap(normalised, 3.0, None))
    assert w.max() <= 3.0 + 1e-9 and w.mean() == pytest.approx(1.0)
    assert clipped.mean() > result.share_clipped
    assert effective_sample_size(w) > result.ess


# ---------------------------------------------------------------------------------------------
# Several confounded features: w = Π_i w_i (Eq. 10)
# ---------------------------------------------------------------------------------------------
def test_total_weight_is_the_product_over_confounded_features():
    rng = np.random.default_rng(3)
    n = 1000
    r = rng.normal(size=n)
    df = pd.DataFrame({R: r, "a": r + rng.normal(size=n), "b": rng.integers(1, 3, n), "h": rng.normal(size=n)})
    report = BiasReport((ConfoundedFeature("a", (R,), 1), ConfoundedFeature("b", (R, "h"), 2)), ("a", "b"), (R,))
    est = fit_influence_estimators(df, report, {"a": "ordinal", "b": "categorical", "h": "continuous"},
                                   InfluenceConfig(epochs=3), seed=0)
    result = importance_weights(df, est, WeightConfig(max_weight=None, n_permutations=4), seed=1)
    lw = result.feature_log_weights
    np.testing.assert_allclose(result.log_weights, lw["a"] + lw["b"])
    product = np.exp(lw["a"]) * np.exp(lw["b"])
    np.testing.assert_allclose(result.weights, product / product.mean(), rtol=1e-9)
    assert not result.clipped.any() and result.cap is None
    # seeded: the same permutations give the same weights
    again = importance_weights(df, est, WeightConfig(max_weight=None, n_permutations=4), seed=1)
    np.testing.assert_array_equal(again.weights, result.weights)


def test_permutations_shrink_with_rows_under_the_budget():
    config = WeightConfig(n_permutations=16, max_permuted_rows=4_000_000)
    assert [config.permutations_for(n) for n in (1_000, 250_000, 500_000, 2_000_000, 9_000_000)] == [16, 16, 8, 2, 1]
    assert WeightConfig(max_permuted_rows=None).permutations_for(10**9) == 16
    # the weights record the K they used, and a budget of K = 1 gives other (unbiased, noisier) weights
    rng = np.random.default_rng(5)
    n = 2000
    r = rng.normal(size=n)
    df = pd.DataFrame({R: r, "h": rng.normal(size=n)})
    df["a"] = r + df["h"] + rng.normal(size=n)
    report = BiasReport((ConfoundedFeature("a", (R, "h"), 2),), ("a",), (R,))
    est = fit_influence_estimators(df, report, {"a": "continuous", "h": "continuous"}, InfluenceConfig(epochs=3),
                                   seed=0)
    full = importance_weights(df, est, WeightConfig(max_weight=None, n_permutations=8, max_permuted_rows=None))
    one = importance_weights(df, est, WeightConfig(max_weight=None, n_permutations=8, max_permuted_rows=n))
    assert full.features["a"]["n_permutations"] == 8 and one.features["a"]["n_permutations"] == 1
    assert not np.allclose(full.weights, one.weights)
    assert np.corrcoef(full.log_weights, one.log_weights)[0, 1] > 0.3


def test_no_confounded_features_gives_unit_weights():
    df = pd.DataFrame({R: np.arange(5.0)})
    result = importance_weights(df, {})
    np.testing.assert_array_equal(result.weights, np.ones(5))
    assert result.ess == pytest.approx(5.0) and result.share_clipped == 0.0


# ---------------------------------------------------------------------------------------------
# Pure functions
# ---------------------------------------------------------------------------------------------
def test_log_ratio_sum_and_log_mean_exp():
    np.testing.assert_allclose(feature_log_weight([0.0, -1.0], [-1.0, -1.0]), [1.0, 0.0])
    a = np.array([[1000.0, -5.0], [1000.0 + np.log(3.0), -7.0]])
    np.testing.assert_allclose(log_mean_exp(a, 0), [1000.0 + np.log(2.0), np.log((np.exp(-5) + np.exp(-7)) / 2)])


def test_effective_sample_size():
    assert effective_sample_size(np.ones(10)) == pytest.approx(10.0)
    assert effective_sample_size(np.array([0.0, 0.0, 3.0])) == pytest.approx(1.0)
    assert effective_sample_size(np.array([1.0, 3.0])) == pytest.approx(16.0 / 10.0)
    assert effective_sample_size(7.0 * np.array([1.0, 3.0])) == pytest.approx(1.6)      # scale-free


def test_clip_and_normalise_known_case():
    w, clipped = clip_and_normalise(np.array([1.0, 1.0, 1.0, 9.0]), cap=2.0)
    # the largest row is held at 2; the rest share the remaining mass 4 − 2 equally
    np.testing.assert_allclose(w, [2 / 3, 2 / 3, 2 / 3, 2.0])
    np.testing.assert_array_equal(clipped, [False, False, False, True])
    np.testing.assert_allclose(clip_and_normalise(np.array([5.0, 1.0]), cap=1.0)[0], [1.0, 1.0])
    np.testing.assert_allclose(self_normalise(np.array([2.0, 6.0])), [0.5, 1.5])
    with pytest.raises(ValueError, match="below 1"):
        clip_and_normalise(np.array([1.0, 2.0]), cap=0.5)
    with pytest.raises(ValueError, match="at least 3"):
        clip_and_normalise(np.array([0.0, 0.0, 1.0]), cap=2.0)
    np.testing.assert_allclose(clip_and_normalise(np.array([0.0, 1.0, 5.0]), cap=1.5)[0], [0.0, 1.5, 1.5])
    with pytest.raises(ValueError, match="finite"):
        clip_and_normalise(np.array([1.0, np.inf]), cap=2.0)
    assert clip_cap(np.array([0.5, 0.5, 1.0, 2.0]), 10.0, 0.5) == 1.0        # a quantile cap is floored at 1
    assert clip_cap(np.arange(101.0) / 50.0, 1.5, 0.99) == 1.5
    assert clip_cap(np.ones(3), None, None) is None
    with pytest.raises(ValueError, match="weights.max_weight"):
        WeightConfig(max_weight=0.5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 1e6)), min_size=1, max_size=60).filter(lambda v: sum(v) > 0),
       st.floats(1.0, 50.0))
def test_clip_and_normalise_properties(values, cap):
    raw = np.array(values)
    if np.count_nonzero(raw) * cap < raw.size:                   # mean 1 unreachable under the cap
        with pytest.raises(ValueError, match="too low"):
            clip_and_normalise(raw, cap)
        return
    w, clipped = clip_and_normalise(raw, cap)
    assert w.mean() == pytest.approx(1.0, rel=1e-9)
    assert w.max() <= cap * (1 + 1e-9)
    assert np.all(np.diff(w[np.argsort(raw, kind="stable")]) >= -1e-9 * cap)       # order kept
    free = ~clipped & (raw > 0)
    if free.sum() >= 2:                                                             # ratios kept below the cap
        ratio = w[free] / raw[free]
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
    assert np.all(w[clipped] == pytest.approx(cap))


@pytest.mark.parametrize("sigma", [0.5, 2.0, 4.0])
def test_clip_fixed_point_equals_the_sorted_solve(sigma):
    """The few-pass solve of the cap's scale gives the sorted solve's weights and clipped rows."""
    from wpultr.bal.weights import _clip_sorted
    raw = np.random.default_rng(3).lognormal(0.0, sigma, 50_000)
    raw[:100] = 0.0
    fast, fast_clipped = clip_and_normalise(raw, 20.0)
    slow, slow_clipped = _clip_sorted(raw / raw.max(), 20.0)
    np.testing.assert_allclose(fast, slow, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(fast_clipped, slow_clipped)
    assert fast.mean() == pytest.approx(1.0) and fast.max() <= 20.0 * (1 + 1e-9)


def test_clip_fixed_point_gives_up_on_a_tail_that_adds_one_row_per_round():
    """A geometric tail makes each round of the fixed point clip about one more row: it hands over (None)
    after its rounds, and clip_and_normalise's answer is still the sorted solve's."""
    from wpultr.bal.weights import _clip_by_fixed_point, _clip_sorted
    raw = np.concatenate([np.ones(1000), 1.05 ** np.arange(200)])
    w = raw / raw.max()
    assert _clip_by_fixed_point(w, 1.2, max_rounds=3) is None
    out, clipped = clip_and_normalise(raw, 1.2)
    ref, ref_clipped = _clip_sorted(w, 1.2)
    np.testing.assert_allclose(out, ref, rtol=1e-10)
    np.testing.assert_array_equal(clipped, ref_clipped)
    assert out.mean() == pytest.approx(1.0) and clipped.sum() > 3


@pytest.mark.parametrize("kind", ["continuous", "categorical"])
def test_weights_in_chunks_are_one_pass_per_chunk(kind):
    """`importance_weights` evaluates the densities a chunk of rows at a time (bounded memory on large logs): one
    chunk is the one-pass computation; smaller chunks draw the permutation numerator's r̂ within each chunk, the
    same estimate of p(x | m) from fewer rows, so the log weights agree closely but not exactly."""
    rng = np.random.default_rng(8)
    n = 3000
    r = rng.normal(size=n)
    df = pd.DataFrame({R: r.astype(np.float32), "h": rng.normal(size=n), "m": rng.integers(0, 3, n)})
    df["a"] = (r > 0).astype(int) + rng.integers(0, 2, n) if kind == "categorical" else r + df["h"] + rng.normal(size=n)
    report = BiasReport((ConfoundedFeature("a", (R, "h", "m"), 2),), ("a",), (R,))
    kinds = {"a": kind, "h": "continuous", "m": "categorical"}
    est = fit_influence_estimators(df, report, kinds, InfluenceConfig(epochs=3), seed=0, n_categories={"a": 4, "m": 3})
    config = WeightConfig(n_permutations=4, max_weight=5)
    whole = importance_weights(df, est, config, seed=2)
    one = importance_weights(df, est, config, seed=2, chunk_rows=n)
    np.testing.assert_array_equal(one.log_weights, whole.log_weights)
    np.testing.assert_array_equal(one.weights, whole.weights)
    for chunk in (997, 1024):
        chunked = importance_weights(df, est, config, seed=2, chunk_rows=chunk)
        assert chunked.features["a"]["permuted_within_rows"] == chunk
        numerator = chunked.log_weights + est["a"].denominator.log_prob(df)          # the estimated log p(x | m)
        reference = whole.log_weights + est["a"].denominator.log_prob(df)
        other_draw = importance_weights(df, est, config, seed=3).log_weights + est["a"].denominator.log_prob(df)
        noise = np.corrcoef(other_draw, reference)[0, 1]                               # two draws of one pass
        assert np.corrcoef(numerator, reference)[0, 1] > noise - 0.05
        assert chunked.weights.mean() == pytest.approx(1.0) and chunked.weights.max() <= 5 + 1e-9


def test_a_spread_beyond_exps_range_is_clipped_in_log_space():
    """A few rows e^900 above the rest (a denominator density near 0, met among tens of millions of rows) leave
    every other weight exactly 0 after exponentiating; the log-space solve clips those rows at the cap and keeps
    the others' ratios, mean 1 — what the linear solve gives wherever it is defined."""
    rng = np.random.default_rng(4)
    lw = rng.normal(size=10_000)
    wild = lw.copy()
    wild[[3, 77, 5000]] += 900.0
    with pytest.raises(ValueError, match="too low"):
        clip_and_normalise(normalised_from_log(wild), 20.0)
    weights, clipped = clip_and_normalise_log(wild, 20.0)
    assert weights.mean() == pytest.approx(1.0, rel=1e-12) and weights.max() <= 20.0
    assert clipped[[3, 77, 5000]].all() and clipped.sum() == 3
    rest = np.flatnonzero(~clipped)
    np.testing.assert_allclose(weights[rest] / weights[rest[0]], np.exp(wild[rest] - wild[rest[0]]), rtol=1e-9)
    for spread, cap in ((1.0, 5.0), (3.0, 20.0), (3.0, 1.5)):           # where the linear solve is defined: the same
        ordinary = rng.normal(scale=spread, size=5_000)
        linear = clip_and_normalise(normalised_from_log(ordinary), cap)
        logged = clip_and_normalise_log(ordinary, cap)
        np.testing.assert_allclose(logged[0], linear[0], rtol=1e-9)
        np.testing.assert_array_equal(logged[1], linear[1])
    df = pd.DataFrame({R: np.zeros(4)})                                   # importance_weights takes that path itself
    assert importance_weights(df, {}).weights.tolist() == [1.0] * 4


@pytest.mark.parametrize("chunk", [997, 1 << 20])
def test_the_log_space_candidate_solve_equals_the_sorted_log_solve(chunk):
    """`clip_and_normalise_log` sorts only the n / cap largest logs (no other row can sit at the cap), found by
    chunks; the sort of every row gives the same weights and clipped rows, wild spreads and slow tails included."""
    from wpultr.bal.weights import _clip_sorted_log
    rng = np.random.default_rng(11)
    geometric = np.log(np.concatenate([np.ones(1000), 1.05 ** np.arange(200)]))   # a fixed point clips one per round
    spread = rng.normal(scale=0.7, size=20_000)
    spread[-400:] = rng.uniform(3.0, 5000.0, 400)                                    # a tail spread over thousands
    cases = [(geometric, 1.2), (spread, 20.0)]
    for sigma, cap in ((1.0, 5.0), (3.0, 20.0), (6.0, 20.0), (2.0, 1.3)):
        lw = rng.normal(scale=sigma, size=20_000)
        lw[rng.choice(lw.size, 5, replace=False)] += rng.uniform(800.0, 5000.0, 5)   # beyond exp's range
        lw[:40] -= 4000.0                                                               # and far below it
        cases.append((lw, cap))
    for lw, cap in cases:
        fast, fast_clipped = clip_and_normalise_log(lw, cap, chunk)
        slow, slow_clipped = _clip_sorted_log(lw, cap)
        np.testing.assert_allclose(fast, slow, rtol=1e-10, atol=1e-300)
        np.testing.assert_array_equal(fast_clipped, slow_clipped)
        assert fast.mean() == pytest.approx(1.0, rel=1e-12) and fast.max() <= cap
    assert clip_and_normalise_log(spread, 20.0, chunk)[1].sum() > 100                 # many rows at the cap
    ones, all_clipped = clip_and_normalise_log(rng.normal(size=50), 1.0, chunk)
    assert ones.tolist() == [1.0] * 50 and all_clipped.all()


def test_the_kth_largest_by_chunks_is_the_sorted_one():
    from wpultr.bal.weights import _kth_largest
    from wpultr.schema import row_spans
    x = np.random.default_rng(2).normal(size=5000)
    x[::50] = 1.0                                                                       # ties
    for k in (1, 7, 100, 4999, 5000):
        for chunk in (64, 5000):
            assert _kth_largest(x, k, row_spans(x.size, chunk)) == np.sort(x)[::-1][k - 1]


def test_weights_without_the_feature_arrays_are_the_same():
    """BAL's epochs let each feature's log weights go once summed and summarised (`keep_feature_log_weights`):
    the weights, the total and every diagnostic are those of the run that keeps them; Kish's ESS from the logs by
    chunks is the one of the exponentiated weights."""
    from wpultr.bal.weights import effective_sample_size_log
    rng = np.random.default_rng(5)
    n = 2000
    r = rng.normal(size=n)
    df = pd.DataFrame({R: r.astype(np.float32), "m": rng.normal(size=n)})
    df["a"] = r + rng.normal(size=n)
    df["b"] = 0.5 * r + df["m"] + rng.normal(size=n)
    report = BiasReport((ConfoundedFeature("a", (R,), 1), ConfoundedFeature("b", (R, "m"), 2)), ("a", "b"), (R,))
    est = fit_influence_estimators(df, report, {"a": "continuous", "b": "continuous", "m": "continuous"},
                                   InfluenceConfig(epochs=3), seed=0)
    config = WeightConfig(n_permutations=2, max_weight=5)
    kept = importance_weights(df, est, config, seed=1)
    lean = importance_weights(df, est, config, seed=1, keep_feature_log_weights=False)
    assert set(kept.feature_log_weights) == {"a", "b"} and lean.feature_log_weights == {}
    np.testing.assert_array_equal(lean.weights, kept.weights)
    np.testing.assert_array_equal(lean.log_weights, kept.feature_log_weights["a"] + kept.feature_log_weights["b"])
    assert lean.to_dict() == kept.to_dict()
    assert kept.to_dict()["features"]["b"]["log_weight"]["max"] == kept.feature_log_weights["b"].max()
    assert effective_sample_size_log(kept.log_weights) == pytest.approx(
        effective_sample_size(normalised_from_log(kept.log_weights)), rel=1e-12)


class _Density:
    """A density with given log values per row (by the frame's index): the arithmetic of the weights alone."""

    def __init__(self, values):
        self.values = np.asarray(values, np.float64)

    def log_prob(self, frame):
        return self.values[frame.index.to_numpy()]


def test_importance_weights_take_the_log_space_solve_for_a_wild_row():
    rng = np.random.default_rng(6)
    n = 4000
    log_den = rng.normal(size=n)
    log_den[17] = -900.0                                   # a row far outside p(x | r̂, m): weight e^900 the rest's
    est = {"a": FeatureInfluence("a", 1, (R,), _Density(log_den), _Density(np.zeros(n)))}
    result = importance_weights(pd.DataFrame({R: np.zeros(n)}), est, WeightConfig(max_weight=20), seed=0,
                                chunk_rows=1000)
    assert result.weights.mean() == pytest.approx(1.0) and result.weights.max() <= 20.0
    assert result.clipped[17] and result.clipped.sum() == 1
    rest = np.delete(np.arange(n), 17)
    np.testing.assert_allclose(result.weights[rest] / result.weights[rest[0]],
                               np.exp(log_den[rest[0]] - log_den[rest]), rtol=1e-9)


def test_chunked_quantiles_are_numpys_without_a_copy_of_the_column():
    """Above `copy_rows` the log-weight summary finds its quantiles from exact order statistics by chunks
    (`order_statistics`: rounds of binning, then a gather of one bin): numpy's numbers, to the bit, for ties,
    heavy tails, a range of a few floats and the tiny bins and chunks that force many rounds."""
    from wpultr.bal.weights import chunked_quantiles, order_statistics
    rng = np.random.default_rng(0)
    cases = [rng.standard_normal(1000), np.round(rng.standard_normal(5000), 1),
             np.concatenate([np.zeros(3000), rng.standard_cauchy(300) * 1e3]), np.array([5.0]), np.array([1.0, 2.0]),
             np.full(700, 3.3), np.concatenate([rng.standard_normal(20000), [1e150, -1e150]]),
             1.0 + np.arange(50) * np.spacing(1.0)]
    for x in cases:
        ranks = sorted(set(range(0, len(x), max(1, len(x) // 7))) | {len(x) - 1})
        ordered = np.sort(x)
        tiny = [{"bins": 2, "gather_rows": 1, "chunk_rows": 5}] if len(x) <= 1000 else []   # rounds x chunks: slow
        for knobs in ({}, {"bins": 4, "gather_rows": 3, "chunk_rows": 97}, *tiny):
            found = order_statistics(x, ranks, **knobs)
            assert [found[k] for k in ranks] == ordered[ranks].tolist()
        for qs in ([0.01, 0.5, 0.99], [0.0, 1.0, 0.3333]):
            assert chunked_quantiles(x, qs) == np.quantile(x, qs).tolist()
        assert log_weight_summary(x, copy_rows=0) == log_weight_summary(x)
    with pytest.raises(IndexError):
        order_statistics(np.arange(3.0), [3])


class _Rank:
    """Rank `rank` of `world` as `importance_weights` sees it (`training.distributed.RankBatches`: which chunks it
    evaluates, and the sum over ranks), its summed arrays kept so the test can add the ranks' parts itself."""

    def __init__(self, rank: int, world: int):
        self.rank, self.world, self.parts = rank, world, []

    def owns(self, index: int) -> bool:
        return index % self.world == self.rank

    def sum(self, values: np.ndarray) -> np.ndarray:
        self.parts.append(values.copy())
        return values


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_evaluate_their_chunks_with_the_one_process_permutations(world):
    """Each DDP rank evaluates only its chunks' densities but draws every chunk's permutations: the ranks' parts add
    up to one process's log weights of every feature (the same numerator draws), rows of other ranks left 0."""
    rng = np.random.default_rng(4)
    n = 2500
    r = rng.normal(size=n)
    df = pd.DataFrame({R: r.astype(np.float32), "h": rng.normal(size=n), "m": rng.integers(0, 3, n)})
    df["a"] = r + df["h"] + rng.normal(size=n)
    df["b"] = (r > 0).astype(int) + rng.integers(0, 2, n)
    report = BiasReport((ConfoundedFeature("a", (R, "h"), 2), ConfoundedFeature("b", (R, "m"), 2)), ("a", "b"), (R,))
    kinds = {"a": "continuous", "b": "categorical", "h": "continuous", "m": "categorical"}
    est = fit_influence_estimators(df, report, kinds, InfluenceConfig(epochs=2), seed=0,
                                   n_categories={"b": 3, "m": 3})
    config = WeightConfig(n_permutations=3, max_weight=5)
    one = importance_weights(df, est, config, seed=2, chunk_rows=600)          # 5 chunks
    ranks = [_Rank(k, world) for k in range(world)]
    for rank in ranks:
        importance_weights(df, est, config, seed=2, chunk_rows=600, ranks=rank)
    for f, name in enumerate(est):
        added = sum(rank.parts[f] for rank in ranks)
        np.testing.assert_allclose(added, one.feature_log_weights[name], rtol=1e-12, atol=1e-12)
        for rank in ranks:                                   # a rank's part holds its own chunks' rows alone
            own = np.zeros(n, dtype=bool)
            for index, start in enumerate(range(0, n, 600)):
                own[start: start + 600] = rank.owns(index)
            assert not rank.parts[f][~own].any() and rank.parts[f][own].all()
