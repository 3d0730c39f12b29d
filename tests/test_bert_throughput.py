"""The BERT training path's throughput causes (issue 32 item 6) and bench/bert_throughput.py's import chain.

Three causes, each checked by what it does, not by a time: torch's OpenMP threads spun while waiting, taking the
time slices their partner needed on a busy machine (3x slower; `import wpultr` makes them sleep before torch loads);
the train stage maps every allocation of 4 MiB or more (memory.map_large_allocations) for its per-row arrays, and a
BERT batch's activations are that large, so each batch's pages faulted in afresh (~285 000 faults, 1.1 GB zeroed,
per batch of the demo); and every batch ran the encoder over max_length columns, not its longest input's. The
process-wide checks run in a fresh interpreter; the bench must also run without Dask.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# One epoch of the demo's tiny BERT (ranker and train sections of pipelines/demo.yaml, through the bench's table
# and config) under the train stage's allocator policy; the page faults of each batch after the first two, read
# where the trainer calls the loss (once a batch).
FAULTS_PER_BATCH = textwrap.dedent("""
    import json, resource, sys
    sys.path.insert(0, "bench")
    import bert_throughput as bench
    from wpultr.methods.losses import click_loss
    from wpultr.methods.training.trainer import Trainer, build_ranker
    from wpultr.memory import map_large_allocations
    assert map_large_allocations()
    cfg = bench.run_config("tiny", "cpu", batch_size=None, max_length=None)
    frame = bench.sessions_table(cfg.train.batch_size * 10 * 5, bench.CONFIGS["tiny"]["vocab"])
    trainer = Trainer(build_ranker(cfg, frame), frame, None, cfg)
    seen = []
    def loss(scores, batch):
        seen.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
        return click_loss("pointwise", scores, batch.clicks, batch.mask)
    trainer.epoch(loss)
    print(json.dumps([b - a for a, b in zip(seen, seen[1:])][1:]))
""")


@pytest.mark.e2e
def test_bert_batches_reuse_memory_under_the_train_stage_allocator_policy():
    out = subprocess.run([sys.executable, "-c", FAULTS_PER_BATCH], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    faults = json.loads(out.stdout.strip().splitlines()[-1])
    # 1280 rows x 48 tokens: one attention-probability tensor alone is 1280*2*48*48*4 B = 5760 pages; a step that
    # maps its activations afresh faults ~285 000, one that reuses the heap's blocks next to none (a step that grows
    # the heap once may fault a few such tensors in: seen up to 7 683)
    assert len(faults) == 3 and max(faults) < 30_000, faults


# Modules the lead's GPU machine lacks (torch, transformers, numpy, pandas, pyarrow, pyyaml, typer, scipy and
# scikit-learn only): importing one of them fails there as it does here.
ABSENT = ("dask", "distributed", "causallearn", "lightgbm", "xgboost", "numba", "graphviz", "pydantic", "toolz",
          "tlz", "tblib", "matplotlib")
BLOCKED_RUN = textwrap.dedent("""
    import importlib.abc, runpy, sys
    ABSENT = set(sys.argv[1].split(","))
    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in ABSENT:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, Absent())
    sys.path.insert(0, ".")
    sys.argv = ["bench/bert_throughput.py", *sys.argv[2:]]
    runpy.run_path("bench/bert_throughput.py", run_name="__main__")
""")


@pytest.mark.e2e
def test_bench_runs_without_dask_and_reports_both_paths():
    out = subprocess.run([sys.executable, "-c", BLOCKED_RUN, ",".join(ABSENT), "--rows", "160", "--batch-size", "4",
                          "--repeats", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    median = [line for line in out.stdout.splitlines() if line.startswith("median:")]
    assert median and "rows/s" in median[0] and "sessions/s" in median[0] and "ratio product/bare" in median[0]


def test_the_encoder_runs_on_a_batch_up_to_its_longest_input_with_the_same_outputs():
    import numpy as np
    import pandas as pd
    import torch

    from wpultr.rankers.bert import ATTENTION, INPUT_IDS, TOKEN_TYPES, BertRanker
    from wpultr.schema import ABSTRACT_TOKENS, QUERY_TOKENS, TITLE_TOKENS
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({QUERY_TOKENS: [rng.integers(0, 50, n) for n in (1, 3, 2, 4)],
                          TITLE_TOKENS: [rng.integers(0, 50, n) for n in (2, 5, 1, 3)],
                          ABSTRACT_TOKENS: [rng.integers(0, 50, n) for n in (4, 6, 0, 2)]})
    torch.manual_seed(0)
    ranker = BertRanker.build(frame, path=None, head=[8], dropout=0.0, max_length=48, freeze_encoder=False,
                              cache_embeddings=False, special_tokens=None,
                              tiny={"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
                                    "intermediate_size": 32}).eval()
    inputs = ranker.prepare(frame)
    assert inputs[INPUT_IDS].shape == (4, 48)                # prepared once, padded to max_length
    widths = []
    ranker.encoder.bert.embeddings.register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    with torch.no_grad():
        scores = ranker(inputs)
        full = ranker.head(ranker.encoder.bert(input_ids=inputs[INPUT_IDS], token_type_ids=inputs[TOKEN_TYPES],
                                               attention_mask=inputs[ATTENTION]).last_hidden_state[:, 0]).squeeze(-1)
        masked, labels = ranker.mlm_masking(inputs, 0.5, torch.Generator().manual_seed(0))
        mlm = ranker.mlm_loss_sum(inputs, masked, labels)
        hidden = ranker.encoder.bert(input_ids=masked, token_type_ids=inputs[TOKEN_TYPES],
                                     attention_mask=inputs[ATTENTION]).last_hidden_state
        chosen = labels != -100
        full_mlm = torch.nn.functional.cross_entropy(ranker.encoder.cls(hidden[chosen]), labels[chosen],
                                                     reduction="sum")
    longest = 1 + 3 + 5 + 6 + 3                                # [CLS] q [SEP] t [SEP] a [SEP] of the second row
    assert widths == [longest, 48, longest, 48]                 # the score's and the masked LM's passes are cut
    torch.testing.assert_close(scores, full, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mlm, full_mlm, rtol=1e-5, atol=1e-5)


# Records OMP_WAIT_POLICY as it stands when torch is first imported (torch's OpenMP library reads it then, once).
AT_TORCH_IMPORT = textwrap.dedent("""
    import importlib.abc, os, sys
    class Watch(importlib.abc.MetaPathFinder):   # prints the policy as torch begins to load, then ends the process
        def find_spec(self, name, path, target=None):
            if name == "torch":
                print(os.environ.get("OMP_WAIT_POLICY"), flush=True)
                os._exit(0)
    sys.meta_path.insert(0, Watch())
    import wpultr.rankers.bert
""")


@pytest.mark.e2e
def test_torch_loads_with_openmp_threads_that_sleep_while_waiting_unless_the_user_chose():
    import os
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    policy = [subprocess.run([sys.executable, "-c", AT_TORCH_IMPORT], cwd=ROOT, capture_output=True, text=True,
                             env=given, timeout=300).stdout.strip()
              for given in (env, {**env, "OMP_WAIT_POLICY": "ACTIVE"})]
    assert policy == ["PASSIVE", "ACTIVE"]


def test_scoring_takes_rows_by_length_and_puts_each_score_back():
    import numpy as np
    import pandas as pd
    import torch

    from wpultr.rankers.base import score_inputs
    from wpultr.rankers.bert import BertRanker
    from wpultr.schema import ABSTRACT_TOKENS, QUERY_TOKENS, TITLE_TOKENS
    rng = np.random.default_rng(1)
    n = 40
    frame = pd.DataFrame({QUERY_TOKENS: [rng.integers(0, 50, rng.integers(1, 4)) for _ in range(n)],
                          TITLE_TOKENS: [rng.integers(0, 50, rng.integers(1, 6)) for _ in range(n)],
                          ABSTRACT_TOKENS: [rng.integers(0, 50, rng.integers(0, 30)) for _ in range(n)]})
    torch.manual_seed(0)
    ranker = BertRanker.build(frame, path=None, head=[8], dropout=0.0, max_length=48, freeze_encoder=False,
                              cache_embeddings=False, special_tokens=None,
                              tiny={"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                                    "intermediate_size": 32}).eval()
    inputs = ranker.prepare(frame)
    widths = []
    ranker.encoder.bert.embeddings.register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    scores = score_inputs(ranker, inputs, batch_size=8)
    lengths = np.sort(inputs["attention_mask"].sum(1).numpy())
    assert widths == [int(lengths[i + 7]) for i in range(0, n, 8)]       # each batch as long as its longest row
    with torch.no_grad():
        one_by_one = np.array([float(ranker({k: v[i: i + 1] for k, v in inputs.items()})) for i in range(n)])
    np.testing.assert_allclose(scores, one_by_one, rtol=1e-5, atol=1e-6)     # in the frame's order
