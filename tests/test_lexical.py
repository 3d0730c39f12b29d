"""Lexical features from token ids: hand-computed values, monotonicity, merge == whole, persistence, Dask."""
import json
import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wpultr.features.lexical import STATE_JSON, STATE_NPZ, LexicalFeaturizer, featurize_partitions, fit_partitions
from wpultr.schema import ABSTRACT_TOKENS, FEATURES, QUERY_ID, QUERY_TOKENS, TITLE_TOKENS, SchemaError

TITLES = [[1, 2, 3], [1, 1], [4, 5, 6, 7]]


def hand_table(query=(1, 4)) -> pd.DataFrame:
    return pd.DataFrame({QUERY_TOKENS: [list(query)] * 3, TITLE_TOKENS: TITLES})


def random_table(seed: int, n_rows: int = 300, vocabulary: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)

    def lists(low, high):
        return [rng.integers(0, vocabulary, size=rng.integers(low, high + 1)).astype(np.int32) for _ in range(n_rows)]

    return pd.DataFrame({QUERY_ID: rng.integers(0, 20, n_rows), QUERY_TOKENS: lists(1, 5),
                         TITLE_TOKENS: lists(0, 12), ABSTRACT_TOKENS: lists(5, 40)})


def feature(featurizer: LexicalFeaturizer, matrix: np.ndarray, name: str) -> np.ndarray:
    return matrix[:, featurizer.feature_names_.index(name)]


def test_title_features_by_hand():
    """N = 3 titles, 9 tokens, avgdl 3; query [1, 4]: df(1) = 2, cf(1) = 3, df(4) = cf(4) = 1."""
    featurizer = LexicalFeaturizer(fields=(TITLE_TOKENS,)).fit(hand_table())
    x = featurizer.transform(hand_table())
    k1, b = 1.2, 0.75
    idf1, idf4 = math.log(1 + 1.5 / 2.5), math.log(1 + 2.5 / 1.5)

    def saturate(tf, length):
        return tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / 3))

    expected_bm25 = [idf1 * saturate(1, 3), idf1 * saturate(2, 2), idf4 * saturate(1, 4)]
    np.testing.assert_allclose(feature(featurizer, x, "title_bm25"), expected_bm25, rtol=1e-6)
    np.testing.assert_allclose(feature(featurizer, x, "title_tf"), [math.log(2), math.log(3), math.log(2)], rtol=1e-6)
    np.testing.assert_allclose(feature(featurizer, x, "title_idf"), [math.log(4 / 3), math.log(4 / 3), math.log(2)],
                               rtol=1e-6)
    np.testing.assert_allclose(feature(featurizer, x, "title_tf_idf")[0], math.log(2) * math.log(4 / 3), rtol=1e-6)
    mu = 256.0
    dirichlet_first = math.log((1 + mu / 3) / (3 + mu)) + math.log((mu / 9) / (3 + mu))
    jm_short_first = math.log(0.9 / 3 + 0.1 / 3) + math.log(0.1 / 9)
    assert feature(featurizer, x, "title_ql_dirichlet")[0] == pytest.approx(dirichlet_first, rel=1e-6)
    assert feature(featurizer, x, "title_ql_jm_short")[0] == pytest.approx(jm_short_first, rel=1e-6)
    np.testing.assert_array_equal(feature(featurizer, x, "title_length"), [3, 2, 4])
    np.testing.assert_array_equal(feature(featurizer, x, "query_length"), [2, 2, 2])
    assert x.dtype == np.float32 and x.shape == (3, len(featurizer.feature_names_))


def test_unseen_query_terms_leave_likelihoods_unchanged():
    featurizer = LexicalFeaturizer(fields=(TITLE_TOKENS,)).fit(hand_table())
    with_unseen = featurizer.transform(hand_table(query=(1, 4, 999)))
    without = featurizer.transform(hand_table(query=(1, 4)))
    for name in ("title_ql_dirichlet", "title_ql_jm_short", "title_ql_jm_long", "title_bm25"):
        np.testing.assert_allclose(feature(featurizer, with_unseen, name), feature(featurizer, without, name))
    assert np.isfinite(with_unseen).all()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_more_query_term_overlap_gives_higher_bm25(seed):
    """Replacing a non-query token of a document by a query token (same length) raises BM25."""
    rng = np.random.default_rng(seed)
    query = list(rng.choice(np.arange(10), size=rng.integers(1, 4), replace=False))
    title = list(rng.integers(10, 30, size=rng.integers(1, 10)))
    richer = title.copy()
    richer[int(rng.integers(len(richer)))] = int(rng.choice(query))
    corpus = random_table(seed % 1000, n_rows=30, vocabulary=30)
    featurizer = LexicalFeaturizer(fields=(TITLE_TOKENS,)).fit(corpus)
    x = featurizer.transform(pd.DataFrame({QUERY_TOKENS: [query, query], TITLE_TOKENS: [title, richer]}))
    bm25 = feature(featurizer, x, "title_bm25")
    assert bm25[1] > bm25[0]
    assert feature(featurizer, x, "title_tf")[1] > feature(featurizer, x, "title_tf")[0]


def test_fit_on_halves_then_merge_equals_fit_on_whole():
    whole = random_table(seed=1)
    first, second = whole.iloc[:120], whole.iloc[120:]
    merged = LexicalFeaturizer().fit(first).merge(LexicalFeaturizer().fit(second))
    reference = LexicalFeaturizer().fit(whole)
    assert merged.n_documents_ == reference.n_documents_ == len(whole)
    for field in reference.fields:
        assert merged.field_stats_[field] == reference.field_stats_[field]
    streamed = LexicalFeaturizer().partial_fit(first).partial_fit(second)
    np.testing.assert_array_equal(merged.transform(whole), reference.transform(whole))
    np.testing.assert_array_equal(streamed.transform(whole), reference.transform(whole))
    with pytest.raises(ValueError, match=r"parameters differ: k1=1.2 vs 2.0"):
        reference.merge(LexicalFeaturizer(k1=2.0).fit(first))


def test_repeated_documents_count_once_per_frame():
    table = random_table(seed=2, n_rows=50)
    doubled = pd.concat([table, table.assign(**{QUERY_TOKENS: [[0]] * len(table)})], ignore_index=True)
    once, twice = LexicalFeaturizer().fit(table), LexicalFeaturizer().fit(doubled)
    assert twice.n_documents_ == once.n_documents_
    assert twice.field_stats_[TITLE_TOKENS] == once.field_stats_[TITLE_TOKENS]
    counted = LexicalFeaturizer(unique_documents=False).fit(doubled)
    assert counted.n_documents_ == 2 * once.n_documents_
    np.testing.assert_array_equal(counted.field_stats_[TITLE_TOKENS].doc_freq,
                                  2 * once.field_stats_[TITLE_TOKENS].doc_freq)


def test_save_load_round_trip(tmp_path):
    table = random_table(seed=3)
    featurizer = LexicalFeaturizer(mu=100.0, jm_lambda_long=0.5).fit(table)
    featurizer.save(tmp_path / "lexical")
    loaded = LexicalFeaturizer.load(tmp_path / "lexical")
    assert loaded.get_params() == featurizer.get_params()
    assert loaded.feature_names_ == featurizer.feature_names_
    assert all(loaded.field_stats_[f] == featurizer.field_stats_[f] for f in featurizer.fields)
    np.testing.assert_array_equal(loaded.transform(table), featurizer.transform(table))
    np.load(tmp_path / "lexical" / STATE_NPZ, allow_pickle=False).close()     # plain arrays, no pickle
    meta = json.loads((tmp_path / "lexical" / STATE_JSON).read_text())
    (tmp_path / "lexical" / STATE_JSON).write_text(json.dumps({k: v for k, v in meta.items() if k != "n_documents"}))
    with pytest.raises(ValueError, match=r"lexical_featurizer.json: missing key 'n_documents'"):
        LexicalFeaturizer.load(tmp_path / "lexical")


@pytest.mark.parametrize("cells, fragment", [
    ([[1, 2], None, [3]], "column 'title_tokens' row 1 is empty"),
    ([[1, 2], [3], "4 5"], "column 'title_tokens' row 2 is '4 5'"),
    ([[1, 2], [3], [4.5]], "column 'title_tokens' row 2 is [4.5]"),
])
def test_bad_token_cells_name_column_and_row(cells, fragment):
    table = pd.DataFrame({QUERY_TOKENS: [[1]] * 3, TITLE_TOKENS: cells})
    with pytest.raises(SchemaError) as err:
        LexicalFeaturizer(fields=(TITLE_TOKENS,)).fit(table)
    assert fragment in str(err.value)


def test_transform_needs_fit_and_checks_params():
    with pytest.raises(RuntimeError, match="not fitted"):
        LexicalFeaturizer().transform(random_table(seed=4, n_rows=3))
    with pytest.raises(ValueError, match=r"LexicalFeaturizer.b: 1.5 is not in \[0, 1\]"):
        LexicalFeaturizer(b=1.5).fit(random_table(seed=4, n_rows=3))


@pytest.mark.e2e
def test_partitions_on_dask_match_in_memory(tmp_path, dask_client):
    table = random_table(seed=5, n_rows=200)
    paths = []
    for i, part in enumerate((table.iloc[:90], table.iloc[90:])):
        paths.append(tmp_path / "in" / f"part-{i}.parquet")
        paths[-1].parent.mkdir(exist_ok=True)
        part.to_parquet(paths[-1], index=False)
    fitted = fit_partitions(paths, LexicalFeaturizer(), client=dask_client)
    reference = LexicalFeaturizer().partial_fit(table.iloc[:90]).partial_fit(table.iloc[90:])
    assert all(fitted.field_stats_[f] == reference.field_stats_[f] for f in reference.fields)
    written = featurize_partitions(paths, tmp_path / "out", fitted, client=dask_client)
    assert [p.name for p in written] == ["part-0.parquet", "part-1.parquet"]
    out = pd.concat([pq.read_table(p).to_pandas() for p in written], ignore_index=True)
    np.testing.assert_array_equal(np.stack(out[FEATURES].to_list()), reference.transform(table))
    assert list(out[QUERY_ID]) == list(table[QUERY_ID])
    with pytest.raises(SchemaError, match="part-0.parquet: already has a 'features' column"):
        featurize_partitions([written[0]], tmp_path / "again", fitted)
