"""Data-parallel training of a neural ranker with torch.distributed (DDP, gloo on CPU) across processes.

Every rank draws the same global batches (the same seeded generator, so the same order as one
process) and trains on its contiguous shard of each; DDP all-reduces (averages) the gradients. Each
shard's loss is scaled by its share of the global batch's normaliser (shown results for the pointwise
click loss, clicked lists for the listwise one), so the averaged gradient is the gradient of the
global batch's loss: N ranks train the same model as one process with the same `train.batch_size`
(up to float rounding; with `ranker.dropout` > 0 the dropout masks differ). Rank 0 validates, picks
the best epoch and writes the ranker. Only the naive method (with its warm-up) trains this way.

Launch, either way:
  * config `train.processes: N` (N > 1): `wpultr run` starts N ranks on this machine, on loopback
    (the same entry as below, as subprocesses with torchrun's environment variables);
  * torchrun, on one or several machines (each rank sees the same files):
        torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
            -m wpultr.methods.distributed run.yaml --sessions runs/x/data/featured_sessions \\
            --valid valid.parquet --out model/
    `--sessions` is a Parquet file or partition directory (streamed when `train.streaming: true`);
    rank 0 writes the ranker (config.json + model.safetensors) and history.json under `--out`.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .base import FitResult
from .registry import get_method
from .training import ListBatch, LossFn, Trainer, build_ranker, list_scores

if TYPE_CHECKING:
    from ..config import RunConfig

HISTORY_FILE = "history.json"
RANKER_SUBDIR = "ranker"


def shard(batch: ListBatch, rank: int, world: int) -> ListBatch:
    """Rank `rank`'s contiguous share of a global batch's sessions (possibly none)."""
    bounds = np.linspace(0, len(batch.rows), world + 1).round().astype(int)
    part = slice(bounds[rank], bounds[rank + 1])
    return ListBatch(batch.index[part], batch.rows[part], batch.mask[part], batch.clicks[part],
                     batch.positions[part], {k: v[part] for k, v in batch.extras.items()}, batch.inputs)


def click_normaliser(loss: str, batch: ListBatch) -> float:
    """What the click loss `loss` (losses.click_loss) divides by: shown results, or lists with a click."""
    if loss == "listwise":
        return float(((batch.clicks * batch.mask).sum(dim=1) > 0).sum())
    return float(batch.mask.sum())


class DataParallelTrainer(Trainer):
    """The shared trainer as one DDP rank: scores through the DDP wrapper, steps on its shard of each batch."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.ddp = DistributedDataParallel(self.ranker, forward_sync_buffers=False,   # buffers never change in training
                                           find_unused_parameters=self.cfg.ranker.backbone != "mlp")
        self.share = 1.0   # this rank's share of the current global batch's normaliser, times the world size

    def scores(self, batch: ListBatch) -> torch.Tensor:
        return list_scores(self.ddp, self.inputs, batch)

    def batches(self, extras: dict[str, np.ndarray] | None = None) -> Iterator[ListBatch]:
        for batch in super().batches(extras):
            total = click_normaliser(self.cfg.train.loss, batch)
            mine = shard(batch, self.rank, self.world)
            share = click_normaliser(self.cfg.train.loss, mine)
            self.share = share * self.world / total if total > 0 else 0.0
            yield mine

    def epoch(self, loss_fn: LossFn, extras: dict[str, np.ndarray] | None = None) -> dict[str, float]:
        def scaled(scores: torch.Tensor, batch: ListBatch):
            out = loss_fn(scores, batch)
            loss, stats = out if isinstance(out, tuple) else (out, {})
            loss = loss * self.share     # DDP averages over ranks: the mean is the global batch's gradient
            reported = loss.detach().clone()
            dist.all_reduce(reported)
            return loss, {**stats, "loss": float(reported) / self.world}
        return super().epoch(scaled, extras)

    def validate(self) -> dict[str, Any] | None:
        return super().validate() if self.rank == 0 else None


def fit_rank(sessions: str | Path, valid: pd.DataFrame | None, cfg: "RunConfig") -> FitResult:
    """This rank's part of the fit (the process group is up): the method's epochs on a DataParallelTrainer."""
    if cfg.train.streaming:
        from .streaming import streaming_trainer
        trainer = streaming_trainer(sessions, valid, cfg, DataParallelTrainer)
    else:
        from ..io.parquet import read_table, sample_sessions
        train = sample_sessions(read_table(sessions), cfg.data.max_sessions, cfg.seed)
        trainer = DataParallelTrainer(build_ranker(cfg, train), train, valid, cfg)
        if cfg.train.warmup_epochs:   # only then: the warm-up imports transformers (seconds per rank)
            from .warmup import warm_up
            warm_up(trainer)
    return get_method(cfg.train.method).fit_trainer(trainer, cfg)


def fit_streamed(sessions_dir: str | Path, valid: pd.DataFrame | None, cfg: "RunConfig") -> FitResult:
    """The train stage's fit with `train.streaming: true`: batches streamed from the partitions of
    `sessions_dir` in this process, or by `train.processes` DDP ranks; the table is never read whole."""
    if cfg.train.processes > 1:
        return fit_data_parallel(sessions_dir, valid, cfg)
    from .streaming import streaming_trainer
    return get_method(cfg.train.method).fit_trainer(streaming_trainer(sessions_dir, valid, cfg), cfg)


# ---------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """One rank, launched by torchrun (or `fit_data_parallel`): RANK, WORLD_SIZE, MASTER_ADDR/PORT from the env."""
    parser = argparse.ArgumentParser(prog="python -m wpultr.methods.distributed", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="run config (YAML)")
    parser.add_argument("--sessions", required=True, help="sessions table: a Parquet file or partition directory")
    parser.add_argument("--valid", help="validation annotations (Parquet) that pick the best epoch")
    parser.add_argument("--out", required=True, help="directory rank 0 writes the ranker and history.json into")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, repeatable")
    args = parser.parse_args(argv)
    from ..config import load_config, parse_overrides
    cfg = load_config(args.config, parse_overrides(args.set))
    cfg.train.device = "cpu"   # gloo reduces CPU tensors
    valid = pd.read_parquet(args.valid) if args.valid else None
    dist.init_process_group("gloo", timeout=timedelta(minutes=30))
    try:
        result = fit_rank(args.sessions, valid if valid is not None and len(valid) else None, cfg)
        if dist.get_rank() == 0:
            out = Path(args.out)
            result.ranker.save(out / RANKER_SUBDIR)
            (out / HISTORY_FILE).write_text(json.dumps({"history": result.history, "bias": result.bias}))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fit_data_parallel(sessions: pd.DataFrame | str | Path, valid: pd.DataFrame | None, cfg: "RunConfig",
                      processes: int | None = None) -> FitResult:
    """Train with `processes` (default `train.processes`) DDP ranks on loopback, started as subprocesses
    (so it works inside a Dask worker too); a rank's failure stops the others and raises with its stderr."""
    from ..config import dump_config
    from ..errors import WpultrError
    from ..rankers.registry import load_ranker
    n = processes or cfg.train.processes
    with tempfile.TemporaryDirectory(prefix="wpultr-ddp-") as tmp:
        work = Path(tmp)
        if isinstance(sessions, pd.DataFrame):
            sessions.to_parquet(work / "sessions.parquet", index=False)
            sessions = work / "sessions.parquet"
        (work / "config.yaml").write_text(dump_config(cfg))
        command = [sys.executable, "-m", __name__, str(work / "config.yaml"), "--sessions", str(sessions),
                   "--out", str(work)]
        if valid is not None and len(valid):
            valid.to_parquet(work / "valid.parquet", index=False)
            command += ["--valid", str(work / "valid.parquet")]
        threads = str(max(1, (os.cpu_count() or 1) // n))
        base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(n),
                "LOCAL_WORLD_SIZE": str(n), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", threads)}
        ranks = []
        for rank in range(n):
            log = open(work / f"rank{rank}.log", "wb")
            ranks.append((subprocess.Popen(command, env={**base, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                                           stdout=log, stderr=subprocess.STDOUT), log))
        failed = _wait(ranks)
        if failed is not None:
            tail = (work / f"rank{failed}.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise WpultrError(f"train.processes: DDP rank {failed} of {n} failed: {tail[0] if tail else 'no output'}")
        saved = json.loads((work / HISTORY_FILE).read_text())
        return FitResult(load_ranker(work / RANKER_SUBDIR).eval(), saved["history"],
                         {**saved["bias"], "processes": n})


def _wait(ranks: list[tuple[subprocess.Popen, Any]]) -> int | None:
    """Wait for every rank; the first that fails ends the others (they would wait on it). Its rank, or None."""
    try:
        while True:
            codes = [p.poll() for p, _ in ranks]
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                for p, _ in ranks:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                return bad[0]
            if all(c == 0 for c in codes):
                return None
            time.sleep(0.05)
    finally:
        for _, log in ranks:
            log.close()


if __name__ == "__main__":
    sys.exit(main())
