"""The one metric definition: hand-computed cases, independent implementations, properties, groups."""
import json
import math
import shutil

import ir_measures
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ir_measures import AP, ERR, nDCG

from wpultr.evaluation import metrics
from wpultr.schema import BUCKET, LABEL, QUERY_ID, SchemaError

KS = (1, 3, 5, 10)
EXP_GAINS = {grade: 2 ** grade - 1 for grade in range(5)}


def random_table(seed: int, n_queries: int = 120, max_docs: int = 25,
                 score_decimals: int | None = None) -> pd.DataFrame:
    """Annotated documents of random queries; rounding the scores makes ties."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_docs + 1, size=n_queries)
    n = int(sizes.sum())
    scores = rng.normal(size=n)
    if score_decimals is not None:
        scores = np.round(scores, score_decimals)
    query_ids = np.repeat(rng.permutation(n_queries) + 1, sizes)
    df = pd.DataFrame({QUERY_ID: query_ids, LABEL: rng.integers(0, 5, size=n), "score": scores,
                       BUCKET: np.repeat(rng.integers(0, 10, size=n_queries), sizes)})
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)  # queries' rows interleaved


def as_trec(df: pd.DataFrame) -> tuple[dict, dict]:
    """qrels and run dicts; document names fall as row numbers rise, so trec_eval's and gdeval's
    tie rule (score descending, then name descending) equals ours (score descending, then row order)."""
    names = [f"d{len(df) - row:07d}" for row in range(len(df))]
    qrels: dict = {}
    run: dict = {}
    for name, query, label, score in zip(names, df[QUERY_ID], df[LABEL], df["score"], strict=True):
        qrels.setdefault(str(query), {})[name] = int(label)
        run.setdefault(str(query), {})[name] = float(score)
    return qrels, run


def by_query(results, measure) -> dict[int, float]:
    return {int(m.query_id): m.value for m in results if m.measure == measure}


# ---------------------------------------------------------------------------------------------
# hand-computed
# ---------------------------------------------------------------------------------------------
def test_single_query_values_by_hand():
    ranked = [3, 2, 0, 1]
    dcg3 = 7 + 3 / math.log2(3)                              # ranks 1..3: gains 7, 3, 0
    ideal3 = 7 + 3 / math.log2(3) + 1 / 2                    # ideal order 3, 2, 1
    assert metrics.dcg_at_k(ranked, 3) == pytest.approx(dcg3)
    assert metrics.dcg_at_k(ranked, 1) == pytest.approx(7.0)
    assert metrics.ndcg_at_k(ranked, 3) == pytest.approx(dcg3 / ideal3)
    assert metrics.err_at_k(ranked, 3) == pytest.approx(7 / 16 + (1 / 2) * (3 / 16) * (9 / 16))
    assert metrics.average_precision(ranked) == pytest.approx((1 + 1 + 3 / 4) / 3)
    assert metrics.average_precision(ranked, relevance_threshold=2) == pytest.approx(1.0)
    assert metrics.dcg_at_k(ranked, 10) == pytest.approx(dcg3 + 1 / math.log2(5))  # k beyond the list


def test_query_without_relevant_documents_scores_zero():
    assert metrics.ndcg_at_k([0, 0, 0], 3) == 0.0
    assert metrics.average_precision([0, 0]) == 0.0
    table = metrics.per_query(pd.DataFrame({QUERY_ID: [5, 5], LABEL: [0, 0], "s": [0.2, 0.1]}), "s")
    assert table.loc[0, "nDCG@10"] == 0.0 and table.loc[0, "MAP"] == 0.0


def test_ties_keep_row_order():
    tied = pd.DataFrame({QUERY_ID: [1, 1], LABEL: [0, 4], "s": [0.5, 0.5]})
    assert metrics.per_query(tied, "s").loc[0, "DCG@1"] == 0.0
    assert metrics.per_query(tied.iloc[::-1], "s").loc[0, "DCG@1"] == 15.0


def test_per_query_matches_single_query_functions():
    df = random_table(seed=3, score_decimals=1)
    table = metrics.per_query(df, "score").set_index(QUERY_ID)
    for query, rows in df.groupby(QUERY_ID, sort=False):
        ranked = rows[LABEL].to_numpy()[np.argsort(-rows["score"].to_numpy(), kind="stable")]
        got = table.loc[query]
        for k in KS:
            assert got[f"DCG@{k}"] == pytest.approx(metrics.dcg_at_k(ranked, k), abs=1e-9)
            assert got[f"ERR@{k}"] == pytest.approx(metrics.err_at_k(ranked, k), abs=1e-9)
            assert got[f"nDCG@{k}"] == pytest.approx(metrics.ndcg_at_k(ranked, k), abs=1e-9)
        assert got["MAP"] == pytest.approx(metrics.average_precision(ranked), abs=1e-9)
        assert got[BUCKET] == rows[BUCKET].iloc[0]


def test_mcc_is_pooled_pearson_and_scale_invariant():
    rng = np.random.default_rng(0)
    true = rng.uniform(size=200)
    pred = true + rng.normal(scale=0.3, size=200)
    assert metrics.mcc(true, pred) == pytest.approx(np.corrcoef(true, pred)[0, 1])
    assert metrics.mcc(true, 0.2 * true) == pytest.approx(1.0)
    assert metrics.mcc(true, -true) == pytest.approx(-1.0)
    assert math.isnan(metrics.mcc(true, np.full(200, 0.5)))
    with pytest.raises(ValueError, match="200 values, predicted has 3"):
        metrics.mcc(true, [1.0, 2.0, 3.0])


# ---------------------------------------------------------------------------------------------
# independent implementations
# ---------------------------------------------------------------------------------------------
def test_dcg_and_ndcg_match_ranx_burges():
    """ranx's dcg_burges / ndcg_burges use gain 2^y − 1 and discount log2(i + 1): our definition.
    ranx sorts tied scores in no fixed order, so these scores are all distinct."""
    from ranx import Qrels, Run, evaluate
    df = random_table(seed=1)
    qrels, run = as_trec(df)
    names = [f"{m}@{k}" for m in ("dcg_burges", "ndcg_burges") for k in KS]
    ours = metrics.per_query(df, "score").set_index(QUERY_ID)
    theirs = evaluate(Qrels.from_dict(qrels), Run.from_dict(run), names, return_mean=False, make_comparable=True)
    order = [int(q) for q in Run.from_dict(run).get_query_ids()]
    for k in KS:
        np.testing.assert_allclose(ours.loc[order, f"DCG@{k}"], theirs[f"dcg_burges@{k}"], rtol=1e-9)
        np.testing.assert_allclose(ours.loc[order, f"nDCG@{k}"], theirs[f"ndcg_burges@{k}"], rtol=1e-9, atol=1e-12)


@pytest.mark.skipif(shutil.which("perl") is None, reason="gdeval.pl needs perl")
def test_err_and_ndcg_match_gdeval_with_ties():
    """TREC's gdeval.pl (through ir-measures): ERR with max grade 4, nDCG with exponential gain;
    it prints five decimals. Rounded scores make many ties."""
    df = random_table(seed=2, score_decimals=1)
    qrels, run = as_trec(df)
    measures = [m @ k for k in KS for m in (ERR, nDCG(dcg="exp-log2"))]
    results = list(ir_measures.gdeval.iter_calc(measures, qrels, run))
    ours = metrics.per_query(df, "score").set_index(QUERY_ID)
    assert (df.groupby(QUERY_ID)["score"].nunique() < df.groupby(QUERY_ID).size()).sum() > 10  # ties present
    for k in KS:
        err, ndcg = by_query(results, ERR @ k), by_query(results, nDCG(dcg="exp-log2") @ k)
        queries = sorted(err)
        assert len(queries) > 100
        np.testing.assert_allclose(ours.loc[queries, f"ERR@{k}"], [err[q] for q in queries], atol=6e-6)
        np.testing.assert_allclose(ours.loc[queries, f"nDCG@{k}"], [ndcg[q] for q in queries], atol=6e-6)


@pytest.mark.parametrize("threshold", [1, 3])
def test_map_and_ndcg_match_trec_eval_with_ties(threshold):
    """trec_eval (pytrec_eval through ir-measures): AP with rel >= threshold; nDCG@k with gains 2^y − 1."""
    df = random_table(seed=4, score_decimals=1)
    qrels, run = as_trec(df)
    ndcg = [nDCG(gains=EXP_GAINS) @ k for k in KS]
    results = list(ir_measures.pytrec_eval.iter_calc([AP(rel=threshold)] + ndcg, qrels, run))
    ours = metrics.per_query(df, "score", relevance_threshold=threshold).set_index(QUERY_ID)
    ap = by_query(results, AP(rel=threshold))
    queries = sorted(ap)
    np.testing.assert_allclose(ours.loc[queries, "MAP"], [ap[q] for q in queries], atol=1e-12)
    for k, measure in zip(KS, ndcg, strict=True):
        got = by_query(results, measure)
        np.testing.assert_allclose(ours.loc[queries, f"nDCG@{k}"], [got[q] for q in queries], atol=1e-12)


# ---------------------------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------------------------
labels_strategy = st.lists(st.integers(0, 4), min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(labels=labels_strategy, scores_seed=st.integers(0, 2 ** 32 - 1), k=st.sampled_from(KS))
def test_ndcg_between_zero_and_one(labels, scores_seed, k):
    scores = np.random.default_rng(scores_seed).integers(0, 4, size=len(labels))  # many ties
    table = metrics.per_query(pd.DataFrame({QUERY_ID: 1, LABEL: labels, "s": scores}), "s", ks=(k,))
    assert 0.0 <= table.loc[0, f"nDCG@{k}"] <= 1.0 + 1e-12


@settings(max_examples=60, deadline=None)
@given(labels=labels_strategy, k=st.sampled_from(KS))
def test_perfect_ranking_scores_ndcg_one(labels, k):
    table = metrics.per_query(pd.DataFrame({QUERY_ID: 1, LABEL: labels, "s": np.array(labels, float)}), "s", ks=(k,))
    assert table.loc[0, f"nDCG@{k}"] == pytest.approx(1.0 if max(labels) > 0 else 0.0)
    assert table.loc[0, "MAP"] == pytest.approx(1.0 if max(labels) > 0 else 0.0)


@settings(max_examples=40, deadline=None)
@given(labels=st.lists(st.integers(0, 4), min_size=2, max_size=40), seed=st.integers(0, 2 ** 32 - 1))
def test_metrics_invariant_to_row_order_when_ties_share_a_label(labels, seed):
    """Rows may be permuted freely as long as only documents of equal label share a score."""
    rng = np.random.default_rng(seed)
    labels = np.array(labels)
    queries = rng.integers(0, 3, size=labels.size)
    scores = rng.integers(0, 3, size=labels.size) * 10 + labels      # ties only within a label
    df = pd.DataFrame({QUERY_ID: queries, LABEL: labels, "s": scores.astype(float)})
    shuffled = df.iloc[rng.permutation(labels.size)]
    pd.testing.assert_frame_equal(metrics.per_query(df, "s"), metrics.per_query(shuffled, "s"))


# ---------------------------------------------------------------------------------------------
# groups, JSON, errors
# ---------------------------------------------------------------------------------------------
def test_evaluate_splits_high_and_tail_buckets():
    df = random_table(seed=5)
    table = metrics.per_query(df, "score")
    result = metrics.evaluate(df, "score")
    json.dumps(result)
    high, tail = table[table[BUCKET] <= 4], table[table[BUCKET] >= 5]
    assert result["all"]["n_queries"] == len(table) == df[QUERY_ID].nunique()
    assert result["high"]["n_queries"] == len(high) and result["tail"]["n_queries"] == len(tail)
    assert len(high) and len(tail)
    for column in ("DCG@10", "ERR@3", "nDCG@5", "MAP"):
        assert result["high"][column] == pytest.approx(high[column].mean())
        assert result["tail"][column] == pytest.approx(tail[column].mean())
        assert result["all"][column] == pytest.approx(table[column].mean())


def test_evaluate_without_buckets_and_empty_group():
    df = random_table(seed=6, n_queries=5)
    assert set(metrics.evaluate(df.drop(columns=[BUCKET]), "score")) == {"all"}
    only_high = metrics.evaluate(df.assign(**{BUCKET: 2}), "score", ks=(1,))
    assert only_high["tail"] == {"n_queries": 0, "DCG@1": None, "ERR@1": None, "nDCG@1": None, "MAP": None}
    json.dumps(only_high)


@pytest.mark.parametrize("change, fragment", [
    ({LABEL: [0, 5, 1]}, "column 'label' row 1 is 5"),
    ({"s": [0.1, float("nan"), 0.3]}, "column 's' row 1 is nan"),
    ({BUCKET: [0, 7, 0]}, "column 'bucket' row 1 is 7, but query 1 has bucket 0"),
])
def test_bad_input_names_column_and_row(change, fragment):
    df = pd.DataFrame({QUERY_ID: [1, 1, 2], LABEL: [0, 1, 2], "s": [0.1, 0.2, 0.3], BUCKET: [0, 0, 3]})
    with pytest.raises(SchemaError, match=fragment):
        metrics.per_query(df.assign(**change), "s")


def test_missing_column_and_bad_cutoff():
    df = pd.DataFrame({QUERY_ID: [1], LABEL: [1], "s": [0.1]})
    with pytest.raises(SchemaError, match=r"missing column\(s\) \['score'\]"):
        metrics.evaluate(df, "score")
    with pytest.raises(ValueError, match="positive integer, got 0"):
        metrics.per_query(df, "s", ks=(0,))


def test_queries_sharing_an_id_but_not_their_tokens_are_two_queries():
    from wpultr.schema import QUERY_KEY, QUERY_TOKENS
    df = pd.DataFrame({QUERY_ID: ["7"] * 4 + ["10000014169022957140"] * 2,
                       QUERY_TOKENS: [[1, 2], [1, 2], [3], [3], [5], [5]],
                       LABEL: [4, 0, 0, 4, 2, 0], "score": [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]})
    table = metrics.per_query(df, "score", ks=(1,), bucket_col="none")
    assert list(table[QUERY_KEY]) == ["10000014169022957140\t5", "7\t1 2", "7\t3"]
    assert list(table[QUERY_ID]) == ["10000014169022957140", "7", "7"]
    assert list(table["nDCG@1"]) == [1.0, 1.0, 0.0]
    result = metrics.evaluate(df, "score", ks=(1,), bucket_col="none")["all"]
    assert result["n_queries"] == 3 and result["nDCG@1"] == pytest.approx(2 / 3)
    by_id = metrics.evaluate(df.drop(columns=[QUERY_TOKENS]), "score", ks=(1,), bucket_col="none")["all"]
    assert by_id["n_queries"] == 2          # without tokens the id alone keys a query
