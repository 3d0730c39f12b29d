"""What every method's training shares: sessions as padded lists, the ranker built from config, and a trainer.

`SessionLists` lays the sessions table out as (sessions × slots) arrays ordered by position, so a
loss sees whole result pages. `Trainer` owns the state of one training run (ranker, optimiser,
prepared inputs, validation set, best epoch) and runs epochs of a method's loss over shuffled
session batches; methods differ only in the loss (and in what they fit besides the ranker).
"""
from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from ...evaluation.metrics import evaluate as evaluate_scores
from ...progress import progress
from ...rankers import registry
from ...rankers.base import Inputs, Ranker, resolve_device, score_inputs, take
from ...rankers.precision import autocast, grad_scaler, resolve_precision
from ...schema import CLICK, POSITION, SESSION_ID, SchemaError
from .checkpoint import current

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
    def from_frame(cls, frame: pd.DataFrame) -> SessionLists:
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
def build_ranker(cfg: RunConfig, train: pd.DataFrame) -> Ranker:
    """The ranker `ranker.backbone` names, sized for (and standardised on) the training table
    (rankers.registry.build_ranker: every kind built in one place)."""
    return registry.build_ranker(cfg, train)


LossFn = Callable[[torch.Tensor, ListBatch], "torch.Tensor | tuple[torch.Tensor, dict[str, float]]"]


class Trainer:
    """One ranker's training run: optimiser, prepared inputs, validation and the best epoch so far."""

    def __init__(self, ranker: Ranker, train: pd.DataFrame, valid: pd.DataFrame | None, cfg: RunConfig,
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
        # the per-epoch checkpoint (checkpoint.py) of the train stage in progress, and what this run resumes from
        self.checkpoint = current()
        self.resume: dict[str, Any] | None = self.checkpoint.load() if self.checkpoint is not None else None
        self.resumed_epochs = 0           # the finished epochs taken from the checkpoint (0: a fresh start)
        self.kept: dict[str, Any] = {}    # the state a method keeps across epochs (`keep`)
        self.planned = 0                  # epochs of the phases begun so far (`epoch_range`)

    def keep(self, name: str, state: Any) -> Any:
        """Register state the method keeps across epochs (a tensor, a module, a torch.Generator, or an object with
        state_dict/load_state_dict) so the checkpoint holds it; on a resume it is loaded now. Returns `state`."""
        self.kept[name] = state
        if self.resumed_epochs and name in self.resume["kept"]:
            _load_kept(state, self.resume["kept"][name])
        return state

    def epoch_range(self, epochs: int) -> range:
        """The epoch numbers of a training phase of `epochs` epochs (warm-up, the method's own) still to run: all of
        them, or on a resume those after the checkpoint's last finished epoch (the first call restores it)."""
        start = self.planned
        self.planned += epochs
        if self.resume is not None and not self.resumed_epochs:
            self.restore(self.resume)
        return range(max(start, len(self.history)), start + epochs)

    def restore(self, payload: dict[str, Any]) -> None:
        """Everything `checkpoint_state` saved, back in place: the run continues as if it had not stopped."""
        self.ranker.load_state_dict(payload["ranker"])
        self.optimizer.load_state_dict(payload["optimizer"])
        if self.scaler is not None and payload.get("scaler"):
            self.scaler.load_state_dict(payload["scaler"])
        best = payload.get("best")
        if best:       # the best epoch's ranker, or (saved once) the ranker itself when that epoch is the last
            state = best["state"] if best["state"] is not None else copy.deepcopy(payload["ranker"])
            self.best = (float(best["value"]), int(best["epoch"]), state)
        else:
            self.best = None
        self.history = json.loads(payload["history"])
        self.rng.bit_generator.state = json.loads(payload["numpy_rng"])
        self.generator.set_state(payload["generator"])
        torch.set_rng_state(payload["torch_rng"])
        if payload.get("cuda_rng") is not None and self.device.type == "cuda":   # dropout's stream on the GPU
            torch.cuda.set_rng_state(payload["cuda_rng"], self.device)
        self.resumed_epochs = int(payload["epochs"])
        for name, state in self.kept.items():
            if name in payload["kept"]:
                _load_kept(state, payload["kept"][name])
        self.resume = {"kept": payload["kept"]}     # what `keep` may still load; the rest is in place (memory freed)
        logging.getLogger(__name__).warning("train: resuming after the %d finished epochs in %s",
                                            self.resumed_epochs, self.checkpoint.path if self.checkpoint else "")

    def checkpoint_state(self) -> dict[str, Any]:
        """What a resume needs (checkpoint.py): tensors, numbers and JSON text only (weights_only loading)."""
        best = self.best
        return {"epochs": len(self.history), "ranker": self.ranker.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "best": {"value": best[0], "epoch": best[1],   # the last epoch's is the ranker's: not saved twice
                         "state": None if best[1] == self.history[-1]["epoch"] else best[2]} if best else None,
                "history": json.dumps(self.history, default=_json_value),
                "numpy_rng": json.dumps(self.rng.bit_generator.state),
                "generator": self.generator.get_state(), "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
                "kept": {name: _kept_state(state) for name, state in self.kept.items()}}

    def writes_checkpoint(self) -> bool:
        """Whether this process writes the checkpoint (a DDP rank other than 0 does not)."""
        return self.checkpoint is not None

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
            self.sync_gradients()
            self.optimizer.step()
            return
        self.scaler.scale(loss).backward()
        self.sync_gradients()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def sync_gradients(self) -> None:
        """Between the backward pass and the optimiser step: nothing in one process (the data-parallel trainer
        averages the gradients of the parameters outside its DDP unit there: a method's own models)."""

    def all_sum(self, values: torch.Tensor) -> torch.Tensor:
        """`values` summed over the ranks: themselves in one process. A method's statistics of a batch (REM's counts,
        pairwise debiasing's sums) pass through it, so every DDP rank updates its state from the global batch's."""
        return values

    def draw_for_batch(self, batch: ListBatch, draw: Callable[[int], torch.Tensor]) -> torch.Tensor:
        """`draw(n)`, a random draw over the n sessions of the batch (first dimension), for `batch`: in one process
        the whole batch's; a DDP rank draws the global batch's, as one process does, and keeps its shard's."""
        return draw(len(batch.index))

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
        if self.writes_checkpoint():
            self.checkpoint.save(self.checkpoint_state())
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
            normaliser: Callable[[ListBatch], float] | None = None) -> Ranker:
        """Run `epochs` (config default) epochs of `loss_fn` after the warm-up's (those a resume has not already run),
        recording each, and return the best ranker (`normaliser` as in `epoch`)."""
        for epoch in self.epoch_range(epochs if epochs is not None else self.cfg.train.epochs):
            start = time.perf_counter()
            stats = self.epoch(loss_fn, extras, normaliser) if normaliser is not None else self.epoch(loss_fn, extras)
            self.record(epoch, stats, time.perf_counter() - start)
        return self.finish()


def _kept_state(state: Any) -> Any:
    if isinstance(state, torch.Tensor):
        return state.detach().cpu().clone()
    if isinstance(state, torch.Generator):
        return state.get_state()
    return state.state_dict()


def _load_kept(state: Any, saved: Any) -> None:
    if isinstance(state, torch.Tensor):
        with torch.no_grad():
            state.copy_(saved.to(state.device))
    elif isinstance(state, torch.Generator):
        state.set_state(saved)
    else:
        state.load_state_dict(saved)


def _json_value(value: Any) -> Any:
    """numpy numbers and arrays in a history entry, as JSON."""
    return value.tolist() if hasattr(value, "tolist") else str(value)
