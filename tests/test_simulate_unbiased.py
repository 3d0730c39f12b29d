"""`data.clicks: unbiased` (the ceiling's logs): the same shown results, every click redrawn with no bias."""
import numpy as np
import pytest

from wpultr.config import ConfigError, config_from_dict
from wpultr.schema import CLICK
from wpultr.simulate import simulate
from wpultr.simulate.unbiased import with_unbiased_clicks
from wpultr.simulate.user_models import click_relevance


def test_unbiased_clicks_keep_the_shown_results_and_follow_relevance_alone():
    cfg = config_from_dict({"data": {"simulate": {"n_queries": 40, "n_sessions": 3000, "n_annotated_queries": 10,
                                                  "media_type_consistency": 0.5}}}).data.simulate
    logs = simulate(cfg, seed=3)
    ceiling = with_unbiased_clicks(logs, seed=3)
    biased, unbiased = logs.sessions, ceiling.sessions
    assert unbiased.drop(columns=[CLICK]).equals(biased.drop(columns=[CLICK]))
    truth = ceiling.truth_sessions
    assert (truth["examination_prob"] == 1.0).all()
    chance = click_relevance(truth["true_label"].to_numpy(float), 0.1)
    np.testing.assert_allclose(truth["click_prob"], chance)
    # clicks no longer fall with position beyond what relevance explains: the click rate at the bottom of the page
    # is what relevance predicts there, far above the biased logs' (examination falls with position)
    bottom = unbiased["position"] == unbiased["position"].max()
    assert abs(unbiased.loc[bottom, CLICK].mean() - chance[bottom.to_numpy()].mean()) < 0.03
    assert unbiased.loc[bottom, CLICK].mean() > 2 * biased.loc[bottom, CLICK].mean()
    assert "unbiased" in ceiling.truth["clicks"]


def test_unbiased_clicks_need_simulated_logs():
    with pytest.raises(ConfigError, match=r"data\.clicks"):
        config_from_dict({"data": {"source": "parquet", "train": ["logs.parquet"], "clicks": "unbiased"}})
