"""Training batches streamed from a sessions directory's Parquet partitions, never the whole table in memory.

`PartitionSessions` is a torch IterableDataset of session batches (`training.ListBatch`, each holding its
own prepared rows). Each epoch draws the order of the partitions, then the order of the sessions
within each partition, from the trainer's generator, and cuts the resulting sequence into batches of
`train.batch_size` sessions (a batch may straddle two partitions). With a single partition this is
exactly the in-memory order (`training.batches`): the same permutation of the same sessions, sorted
by session id. Memory holds one partition (plus fewer than a batch of sessions carried over).

Rows are numbered over the partitions' concatenation in path order (`io.parquet.column_table`'s order): a method's
per-row arrays in that numbering (BAL's importance weights and page logits) reach each batch as (B, K)
extras, and `scores` returns the ranker's score of every row in it, one unit's inputs in memory at a time.

Whole sessions: ingest (`io.tables.SessionPartitionWriter`) keeps a session in one partition unless the
session alone is longer than `data.partition_rows`; such a session continues at the start of the next
partition of the same input file, so consecutive partitions whose boundary session id repeats are read
as one unit here. Session ids are unique across input files (ingest numbers them, or requires it).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ...errors import ConfigError
from ...io.parquet import partition_paths, row_count, table_to_pandas
from ...rankers.base import Ranker, score_inputs, take
from ...rankers.mlp import MLPRanker, feature_matrix
from ...schema import CLICK, FEATURES, POSITION, SESSION_ID
from ...settings.methods import BACKBONES
from .trainer import ListBatch, SessionLists, Trainer
from .warmup import warm_up

if TYPE_CHECKING:
    from ...config import RunConfig

# The columns the naive click losses and the MLP ranker read; nothing else of a partition is loaded.
MLP_COLUMNS = (SESSION_ID, POSITION, CLICK, FEATURES)


def session_units(paths: Sequence[str | Path]) -> tuple[list[list[str]], int, list[int]]:
    """(partitions grouped into units that hold whole sessions, number of sessions, each unit's first row in
    the partitions' concatenation), from the id columns only."""
    units: list[list[str]] = []
    offsets: list[int] = []
    sessions, rows, last = 0, 0, None
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
            offsets.append(rows)
        sessions += len(np.unique(ids)) - int(continues)
        rows += len(ids)
        last = ids[-1]
    return units, sessions, offsets


class PartitionSessions(torch.utils.data.IterableDataset):
    """Whole sessions of Parquet partitions as shuffled batches of `batch_size` sessions (see the module doc)."""

    def __init__(self, directory: str | Path, ranker: Ranker, batch_size: int,
                 columns: Sequence[str] | None = MLP_COLUMNS, rng: np.random.Generator | None = None,
                 device: torch.device | str = "cpu"):
        self.paths = [str(p) for p in partition_paths(directory)]
        if not self.paths:
            raise FileNotFoundError(f"{directory}: table directory holds no Parquet partitions")
        self.units, self.sessions, self.offsets = session_units(self.paths)
        self.ranker, self.batch_size = ranker, batch_size
        self.columns = list(columns) if columns is not None else None
        self.rng, self.device = rng or np.random.default_rng(0), torch.device(device)

    def __len__(self) -> int:
        return -(-self.sessions // self.batch_size)

    def __iter__(self) -> Iterator[ListBatch]:
        return self.epoch(self.rng, self.device)

    def read_unit(self, unit: Sequence[str]) -> pd.DataFrame:
        """A unit's rows; the dense `features` stay Arrow buffers (read as one matrix by the ranker, never a
        NumPy array per row: 5 M rows of them cost a minute a pass)."""
        table = pa.concat_tables([pq.read_table(p, columns=self.columns) for p in unit])
        return table_to_pandas(table, (FEATURES,))

    def epoch(self, rng: np.random.Generator, device: torch.device,
              extras: dict[str, np.ndarray] | None = None) -> Iterator[ListBatch]:
        """One pass: unit order, then session order within each unit, drawn from `rng`; batches on `device`.

        `extras` are per-row arrays over the partitions' concatenation (the order `io.parquet.column_table` reads
        them in), laid out per batch as (B, K) tensors, 0 in padding, as the in-memory trainer's extras are."""
        pieces: list[Piece] = []
        held = 0
        for u in rng.permutation(len(self.units)):
            frame = self.read_unit(self.units[u])
            lists = SessionLists.from_frame(frame)
            inputs = self.ranker.prepare(frame)
            order = rng.permutation(len(lists))
            while len(order):
                take_n = min(self.batch_size - held, len(order))
                pieces.append((lists, inputs, order[:take_n], self.offsets[u]))
                held, order = held + take_n, order[take_n:]
                if held == self.batch_size:
                    yield assemble(pieces, device, extras)
                    pieces, held = [], 0
        if pieces:
            yield assemble(pieces, device, extras)

    @property
    def rows(self) -> int:
        """Shown results in all partitions."""
        return row_count(self.paths)

    def scores(self, ranker: Ranker, rows_per_pass: int, precision: str = "fp32") -> np.ndarray:
        """The ranker's score of every row, unit by unit, in the partitions' order (one unit's inputs in memory),
        under `precision`'s autocast (rankers.precision)."""
        out = np.empty(self.rows, dtype=np.float32)
        for unit, offset in zip(self.units, self.offsets, strict=True):
            frame = self.read_unit(unit)
            out[offset: offset + len(frame)] = score_inputs(ranker, ranker.prepare(frame), rows_per_pass, precision)
        return out


Piece = tuple[SessionLists, dict[str, torch.Tensor], np.ndarray, int]   # lists, inputs, sessions, first row


def assemble(pieces: Sequence[Piece], device: torch.device, extras: dict[str, np.ndarray] | None = None) -> ListBatch:
    """One batch from (lists, prepared inputs, session indices, the unit's first row) pieces: rows renumbered
    into its own inputs, `index` the batch's session ids (a streamed batch has no SessionLists to index into),
    `extras` (per-row arrays over all partitions) gathered as (B, K)."""
    slots = max(lists.slots for lists, _, _, _ in pieces)
    rows, mask, clicks, positions, ids, taken = [], [], [], [], [], []
    gathered: dict[str, list[np.ndarray]] = {k: [] for k in extras or {}}
    offset = 0
    for lists, inputs, index, first in pieces:
        pad = ((0, 0), (0, slots - lists.slots))
        m = np.pad(lists.mask[index], pad)
        local = np.full(m.shape, -1, dtype=np.int64)
        local[m] = offset + np.arange(int(m.sum()))
        offset += int(m.sum())
        unit_rows = lists.rows[index][lists.mask[index]]
        taken.append(take(inputs, unit_rows))
        for name, values in (extras or {}).items():
            out = np.zeros(m.shape, dtype=np.asarray(values).dtype)
            out[m] = values[first + unit_rows]
            gathered[name].append(out)
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
                     {k: torch.as_tensor(np.concatenate(v), device=device) for k, v in gathered.items()},
                     inputs=batch_inputs)


# ---------------------------------------------------------------------------------------------
def feature_moments(paths: Sequence[str | Path]) -> tuple[int, np.ndarray, np.ndarray]:
    """(width, mean, population std) of the `features` vectors over all partitions, merged partition by
    partition (Chan et al.'s pairwise update of count, mean and sum of squared deviations, in float64)."""
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


def streaming_ranker(cfg: RunConfig, directory: str | Path) -> Ranker:
    """The MLP ranker `build_ranker` makes for the whole table, standardised by moments merged over partitions."""
    if not BACKBONES[cfg.ranker.backbone].streams:     # the config refuses it at load; a changed config here
        raise ConfigError(f"train.streaming: true trains ranker.backbone 'mlp' only (its standardisation merges "
                          f"over partitions), got {cfg.ranker.backbone!r}; set train.streaming: false")
    width, mean, std = feature_moments(partition_paths(directory))
    torch.manual_seed(cfg.seed)   # the same initial weights as training.build_ranker
    ranker = MLPRanker(width, cfg.ranker.head, cfg.ranker.dropout)
    ranker.mean.copy_(torch.from_numpy(mean.astype(np.float32)))
    ranker.scale.copy_(torch.from_numpy(np.where(std > 1e-8, std, 1.0).astype(np.float32)))
    return ranker


def streaming_trainer(directory: str | Path, valid: pd.DataFrame | None, cfg: RunConfig,
                      trainer_class: type[Trainer] = Trainer, **kwargs: Any) -> Trainer:
    """A warmed-up trainer (`trainer_class`) whose batches stream from the partitions of `directory`."""
    if cfg.data.max_sessions is not None:
        raise ConfigError(f"data.max_sessions: must be null with train.streaming: true (every session of the "
                          f"partitions is streamed), got {cfg.data.max_sessions!r}")
    ranker = streaming_ranker(cfg, directory)
    stream = PartitionSessions(directory, ranker, cfg.train.batch_size)
    trainer = trainer_class(ranker, None, valid, cfg, stream=stream, **kwargs)
    if cfg.train.warmup_epochs:   # only then: the warm-up imports transformers (seconds in a fresh process)
        warm_up(trainer)
    return trainer
