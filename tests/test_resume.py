"""The train stage resumes from its last finished epoch (methods/training/checkpoint.py): a fit stopped mid-epoch and
run again under the same checkpoint ends with the model of a fit never stopped — in one process for every method
that keeps state across epochs, and through `wpultr run` after a DDP rank is killed mid-epoch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wpultr.config import RunConfig
from wpultr.methods.training.checkpoint import Checkpoint, config_key, keep_checkpoints
from wpultr.methods.training.trainer import Trainer
from wpultr.rundir.files import RunDir
from wpultr.settings.methods import get_method
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate

SIM = SimulateConfig(n_queries=20, docs_per_query=8, n_sessions=160, n_annotated_queries=12,
                     results_per_page=5, vocab_size=200, n_dense_features=5)


@pytest.fixture(scope="module")
def logs(one_torch_thread):
    return simulate(SIM, seed=1)


def config(method: str, loss: str = "pointwise") -> RunConfig:
    cfg = RunConfig()
    cfg.seed = 3
    cfg.ranker.head, cfg.ranker.dropout = [8], 0.0
    cfg.train.method, cfg.train.loss, cfg.train.device = method, loss, "cpu"
    cfg.train.warmup_epochs, cfg.train.epochs, cfg.train.batch_size = 1, 3, 32
    cfg.regression_em.sample_labels = True       # its label draws: a generator the checkpoint must carry
    return cfg


class Stop(Exception):
    """Stands for a process killed mid-epoch."""


def stopped_in_epoch(monkeypatch, epoch: int) -> None:
    """Make the shared trainer's epoch `epoch` (counting from 0, warm-up included) fail after its first batch."""
    calls = {"n": 0}
    original = Trainer.epoch

    def epoch_then_stop(self, loss_fn, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] <= epoch:
            return original(self, loss_fn, *args, **kwargs)

        def loss_then_stop(scores, batch):
            loss_fn(scores, batch)      # the batch's statistics updated, its step not taken
            raise Stop
        return original(self, loss_then_stop, *args, **kwargs)
    monkeypatch.setattr(Trainer, "epoch", epoch_then_stop)


def same_model(a, b) -> None:
    for name, value in a.ranker.state_dict().items():
        torch.testing.assert_close(b.ranker.state_dict()[name], value, rtol=0, atol=0)
    assert [h["train"]["loss"] for h in b.history] == [h["train"]["loss"] for h in a.history]
    assert b.bias["best_epoch"] == a.bias["best_epoch"]


@pytest.mark.parametrize("method", ["naive", "regression_em", "dla", "pairwise_debias", "lbd", "bal"])
def test_a_fit_stopped_mid_epoch_resumes_from_its_last_finished_epoch(logs, tmp_path, monkeypatch, method):
    """Stopped in the method's second epoch (after one warm-up and one method epoch), the fit run again loads the
    checkpoint of epoch 1 — ranker, optimiser, RNG streams, history and the method's own state (REM's θ and label
    draws, DLA's logits, t±, LBD's observation model, BAL's graphs) — and ends bit for bit where an unstopped fit
    ends."""
    cfg = config(method)
    whole = get_method(method).fit(logs.sessions, logs.annotations, cfg)
    run = RunDir.create(tmp_path / "run")
    path = run.path("train/checkpoint.pt")
    with keep_checkpoints(path, config_key(cfg)):
        with monkeypatch.context() as patch:
            stopped_in_epoch(patch, 2)
            with pytest.raises(Stop):
                get_method(method).fit(logs.sessions, logs.annotations, cfg)
        assert Checkpoint(path, config_key(cfg)).finished_epochs() == 2
        resumed = get_method(method).fit(logs.sessions, logs.annotations, cfg)
    same_model(whole, resumed)
    if method == "bal":
        assert [g.edges for g in resumed.graphs] == [g.edges for g in whole.graphs]
    for key in ("theta", "propensities", "t_plus", "t_minus", "observation_by_position"):
        if key in whole.bias:
            assert resumed.bias[key] == whole.bias[key]


def test_a_checkpoint_of_another_config_is_not_resumed(logs, tmp_path, monkeypatch):
    cfg = config("naive")
    run = RunDir.create(tmp_path / "run")
    path = run.path("train/checkpoint.pt")
    with keep_checkpoints(path, config_key(cfg)), monkeypatch.context() as patch:
        stopped_in_epoch(patch, 2)
        with pytest.raises(Stop):
            get_method("naive").fit(logs.sessions, logs.annotations, cfg)
    changed = config("naive")
    changed.train.learning_rate *= 2
    assert config_key(changed) != config_key(cfg)
    with keep_checkpoints(path, config_key(changed)):
        again = get_method("naive").fit(logs.sessions, logs.annotations, changed)
    whole = get_method("naive").fit(logs.sessions, logs.annotations, changed)
    same_model(whole, again)                             # from epoch 0, not from the other config's epoch 2
    assert torch.load(path, weights_only=True)["epochs"] == 4     # and its checkpoint replaced the other's
    assert np.isfinite(again.history[-1]["train"]["loss"])
