"""Data-parallel training (methods/distributed.py): 2 DDP ranks (gloo, loopback) against 1 process.

With the same global batch (`train.batch_size` 37 over 300 sessions: uneven shards and a 4-session last
batch), the two ranks' averaged, share-scaled gradients must give the one-process model.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wpultr.config import RunConfig
from wpultr.errors import ConfigError, WpultrError
from wpultr.io.tables import SessionPartitionWriter, to_arrow
from wpultr.methods.distributed import click_normaliser, fit_data_parallel, fit_streamed, shard
from wpultr.methods.naive import Naive
from wpultr.methods.training import SessionLists, batches
from wpultr.schema import FEATURES, SESSION_ID
from wpultr.simulate import SimulateConfig, simulate

SIM = SimulateConfig(n_queries=30, docs_per_query=10, n_sessions=300, n_annotated_queries=20,
                     results_per_page=6, vocab_size=300, n_dense_features=6)


@pytest.fixture(scope="module")
def logs(one_torch_thread):
    return simulate(SIM, seed=0)


@pytest.fixture(autouse=True)
def one_thread_per_rank(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def config(loss: str, processes: int, streaming: bool = False) -> RunConfig:
    cfg = RunConfig()
    cfg.seed = 4
    cfg.ranker.head, cfg.ranker.dropout = [16], 0.0
    cfg.train.loss, cfg.train.epochs, cfg.train.batch_size, cfg.train.device = loss, 2, 37, "cpu"
    cfg.train.processes, cfg.train.streaming = processes, streaming
    return cfg


def assert_same_model(a, b, skip=()):
    for name, value in a.ranker.state_dict().items():
        if name not in skip:
            torch.testing.assert_close(b.ranker.state_dict()[name], value, rtol=1e-5, atol=1e-5)
    assert [h["train"]["loss"] for h in b.history] == pytest.approx([h["train"]["loss"] for h in a.history],
                                                                     rel=1e-5)
    assert b.bias["best_epoch"] == a.bias["best_epoch"]


def test_two_ranks_train_the_one_process_model(logs):
    one = Naive().fit(logs.sessions, logs.annotations, config("pointwise", 1))
    two = Naive().fit(logs.sessions, logs.annotations, config("pointwise", 2))
    assert two.bias["processes"] == 2
    assert_same_model(one, two)


def test_two_ranks_streaming_partitions_train_the_one_process_model(logs, tmp_path):
    writer = SessionPartitionWriter(tmp_path, 0, 200)
    writer.write(to_arrow(logs.sessions.sort_values(SESSION_ID, kind="stable")))
    writer.close()
    one = fit_streamed(tmp_path, logs.annotations, config("listwise", 1, streaming=True))
    two = fit_streamed(tmp_path, logs.annotations, config("listwise", 2, streaming=True))
    assert_same_model(one, two, skip={"net.2.bias"})   # listwise: blind to a shift of the scores (test_streaming)


def test_a_failing_rank_is_one_error_not_a_hang(logs):
    with pytest.raises(WpultrError, match=r"DDP rank \d of 2 failed: .*needs a dense 'features' column"):
        fit_data_parallel(logs.sessions.drop(columns=[FEATURES]), None, config("pointwise", 2))


@pytest.mark.parametrize("loss", ["pointwise", "listwise"])
def test_shards_split_each_global_batch_and_its_normaliser(logs, loss):
    lists = SessionLists.from_frame(logs.sessions)
    for batch in batches(lists, 37, np.random.default_rng(0), torch.device("cpu")):
        for world in (2, 3, 40):      # 40 ranks: some shards are empty
            parts = [shard(batch, r, world) for r in range(world)]
            assert np.array_equal(np.concatenate([p.index for p in parts]), batch.index)
            assert torch.equal(torch.cat([p.clicks for p in parts]), batch.clicks)
            assert sum(click_normaliser(loss, p) for p in parts) == click_normaliser(loss, batch)
            assert max(len(p.index) for p in parts) - min(len(p.index) for p in parts) <= 1


def test_a_booster_is_not_given_ddp_ranks(logs):
    cfg = config("pointwise", 2)
    cfg.ranker.backbone = "lightgbm"
    with pytest.raises(ConfigError, match="train.processes: DDP ranks train the neural backbones"):
        Naive().fit(logs.sessions, None, cfg)
