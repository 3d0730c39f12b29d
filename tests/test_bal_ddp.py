"""Data-parallel BAL (`train.processes: 2`): two DDP ranks learn the one-process model.

Each rank scores its share of the rows, rank 0 alone fits the graph and the influence estimators and sends them
to the other, and the click model and the ranker step as DDP over the global batches one process draws; with
`ranker.dropout: 0` the two ranks' ranker, losses, graphs and weights are one process's (float rounding aside).
The same through a Dask LocalCluster standing in for `--scheduler`: the ranks run as tasks, one per worker.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
import torch

from wpultr.bal.method import BAL
from wpultr.config import RunConfig
from wpultr.io.tables import SessionPartitionWriter, to_arrow
from wpultr.schema import SESSION_ID
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate

SIM = SimulateConfig(n_queries=20, docs_per_query=6, n_sessions=240, n_annotated_queries=12, results_per_page=5,
                     n_dense_features=4, vocab_size=200)


@pytest.fixture(scope="module")
def logs(one_torch_thread):
    return simulate(SIM, seed=1)


@pytest.fixture(autouse=True)
def one_thread_per_rank(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def bal_config(processes: int, backbone: str = "mlp", streaming: bool = False, loss: str = "pointwise") -> RunConfig:
    cfg = RunConfig()
    cfg.seed = 3
    cfg.data.simulate = SIM
    cfg.ranker.backbone, cfg.ranker.head, cfg.ranker.dropout = backbone, [8], 0.0
    cfg.train.method, cfg.train.device, cfg.train.loss = "bal", "cpu", loss
    cfg.train.epochs, cfg.train.warmup_epochs, cfg.train.batch_size = 2, 1, 29    # uneven shards, a short last batch
    cfg.train.processes, cfg.train.streaming = processes, streaming
    cfg.discovery.n_sessions, cfg.discovery.max_depth = 200, 1
    cfg.bal.estimator_rows, cfg.bal.influence.epochs = 600, 3
    cfg.bal.click_model.epochs, cfg.bal.click_model.batch_size = 2, 97
    return cfg


@pytest.fixture(scope="module")
def one_process(logs):
    """The one-process MLP fit the in-memory tests hold their ranks to (fitted once for the module)."""
    return BAL().fit(logs.sessions, logs.annotations, bal_config(1))


def assert_same_bal(one, two):
    for name, value in one.ranker.state_dict().items():
        torch.testing.assert_close(two.ranker.state_dict()[name], value, rtol=1e-4, atol=1e-5)
    assert [e.get("phase") for e in two.history] == [e.get("phase") for e in one.history]
    for a, b in zip(one.history, two.history, strict=True):
        assert b["train"]["loss"] == pytest.approx(a["train"]["loss"], rel=1e-4)
        if a.get("phase") == "bal":
            assert b["graph_edges"] == a["graph_edges"]
            assert b["train"]["click_model_nll"] == pytest.approx(a["train"]["click_model_nll"], rel=1e-4)
            assert b["weights"]["ess_fraction"] == pytest.approx(a["weights"]["ess_fraction"], rel=1e-4)
    assert two.bias["best_epoch"] == one.bias["best_epoch"]
    assert [g.to_dict()["edges"] for g in two.graphs] == [g.to_dict()["edges"] for g in one.graphs]
    assert two.bias["processes"] == 2


@pytest.mark.e2e
def test_two_bal_ranks_learn_the_one_process_model(logs, one_process):
    one = one_process
    two = BAL().fit(logs.sessions, logs.annotations, bal_config(2))
    assert any(e.get("weights", {}).get("confounded") for e in one.history)   # the weights step ran
    assert_same_bal(one, two)


@pytest.mark.e2e
def test_two_streamed_bal_ranks_learn_the_one_process_model(logs, tmp_path):
    directory = tmp_path / "sessions"
    directory.mkdir()
    writer = SessionPartitionWriter(directory, 0, 400)       # several partitions: the ranks score different units
    writer.write(to_arrow(logs.sessions.sort_values(SESSION_ID, kind="stable")))
    writer.close()
    one = BAL().fit_streamed(directory, logs.annotations, bal_config(1, streaming=True))
    two = BAL().fit_streamed(directory, logs.annotations, bal_config(2, streaming=True))
    assert_same_bal(one, two)


@pytest.mark.e2e
def test_two_bal_ranks_with_the_embedding_backbone_learn_the_one_process_model(logs):
    one = BAL().fit(logs.sessions, logs.annotations, bal_config(1, "embedding"))
    two = BAL().fit(logs.sessions, logs.annotations, bal_config(2, "embedding"))
    assert_same_bal(one, two)


@pytest.mark.e2e
def test_two_bal_ranks_with_a_tiny_bert_learn_the_one_process_model(logs):
    """BERT's masked-LM warm-up and BAL's epochs as ranks (an in-process encoder of 2 layers, width 32)."""
    def bert(processes: int) -> RunConfig:
        cfg = bal_config(processes, "bert")
        cfg.ranker.bert.max_length, cfg.ranker.bert.hidden_size, cfg.ranker.bert.intermediate_size = 16, 32, 64
        cfg.ranker.bert.num_hidden_layers, cfg.ranker.bert.num_attention_heads = 2, 2
        cfg.train.epochs, cfg.train.mlm_probability = 1, 0.3
        return cfg
    one = BAL().fit(logs.sessions, logs.annotations, bert(1))
    two = BAL().fit(logs.sessions, logs.annotations, bert(2))
    assert one.history[0]["train"]["mlm"] > 1.0
    assert_same_bal(one, two)


def _kill_worker_of_rank(rank: str, ready: Callable[[], bool]) -> None:
    """SIGKILL the Dask worker running DDP rank `rank` (among this process's descendants), once `ready()` (the
    checkpoint holds BAL's first epoch) and the rank is past its imports."""
    import time

    import psutil

    from wpultr.methods.training.ranks import RANK_ENTRY
    deadline = time.time() + 300
    while time.time() < deadline:
        if not ready():
            time.sleep(0.2)
            continue
        for child in psutil.Process().children(recursive=True):
            try:
                if RANK_ENTRY in " ".join(child.cmdline()) and child.environ().get("RANK") == rank \
                        and child.cpu_times().user > 2.0:
                    child.parent().kill()
                    return
            except psutil.Error:
                continue
        time.sleep(0.2)


@pytest.mark.e2e
def test_a_worker_lost_mid_fit_fails_it_in_one_line_and_the_fit_resumes_from_its_last_finished_epoch(
        logs, one_process, tmp_path):
    """The Dask worker that runs rank 1 dies in BAL's second epoch (the checkpoint holds the warm-up and BAL's first
    epoch, with its graph and the estimators the next epoch warm-starts from): the fit fails with one line naming
    the lost worker (the other rank is stopped where it runs), and the same fit run again takes two of the workers
    left (of 3), one rank each, resumes from the checkpoint and learns the one-process model."""
    import threading

    from distributed import Client, LocalCluster

    from wpultr.errors import WpultrError
    from wpultr.methods.training.checkpoint import Checkpoint, config_key, keep_checkpoints
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        cfg = bal_config(2)
        cfg.cluster.scheduler = cluster.scheduler_address
        checkpoint = Checkpoint(tmp_path / "checkpoint.pt", config_key(cfg))
        before = set(client.scheduler_info()["workers"])
        killer = threading.Thread(target=_kill_worker_of_rank, args=("1", lambda: checkpoint.finished_epochs() >= 2))
        killer.start()
        with keep_checkpoints(checkpoint.path, checkpoint.key):
            with pytest.raises(WpultrError) as failed:
                BAL().fit(logs.sessions, logs.annotations, cfg)
            killer.join()
            message = str(failed.value)
            assert "\n" not in message and re.search(r"DDP rank \d of 2 failed: Dask worker \d \(tcp://\S+\) was "
                                                     r"lost mid-fit; run again to resume", message), message
            lost = message.split("(", 1)[1].split(")", 1)[0]
            assert lost in before and lost not in client.scheduler_info()["workers"]   # that worker is gone
            saved = checkpoint.load()
            assert saved["epochs"] == 2 and len(json.loads(saved["kept"]["bal"]["graphs"])) == 1
            again = BAL().fit(logs.sessions, logs.annotations, cfg)
        left = set(client.scheduler_info()["workers"])
    assert len(set(again.bias["rank_workers"])) == 2 and set(again.bias["rank_workers"]) <= left   # one rank each
    assert_same_bal(one_process, again)           # resumed after 2 epochs: the model of a fit never stopped
