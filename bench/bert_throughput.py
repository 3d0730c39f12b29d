"""Training throughput of the BERT ranker as a run trains it, against a bare transformers loop of the same size.

(a) product: what `wpultr run` does with `ranker.backbone: bert` and `train.method: naive` — `build_ranker`,
    the shared `Trainer` preparing the sessions table, and `Naive.fit_trainer` running one epoch over it
    (shuffled session batches, the click loss, Adam), with the train stage's allocator policy applied
    (`memory.map_large_allocations`; it is skipped if `wpultr.memory` cannot be imported);
(b) bare: a `transformers.BertModel` of the same config and the same MLP head, fed the same rows in batches of
    the same sessions (each batch padded to its longest input, built before timing), forward + BCE loss +
    backward + Adam step, under glibc's own reuse of large blocks (as a process of its own has it).
The two alternate (product, bare, product, bare, …) after an untimed warm-up of both, so load drift hits both;
printed per round and as medians: rows/s, sessions/s, rows per CPU-second of this process and minor page faults
per 128 sessions of each, and the ratio product / bare of the wall times (target >= 0.7). Both run in one process,
so what is process-wide (torch's threads, the OpenMP wait policy `import wpultr` sets) is the same for both.

Data: a synthetic sessions table shaped like the demo's logs (data/sample: 10 results a session, query 1-6
tokens, title 3-15, abstract 8-36, ids below 2000) for `tiny`; for `base` abstracts of 40-120 tokens (inputs cut
at 128) and ids below BERT-base's vocabulary (30522). Configs: `tiny` takes pipelines/demo.yaml's ranker and
train sections (the demo's tiny BERT, head, batch size, max_length); `base` the 12-layer BERT-base sizes (hidden
768, 12 heads, intermediate 3072), built in process from a config (no download), 32 sessions a batch. Imports
only torch, transformers, numpy, pandas, pyyaml and wpultr's config, rankers and methods (no Dask):

    PYTHONPATH=. python bench/bert_throughput.py --config tiny --device cpu [--rows 6000] [--batch-size 128]
    PYTHONPATH=. python bench/bert_throughput.py --config base --device cuda --rows 6400
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import time
from pathlib import Path

import wpultr  # noqa: F401  first, as in `wpultr run`: its OpenMP wait policy is read when torch loads

# isort: split
import numpy as np
import pandas as pd
import torch

from wpultr.config import config_from_dict, read_yaml_mapping
from wpultr.memory import large_blocks_kept
from wpultr.methods.naive import Naive
from wpultr.methods.training.trainer import Trainer, build_ranker
from wpultr.schema import ABSTRACT_TOKENS, CLICK, POSITION, QUERY_ID, QUERY_TOKENS, SESSION_ID, TITLE_TOKENS

DEMO = Path(__file__).resolve().parents[1] / "pipelines" / "demo.yaml"
RESULTS = 10                                   # results per session, as in the demo's logs
LENGTHS = {QUERY_TOKENS: (1, 6), TITLE_TOKENS: (3, 15), ABSTRACT_TOKENS: (8, 36)}   # data/sample's ranges
BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}
CONFIGS = {"tiny": {"vocab": 2000, "max_length": None, "batch_size": None, "lengths": LENGTHS},  # None: the demo's
           "base": {"vocab": 30522 - 5, "max_length": 128, "batch_size": 32,                 # 5 specials appended
                    "lengths": {**LENGTHS, ABSTRACT_TOKENS: (40, 120)}}}


def sessions_table(rows: int, vocab: int, seed: int = 0, lengths: dict | None = None) -> pd.DataFrame:
    """`rows` shown results (whole sessions of RESULTS) with token ids below `vocab`, token counts drawn uniformly
    from `lengths` (default LENGTHS) and ~15% clicks."""
    rng = np.random.default_rng(seed)
    n = rows // RESULTS

    def tokens(column: str, count: int) -> list[np.ndarray]:
        low, high = (lengths or LENGTHS)[column]
        return [rng.integers(0, vocab, rng.integers(low, high + 1)).astype(np.int32) for _ in range(count)]

    queries = tokens(QUERY_TOKENS, n)
    return pd.DataFrame({
        SESSION_ID: np.repeat(np.arange(n, dtype=np.int64), RESULTS),
        QUERY_ID: np.repeat([str(q) for q in range(n)], RESULTS),
        POSITION: np.tile(np.arange(1, RESULTS + 1, dtype=np.int16), n),
        CLICK: (rng.random(n * RESULTS) < 0.15).astype(np.int8),
        QUERY_TOKENS: [queries[i // RESULTS] for i in range(n * RESULTS)],
        TITLE_TOKENS: tokens(TITLE_TOKENS, n * RESULTS),
        ABSTRACT_TOKENS: tokens(ABSTRACT_TOKENS, n * RESULTS)})


def run_config(name: str, device: str, batch_size: int | None, max_length: int | None):
    """The demo's ranker and train sections with the BERT backbone (`base`: BERT-base sizes), one epoch a fit."""
    demo = read_yaml_mapping(DEMO)
    ranker, train = dict(demo["ranker"]), dict(demo["train"])
    bert = dict(ranker.get("bert") or {})
    if name == "base":
        bert.update(BASE)
    bert["max_length"] = max_length or CONFIGS[name]["max_length"] or bert.get("max_length", 64)
    ranker.update(backbone="bert", bert=bert)
    train.update(method="naive", epochs=1, warmup_epochs=0, device=device,
                 batch_size=batch_size or CONFIGS[name]["batch_size"] or train.get("batch_size", 256))
    # no cluster here: a size for its workers would be parsed by Dask, which a GPU box may lack
    return config_from_dict({"seed": demo.get("seed", 0), "ranker": ranker, "train": train,
                             "cluster": {"memory_limit": "auto"}})


def train_stage_allocator() -> str:
    """Apply the train stage's allocator policy, as `wpultr run` does before fitting (needs wpultr.memory)."""
    try:
        from wpultr.memory import map_large_allocations
    except ImportError as error:       # a box with torch only lacking what the stages import: the policy is CPU-side
        return f"not applied ({error})"
    return "applied" if map_large_allocations() else "not glibc"


class BareModel(torch.nn.Module):
    """A transformers BertModel of `config` and a Linear-ELU-Dropout head on [CLS], written out by hand."""

    def __init__(self, config: dict, head: list[int], dropout: float):
        from transformers import BertConfig, BertModel
        super().__init__()
        self.bert = BertModel(BertConfig(**config), add_pooling_layer=False)
        layers, width = [], self.bert.config.hidden_size
        for h in head:
            layers += [torch.nn.Linear(width, h), torch.nn.ELU(), torch.nn.Dropout(dropout)]
            width = h
        self.head = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))

    def forward(self, ids: torch.Tensor, types: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
        return self.head(hidden[:, 0]).squeeze(-1)


def bare_batches(inputs: dict[str, torch.Tensor], clicks: np.ndarray, sessions_per_batch: int, seed: int):
    """CPU batches of whole sessions (rows are session-major), each cut to its longest input."""
    order = np.random.default_rng(seed).permutation(len(clicks) // RESULTS)
    out = []
    for start in range(0, len(order), sessions_per_batch):
        rows = torch.as_tensor((order[start: start + sessions_per_batch, None] * RESULTS
                                + np.arange(RESULTS)).reshape(-1))
        mask = inputs["attention_mask"].index_select(0, rows)
        width = int(mask.sum(1).max())
        out.append(tuple(t[:, :width].contiguous() for t in (inputs["input_ids"].index_select(0, rows),
                                                            inputs["token_type_ids"].index_select(0, rows), mask))
                   + (torch.as_tensor(clicks[rows.numpy()], dtype=torch.float32),))
    return out


def bare_epoch(model: BareModel, optimizer: torch.optim.Optimizer, batches: list, device: torch.device) -> None:
    """One pass of the bare loop, under glibc's own policy for a process of its own (freed blocks up to 32 MiB
    reused, memory.large_blocks_kept): the train stage's policy, applied first, is process-wide."""
    model.train()
    with large_blocks_kept():
        for ids, types, mask, clicks in batches:
            scores = model(ids.to(device), types.to(device), mask.to(device))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(scores, clicks.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            float(loss.detach())            # a loop that logs its loss syncs once a batch, as the trainer does


def timed(fn, device: torch.device) -> tuple[float, float, int]:
    """Wall seconds, this process's CPU seconds (user + system) and minor page faults of `fn()`."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, after.ru_minflt - before.ru_minflt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--rows", type=int, default=6000, help="shown results in the table (whole sessions of 10)")
    parser.add_argument("--batch-size", type=int, default=None, help="sessions a batch (default: tiny 128 as "
                        "the demo, base 32)")
    parser.add_argument("--max-length", type=int, default=None, help="tokens an input (tiny 48 as the demo, base 128)")
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs of each, interleaved")
    args = parser.parse_args()

    allocator = train_stage_allocator()
    cfg = run_config(args.config, args.device, args.batch_size, args.max_length)
    device = torch.device(args.device)
    frame = sessions_table(args.rows, CONFIGS[args.config]["vocab"], lengths=CONFIGS[args.config]["lengths"])
    rows, sessions = len(frame), len(frame) // RESULTS
    print(f"bert throughput: config {args.config} ({cfg.ranker.bert.num_hidden_layers} layers, hidden "
          f"{cfg.ranker.bert.hidden_size}), device {args.device}"
          f"{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}, {rows} rows = "
          f"{sessions} sessions, batch {cfg.train.batch_size} sessions, max_length {cfg.ranker.bert.max_length}; "
          f"torch {torch.__version__} threads {torch.get_num_threads()}, {os.cpu_count()} cpus, {platform.machine()};"
          f" train stage allocator policy {allocator}")

    start = time.perf_counter()
    trainer = Trainer(build_ranker(cfg, frame), frame, None, cfg)
    naive = Naive()
    print(f"product set-up (ranker + prepared inputs): {time.perf_counter() - start:.2f} s; "
          f"{sum(p.numel() for p in trainer.ranker.parameters()) / 1e6:.2f} M parameters")
    torch.manual_seed(cfg.seed)
    bare = BareModel(trainer.ranker.init_args()["bert_config"], cfg.ranker.head, cfg.ranker.dropout).to(device)
    optimizer = torch.optim.Adam(bare.parameters(), lr=cfg.train.learning_rate)
    batches = bare_batches(trainer.inputs, frame[CLICK].to_numpy(), cfg.train.batch_size, cfg.seed)

    warm = Trainer(build_ranker(cfg, frame), frame.iloc[: 2 * cfg.train.batch_size * RESULTS], None, cfg)
    naive.fit_trainer(warm, cfg)                     # warm-up: kernels, allocator, BLAS handles
    bare_epoch(bare, optimizer, batches[:2], device)
    del warm

    product_s, bare_s = [], []
    for round_ in range(args.repeats):
        product_s.append(timed(lambda: naive.fit_trainer(trainer, cfg), device))
        bare_s.append(timed(lambda: bare_epoch(bare, optimizer, batches, device), device))
        print(f"round {round_}: {figures('product', product_s[-1], rows)}  {figures('bare', bare_s[-1], rows)}  "
              f"ratio {bare_s[-1][0] / product_s[-1][0]:.2f}")
    p, b = (tuple(statistics.median(values) for values in zip(*runs, strict=True)) for runs in (product_s, bare_s))
    print(f"median: product {rows / p[0]:.0f} rows/s ({sessions / p[0]:.1f} sessions/s), bare {rows / b[0]:.0f} "
          f"rows/s ({sessions / b[0]:.1f} sessions/s), ratio product/bare {b[0] / p[0]:.2f} (target >= 0.7); per CPU "
          f"second {rows / p[1]:.0f} and {rows / b[1]:.0f} rows, ratio {b[1] / p[1]:.2f}")


def figures(name: str, timing: tuple[float, float, int], rows: int) -> str:
    wall, cpu, faults = timing
    return (f"{name} {rows / wall:8.0f} rows/s ({rows / RESULTS / wall:7.1f} sessions/s, {rows / cpu:6.0f} rows/CPU-s, "
            f"{faults / (rows / RESULTS) * 128:7.0f} page faults/128 sessions)")


if __name__ == "__main__":
    main()
