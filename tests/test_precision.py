"""Mixed precision (`train.precision`, rankers/precision.py) on the CPU: the bf16 path runs the tiny BERT's encoder
in bf16 (its epochs, masked-LM warm-up and scoring) and its scoring head in fp32, and learns the fp32 model within
bf16's rounding, its scores as finely resolved; a ranker without an encoder runs fp32; fp16 is refused on a CPU with
one line naming the key; `auto` is fp32 on a CPU."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wpultr.config import RunConfig, config_from_dict
from wpultr.errors import ConfigError
from wpultr.methods.naive import Naive
from wpultr.rankers.base import score_frame
from wpultr.rankers.precision import autocast, grad_scaler, resolve_precision, scoring_precision
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate

SIM = SimulateConfig(n_queries=20, docs_per_query=8, n_sessions=160, n_annotated_queries=12,
                     results_per_page=6, vocab_size=200, n_dense_features=4)


@pytest.fixture(scope="module")
def logs(one_torch_thread):
    return simulate(SIM, seed=0)


def bert_config(precision: str) -> RunConfig:
    """A tiny in-process BERT (2 layers, width 32, no dropout): one masked-LM warm-up epoch and one click epoch."""
    cfg = RunConfig()
    cfg.seed = 5
    cfg.ranker.backbone, cfg.ranker.head, cfg.ranker.dropout = "bert", [16], 0.0
    cfg.ranker.bert.max_length = 16
    cfg.ranker.bert.hidden_size, cfg.ranker.bert.intermediate_size = 32, 64
    cfg.ranker.bert.num_hidden_layers, cfg.ranker.bert.num_attention_heads = 2, 2
    cfg.train.device, cfg.train.precision = "cpu", precision
    cfg.train.warmup_epochs, cfg.train.epochs, cfg.train.batch_size, cfg.train.mlm_probability = 1, 1, 32, 0.3
    return cfg


def test_bf16_runs_the_encoder_in_bf16_and_learns_the_fp32_model(logs, monkeypatch):
    dtypes: list[tuple[torch.nn.Module, torch.dtype]] = []
    original = torch.nn.Linear.forward

    def watched(self, x):                      # what dtype every Linear (encoder, head, MLM head) computes in
        out = original(self, x)
        dtypes.append((self, out.dtype))
        return out
    monkeypatch.setattr(torch.nn.Linear, "forward", watched)
    fp32 = Naive().fit(logs.sessions, logs.annotations, bert_config("fp32"))
    assert {dtype for _, dtype in dtypes} == {torch.float32}
    dtypes.clear()
    bf16 = Naive().fit(logs.sessions, logs.annotations, bert_config("bf16"))
    head = set(bf16.ranker.head.modules())
    # the warm-up's MLM, the click epoch and validation scoring alike: the encoder in bf16, the scoring head in fp32
    assert {dtype for module, dtype in dtypes if module not in head} == {torch.bfloat16}
    assert {dtype for module, dtype in dtypes if module in head} == {torch.float32}
    monkeypatch.setattr(torch.nn.Linear, "forward", original)

    assert [e["precision"] for e in fp32.history] == ["fp32", "fp32"]
    assert [e["precision"] for e in bf16.history] == ["bf16", "bf16"]
    assert [e.get("phase") for e in bf16.history] == ["warmup", None]
    # bf16 keeps 8 bits of mantissa (relative rounding 2^-9 ≈ 0.002 a product): two epochs of Adam at lr 1e-3 move
    # every weight by the same steps within that rounding. Tolerances (measured: losses 5e-5 apart, scores 6e-4 of
    # their size, 0.5 % of their spread once centred, the same order): the losses within 2 %, the scores (fp32
    # passes of each trained model) within 0.2 % of their size and, centred, 5 % of their spread, ranked alike
    for a, b in zip(fp32.history, bf16.history, strict=True):
        assert b["train"] == pytest.approx(a["train"], rel=0.02)
    x, y = (score_frame(r.ranker, logs.annotations) for r in (fp32, bf16))
    assert np.abs(x - y).max() < 2e-3 * np.abs(x).max()
    assert np.abs((x - x.mean()) - (y - y.mean())).max() < 0.05 * x.std()
    rank = lambda v: np.argsort(np.argsort(v))           # noqa: E731
    assert np.corrcoef(rank(x), rank(y))[0, 1] > 0.98
    # the same ranker scored under bf16 autocast: the fp32 scores within bf16's rounding (2^-8 of the size)
    z = score_frame(bf16.ranker, logs.annotations, precision="bf16")
    assert np.abs(z - y).max() < 2 ** -7 * np.abs(y).max() and not np.array_equal(z, y)
    # ... and as finely resolved: a head in bf16 kept 8 bits of scores 0.004 apart at 1.8, tying most of a query's
    assert len(np.unique(z)) == len(np.unique(y))


def test_a_ranker_without_an_encoder_runs_fp32(logs):
    from wpultr.methods.training.trainer import Trainer, build_ranker
    cfg = bert_config("bf16")
    cfg.ranker.backbone = "mlp"
    trainer = Trainer(build_ranker(cfg, logs.sessions), logs.sessions, None, cfg)
    assert trainer.precision == "fp32" and not trainer.ranker.runs_mixed_precision()

def test_fp16_is_refused_on_a_cpu_with_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"^train.precision: must be .*'fp16' needs a CUDA device.*got 'fp16'$"):
        config_from_dict({"train": {"device": "cpu", "precision": "fp16"}})
    with pytest.raises(ConfigError, match=r"^train.precision: 'fp16' needs a CUDA device"):
        resolve_precision("fp16", "cpu")          # device auto on a machine without CUDA: refused when it resolves
    with pytest.raises(ConfigError, match=r"^train.precision: 'half' is not allowed; allowed values: 'auto', 'fp32'"):
        config_from_dict({"train": {"precision": "half"}})
    assert scoring_precision("fp16", "cpu") == "fp32"   # an fp16-trained ranker scored on a CPU: exact fp32


def test_auto_is_fp32_on_a_cpu_and_only_fp16_scales_its_loss():
    assert resolve_precision("auto", "cpu") == "fp32" and resolve_precision("bf16", "cpu") == "bf16"
    assert grad_scaler("cpu", "bf16") is None and grad_scaler("cpu", "fp32") is None
    layer = torch.nn.Linear(4, 2)
    with autocast("cpu", "bf16"):
        assert layer(torch.ones(3, 4)).dtype == torch.bfloat16
    with autocast("cpu", "fp32"):
        assert layer(torch.ones(3, 4)).dtype == torch.float32
