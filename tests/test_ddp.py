"""Data-parallel training (methods/training/distributed.py): 2 DDP ranks (gloo, loopback) against 1 process.

With the same global batch (`train.batch_size` 37 over 300 sessions: uneven shards and a 4-session last
batch), the two ranks' averaged, share-scaled gradients must give the one-process model — the MLP, and a
tiny BERT (2 layers, width 32, vocabulary from the simulated tokens, no dropout) through its masked-LM
warm-up, whose masking each rank draws for the whole global batch and cuts to its rows.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import torch

from wpultr.config import RunConfig
from wpultr.errors import ConfigError, WpultrError
from wpultr.io.tables import SessionPartitionWriter, to_arrow
from wpultr.methods.naive import Naive
from wpultr.methods.training.distributed import click_normaliser, fit_data_parallel, fit_streamed, shard, shard_masking
from wpultr.methods.training.ranks import keep_rank_logs
from wpultr.methods.training.streaming import PartitionSessions, streaming_ranker
from wpultr.methods.training.trainer import SessionLists, batches, build_ranker, list_scores
from wpultr.rankers.base import n_rows, score_frame, take
from wpultr.rankers.registry import load_ranker
from wpultr.schema import FEATURES, SESSION_ID
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate

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


def bert_config(processes: int, loss: str = "pointwise") -> RunConfig:
    """A tiny in-process BERT (its dropout, like the head's, 0) with one masked-LM warm-up epoch."""
    cfg = config(loss, processes)
    cfg.ranker.backbone = "bert"
    cfg.ranker.bert.max_length = 16
    cfg.ranker.bert.hidden_size, cfg.ranker.bert.intermediate_size = 32, 64
    cfg.ranker.bert.num_hidden_layers, cfg.ranker.bert.num_attention_heads = 2, 2
    cfg.train.warmup_epochs, cfg.train.epochs, cfg.train.mlm_probability = 1, 1, 0.3
    return cfg


def assert_same_model(a, b, skip=()):
    for name, value in a.ranker.state_dict().items():
        if name not in skip:
            torch.testing.assert_close(b.ranker.state_dict()[name], value, rtol=1e-5, atol=1e-5)
    assert [h["train"]["loss"] for h in b.history] == pytest.approx([h["train"]["loss"] for h in a.history],
                                                                     rel=1e-5)
    assert b.bias["best_epoch"] == a.bias["best_epoch"]


@pytest.mark.e2e
def test_two_ranks_streaming_partitions_train_the_one_process_model(logs, tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    writer = SessionPartitionWriter(parts, 0, 200)
    writer.write(to_arrow(logs.sessions.sort_values(SESSION_ID, kind="stable")))
    writer.close()
    with keep_rank_logs(tmp_path / "one"):
        one = fit_streamed(parts, logs.annotations, config("listwise", 1, streaming=True))
    with keep_rank_logs(tmp_path / "two"):
        two = fit_streamed(parts, logs.annotations, config("listwise", 2, streaming=True))
    # two ranks ran, each leaving its log; one process starts none (a fit that quietly ran in one would leave none)
    assert not (tmp_path / "one").exists()
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["rank0.log", "rank1.log"]
    # and together they learned the one-process model
    assert_same_model(one, two, skip={"net.2.bias"})   # listwise: blind to a shift of the scores (test_streaming)


@pytest.mark.e2e
def test_two_ranks_train_the_one_process_bert_through_its_masked_lm_warm_up(logs, tmp_path):
    one = Naive().fit(logs.sessions, logs.annotations, bert_config(1))
    two = Naive().fit(logs.sessions, logs.annotations, bert_config(2))
    assert one.history[0]["phase"] == two.history[0]["phase"] == "warmup"
    assert two.history[0]["train"]["mlm"] == pytest.approx(one.history[0]["train"]["mlm"], rel=1e-5)
    assert one.history[0]["train"]["mlm"] > 1.0
    assert_same_model(one, two)      # every tensor: encoder, head and the masked-LM head the warm-up trained
    assert {"encoder.cls.predictions.transform.dense.weight", "head.0.weight"} <= set(two.ranker.state_dict())
    # rank 0 wrote the ranker (config.json + model.safetensors); it loads and scores as `wpultr score` does
    saved = load_ranker(two.ranker.save(tmp_path / "ranker"))      # safetensors + config, checked before building
    np.testing.assert_allclose(score_frame(saved, logs.annotations), score_frame(one.ranker, logs.annotations),
                               rtol=1e-4, atol=1e-4)


def test_the_global_batch_masking_cut_to_shards_is_the_one_process_masked_lm(logs):
    """Each rank's rows of the global masking, its summed loss over the global masked count: the ranks' sum
    is one process's masked-LM loss, value and gradient (and that loss is transformers' own MLM loss)."""
    cfg = bert_config(1)
    ranker = build_ranker(cfg, logs.sessions)
    inputs = ranker.prepare(logs.sessions)
    batch = next(batches(SessionLists.from_frame(logs.sessions), 37, np.random.default_rng(0), torch.device("cpu")))
    tokens = take(inputs, batch.rows[batch.rows >= 0])
    masked, labels = ranker.mlm_masking(tokens, 0.3, torch.Generator().manual_seed(3))
    reference = ranker.encoder(input_ids=masked, token_type_ids=tokens["token_type_ids"],
                               attention_mask=tokens["attention_mask"], labels=labels).loss
    one = ranker.mlm_loss(tokens, 0.3, torch.Generator().manual_seed(3))
    torch.testing.assert_close(one, reference)
    expected = torch.autograd.grad(one, list(ranker.parameters()), allow_unused=True)
    for world in (2, 3):
        total = 0.0
        for rank in range(world):      # every rank's generator is in the same state, as the trainer's are
            masking = shard_masking(ranker, batch, inputs, rank, world, 0.3, torch.Generator().manual_seed(3))
            part = shard(batch, rank, world)
            assert masking.global_count == int((labels >= 0).sum())
            total = total + ranker.mlm_loss_sum(take(inputs, part.rows[part.rows >= 0]), masking.ids,
                                                masking.labels) / masking.global_count
        torch.testing.assert_close(total, one)
        for got, want in zip(torch.autograd.grad(total, list(ranker.parameters()), allow_unused=True), expected,
                             strict=True):
            assert (got is None) == (want is None)
            if want is not None:
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_a_streamed_batch_shard_keeps_only_its_own_prepared_rows(logs, tmp_path):
    writer = SessionPartitionWriter(tmp_path, 0, 500)
    writer.write(to_arrow(logs.sessions.sort_values(SESSION_ID, kind="stable")))
    writer.close()
    ranker = streaming_ranker(config("pointwise", 1), tmp_path).eval()
    for batch in PartitionSessions(tmp_path, ranker, 37):
        whole = list_scores(ranker, {}, batch)
        for world in (2, 3):
            parts = [shard(batch, r, world) for r in range(world)]
            assert sum(n_rows(p.inputs) for p in parts) == n_rows(batch.inputs)
            for p in parts:
                assert n_rows(p.inputs) == int(p.mask.sum())
            torch.testing.assert_close(torch.cat([list_scores(ranker, {}, p) for p in parts]), whole)


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


def test_a_booster_with_ddp_ranks_fails_when_the_config_loads():
    from wpultr.config import config_from_dict
    with pytest.raises(ConfigError, match=r"ranker.backbone: 'lightgbm' .* train.processes 2; allowed values"):
        config_from_dict({"ranker": {"backbone": "lightgbm"}, "train": {"processes": 2}})


def test_a_booster_is_not_given_ddp_ranks(logs):
    cfg = config("pointwise", 2)
    cfg.ranker.backbone = "lightgbm"
    with pytest.raises(ConfigError, match="train.processes: DDP ranks train the neural backbones"):
        Naive().fit(logs.sessions, None, cfg)


@pytest.mark.e2e
def test_two_ranks_train_on_the_table_the_train_stage_reads(logs, tmp_path):
    """The train stage hands a method its sessions with the list columns as Arrow arrays
    (io.train_input.arrow_lists): the ranks must read that table back (pandas 3 could not: "data type
    'list<element: int32>[pyarrow]' not understood") and train the one-process model on it."""
    from wpultr.io.train_input import arrow_lists, read_sampled_sessions
    (tmp_path / "sessions").mkdir()
    writer = SessionPartitionWriter(tmp_path / "sessions", 0, 200)
    writer.write(to_arrow(logs.sessions.sort_values(SESSION_ID, kind="stable")))
    writer.close()
    cfg = config("pointwise", 1)
    table = read_sampled_sessions(tmp_path / "sessions", None, cfg.seed, None, arrow_lists(cfg))
    assert any(isinstance(t, pd.ArrowDtype) for t in table.dtypes)          # the tokens and features as Arrow
    one = Naive().fit(table, logs.annotations, cfg)
    two = Naive().fit(table, logs.annotations, config("pointwise", 2))
    assert two.bias["processes"] == 2
    assert two.bias["distributed"] == {"engine": "torch DDP", "backend": "gloo", "device": "cpu"}   # no GPU here
    assert_same_model(one, two)


@pytest.mark.e2e
def test_a_failing_rank_is_one_error_not_a_hang_and_keeps_its_traceback_where_the_error_says(logs, tmp_path):
    from wpultr.methods.training.ranks import keep_rank_logs
    with keep_rank_logs(tmp_path / "ranks"), pytest.raises(WpultrError) as failed:
        fit_data_parallel(logs.sessions.drop(columns=[FEATURES]), None, config("pointwise", 2))
    message = str(failed.value)
    assert "\n" not in message
    assert re.search(r"DDP rank \d of 2 failed: .*needs a dense 'features' column", message), message
    kept = message.rsplit("its log: ", 1)[1].rstrip(")")
    assert kept.startswith(str(tmp_path / "ranks" / "rank"))
    with open(kept) as handle:
        text = handle.read()
    assert "Traceback (most recent call last)" in text and "needs a dense 'features' column" in text


def test_the_rank_entry_refuses_a_directory_that_is_not_a_sessions_table(logs, tmp_path, capsys):
    """docs/cluster.md's torchrun command names a run's data/featured/sessions; given data/featured/ itself (whose
    annotations.parquet is no sessions table) a rank stops with one line before it joins the process group."""
    from wpultr.methods.training.distributed import main
    featured = tmp_path / "featured"
    (featured / "sessions").mkdir(parents=True)
    writer = SessionPartitionWriter(featured / "sessions", 0, 200)
    writer.write(to_arrow(logs.sessions))
    writer.close()
    logs.annotations.to_parquet(featured / "annotations.parquet")
    (tmp_path / "run.yaml").write_text("train: {processes: 2}\n")
    assert main([str(tmp_path / "run.yaml"), "--sessions", str(featured), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--sessions:" in err and "not a sessions table" in err
    assert f"did you mean {featured / 'sessions'}" in err


@pytest.mark.e2e
@pytest.mark.parametrize("method", ["ipw", "propensity_pairs", "pairwise_framework"])
def test_two_ranks_of_a_reweighting_method_train_its_one_process_model(logs, method):
    """IPW (listwise: its loss divides by the batch's weighted clicks Σ c/θ) and the pair-weighted method (by the
    batch's sessions) as DDP ranks: each shard's loss scaled by its share of that normaliser."""
    from wpultr.settings.methods import get_method

    def cfg(processes: int) -> RunConfig:
        c = config("listwise" if method == "ipw" else "pointwise", processes)
        c.train.method, c.propensity.source = method, "table"
        c.propensity.table = {1: 1.0, 2: 0.7, 3: 0.5, 4: 0.4, 5: 0.3, 6: 0.25}
        return c
    one = get_method(method).fit(logs.sessions, logs.annotations, cfg(1))
    two = get_method(method).fit(logs.sessions, logs.annotations, cfg(2))
    assert_same_model(one, two, skip={"net.2.bias"})   # softmax and pair losses are blind to a shift of the scores


@pytest.mark.e2e
@pytest.mark.parametrize("method, state", [("regression_em", "theta"), ("dla", "propensities"),
                                           ("pairwise_debias", "t_minus"), ("lbd", "observation_by_position")])
def test_two_ranks_of_a_method_with_its_own_state_train_its_one_process_model(logs, method, state):
    """Methods that keep state across batches besides the ranker — REM's θ (M-step from the batch's counts), DLA's
    propensity logits (outside the DDP unit: their gradient averaged by the trainer), pairwise debiasing's t± (from
    the batch's pair sums), LBD's observation model (its Bernoulli mask drawn for the global batch) — learn the
    one-process model and state at 2 ranks: the batch's statistics are summed over the ranks."""
    from wpultr.settings.methods import get_method

    def cfg(processes: int) -> RunConfig:
        c = config("pointwise", processes)
        c.train.method = method
        c.lbd.drop_probability = 0.3           # γ ~ Bernoulli(0.7): the draw the ranks must share
        return c
    one = get_method(method).fit(logs.sessions, logs.annotations, cfg(1))
    two = get_method(method).fit(logs.sessions, logs.annotations, cfg(2))
    assert two.bias["processes"] == 2
    # REM is pointwise (every tensor); the others' losses are blind to a shift of the scores
    assert_same_model(one, two, skip=set() if method == "regression_em" else {"net.2.bias"})
    np.testing.assert_allclose(_values(two.bias[state]), _values(one.bias[state]), rtol=1e-4, atol=1e-6)
    assert not np.allclose(_values(one.bias[state]), _values(one.bias[state])[0])   # the state did move


@pytest.mark.e2e
def test_two_ranks_of_the_oracle_train_its_one_process_model(logs):
    """The oracle's listwise loss on the true gains divides by the lists with a relevant result: each shard's loss
    is scaled by its share of those."""
    from wpultr.methods.oracle import TRUE_LABEL, Oracle
    truth = logs.truth_sessions[[SESSION_ID, "position", TRUE_LABEL]]
    sessions = logs.sessions.merge(truth, on=[SESSION_ID, "position"], how="left", validate="one_to_one")

    def cfg(processes: int) -> RunConfig:
        c = config("listwise", processes)
        c.train.method = "oracle"
        return c
    one = Oracle().fit(sessions, logs.annotations, cfg(1))
    two = Oracle().fit(sessions, logs.annotations, cfg(2))
    assert two.bias["processes"] == 2
    assert_same_model(one, two, skip={"net.2.bias"})


def _values(table) -> np.ndarray:
    """The numbers of a bias record's table ({"1": p_1, ...}) or list."""
    return np.asarray(list(table.values()) if isinstance(table, dict) else table, dtype=float)
