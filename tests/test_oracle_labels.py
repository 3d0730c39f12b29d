"""The true-label oracle is trained with the run's loss kind (issue 31: the LETOR anomaly of the
identifiability reproduction, where the listwise oracle's exp(score) had no common scale across queries)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wpultr.config import RunConfig
from wpultr.errors import ConfigError
from wpultr.methods.oracle import Oracle, label_loss
from wpultr.rankers.base import score_frame
from wpultr.rundir.layout import TRUTH_DIR
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate

SIM = SimulateConfig(n_queries=40, docs_per_query=8, results_per_page=8, n_sessions=600, n_annotated_queries=10,
                     vocab_size=300, n_dense_features=8, user_model="pbm")


def oracle_config(tmp_path, loss: str) -> RunConfig:
    cfg = RunConfig()
    cfg.run_dir = str(tmp_path)
    cfg.data.simulate = SIM
    cfg.ranker.head = [16]
    cfg.ranker.dropout = 0.0
    cfg.train.method = "oracle"
    cfg.train.loss = loss
    cfg.train.epochs = 8
    cfg.train.batch_size = 32
    cfg.train.learning_rate = 0.01
    cfg.train.device = "cpu"
    return cfg


def test_pointwise_oracle_predicts_the_normalised_gain_on_one_scale_across_queries(tmp_path):
    """train.loss pointwise: σ(score) estimates (2^y − 1)/15, the share of the user model's click relevance
    that grows with the grade, for every query alike, as a pointwise click model's σ(score) does."""
    torch.manual_seed(0)
    logs = simulate(SIM, seed=0)
    (tmp_path / TRUTH_DIR).mkdir(parents=True)
    logs.truth_sessions.to_parquet(tmp_path / TRUTH_DIR / "truth_sessions.parquet")
    result = Oracle().fit(logs.sessions, None, oracle_config(tmp_path, "pointwise"))
    assert result.bias["loss"] == "pointwise"
    docs = logs.annotations
    gain = (np.exp2(docs["label"].to_numpy(np.float64)) - 1.0) / 15.0
    predicted = 1.0 / (1.0 + np.exp(-np.asarray(score_frame(result.ranker, docs), dtype=np.float64)))
    assert np.abs(predicted - gain).mean() < 0.2      # the listwise oracle this replaced: 0.41


def test_oracle_refuses_a_loss_it_cannot_train_with():
    with pytest.raises(ConfigError, match="train.loss"):
        label_loss("lambdarank")
