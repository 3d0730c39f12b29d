"""Bradley–Terry scores of ordinal page features: recovery, direction, merging, unseen levels, errors."""
import numpy as np
import pandas as pd
import pytest
from scipy.special import expit
from scipy.stats import spearmanr

from wpultr.features.bradley_terry import BradleyTerryEncoder, PairCounts, pair_counts
from wpultr.schema import POSITION, SESSION_ID, SchemaError


def simulated_pairs(true_scores: np.ndarray, levels: np.ndarray, n_pairs: int, seed: int) -> PairCounts:
    """Pairs of distinct levels; the first wins with the Bradley–Terry probability of the true scores."""
    rng = np.random.default_rng(seed)
    k = len(levels)
    a = rng.integers(0, k, n_pairs)
    b = (a + rng.integers(1, k, n_pairs)) % k
    first_wins = rng.random(n_pairs) < expit(true_scores[a] - true_scores[b])
    winner, loser = np.where(first_wins, a, b), np.where(first_wins, b, a)
    order = np.argsort(levels)
    rank = np.empty(k, int)
    rank[order] = np.arange(k)
    wins = np.zeros((k, k), np.int64)
    np.add.at(wins, (rank[winner], rank[loser]), 1)
    return PairCounts(levels[order].astype(float), wins)


def test_recovers_known_score_order_from_simulated_pairs():
    levels = np.array([7, 2, 9, 4, 1, 5, 3])                 # level values unrelated to the true order
    true = np.array([1.5, -0.3, 2.2, 0.4, -1.8, 0.9, -1.0])
    counts = simulated_pairs(true, levels, n_pairs=40_000, seed=3)
    fitted = BradleyTerryEncoder(column="grade", ridge=1e-4).fit_counts(counts)
    estimate = fitted.transform(pd.Series(levels))
    assert spearmanr(estimate, true).statistic == pytest.approx(1.0)
    np.testing.assert_allclose(estimate - estimate.mean(), true - true.mean(), atol=0.1)


def _sessions(n_sessions: int, n_results: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_sessions):
        for p in rng.permutation(np.arange(1, n_results + 1)):   # row order inside a session is arbitrary
            rows.append({SESSION_ID: s, POSITION: int(p)})
    return pd.DataFrame(rows)


def test_positions_score_higher_when_shown_higher():
    df = _sessions(50, 6, seed=0)
    counts = pair_counts(df, POSITION)
    expected = np.triu(np.full((6, 6), 50), k=1)               # a above b in every session iff a < b
    np.testing.assert_array_equal(counts.wins, expected)
    scores = BradleyTerryEncoder(POSITION).fit(df).transform(pd.Series(np.arange(1, 7)))
    assert np.all(np.diff(scores) < 0)                         # BAL §3.1: s(2) > s(p) for p > 2


def test_other_ordinal_feature_counts_pairs_by_display_order():
    df = pd.DataFrame({SESSION_ID: [1, 1, 1, 2, 2], POSITION: [1, 2, 3, 1, 2], "grade": [5, 5, 3, 3, 5]})
    counts = pair_counts(df, "grade")
    np.testing.assert_array_equal(counts.levels, [3.0, 5.0])
    # session 1: (5 over 3) twice, (5 over 5) a tie; session 2: (3 over 5) once
    np.testing.assert_array_equal(counts.wins, [[0, 1], [2, 0]])


def test_merged_partition_counts_equal_whole_table_counts():
    df = _sessions(40, 5, seed=1)
    df["grade"] = np.random.default_rng(2).integers(0, 4, len(df))
    whole = pair_counts(df, "grade")
    first, second = df[df[SESSION_ID] < 17], df[df[SESSION_ID] >= 17]
    merged = pair_counts(first, "grade").merge(pair_counts(second, "grade"))
    np.testing.assert_array_equal(merged.levels, whole.levels)
    np.testing.assert_array_equal(merged.wins, whole.wins)


def test_unseen_levels_interpolate_and_ties_stay_finite():
    df = pd.DataFrame({SESSION_ID: [1, 1, 2, 2], POSITION: [1, 3, 1, 3]})
    fitted = BradleyTerryEncoder(POSITION).fit(df)
    s1, s2, s3 = fitted.transform(pd.Series([1, 2, 3]))
    assert s1 > s2 > s3 and s2 == pytest.approx((s1 + s3) / 2)
    assert fitted.transform(pd.Series([0, 10])).tolist() == [s1, s3]   # clamped at the ends
    ties = pd.DataFrame({SESSION_ID: [1, 1], POSITION: [1, 2], "grade": [4, 4]})
    tied = BradleyTerryEncoder("grade").fit(ties)
    assert tied.n_pairs_ == 0 and tied.scores_.tolist() == [0.0]


def test_round_trip_and_bad_input():
    fitted = BradleyTerryEncoder(POSITION, ridge=0.05).fit(_sessions(10, 4, seed=0))
    again = BradleyTerryEncoder.from_dict(fitted.to_dict())
    np.testing.assert_array_equal(again.transform(pd.Series([1, 2, 3, 4])), fitted.transform(pd.Series([1, 2, 3, 4])))
    with pytest.raises(ValueError, match="ridge must be > 0"):
        BradleyTerryEncoder(POSITION, ridge=0).fit(_sessions(3, 3, seed=0))
    bad = pd.DataFrame({SESSION_ID: [1, 1], POSITION: [1, 2], "grade": ["a", "b"]})
    with pytest.raises(SchemaError, match=r"'grade' row 0 is 'a'"):
        pair_counts(bad, "grade")
    with pytest.raises(SchemaError, match="missing column"):
        pair_counts(bad.drop(columns=POSITION), "grade")
