"""The train stage's checkpoint after every finished epoch, so a rerun of a failed train stage resumes from it.

The shared trainer (trainer.py) writes `train/checkpoint.pt` in the run directory after each recorded epoch: the
ranker, the optimiser (and fp16's loss scaler), the best epoch so far, the history, the RNG states (the trainer's
batch order and draws, torch's global stream) and the state a method keeps across epochs (`Trainer.keep`: REM's θ,
DLA's propensity logits, pairwise debiasing's t±, LBD's observation model, BAL's graphs so far), with the key of
the config that wrote it (`config_key`). It is written through the run directory's atomic rename
(`rundir.files.atomic_path`) and read with `torch.load(weights_only=True)`: tensors, numbers and strings only (the
history and graphs as JSON text). A checkpoint of another config is ignored (the run starts at epoch 0 and replaces
it). In DDP rank 0 writes it and every rank reads it: the launcher hands the ranks its path and key
(`--checkpoint`, `ranks.RankJob`). The train stage deletes it once the ranker and history are written.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...config import results_config
from ...rundir.files import Replaces, atomic_path

if TYPE_CHECKING:
    from ...config import RunConfig

log = logging.getLogger(__name__)
FORMAT = 1


def config_key(cfg: RunConfig) -> str:
    """The sha256 of what `cfg` computes (`config.results_config`: where it runs aside): a checkpoint resumes only
    the config that wrote it."""
    return hashlib.sha256(json.dumps(results_config(cfg), sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Checkpoint:
    """Where a training run keeps its checkpoint and the key of its config."""

    path: Path
    key: str

    def load(self, mapped: bool = False) -> dict[str, Any] | None:
        """The checkpoint's contents when it was written under this key, else None (no file, another config, or a
        file that does not load: the run then starts from epoch 0 and replaces it). `mapped`: its tensors mapped from
        the file, not read (to look at its epochs)."""
        if not self.path.is_file():
            return None
        try:
            payload = torch.load(self.path, map_location="cpu", weights_only=True, mmap=mapped)
        except Exception as e:   # noqa: BLE001 (any unreadable file: start over, as if there were none)
            log.warning("train: %s does not load (%s); training starts from epoch 0", self.path, e)
            return None
        if not isinstance(payload, dict) or payload.get("format") != FORMAT or payload.get("key") != self.key:
            log.warning("train: %s was written under another config; training starts from epoch 0", self.path)
            return None
        return payload

    def save(self, payload: dict[str, Any]) -> None:
        """Write `payload` (and this key) atomically: a rank killed mid-write leaves the previous checkpoint."""

        # an existing file is replaced only when it is a checkpoint (a user's file at --checkpoint is refused)
        ours = Replaces("a wpultr training checkpoint", is_checkpoint, in_runs=True)
        with atomic_path(self.path, ours, key="--checkpoint") as tmp:
            torch.save({**payload, "format": FORMAT, "key": self.key}, tmp)

    def finished_epochs(self) -> int:
        """How many epochs the checkpoint holds (0 without one of this config)."""
        payload = self.load(mapped=True)
        return int(payload["epochs"]) if payload else 0

    def remove(self) -> None:
        """Delete the checkpoint once its fit is done: only a wpultr checkpoint (`is_checkpoint`, on the resolved
        path) — a user's file at that path stays, as `save` never replaces one."""
        path = self.path.resolve()
        if is_checkpoint(path):
            path.unlink()


def is_checkpoint(path: Path) -> bool:
    """`path` is a checkpoint this module wrote (its format mark; the tensors are mapped, not read)."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:   # noqa: BLE001 (anything that does not load as one is not one)
        return False
    return isinstance(payload, dict) and payload.get("format") == FORMAT


_current: ContextVar[Checkpoint | None] = ContextVar("wpultr_checkpoint", default=None)


@contextmanager
def keep_checkpoints(path: str | Path, key: str) -> Iterator[Checkpoint]:
    """Within this block every shared trainer resumes from and writes to the checkpoint at `path` (key `key`)."""
    checkpoint = Checkpoint(Path(path), key)
    token = _current.set(checkpoint)
    try:
        yield checkpoint
    finally:
        _current.reset(token)


def current() -> Checkpoint | None:
    """The checkpoint of the training run in progress (`keep_checkpoints`), if any."""
    return _current.get()
