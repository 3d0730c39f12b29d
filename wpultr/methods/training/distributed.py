"""Data-parallel training of a neural ranker with torch.distributed (DDP: NCCL on GPUs, gloo on CPU) across processes.

Every rank draws the same global batches (the same seeded generator, so the same order as one
process) and trains on its contiguous shard of each; DDP all-reduces (averages) the gradients. Each
shard's loss is scaled by its share of the global batch's normaliser (shown results for the pointwise
click loss, clicked lists for the listwise one), so the averaged gradient is the gradient of the
global batch's loss: N ranks train the same model as one process with the same `train.batch_size`
(up to float rounding; with dropout > 0 — `ranker.dropout`, which is also the in-process BERT
encoder's — the dropout masks differ). Rank 0 validates, picks the best epoch and writes the ranker.
The methods whose spec declares `processes` train this way (naive, IPW, the pair-weighted method, the pairwise
framework: their epochs on a DataParallelTrainer; BAL through its own `fit_rank`, with `on_rank0` and
`RankBatches`), on every neural backbone (`mlp`, `bert`, `embedding`; each rank reads the whole table in
memory, or streams the partitions).

The BERT warm-up's masked LM (warmup.py) is made exact the same way: every rank draws the masking of
the whole global batch from the shared generator, as one process does, and keeps its own rows; its
summed masked-token loss is divided by the global batch's masked-token count. Training runs in two
phases that read different parameters — the warm-up the encoder, head and masked-LM head, the
method's epochs the encoder and head only — so each phase is its own DDP unit (`Phase`) holding
exactly what it reads: no gradient is waited for in vain and no graph search
(`find_unused_parameters`) is needed.

Each rank trains on GPU `LOCAL_RANK` and the ranks reduce with NCCL when `train.device` is `cuda` (or `auto` with a
GPU), else on the CPU with gloo (`ranks.rank_device`); every sum over the ranks goes through `all_sum`, which hands
NCCL its tensors on the GPU.

Launch, either way:
  * config `train.processes: N` (N > 1): `wpultr run` starts N ranks (`ranks.fit_data_parallel`: the same entry
    as below, with torchrun's environment variables) as subprocesses on loopback, or with `cluster.scheduler` as
    one task per Dask worker of that cluster;
  * torchrun, on one or several machines (each rank sees the same files):
        torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
            -m wpultr.methods.training.distributed run.yaml --sessions runs/x/data/featured/sessions \\
            --valid valid.parquet --out model/
    `--sessions` is a Parquet file or partition directory (streamed when `train.streaming: true`);
    rank 0 writes the ranker (config.json + model.safetensors) and history.json under `--out`.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ...cli_support import USER_ERRORS
from ...config import load_config, parse_overrides
from ...errors import ConfigError
from ...io.parquet import column_names, read_table, sample_sessions
from ...rankers.base import IGNORE_INDEX, Inputs, Ranker, n_rows, score_inputs, take
from ...schema import SESSION_ID
from ...settings.methods import get_method
from ..base import FitResult
from ..losses import click_loss, click_loss_named
from .checkpoint import config_key, keep_checkpoints
from .ranks import GRAPHS_FILE, HISTORY_FILE, RANKER_SUBDIR, fit_data_parallel, rank_device  # its callers' name
from .streaming import streaming_trainer
from .trainer import ListBatch, LossFn, Trainer, build_ranker, list_scores
from .warmup import warm_up

if TYPE_CHECKING:
    from ...config import RunConfig



def nccl_device() -> torch.device | None:
    """This rank's GPU when the ranks reduce with NCCL (set by `main` before the group starts), else None (gloo)."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == dist.Backend.NCCL else None


def all_sum(values: torch.Tensor) -> torch.Tensor:
    """`values` summed over the ranks: a new tensor on `values`' device. Every collective sum goes through here: NCCL
    reduces CUDA tensors only, so under it a CPU tensor (scores or weights built from numpy) goes to this rank's GPU
    and back; gloo reduces it where it is."""
    summed = values.detach().to(nccl_device() or values.device, copy=True)
    dist.all_reduce(summed)
    return summed.to(values.device)


def shard_sessions(sessions: int, rank: int, world: int) -> slice:
    """Rank `rank`'s contiguous share of a global batch of `sessions` sessions (sizes differ by at most one)."""
    bounds = np.linspace(0, sessions, world + 1).round().astype(int)
    return slice(int(bounds[rank]), int(bounds[rank + 1]))


def shard(batch: ListBatch, rank: int, world: int) -> ListBatch:
    """Rank `rank`'s contiguous share of a global batch's sessions (possibly none). A batch that carries its own
    prepared rows (streamed) keeps only the shard's, renumbered, so a rank holds none of the others' tokens."""
    part = shard_sessions(len(batch.rows), rank, world)
    rows, inputs = batch.rows[part], batch.inputs
    if inputs is not None:
        shown = rows >= 0
        inputs = take(inputs, rows[shown])
        rows = np.full(rows.shape, -1, dtype=np.int64)
        rows[shown] = np.arange(int(shown.sum()))
    return ListBatch(batch.index[part], rows, batch.mask[part], batch.clicks[part],
                     batch.positions[part], {k: v[part] for k, v in batch.extras.items()}, inputs)


def click_normaliser(loss: str, batch: ListBatch) -> float:
    """What the click loss `loss` (losses.click_loss) divides by: shown results, or lists with a click."""
    return click_loss_named(loss).normaliser(batch.clicks, batch.mask)


@dataclass
class Masking:
    """One rank's rows of a global batch's masked-LM masking, and how many tokens the whole batch masked."""

    ids: torch.Tensor        # (rows of the shard, max_length) input ids after masking
    labels: torch.Tensor     # the masked tokens' ids, IGNORE_INDEX elsewhere
    global_count: int        # masked tokens in the global batch: the one-process loss's normaliser


def shard_masking(ranker: Ranker, batch: ListBatch, inputs: Inputs, rank: int, world: int, probability: float,
                  generator: torch.Generator) -> Masking:
    """The masking one process draws from `generator` for global batch `batch` (BertRanker.mlm_masking of its
    rows of `inputs`, or of its own prepared rows), cut to rank `rank`'s shard: every rank draws the whole
    batch's, so all keep one process's draws and know the batch's masked-token count without communicating."""
    part = shard_sessions(len(batch.rows), rank, world)
    first = int(batch.mask[: part.start].sum())      # the shard's rows are a contiguous run of the batch's
    mine = slice(first, first + int(batch.mask[part].sum()))
    tokens = take(batch.inputs if batch.inputs is not None else inputs, batch.rows[batch.rows >= 0])
    masked, labels = ranker.mlm_masking(tokens, probability, generator)
    return Masking(masked[mine], labels[mine], int((labels != IGNORE_INDEX).sum()))


class Phase(torch.nn.Module):
    """One training phase as a DDP unit: the ranker's submodules the phase reads (DDP all-reduces exactly their
    gradients) and the function it runs on a batch (a plain callable, so the rest of the ranker is not registered)."""

    def __init__(self, parts: dict[str, torch.nn.Module], run: Callable[..., Any]):
        if isinstance(run, torch.nn.Module):
            raise TypeError("Phase: pass the ranker's bound __call__, not the module (it would register all of it)")
        super().__init__()
        self.parts = torch.nn.ModuleDict(parts)
        self.run = run

    def forward(self, *args: Any) -> Any:
        return self.run(*args)


class SharedTrainerFit:
    """The `fit` of a method the shared trainer runs (its `fit_with`): in this process, or as `train.processes` DDP
    ranks, each of which calls the method's `fit_rank` on its share of every global batch."""

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> FitResult:
        if config.train.processes > 1:
            return fit_data_parallel(train, valid, config)
        return self.fit_with(train, valid, config, Trainer)

    def fit_rank(self, sessions: Any, valid: pd.DataFrame | None, config: RunConfig, trainer_class: type,
                 arrow_lists: Sequence[str] = (), overrides: Any = None) -> FitResult:
        """One DDP rank's fit: the table and ranker every rank builds alike (`rank_ranker_and_table`), then the
        method's `fit_with` on `trainer_class` (a DataParallelTrainer); what the method sums over the ranks, its
        `fit_with` says."""
        ranker, train = rank_ranker_and_table(sessions, config, arrow_lists)
        return self.fit_with(train, valid, config, trainer_class, ranker)


class DataParallelTrainer(Trainer):
    """The shared trainer as one DDP rank: scores through a DDP unit, steps on its shard of each batch."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        read = getattr(self.ranker, "score_modules", None)     # a ranker holding modules its score never reads
        self.ddp = self.data_parallel(read() if read else {"ranker": self.ranker}, self.ranker.__call__)
        self.warmup_ddp: DistributedDataParallel | None = None   # the masked-LM warm-up's unit, built when it runs
        self.share = 1.0   # this rank's share of the current global batch's normaliser, times the world size
        self.masking_on = False            # in the masked-LM warm-up: mask each global batch (batches())
        self.masking: Masking | None = None   # this rank's rows of the current batch's masking, while masking_on
        self.mlm_part = torch.zeros(())    # this rank's masked-LM loss term of the current batch (scores())
        self.normaliser: Callable[[ListBatch], float] | None = None   # the current epoch's (epoch())
        self.global_sessions, self.part = 0, slice(0, 0)   # the current global batch's size and this rank's shard
        self.inside = {id(p) for p in self.ddp.parameters()}   # what DDP averages; the rest: `sync_gradients`
        self.kill_at = _kill_hook(self.rank)

    @staticmethod
    def data_parallel(parts: dict[str, torch.nn.Module], run: Callable[..., Any]) -> DistributedDataParallel:
        """`parts` as one DDP unit running `run`; on a GPU, DDP is told it (`device_ids`), as NCCL wants."""
        unit = Phase(parts, run)
        device = next((p.device for p in unit.parameters()), torch.device("cpu"))
        return DistributedDataParallel(unit, device_ids=[device] if device.type == "cuda" else None,
                                       forward_sync_buffers=False)   # buffers never change

    def scores(self, batch: ListBatch) -> torch.Tensor:
        masking = self.masking
        if masking is None or masking.global_count == 0:   # one process skips a masking that chose no token too
            self.mlm_part = torch.zeros((), device=self.device)
            return list_scores(self.ddp, self.inputs, batch)

        def forward(inputs: Inputs) -> torch.Tensor:
            scores, total = self.warmup_ddp(inputs, masking.ids.to(self.device), masking.labels.to(self.device))
            self.mlm_part = total * (self.world / masking.global_count)   # DDP's mean: Σ over ranks / global count
            return scores
        return list_scores(forward, self.inputs, batch)

    def train_scores(self, rows_per_pass: int = 16384) -> np.ndarray:
        """Every training row's score, as one process computes it: each rank scores its contiguous share of the rows
        (of the partitions' units when streaming), zeros elsewhere, and a sum over the ranks assembles them."""
        if self.stream is not None:
            out = np.zeros(self.stream.rows, dtype=np.float32)
            units = shard_sessions(len(self.stream.units), self.rank, self.world)
            for unit, offset in zip(self.stream.units[units], self.stream.offsets[units], strict=True):
                frame = self.stream.read_unit(unit)
                out[offset: offset + len(frame)] = score_inputs(self.ranker, self.ranker.prepare(frame), rows_per_pass)
        else:
            total = n_rows(self.inputs)
            out = np.zeros(total, dtype=np.float32)
            mine = shard_sessions(total, self.rank, self.world)
            out[mine] = score_inputs(self.ranker, take(self.inputs, np.arange(mine.start, mine.stop)), rows_per_pass)
        return all_sum(torch.from_numpy(out)).numpy()

    def batches(self, extras: dict[str, np.ndarray] | None = None) -> Iterator[ListBatch]:
        normaliser = self.normaliser or (lambda b: click_normaliser(self.cfg.train.loss, b))
        for batch in super().batches(extras):
            total = normaliser(batch)
            self.global_sessions, self.part = len(batch.rows), shard_sessions(len(batch.rows), self.rank, self.world)
            mine = shard(batch, self.rank, self.world)
            share = normaliser(mine)
            self.share = share * self.world / total if total > 0 else 0.0
            if self.masking_on:
                self.masking = shard_masking(self.ranker, batch, self.inputs, self.rank, self.world,
                                             self.cfg.train.mlm_probability, self.generator)
            yield mine

    def sync_gradients(self) -> None:
        """Average the gradients of the parameters outside the DDP unit over the ranks, as DDP does its own: each
        rank's loss is scaled by its share (`epoch`), so the mean is the global batch's gradient. A parameter no
        loss reached has no gradient on any rank (every rank runs the same code) and stays so."""
        grads = [p.grad for group in self.optimizer.param_groups for p in group["params"]
                 if id(p) not in self.inside and p.grad is not None]
        if not grads:
            return
        flat = all_sum(torch.cat([g.reshape(-1) for g in grads])) / self.world
        offset = 0
        for g in grads:
            g.copy_(flat[offset: offset + g.numel()].view_as(g))
            offset += g.numel()

    all_sum = staticmethod(all_sum)

    def draw_for_batch(self, batch: ListBatch, draw: Callable[[int], torch.Tensor]) -> torch.Tensor:
        return draw(self.global_sessions)[self.part]

    def writes_checkpoint(self) -> bool:
        return self.checkpoint is not None and self.rank == 0

    def epoch(self, loss_fn: LossFn, extras: dict[str, np.ndarray] | None = None,
              normaliser: Callable[[ListBatch], float] | None = None) -> dict[str, float]:
        """One epoch on this rank's shards; `normaliser` is what `loss_fn` divides a batch's loss by (default: the
        click loss's, `click_normaliser`): each shard's loss is scaled by its share of the global batch's."""
        self.normaliser = normaliser

        done = [0]      # batches of this epoch so far

        def scaled(scores: torch.Tensor, batch: ListBatch):
            if self.kill_at == len(self.history) and done[0] == 1:   # the test hook (`KILL_ENV`): past the first
                _die()          # batch, whose all-reduce waited for rank 0 to write the last epoch's checkpoint
            done[0] += 1
            out = loss_fn(scores, batch)
            loss, stats = out if isinstance(out, tuple) else (out, {})
            loss = loss * self.share     # DDP averages over ranks: the mean is the global batch's gradient
            return loss, {**stats, "loss": float(all_sum(loss)) / self.world}
        try:
            return super().epoch(scaled, extras)
        finally:
            self.normaliser = None

    def warmup_epoch(self, loss_fn: LossFn, with_mlm: bool) -> dict[str, float]:
        """One epoch of warmup.warm_up's loss on this rank's shards. With a BERT encoder to train (`with_mlm`) —
        naive click loss + `train.mlm_weight` × masked LM — the click term is scaled by its share and the
        masked-LM term by the global batch's masked-token count (see `scores`), the masking drawn for the whole
        global batch, so DDP's mean gradient and the reported losses are one process's; else `loss_fn` as is."""
        if not with_mlm:
            return self.epoch(loss_fn)
        cfg = self.cfg.train
        # Every parameter is read here: encoder, head and masked-LM head. The two units share the encoder and head;
        # a unit whose forward did not run in a step ignores their gradient hooks (as DDP does under no_sync).
        if self.warmup_ddp is None:
            ranker = self.ranker

            def scores_and_mlm(inputs: Inputs, ids: torch.Tensor, labels: torch.Tensor):
                return ranker(inputs), ranker.mlm_loss_sum(inputs, ids, labels)
            self.warmup_ddp = self.data_parallel({"ranker": ranker}, scores_and_mlm)
            self.inside |= {id(p) for p in self.warmup_ddp.parameters()}

        def loss(scores: torch.Tensor, batch: ListBatch):
            click = click_loss(cfg.loss, scores, batch.clicks, batch.mask) * self.share
            mlm = self.mlm_part
            click_mean, mlm_mean = (all_sum(torch.stack([click.detach(), mlm.detach()])) / self.world).tolist()
            return click + cfg.mlm_weight * mlm, {"loss": click_mean + cfg.mlm_weight * mlm_mean,
                                                  "click": click_mean, "mlm": mlm_mean}
        self.masking_on = True
        try:
            return super().epoch(loss)
        finally:
            self.masking_on, self.masking = False, None

    def validate(self) -> dict[str, Any] | None:
        return super().validate() if self.rank == 0 else None


KILL_ENV = "WPULTR_TEST_KILL_RANK"   # "<rank>:<epoch>": that rank SIGKILLs itself mid-epoch (tests only; epochs
#                                      counted from 0 with the warm-up's, as the checkpoint counts them)


def _kill_hook(rank: int) -> int | None:
    """The epoch in which this rank is to kill itself (`KILL_ENV`, set by the resume tests), or None."""
    wanted = os.environ.get(KILL_ENV, "")
    who, _, when = wanted.partition(":")
    return int(when) if wanted and who == str(rank) and when.isdigit() else None


def _die() -> None:
    """SIGKILL this process mid-epoch, as a lost machine would end it: no cleanup, no error line of its own."""
    os.kill(os.getpid(), signal.SIGKILL)


def fit_rank(sessions: str | Path, valid: pd.DataFrame | None, cfg: RunConfig,
             arrow_lists: Sequence[str] = (), overrides: dict[str, np.ndarray] | None = None) -> FitResult:
    """This rank's part of the fit (the process group is up): a method with a data-parallel fit of its own (BAL's
    `fit_rank`) runs it; any other, its epochs on a DataParallelTrainer (`fit_trainer`)."""
    method = get_method(cfg.train.method)
    if hasattr(method, "fit_rank"):
        return method.fit_rank(sessions, valid, cfg, DataParallelTrainer, arrow_lists, overrides)
    if cfg.train.streaming:
        trainer = streaming_trainer(sessions, valid, cfg, DataParallelTrainer)
    else:
        trainer = DataParallelTrainer(*rank_ranker_and_table(sessions, cfg, arrow_lists), valid, cfg)
        if cfg.train.warmup_epochs:   # only then: the warm-up imports transformers (seconds per rank)
            warm_up(trainer)
    return method.fit_trainer(trainer, cfg)


def rank_ranker_and_table(sessions: str | Path, cfg: RunConfig, arrow_lists: Sequence[str] = ()
                          ) -> tuple[Ranker, pd.DataFrame]:
    """The sessions table a rank trains on in memory (read as the parent handed it over: `arrow_lists` as Arrow) and
    the ranker built on it, the same on every rank."""
    train = sample_sessions(read_table(sessions, arrow_lists=arrow_lists), cfg.data.max_sessions, cfg.seed)
    return build_ranker(cfg, train), train


def fit_streamed(sessions_dir: str | Path, valid: pd.DataFrame | None, cfg: RunConfig) -> FitResult:
    """The train stage's fit with `train.streaming: true`: batches streamed from the partitions of
    `sessions_dir` in this process, or by `train.processes` DDP ranks; the table is never read whole."""
    if cfg.train.processes > 1:
        return fit_data_parallel(sessions_dir, valid, cfg)
    return get_method(cfg.train.method).fit_trainer(streaming_trainer(sessions_dir, valid, cfg), cfg)


def on_rank0(fit: Callable[[], Any]) -> Any:
    """`fit()` run by rank 0 alone and its result sent to every rank (pickled by torch.save): a fit every rank needs
    and that runs once (BAL's graph and influence estimators), not once per rank. Under NCCL a tensor rank 0 left on
    its GPU arrives on the receiving rank's own GPU (`map_location`), not on rank 0's."""
    rank0 = dist.get_rank() == 0
    result = fit() if rank0 else None
    box: list[Any] = [None]
    if rank0:
        buffer = io.BytesIO()
        torch.save(result, buffer, pickle_protocol=pickle.HIGHEST_PROTOCOL)
        box = [buffer.getvalue()]
    dist.broadcast_object_list(box, src=0)
    if rank0:
        return result
    here = nccl_device()
    gpus = {f"cuda:{i}": str(here) for i in range(torch.cuda.device_count())} if here is not None else None
    # a peer rank's bytes within one fit, as broadcast_object_list's own pickle: not a file a user hands us
    return torch.load(io.BytesIO(box[0]), map_location=gpus, weights_only=False)


class RankBatches:
    """A small model's minibatch fit as DDP over the global batches one process draws (BAL's click model): every
    rank draws the same batch, keeps its contiguous share, and scales its summed loss by world / batch size, so
    DDP's mean gradient is the gradient of the global batch's mean loss."""

    def __init__(self) -> None:
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def wrap(self, parts: dict[str, torch.nn.Module], run: Callable[..., Any]) -> DistributedDataParallel:
        return DataParallelTrainer.data_parallel(parts, run)

    def part(self, index: torch.Tensor) -> torch.Tensor:
        return index[shard_sessions(len(index), self.rank, self.world)]

    def mean(self, summed: torch.Tensor, batch: int) -> torch.Tensor:
        """This shard's term of the global batch's mean loss, as DDP averages it over the ranks."""
        return summed * (self.world / max(batch, 1))

    def owns(self, index: int) -> bool:
        """Whether this rank computes piece `index` of a pass split into pieces (BAL's weight chunks): round robin."""
        return index % self.world == self.rank

    def sum(self, values: np.ndarray) -> np.ndarray:
        """`values` summed over the ranks (each holding its own pieces, zeros elsewhere): every piece, on every rank."""
        return all_sum(torch.from_numpy(np.ascontiguousarray(values))).numpy()

    def value(self, term: torch.Tensor) -> float:
        """The global batch's mean loss from this shard's term (`mean`)."""
        return float(all_sum(term)) / self.world


# ---------------------------------------------------------------------------------------------
def check_sessions_path(path: str | Path) -> None:
    """ConfigError unless `path` is a sessions table (a Parquet file or partition directory with a session_id
    column): a run's data/featured/ holds the table in sessions/ beside annotations.parquet, not as its partitions."""
    path = Path(path)
    if path.is_dir() and not any(p.suffix == ".parquet" for p in path.iterdir()):
        hint = f"; did you mean {path / 'sessions'}?" if (path / "sessions").is_dir() else ""
        raise ConfigError(f"--sessions: {path} holds no Parquet partitions{hint}")
    if SESSION_ID not in column_names(path):
        hint = f"; did you mean {path / 'sessions'}?" if path.is_dir() and (path / "sessions").is_dir() else ""
        raise ConfigError(f"--sessions: {path} is not a sessions table (no {SESSION_ID!r} column){hint}")


def main(argv: Sequence[str] | None = None) -> int:
    """One rank, launched by torchrun (or `ranks.fit_data_parallel`): RANK, WORLD_SIZE, MASTER_ADDR/PORT from the
    env. A bad argument is one line and exit code 2, as every wpultr command's."""
    parser = argparse.ArgumentParser(prog="python -m wpultr.methods.training.distributed",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("config", help="run config (YAML)")
    parser.add_argument("--sessions", required=True,
                        help="sessions table: a Parquet file or partition directory (a run's data/featured/sessions)")
    parser.add_argument("--valid", help="validation annotations (Parquet) that pick the best epoch")
    parser.add_argument("--out", required=True, help="directory rank 0 writes the ranker and history.json into")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, repeatable")
    parser.add_argument("--arrow-lists", default="", help=argparse.SUPPRESS)   # list columns kept as Arrow
    parser.add_argument("--overrides", help=argparse.SUPPRESS)   # .npz of per-row columns replacing the partitions'
    parser.add_argument("--checkpoint", help="per-epoch checkpoint to resume from and write (rank 0), "
                                             "e.g. a run's train/checkpoint.pt")
    parser.add_argument("--checkpoint-key", help=argparse.SUPPRESS)   # the launching config's key (checkpoint.py)
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, parse_overrides(args.set))
        check_sessions_path(args.sessions)
        place = rank_device(cfg.train.device, torch.cuda.is_available(), torch.cuda.device_count(),
                            int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cfg.train.device = place.kind   # "cuda" is GPU LOCAL_RANK once set_device ran; the same on every rank
    if place.backend == "nccl":
        torch.cuda.set_device(place.device)   # before the group: NCCL and broadcast_object_list use this GPU
    valid = pd.read_parquet(args.valid) if args.valid else None
    dist.init_process_group(place.backend, timeout=timedelta(minutes=30))
    try:
        overrides = None
        if args.overrides:
            with np.load(args.overrides, allow_pickle=False) as saved:
                overrides = {k: saved[k] for k in saved.files}

        with keep_checkpoints(args.checkpoint, args.checkpoint_key or config_key(cfg)) if args.checkpoint \
                else nullcontext():
            result = fit_rank(args.sessions, valid if valid is not None and len(valid) else None, cfg,
                              tuple(c for c in args.arrow_lists.split(",") if c), overrides)
        if dist.get_rank() == 0:
            result.bias["distributed"] = {"engine": "torch DDP", "backend": place.backend, "device": place.kind,
                                          **({"gpu": torch.cuda.get_device_name()} if place.kind == "cuda" else {})}
            out = Path(args.out)
            result.ranker.save(out / RANKER_SUBDIR)
            (out / HISTORY_FILE).write_text(json.dumps({"history": result.history, "bias": result.bias}))
            if result.graphs:
                (out / GRAPHS_FILE).write_text(json.dumps([g.to_dict() for g in result.graphs]))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
