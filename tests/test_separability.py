"""Which page features BAL corrects: only those that vary for the same document (`bal.separability`)."""
import numpy as np
import pandas as pd
import pytest
import torch

from wpultr.bal.method import BAL
from wpultr.bal.separability import separability, within_document_share
from wpultr.causal.biases import BiasReport, ConfoundedFeature
from wpultr.config import ConfigError, RunConfig, config_from_dict
from wpultr.schema import BAIDU_PAGE_FEATURES, CLICK, RELEVANCE_SCORE
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate


def _anova_share(pairs, values, categorical):
    """The within-pair share by pandas groupby, one indicator column at a time (independent of the bincounts)."""
    frame = pd.get_dummies(pd.Series(values)).astype(float) if categorical else pd.DataFrame({"x": values})
    within = (frame - frame.groupby(pairs).transform("mean")).pow(2).to_numpy().sum()
    return within / (frame - frame.mean()).pow(2).to_numpy().sum()


@pytest.mark.parametrize("categorical", [False, True])
def test_within_document_share_is_the_anova_within_sum_of_squares_share(categorical):
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 50, 2000)
    own = rng.integers(0, 4, 50)[pairs]                               # the document's own value ...
    values = np.where(rng.random(2000) < 0.6, own, rng.integers(0, 4, 2000))   # ... shown 60 % of the time
    values = values if categorical else values + rng.normal(0, 0.3, 2000)
    assert within_document_share(pairs, values, categorical) == pytest.approx(_anova_share(pairs, values, categorical),
                                                                              rel=1e-10)


def test_within_document_share_is_0_for_a_feature_fixed_per_document_and_near_1_for_one_drawn_per_impression():
    rng = np.random.default_rng(1)
    pairs = rng.integers(0, 100, 5000)
    assert within_document_share(pairs, rng.integers(0, 4, 100)[pairs], True) == 0.0
    assert within_document_share(pairs, rng.normal(size=100)[pairs], False) == pytest.approx(0.0, abs=1e-12)
    assert within_document_share(pairs, rng.integers(0, 4, 5000), True) > 0.95
    assert within_document_share(pairs, np.full(5000, 3.0), False) == 0.0       # no variance: nothing to learn


def _logs(consistency):
    cfg = SimulateConfig(n_queries=30, docs_per_query=8, n_sessions=600, n_annotated_queries=10, results_per_page=6,
                         media_type_consistency=consistency)
    return simulate(cfg, seed=3).sessions


def test_a_media_type_fixed_per_document_is_set_aside_and_one_varying_by_impression_is_kept():
    fixed = separability(_logs(1.0), BAIDU_PAGE_FEATURES, 0.05)
    assert fixed.checked and fixed.set_aside == ("media_type",)
    assert fixed.shares["position"] > 0.2 and fixed.shares["serp_max_show_height"] > 0.2
    varying = separability(_logs(0.4), BAIDU_PAGE_FEATURES, 0.05)
    assert varying.set_aside == () and varying.shares["media_type"] > 0.3
    recorded = fixed.to_dict()
    assert recorded["set_aside"] == ["media_type"] and recorded["within_document_share"]["media_type"] == 0.0


def test_bals_training_rows_record_what_separability_measures_one_column_at_a_time():
    """BAL's rows, built one page feature at a time (bal/rows.py, out of core), run `separability`'s own check
    (SeparabilityCheck), not a copy of it: the same shares and set-aside features as the frame's."""
    from wpultr.bal.rows import TrainingRows
    logs = _logs(1.0)
    run = RunConfig()
    run.train.method, run.bal.graph = "bal", "all_features"
    built = TrainingRows.build(logs, run).separable
    assert built.to_dict() == separability(logs, run.data.parsed_page_features, 0.05).to_dict()
    assert built.set_aside == ("media_type",)
    run.discovery.min_within_document_share = 0.0
    assert not TrainingRows.build(logs, run).separable.checked


def test_nothing_is_set_aside_without_doc_ids_or_with_the_check_off():
    logs = _logs(1.0)
    off = separability(logs, BAIDU_PAGE_FEATURES, 0.0)
    assert not off.checked and off.set_aside == () and "is 0" in off.reason
    blind = separability(logs.drop(columns="doc_id"), BAIDU_PAGE_FEATURES, 0.05)
    assert not blind.checked and blind.set_aside == () and "doc_id" in blind.reason


def test_min_within_document_share_is_discoverys_and_the_old_bal_key_still_loads_with_a_note(caplog):
    """Issue 46: the click tests' threshold is a discovery setting; `bal.min_within_document_share` is read there
    through config.MOVED_KEYS, with a note, and both given differently is one error naming both."""
    with pytest.raises(ConfigError, match="discovery.min_within_document_share"):
        config_from_dict({"discovery": {"min_within_document_share": 1.0}})
    assert config_from_dict({"discovery": {"min_within_document_share": 0}}).discovery.min_within_document_share == 0
    assert not hasattr(config_from_dict({}).bal, "min_within_document_share")
    with caplog.at_level("WARNING", logger="wpultr.config"):
        old = config_from_dict({"bal": {"min_within_document_share": 0.2}})
    assert old.discovery.min_within_document_share == 0.2
    assert "bal.min_within_document_share moved to discovery.min_within_document_share" in caplog.text
    with pytest.raises(ConfigError, match=r"^bal.min_within_document_share: moved to discovery\..*both are given"):
        config_from_dict({"bal": {"min_within_document_share": 0.2}, "discovery": {"min_within_document_share": 0.1}})


def test_a_report_without_a_feature_no_longer_corrects_it_but_keeps_it_as_a_conditioning_parent():
    report = BiasReport((ConfoundedFeature("media_type", (RELEVANCE_SCORE,), 1),
                         ConfoundedFeature("serp_height", (RELEVANCE_SCORE, "media_type"), 2)),
                        ("media_type", "serp_height", "position"), (RELEVANCE_SCORE, "media_type", "serp_height",
                                                                    "position"))
    kept = report.without(["media_type"])
    assert [c.feature for c in kept.confounded] == ["serp_height"]
    assert kept.confounded[0].parents == (RELEVANCE_SCORE, "media_type")
    assert kept.page_feature_biases == ("serp_height", "position")
    assert kept.click_parents == (RELEVANCE_SCORE, "serp_height", "position")
    assert report.without([]) == report


def test_bal_does_not_correct_a_feature_fixed_per_document():
    """FB-BAL's graph makes every page feature confounded and a click parent; with the media type fixed per
    document, BAL must weight and model clicks without it, and say so in its bias record."""
    logs = _logs(1.0)
    run = RunConfig()
    run.data.simulate, run.train.method, run.train.device = SimulateConfig(), "bal", "cpu"
    run.train.epochs, run.train.warmup_epochs, run.train.batch_size = 1, 1, 64
    run.bal.graph, run.bal.estimator_rows, run.bal.influence.epochs, run.bal.click_model.epochs = \
        "all_features", 1000, 3, 1
    torch.manual_seed(0)
    result = BAL().fit(logs, None, run)
    assert result.bias["separability"]["set_aside"] == ["media_type"]
    epoch = result.bias["epochs"][0]
    assert "media_type" not in epoch["biases"]["click_parents"]
    assert "media_type" not in [c["feature"] for c in epoch["biases"]["confounded"]]
    assert "media_type" not in epoch["weights"]["confounded"] and "position" in epoch["weights"]["confounded"]
    assert CLICK in result.graphs[0].nodes and result.graphs[0].adjacent("media_type", CLICK)   # the graph keeps it
