"""Training batches streamed from a sessions directory's Parquet partitions, never the whole table in memory.

`PartitionSessions` is a torch IterableDataset of session batches (`training.ListBatch`, each holding its
own prepared rows). Each epoch draws the order of the partitions, then the order of the sessions
within each partition, from the trainer's generator, and cuts the resulting sequence into batches of
`train.batch_size` sessions (a batch may straddle two partitions). With a single partition this is
exactly the in-memory order (`training.batches`): the same permutation of the same sessions, sorted
by session id. Memory holds one partition (plus fewer than a batch of sessions carried over).

Whole sessions: ingest (`io.tables.SessionPartitionWriter`) keeps a session in one partition unless the
session alone is longer than `data.partition_rows`; such a session continues at the start of the next
partition of the same input file, so consecutive partitions whose boundary session id repeats are read
as one unit here. Session ids are unique across input files (ingest numbers them, or requires it).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import torch

from ..errors import ConfigError
from ..io.parquet import partition_paths
from ..rankers.base import Ranker, take
from ..schema import CLICK, FEATURES, POSITION, SESSION_ID
from .training import ListBatch, SessionLists, Trainer

if TYPE_CHECKING:
    from ..config import RunConfig

# The columns the naive click losses and the MLP ranker read; nothing else of a partition is loaded.
MLP_COLUMNS = (SESSION_ID, POSITION, CLICK, FEATURES)


def session_units(paths: Sequence[str | Path]) -> tuple[list[list[str]], int]:
    """(partitions grouped into units that hold whole sessions, number of sessions), from the id columns only."""
    units: list[list[str]] = []
    sessions, last = 0, None
    for path in paths:
        ids = pq.read_table(path, columns=[SESSION_ID]).column(SESSION_ID).to_numpy()
        if not len(ids):
            continue
        first = ids[0]
        continues = last is not None and first == last   # a session longer than a partition, split by ingest
        if continues:
            units[-1].append(str(path))
        else:
            units.append([str(path)])
        sessions += len(np.unique(ids)) - int(continues)
        last = ids[-1]
    return units, sessions


class PartitionSessions(torch.utils.data.IterableDataset):
    """Whole sessions of Parquet partitions as shuffled batches of `batch_size` sessions (see the module doc)."""

    def __init__(self, directory: str | Path, ranker: Ranker, batch_size: int,
                 columns: Sequence[str] | None = MLP_COLUMNS, rng: np.random.Generator | None = None,
                 device: torch.device | str = "cpu"):
        self.paths = [str(p) for p in partition_paths(directory)]
        if not self.paths:
            raise FileNotFoundError(f"{directory}: table directory holds no Parquet partitions")
        self.units, self.sessions = session_units(self.paths)
        self.ranker, self.batch_size = ranker, batch_size
        self.columns = list(columns) if columns is not None else None
        self.rng, self.device = rng or np.random.default_rng(0), torch.device(device)

    def __len__(self) -> int:
        return -(-self.sessions // self.batch_size)

    def __iter__(self) -> Iterator[ListBatch]:
        return self.epoch(self.rng, self.device)

    def read_unit(self, unit: Sequence[str]) -> pd.DataFrame:
        frames = [pd.read_parquet(p, columns=self.columns) for p in unit]
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)

    def epoch(self, rng: np.random.Generator, device: torch.device,
              extras: dict[str, np.ndarray] | None = None) -> Iterator[ListBatch]:
        """One pass: unit order, then session order within each unit, drawn from `rng`; batches on `device`."""
        if extras:
            raise ValueError("streamed batches carry no per-session extras; the method needs the in-memory trainer")
        pieces: list[tuple[SessionLists, dict[str, torch.Tensor], np.ndarray]] = []
        held = 0
        for u in rng.permutation(len(self.units)):
            frame = self.read_unit(self.units[u])
            lists = SessionLists.from_frame(frame)
            inputs = self.ranker.prepare(frame)
            order = rng.permutation(len(lists))
            while len(order):
                take_n = min(self.batch_size - held, len(order))
                pieces.append((lists, inputs, order[:take_n]))
                held, order = held + take_n, order[take_n:]
                if held == self.batch_size:
                    yield assemble(pieces, device)
                    pieces, held = [], 0
        if pieces:
            yield assemble(pieces, device)


def assemble(pieces: Sequence[tuple[SessionLists, dict[str, torch.Tensor], np.ndarray]],
             device: torch.device) -> ListBatch:
    """One batch from (lists, prepared inputs, session indices) pieces: rows renumbered into its own inputs,
    `index` the batch's session ids (a streamed batch has no SessionLists to index into)."""
    slots = max(lists.slots for lists, _, _ in pieces)
    rows, mask, clicks, positions, ids, taken = [], [], [], [], [], []
    offset = 0
    for lists, inputs, index in pieces:
        pad = ((0, 0), (0, slots - lists.slots))
        m = np.pad(lists.mask[index], pad)
        local = np.full(m.shape, -1, dtype=np.int64)
        local[m] = offset + np.arange(int(m.sum()))
        offset += int(m.sum())
        taken.append(take(inputs, lists.rows[index][lists.mask[index]]))
        rows.append(local)
        mask.append(m)
        clicks.append(np.pad(lists.clicks[index], pad))
        positions.append(np.pad(lists.positions[index], pad))
        ids.append(lists.session_ids[index])
    batch_inputs = {k: torch.cat([t[k] for t in taken]) for k in taken[0]}
    return ListBatch(np.concatenate(ids), np.concatenate(rows),
                     torch.as_tensor(np.concatenate(mask), device=device),
                     torch.as_tensor(np.concatenate(clicks), device=device),
                     torch.as_tensor(np.concatenate(positions), device=device),
                     inputs=batch_inputs)


# ---------------------------------------------------------------------------------------------
def feature_moments(paths: Sequence[str | Path]) -> tuple[int, np.ndarray, np.ndarray]:
    """(width, mean, population std) of the `features` vectors over all partitions, merged partition by
    partition (Chan et al.'s pairwise update of count, mean and sum of squared deviations, in float64)."""
    from ..rankers.mlp import feature_matrix
    n, mean, m2 = 0, None, None
    for path in paths:
        matrix = feature_matrix(pd.read_parquet(path, columns=[FEATURES]), str(path)).astype(np.float64)
        if not len(matrix):
            continue
        k, mu = len(matrix), matrix.mean(axis=0)
        sq = ((matrix - mu) ** 2).sum(axis=0)
        if mean is None:
            n, mean, m2 = k, mu, sq
            continue
        if len(mu) != len(mean):
            raise ValueError(f"{path}: column {FEATURES!r} has {len(mu)} values per row, earlier partitions "
                             f"{len(mean)}")
        delta = mu - mean
        total = n + k
        mean = mean + delta * k / total
        m2 = m2 + sq + delta ** 2 * n * k / total
        n = total
    if mean is None:
        raise ValueError(f"{FEATURES!r}: no rows in the partitions")
    return len(mean), mean, np.sqrt(m2 / n)


def streaming_ranker(cfg: "RunConfig", directory: str | Path) -> Ranker:
    """The MLP ranker `build_ranker` makes for the whole table, standardised by moments merged over partitions."""
    if cfg.ranker.backbone != "mlp":
        raise ConfigError(f"train.streaming: true trains ranker.backbone 'mlp' only (its standardisation merges "
                          f"over partitions), got {cfg.ranker.backbone!r}; set train.streaming: false")
    from ..rankers.mlp import MLPRanker
    width, mean, std = feature_moments(partition_paths(directory))
    torch.manual_seed(cfg.seed)   # the same initial weights as training.build_ranker
    ranker = MLPRanker(width, cfg.ranker.head, cfg.ranker.dropout)
    ranker.mean.copy_(torch.from_numpy(mean.astype(np.float32)))
    ranker.scale.copy_(torch.from_numpy(np.where(std > 1e-8, std, 1.0).astype(np.float32)))
    return ranker


def streaming_trainer(directory: str | Path, valid: pd.DataFrame | None, cfg: "RunConfig",
                      trainer_class: type[Trainer] = Trainer, **kwargs: Any) -> Trainer:
    """A warmed-up trainer (`trainer_class`) whose batches stream from the partitions of `directory`."""
    if cfg.data.max_sessions is not None:
        raise ConfigError(f"data.max_sessions: must be null with train.streaming: true (every session of the "
                          f"partitions is streamed), got {cfg.data.max_sessions!r}")
    ranker = streaming_ranker(cfg, directory)
    stream = PartitionSessions(directory, ranker, cfg.train.batch_size)
    trainer = trainer_class(ranker, None, valid, cfg, stream=stream, **kwargs)
    if cfg.train.warmup_epochs:   # only then: the warm-up imports transformers (seconds in a fresh process)
        from .warmup import warm_up
        warm_up(trainer)
    return trainer
