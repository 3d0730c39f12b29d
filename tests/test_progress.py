"""Progress bars: drawn on a terminal (or when forced), silent in pipes, logs and CI."""
import os

import pytest

from wpultr.config import config_from_dict
from wpultr.methods.losses import click_loss
from wpultr.methods.training.trainer import Trainer, build_ranker
from wpultr.progress import progress, progress_enabled
from wpultr.simulate import simulate


@pytest.fixture
def terminal():
    """A real pseudo-terminal to put in place of stderr (inside the test: pytest's capture resets it between phases)."""
    leader, follower = os.openpty()
    stream = os.fdopen(follower, "w")
    yield stream
    stream.close()
    os.close(leader)


def test_bars_only_on_a_terminal_outside_ci(monkeypatch, terminal):
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.delenv("WPULTR_PROGRESS", raising=False)
    monkeypatch.delenv("CI", raising=False)
    assert progress_enabled()
    monkeypatch.setenv("CI", "true")
    assert not progress_enabled()
    monkeypatch.setenv("WPULTR_PROGRESS", "1")
    assert progress_enabled()
    monkeypatch.setenv("WPULTR_PROGRESS", "0")
    monkeypatch.delenv("CI")
    assert not progress_enabled()


def test_silent_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    monkeypatch.delenv("WPULTR_PROGRESS", raising=False)
    monkeypatch.delenv("CI", raising=False)
    bar = progress(range(5), desc="quiet", unit="step")
    assert list(bar) == [0, 1, 2, 3, 4]
    bar.set_postfix(loss=1.0)
    assert capsys.readouterr().err == ""


def tiny_training(epochs):
    cfg = config_from_dict({"seed": 0, "ranker": {"backbone": "mlp", "head": [8]},
                            "train": {"epochs": epochs, "batch_size": 16},
                            "data": {"simulate": {"n_queries": 10, "n_sessions": 60, "n_annotated_queries": 5}}})
    sessions = simulate(cfg.data.simulate, seed=0).sessions
    trainer = Trainer(build_ranker(cfg, sessions), sessions, None, cfg)
    trainer.fit(lambda scores, batch: click_loss("pointwise", scores, batch.clicks, batch.mask))
    return trainer


def test_training_shows_epochs_batches_and_loss_when_forced(monkeypatch, capsys):
    monkeypatch.setenv("WPULTR_PROGRESS", "1")
    trainer = tiny_training(epochs=2)
    err = capsys.readouterr().err
    batches = -(-len(trainer.lists) // 16)
    for epoch in (0, 1):
        assert f"train epoch {epoch}" in err
    assert f"{batches}/{batches}" in err and "batch" in err and "loss=" in err
    monkeypatch.delenv("WPULTR_PROGRESS")
    tiny_training(epochs=1)
    assert capsys.readouterr().err == ""
