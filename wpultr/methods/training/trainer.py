"""What every method's training shares: sessions as padded lists, the ranker built from config, and a trainer.

`SessionLists` lays the sessions table out as (sessions × slots) arrays ordered by position, so a
loss sees whole result pages. `Trainer` owns the state of one training run (ranker, optimiser,
prepared inputs, validation set, best epoch) and runs epochs of a method's loss over shuffled
session batches; methods differ only in the loss (and in what they fit besides the ranker).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pandas as pd
import torch

from ...evaluation.metrics import evaluate as evaluate_scores
from ...progress import progress
from ...rankers import registry
from ...rankers.base import Inputs, Ranker, resolve_device, score_inputs, take
from ...rankers.precision import autocast, grad_scaler, resolve_precision
from ...schema import CLICK, POSITION, SESSION_ID, SchemaError

if TYPE_CHECKING:
    from ...config import RunConfig


# ---------------------------------------------------------------------------------------------
@dataclass
class SessionLists:
    """Sessions as lists: entry [s, j] is the j-th shown result (by position) of session s."""

    rows: np.ndarray          # (S, K) row index into the sessions frame, -1 where the page is shorter
    mask: np.ndarray          # (S, K) True where a result was shown
    clicks: np.ndarray        # (S, K) float32, 0 in padding
    positions: np.ndarray     # (S, K) int64 position as logged (1-based), 0 in padding
    session_ids: np.ndarray   # (S,)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> "SessionLists":
        for column in (SESSION_ID, POSITION, CLICK):
            if column not in frame.columns:
                raise SchemaError(f"sessions: missing column {column!r}; present: {list(frame.columns)}")
        sessions = frame[SESSION_ID].to_numpy()
        positions = frame[POSITION].to_numpy().astype(np.int64)
        order = np.lexsort((positions, sessions))
        codes, ids = pd.factorize(sessions[order], sort=False)
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
        sizes = np.diff(np.r_[starts, len(codes)])
        slot = np.arange(len(codes)) - np.repeat(starts, sizes)
        n, k = len(ids), int(sizes.max()) if len(sizes) else 0
        rows = np.full((n, k), -1, dtype=np.int64)
        rows[codes, slot] = order
        mask = rows >= 0
        lists = cls(rows, mask, np.zeros((n, k), np.float32), np.zeros((n, k), np.int64), np.asarray(ids))
        lists.clicks = lists.gather(frame[CLICK].to_numpy().astype(np.float32))
        lists.positions = lists.gather(positions)
        return lists

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def slots(self) -> int:
        return self.rows.shape[1]

    def gather(self, values: np.ndarray, fill: float = 0) -> np.ndarray:
        """A per-row array of the frame laid out as (S, K), `fill` in padding."""
        values = np.asarray(values)
        out = np.full(self.rows.shape + values.shape[1:], fill, dtype=values.dtype)
        out[self.mask] = values[self.rows[self.mask]]
        return out

    def scatter(self, values: np.ndarray) -> np.ndarray:
        """The inverse of `gather`: (S, K) values back to one per frame row."""
        out = np.zeros((int(self.rows.max()) + 1 if self.rows.size else 0,) + values.shape[2:], dtype=values.dtype)
        out[self.rows[self.mask]] = values[self.mask]
        return out


@dataclass
class ListBatch:
    """A batch of sessions as tensors (B, K) on the training device; `extras` are method-specific columns."""

    index: np.ndarray                 # which sessions of the SessionLists
    rows: np.ndarray                  # (B, K) row indices (-1 padding)
    mask: torch.Tensor
    clicks: torch.Tensor
    positions: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    inputs: Inputs | None = None      # the batch's own prepared rows (streamed batches); None: the trainer's


def batches(lists: SessionLists, batch_size: int, rng: np.random.Generator, device: torch.device,
            extras: dict[str, np.ndarray] | None = None, shuffle: bool = True) -> Iterator[ListBatch]:
    """Shuffled batches of `batch_size` sessions; `extras` are (S, K[, ...]) arrays sliced alongside."""
    order = rng.permutation(len(lists)) if shuffle else np.arange(len(lists))
    for start in range(0, len(order), batch_size):
        index = order[start: start + batch_size]
        yield ListBatch(index, lists.rows[index],
                        torch.as_tensor(lists.mask[index], device=device),
                        torch.as_tensor(lists.clicks[index], device=device),
                        torch.as_tensor(lists.positions[index], device=device),
                        {k: torch.as_tensor(v[index], device=device) for k, v in (extras or {}).items()})


def list_scores(ranker: Ranker, inputs: Inputs, batch: ListBatch) -> torch.Tensor:
    """The ranker's scores of a batch's shown results as (B, K), 0 in padding; float32 whatever precision the
    ranker ran in (the losses take fp32)."""
    flat = batch.rows[batch.rows >= 0]
    scores = ranker(take(batch.inputs if batch.inputs is not None else inputs, flat, batch.mask.device)).float()
    out = scores.new_zeros(batch.mask.shape)
    return out.masked_scatter(batch.mask, scores)


# ---------------------------------------------------------------------------------------------
def build_ranker(cfg: "RunConfig", train: pd.DataFrame) -> Ranker:
    """The ranker `ranker.backbone` names, sized for (and standardised on) the training table
    (rankers.registry.build_ranker: every kind built in one place)."""
    return registry.build_ranker(cfg, train)


LossFn = Callable[[torch.Tensor, ListBatch], "torch.Tensor | tuple[torch.Tensor, dict[str, float]]"]


class Trainer:
    """One ranker's training run: optimiser, prepared inputs, validation and the best epoch so far."""

    def __init__(self, ranker: Ranker, train: pd.DataFrame, valid: pd.DataFrame | None, cfg: "RunConfig",
                 extra_parameters: Iterable[torch.nn.Parameter] = (), lists: SessionLists | None = None,
                 stream: Any = None):
        """`stream` (streaming.PartitionSessions) replaces `train`: batches then come from its partitions."""
        self.cfg = cfg
        self.device = resolve_device(cfg.train.device)
        self.precision = resolve_precision(cfg.train.precision, self.device)   # fp32 | bf16 | fp16, resolved;
        if not ranker.runs_mixed_precision():      # fp32 for a ranker without an encoder (Ranker.runs_mixed_precision)
            self.precision = "fp32"
        self.scaler = grad_scaler(self.device, self.precision)                   # fp16's loss scaler, else None
        self.ranker = ranker.to(self.device)
        self.stream = stream
        self.lists = lists if lists is not None or stream is not None else SessionLists.from_frame(train)
        self.inputs = ranker.prepare(train) if stream is None else {}
        self.valid = valid.reset_index(drop=True) if valid is not None and len(valid) else None
        self.valid_inputs = ranker.prepare(self.valid) if self.valid is not None else None
        trainable = [p for p in ranker.parameters() if p.requires_grad] + list(extra_parameters)
        self.optimizer = torch.optim.Adam(trainable, lr=cfg.train.learning_rate, weight_decay=cfg.train.weight_decay)
        self.rng = np.random.default_rng(cfg.seed)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.history: list[dict[str, Any]] = []
        self.best: tuple[float, int, dict[str, torch.Tensor]] | None = None

    def autocast(self):
        """The autocast context of the run's precision on the training device (nothing for fp32): every encoder pass
        runs under it — the epochs' `scores`, the warm-up's masked LM and the scoring passes (the head stays fp32)."""
        return autocast(self.device, self.precision)

    def scores(self, batch: ListBatch) -> torch.Tensor:
        return list_scores(self.ranker, self.inputs, batch)

    def per_row(self, values: np.ndarray) -> np.ndarray:
        """A per-row array of the training sessions in the layout `epoch`'s extras take: (S, K) session lists
        in memory, the flat array itself when streaming (each batch gathers its own rows)."""
        return np.asarray(values) if self.stream is not None else self.lists.gather(values)

    def train_scores(self, rows_per_pass: int = 16384) -> np.ndarray:
        """The current ranker's score (float32) of every training row, in the training table's order (the
        partitions' order when streaming, one unit's inputs in memory at a time)."""
        if self.stream is not None:
            return self.stream.scores(self.ranker, rows_per_pass, self.precision)
        return score_inputs(self.ranker, self.inputs, rows_per_pass, self.precision)

    def batches(self, extras: dict[str, np.ndarray] | None = None) -> Iterator[ListBatch]:
        if self.stream is not None:
            return self.stream.epoch(self.rng, self.device, extras)
        return batches(self.lists, self.cfg.train.batch_size, self.rng, self.device, extras)

    def step(self, loss: torch.Tensor) -> None:
        """One optimiser step on `loss`; under fp16 through the gradient scaler (a step whose scaled gradients
        overflowed is skipped and the scale lowered, torch.amp.GradScaler)."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
            return
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def warmup_epoch(self, loss_fn: LossFn, with_mlm: bool) -> dict[str, float]:
        """One epoch of warmup.warm_up's loss (`with_mlm`: it draws a masked-LM masking per batch); the
        data-parallel trainer replaces it to draw each global batch's masking as one process does."""
        return self.epoch(loss_fn)

    def epoch(self, loss_fn: LossFn, extras: dict[str, np.ndarray] | None = None,
              normaliser: Callable[[ListBatch], float] | None = None) -> dict[str, float]:
        """One pass over the shuffled sessions; returns the mean loss and any statistics the loss reports.
        `normaliser`, what `loss_fn` divides a batch's loss by, serves the data-parallel trainer (one process
        needs none)."""
        self.ranker.train()
        totals: dict[str, float] = {}
        n = 0
        n_batches = -(-(len(self.lists) if self.stream is None else self.stream.sessions) // self.cfg.train.batch_size)
        with progress(total=n_batches, desc=f"train epoch {len(self.history)}", unit="batch") as bar, \
                self.ranker.batch_allocations():
            for batch in self.batches(extras):
                with self.autocast():           # the ranker's forward (and a DDP rank's) in the run's precision
                    scores = self.scores(batch)
                out = loss_fn(scores, batch)
                loss, stats = out if isinstance(out, tuple) else (out, {})
                self.step(loss)
                for key, value in {"loss": float(loss.detach()), **stats}.items():
                    totals[key] = totals.get(key, 0.0) + float(value)
                n += 1
                bar.set_postfix(loss=f"{totals['loss'] / n:.4g}", refresh=False)
                bar.update()
        return {k: v / max(n, 1) for k, v in totals.items()}

    def validate(self) -> dict[str, Any] | None:
        """Metrics of the current ranker on the validation queries (None without a validation set)."""
        if self.valid is None:
            return None
        scored = self.valid.assign(score=score_inputs(self.ranker, self.valid_inputs, self.cfg.train.batch_size * 8,
                                                      self.precision))
        return evaluate_scores(scored, "score", ks=tuple(self.cfg.evaluation.ks))["all"]

    def record(self, epoch: int, train_stats: dict[str, Any], seconds: float, **more: Any) -> dict[str, Any]:
        """Validate, remember the epoch if it is the best so far (warm-up epochs never are), append it to the
        history."""
        valid = self.validate()
        entry = {"epoch": epoch, "seconds": round(seconds, 3), "precision": self.precision, "train": train_stats,
                 "valid": valid, **more}
        metric = self.cfg.train.select_metric
        value = valid.get(metric) if valid else None
        selectable = more.get("phase") != "warmup"   # the method's result comes from the method's own epochs
        if selectable and value is not None and (self.best is None or value > self.best[0]):
            self.best = (float(value), epoch, copy.deepcopy(self.ranker.state_dict()))
        self.history.append(entry)
        return entry

    def finish(self) -> Ranker:
        """The ranker of the best validation epoch (the last epoch without validation), in eval mode."""
        if self.best is not None:
            self.ranker.load_state_dict(self.best[2])
        return self.ranker.eval()

    @property
    def best_epoch(self) -> int | None:
        return self.best[1] if self.best else None

    def fit(self, loss_fn: LossFn, epochs: int | None = None, extras: dict[str, np.ndarray] | None = None,
            first_epoch: int = 0, normaliser: Callable[[ListBatch], float] | None = None) -> Ranker:
        """Run `epochs` (config default) epochs of `loss_fn`, recording each, and return the best ranker
        (`normaliser` as in `epoch`)."""
        for epoch in range(first_epoch, first_epoch + (epochs if epochs is not None else self.cfg.train.epochs)):
            start = time.perf_counter()
            stats = self.epoch(loss_fn, extras, normaliser) if normaliser is not None else self.epoch(loss_fn, extras)
            self.record(epoch, stats, time.perf_counter() - start)
        return self.finish()
