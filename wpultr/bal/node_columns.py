"""BAL's per-row columns of one fit, held in memory or spilled to local disk, read by row range or row index.

Every epoch step reads the rows through `.iloc` — a chunk (`iloc[start:stop]`: scoring the densities, the page
logits) or a sample (`iloc[index]`: discovery, the estimators' and the click model's rows) — as a pandas frame of
the graph's variables (the encoded page features, r̂, c), so one step's code serves both holdings. In memory
(`BAL.fit`) the columns are arrays and a read is a slice or a gather of them. Spilled (`BAL.fit_streamed`: a log
larger than memory) each fixed column is one raw file in a local scratch directory, written once when it is
built and then dropped from memory; a read opens the file at the rows asked for, so the process holds one chunk
of a column at a time, never the column (a gather reads the file chunk by chunk). r̂, replaced every epoch, is
held in memory either way (`set_scores`). Columns whose name starts with "_" are per-row state that is not a
node of the graph (the raw positions, the click model's document pairs): read by `column` and `take` only.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..processes import process_started
from ..schema import RELEVANCE_SCORE

log = logging.getLogger(__name__)

READ_ROWS = 1 << 20          # a gather from a spilled column reads its file this many rows at a time
SCRATCH_PREFIX = "wpultr-rows-"


def _host_prefix() -> str:
    """`wpultr-rows-<host>-`: the host with its dashes made underscores, so the pid after it parses."""
    return f"{SCRATCH_PREFIX}{socket.gethostname().replace('-', '_')}-"


def scratch_prefix() -> str:
    """This process's scratch-directory prefix: host and pid, so a later fit can tell a dead fit's leftovers."""
    return f"{_host_prefix()}{os.getpid()}-"


def remove_orphaned_scratch(directory: str | Path) -> list[Path]:
    """Remove the scratch directories under `directory` left by fits on this host whose process is gone (killed:
    SIGKILL or a lost machine skip the clean-up at exit); those of live processes and other hosts stay."""
    host = _host_prefix()
    removed = []
    for path in Path(directory).glob(f"{host}*-*"):
        pid = path.name[len(host):].split("-", 1)[0]
        if path.is_dir() and pid.isdigit() and process_started(int(pid)) is None:
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():                # another user's directory stays theirs
                removed.append(path)
    return removed


class NodeColumns:
    """Named per-row arrays of equal length (see the module doc); `directory` None holds them in memory."""

    def __init__(self, n_rows: int, directory: str | Path | None = None):
        self.n_rows = n_rows
        self._arrays: dict[str, np.ndarray] = {}
        self._dtypes: dict[str, np.dtype] = {}
        self._order: list[str] = []
        self._scores: np.ndarray | None = None
        self.directory = None if directory is None else Path(tempfile.mkdtemp(prefix=scratch_prefix(), dir=directory))
        if self.directory is not None:   # the scratch files go with the object (and at exit, whatever happens)
            self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.directory), True)

    @classmethod
    def spilled(cls, n_rows: int, directory: str | Path | None = None) -> NodeColumns:
        """Columns on local disk under `directory` (None: the system's temporary directory, $TMPDIR); first removes
        what killed fits of this host left there (`remove_orphaned_scratch`)."""
        directory = tempfile.gettempdir() if directory is None else directory
        for path in remove_orphaned_scratch(directory):
            log.info("removed %s: scratch rows of a fit whose process is gone", path)
        return cls(n_rows, directory)

    # -- writing -------------------------------------------------------------------------------
    def add(self, name: str, values: np.ndarray) -> None:
        """Append column `name` (spilled: written to its file; the caller can let `values` go)."""
        values = np.asarray(values)
        if len(values) != self.n_rows:
            raise ValueError(f"column {name!r}: {len(values)} rows, the others have {self.n_rows}")
        if name in self._dtypes or name == RELEVANCE_SCORE:
            raise ValueError(f"column {name!r} is already held")
        self._dtypes[name] = values.dtype
        self._order.append(name)
        if self.directory is None:
            self._arrays[name] = values
        else:
            np.ascontiguousarray(values).tofile(self._path(name))

    def add_all(self, columns: Iterable[tuple[str, np.ndarray]]) -> None:
        """Each (name, values) in turn; each is let go before the next is made
        (`PageFeatureEncoder.transform_columns`)."""
        for name, values in columns:
            self.add(name, values)
            del values

    def set_scores(self, r: np.ndarray) -> np.ndarray:
        """This epoch's r̂ (float32, in memory), the graph's relevance-score node; returns the held array."""
        if len(r) != self.n_rows:
            raise ValueError(f"scores: {len(r)} rows, the columns have {self.n_rows}")
        if self._scores is None:                  # r̂'s place among the columns: where it was first set
            self._order.append(RELEVANCE_SCORE)
        self._scores = np.asarray(r, dtype=np.float32)
        self._scores.flags.writeable = False
        return self._scores

    # -- reading -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.n_rows

    @property
    def held(self) -> list[str]:
        """Every column's name, those beside the nodes ("_…") included."""
        return list(self._order)

    @property
    def columns(self) -> list[str]:
        """The frame's columns, as `iloc` returns them: the nodes in the order they were added (r̂ where it was
        first set)."""
        return [c for c in self._order if not c.startswith("_")]

    def column(self, name: str) -> np.ndarray:
        """One whole column (a spilled one read from its file: the caller holds it while it needs it)."""
        if name == RELEVANCE_SCORE and self._scores is not None:
            return self._scores
        return self.read(name, 0, self.n_rows)

    def read(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of column `name` (in memory: a view)."""
        if name == RELEVANCE_SCORE and self._scores is not None:
            return self._scores[start:stop]
        self._check(name)
        if self.directory is None:
            return self._arrays[name][start:stop]
        dtype = self._dtypes[name]
        stop = min(stop, self.n_rows)
        if stop <= start:
            return np.empty(0, dtype)
        return np.fromfile(self._path(name), dtype=dtype, count=stop - start, offset=start * dtype.itemsize)

    def take(self, name: str, index: np.ndarray) -> np.ndarray:
        """Column `name` at the positions `index` (any order, repeats allowed), in `index`'s order."""
        index = np.asarray(index, dtype=np.int64)
        if name == RELEVANCE_SCORE and self._scores is not None:
            return self._scores[index]
        self._check(name)
        if len(index) and (index.min() < 0 or index.max() >= self.n_rows):
            raise IndexError(f"column {name!r}: row index out of [0, {self.n_rows})")
        if self.directory is None:
            return self._arrays[name][index]
        out = np.empty(len(index), dtype=self._dtypes[name])
        order = np.argsort(index, kind="stable")
        ordered = index[order]
        for start in range(0, self.n_rows, READ_ROWS):
            lo, hi = np.searchsorted(ordered, [start, start + READ_ROWS])
            if lo < hi:
                block = self.read(name, start, start + READ_ROWS)
                out[order[lo:hi]] = block[ordered[lo:hi] - start]
        return out

    def frame(self, rows: slice | np.ndarray) -> pd.DataFrame:
        """The node columns at `rows` (a step-1 slice or positions) as a frame indexed by those positions, as
        `DataFrame.iloc` returns them."""
        if isinstance(rows, slice):
            start, stop, step = rows.indices(self.n_rows)
            if step != 1:
                raise ValueError("NodeColumns.iloc: slices take every row (step 1)")
            stop = max(start, stop)
            data = {c: self.read(c, start, stop) for c in self.columns}
            return pd.DataFrame(data, index=pd.RangeIndex(start, stop), copy=False)
        index = np.asarray(rows)
        if index.dtype == bool:
            raise TypeError("NodeColumns.iloc: give row positions (np.flatnonzero of a mask)")
        data = {c: self.take(c, index) for c in self.columns}
        return pd.DataFrame(data, index=pd.Index(index.astype(np.int64)), copy=False)

    @property
    def iloc(self) -> _Rows:
        """`nodes.iloc[start:stop]` / `nodes.iloc[positions]`: the rows as a frame (`frame`)."""
        return _Rows(self)

    def to_frame(self) -> pd.DataFrame:
        """Every row (for a caller that needs the whole table: tests, small fits)."""
        return self.frame(slice(0, self.n_rows))

    def nbytes_in_memory(self) -> int:
        held = sum(a.nbytes for a in self._arrays.values())
        return held + (0 if self._scores is None else self._scores.nbytes)

    # -- internals -----------------------------------------------------------------------------
    def _path(self, name: str) -> Path:
        assert self.directory is not None
        return self.directory / f"{name}.bin"

    def _check(self, name: str) -> None:
        if name not in self._dtypes:
            raise KeyError(f"no column {name!r}; held: {self._order}")


class _Rows:
    """The `.iloc` of `NodeColumns`."""

    def __init__(self, columns: NodeColumns):
        self._columns = columns

    def __getitem__(self, rows: Any) -> pd.DataFrame:
        if isinstance(rows, (int, np.integer)):
            raise TypeError("NodeColumns.iloc: give a slice or an array of row positions")
        return self._columns.frame(rows)

