"""The train stage resumes from its last finished epoch (methods/training/checkpoint.py): a fit stopped mid-epoch and
run again under the same checkpoint ends with the model of a fit never stopped — in one process for every method
that keeps state across epochs, and through `wpultr run` after a DDP rank is killed mid-epoch."""
from __future__ import annotations

import json

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


def pipeline_config(tmp, name: str, processes: int):
    from wpultr.config import config_from_dict
    return config_from_dict({
        "name": name, "seed": 0, "run_dir": str(tmp / "{name}"),
        "data": {"valid_fraction": 0.4, "simulate": {
            "n_queries": 30, "docs_per_query": 8, "n_sessions": 400, "n_annotated_queries": 20,
            "results_per_page": 6, "vocab_size": 200, "n_dense_features": 6}},
        "ranker": {"head": [16], "dropout": 0.0},
        "train": {"method": "naive", "epochs": 3, "warmup_epochs": 1, "batch_size": 32, "device": "cpu",
                  "processes": processes},
        "evaluation": {"discover_graph": False}, "cluster": {"n_workers": 2}})


@pytest.mark.e2e
def test_a_run_whose_rank_is_killed_mid_epoch_resumes_from_its_last_finished_epoch(tmp_path, dask_client,
                                                                                    monkeypatch, one_torch_thread):
    """`wpultr run` with 2 DDP ranks; rank 1 is SIGKILLed in the method's second epoch (the test hook
    WPULTR_TEST_KILL_RANK): the train stage fails with one line naming the rank and its log in the run directory,
    the checkpoint holds the 2 finished epochs, and the run started again resumes there and ships the ranker of a run
    never stopped (and deletes its checkpoint)."""
    from wpultr.errors import WpultrError
    from wpultr.methods.training.distributed import KILL_ENV
    from wpultr.pipeline.runner import run_pipeline
    from wpultr.rankers.registry import load_ranker
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    whole = run_pipeline(pipeline_config(tmp_path, "whole", 1), client=dask_client)
    cfg = pipeline_config(tmp_path, "killed", 2)
    monkeypatch.setenv(KILL_ENV, "1:2")
    with pytest.raises(WpultrError) as failed:
        run_pipeline(cfg, client=dask_client)
    message = str(failed.value)
    log = tmp_path / "killed" / "train" / "ranks" / "rank1.log"
    assert "\n" not in message and "DDP rank 1 of 2 failed: killed by SIGKILL" in message and str(log) in message
    checkpoint = Checkpoint(tmp_path / "killed" / "train" / "checkpoint.pt", config_key(cfg))
    assert checkpoint.finished_epochs() == 2
    monkeypatch.delenv(KILL_ENV)
    again = run_pipeline(cfg, client=dask_client)
    assert not checkpoint.path.exists()
    summary = json.loads((again.run_dir / "summary.json").read_text())
    assert summary["stages"]["train"]["info"]["resumed_after_epochs"] == 2     # what the run tells its user
    a, b = load_ranker(whole.run_dir / "ranker"), load_ranker(again.run_dir / "ranker")
    for name, value in a.state_dict().items():
        torch.testing.assert_close(b.state_dict()[name], value, rtol=1e-5, atol=1e-5)
    history = json.loads((again.run_dir / "train" / "history.json").read_text())["epochs"]
    assert len(history) == 4 and history[0]["phase"] == "warmup"


def test_a_resumed_fit_ships_an_earlier_best_epoch_it_had_checkpointed(logs, tmp_path, monkeypatch):
    """Validation falling after the method's first epoch: the checkpoint carries that epoch's ranker beside the
    current one, and the resumed fit ships it, as the unstopped fit does."""
    monkeypatch.setattr(Trainer, "validate", lambda self: {"DCG@10": 10.0 - len(self.history)})
    cfg = config("naive")
    whole = get_method("naive").fit(logs.sessions, logs.annotations, cfg)
    assert whole.bias["best_epoch"] == 1
    path = RunDir.create(tmp_path / "run").path("train/checkpoint.pt")
    with keep_checkpoints(path, config_key(cfg)):
        with monkeypatch.context() as patch:
            stopped_in_epoch(patch, 3)
            with pytest.raises(Stop):
                get_method("naive").fit(logs.sessions, logs.annotations, cfg)
        assert torch.load(path, weights_only=True)["best"]["epoch"] == 1
        resumed = get_method("naive").fit(logs.sessions, logs.annotations, cfg)
    same_model(whole, resumed)


def test_a_checkpoint_outside_a_run_replaces_only_a_checkpoint(tmp_path):
    """torchrun's `--checkpoint` may name any path: wpultr replaces its own checkpoint there every epoch, never a
    file of the user's."""
    from wpultr.errors import RunDirError
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", "k")
    checkpoint.save({"epochs": 1, "w": torch.ones(3)})
    checkpoint.save({"epochs": 2, "w": torch.ones(3)})
    assert checkpoint.finished_epochs() == 2
    mine = Checkpoint(tmp_path / "notes.pt", "k")
    mine.path.write_text("my notes")
    with pytest.raises(RunDirError, match="--checkpoint .*notes.pt: exists and is not a wpultr training checkpoint"):
        mine.save({"epochs": 1})
    assert mine.path.read_text() == "my notes"
    mine.remove()                                   # the end of a fit removes only a checkpoint
    assert mine.path.read_text() == "my notes"
    checkpoint.remove()
    assert not checkpoint.path.exists()
