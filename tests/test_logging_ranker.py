"""The simulator's feature-based logging ranker (`data.simulate.logging_ranker: linear`, paper 004 §6.1).

The paper's displayed lists come from a ranker trained on the labels of a small share of the queries (a Ranking
SVM on 1 %): fixed per query, ordered by the features, so its mistakes follow the features. Checked here: with no
logging noise every session of a query shows the same list, in the order of the fitted linear score; that score
comes from the features (a query outside the fitting set is ranked the same whatever its grades), and it is better
than chance yet below the grade; the keys are validated.
"""
import numpy as np
import pytest

from wpultr.config import ConfigError
from wpultr.evaluation.metrics import ndcg_at_k
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate
from wpultr.simulate.generate import simulation_engine
from wpultr.simulate.logging_policy import linear_logging_score

SMALL = dict(n_queries=60, docs_per_query=15, n_annotated_queries=12, vocab_size=500, n_dense_features=8,
             results_per_page=10, zipf_exponent=0.0, logging_media_boost=[0.0, 0.0, 0.0, 0.0])


def test_linear_logger_shows_each_query_one_fixed_list_in_score_order():
    cfg = SimulateConfig(**SMALL, n_sessions=600, logging_ranker="linear", logging_ranker_queries=6, logging_noise=0.0)
    logs = simulate(cfg, seed=3)
    corpus = simulation_engine(cfg, seed=3).corpus
    score = dict(zip(corpus.doc_ids, corpus.logging_score, strict=True))
    sessions = logs.sessions.sort_values(["session_id", "position"])
    lists = sessions.groupby("session_id").agg(query=("query_id", "first"), docs=("doc_id", tuple))
    assert lists.groupby("query")["docs"].nunique().eq(1).all()          # the same list every time it is shown
    for docs in lists["docs"].head(50):
        shown = [score[d] for d in docs]
        assert shown == sorted(shown, reverse=True)
    # the top of each list: the 10 best of the query's 15 candidates by the logger's score
    q0 = corpus.docs_of(np.array([0]))[0]
    top = set(corpus.doc_ids[q0[np.argsort(-corpus.logging_score[q0])][:10]])
    assert set(lists[lists["query"] == corpus.query_ids[0]]["docs"].iloc[0]) == top


def test_linear_logger_reads_the_features_not_the_grades_and_ranks_between_chance_and_the_grade():
    cfg = SimulateConfig(**SMALL, n_sessions=10, logging_ranker="linear", logging_ranker_queries=6)
    corpus = simulation_engine(cfg, seed=0).corpus
    # refit with the grades of every query outside the fitting set scrambled: their scores do not move
    rng = np.random.default_rng(7)
    fitted_on = set(np.random.default_rng(1).choice(corpus.n_queries, 6, replace=False))
    scrambled = corpus.label.copy()
    outside = ~np.isin(corpus.doc_query, list(fitted_on))
    scrambled[outside] = rng.permutation(scrambled[outside])
    a = linear_logging_score(corpus.features, corpus.label, corpus.doc_query, 6, np.random.default_rng(1))
    b = linear_logging_score(corpus.features, scrambled, corpus.doc_query, 6, np.random.default_rng(1))
    np.testing.assert_allclose(a / a.std(), b / b.std(), rtol=1e-6, atol=1e-9)

    def mean_ndcg(score):
        return np.mean([ndcg_at_k(corpus.label[d][np.argsort(-score[d])], 10)
                        for d in (corpus.docs_of(np.array([q]))[0] for q in range(corpus.n_queries))])
    chance = mean_ndcg(np.random.default_rng(0).standard_normal(len(corpus.label)))
    linear = mean_ndcg(corpus.logging_score)
    grade = mean_ndcg(corpus.label + 1e-3 * np.random.default_rng(0).standard_normal(len(corpus.label)))
    assert chance + 0.1 < linear < grade


def test_grade_logger_is_the_default_and_has_no_score():
    assert SimulateConfig().logging_ranker == "grade"
    assert simulation_engine(SimulateConfig(**SMALL, n_sessions=10), seed=0).corpus.logging_score is None


@pytest.mark.parametrize("changes, fragment", [
    ({"logging_ranker": "svm"},
     "data.simulate.logging_ranker: 'svm' is not allowed; allowed values: 'grade', 'linear'"),
    ({"logging_ranker": "linear", "logging_ranker_queries": 61}, "data.simulate.logging_ranker_queries: must be <="),
    ({"logging_ranker_queries": 0}, "data.simulate.logging_ranker_queries: must be >= 1"),
])
def test_bad_logging_ranker_settings_name_the_key(changes, fragment):
    with pytest.raises(ConfigError) as err:
        simulate(SimulateConfig(**{**SMALL, "n_sessions": 10, **changes}), seed=0)
    assert fragment in str(err.value)


def test_the_ranking_svm_pairs_are_built_a_block_of_rows_at_a_time_in_the_dense_order():
    """The within-query pairs of unequal grades, a block of rows at a time (memory block × rows, not rows²), are the
    pairs of the dense rows × rows comparison in its order, so the fitted logger is the same."""
    from wpultr.simulate.logging_policy import _ordered_pairs
    rng = np.random.default_rng(0)
    query, label = rng.permutation(np.repeat(np.arange(40), 25)), rng.integers(0, 5, 1000)
    dense = np.nonzero((query[:, None] == query[None, :]) & (label[:, None] > label[None, :]))
    for block in (1, 97, 1000, 4096):
        got = _ordered_pairs(query, label, block)
        assert np.array_equal(got[0], dense[0]) and np.array_equal(got[1], dense[1])
