"""Where `TrainingRows.build` reads the sessions' columns from: a frame in memory, or a sessions directory's Parquet
partitions read a few columns at a time.

The build reads the columns each of its steps needs (the ids to draw discovery's rows, the query and document
ids to code (query, document) pairs, then one page feature at a time to fit, check and encode it) and lets them
go before the next step, so a log larger than memory (`PartitionColumns`) costs the build one step's columns,
never the whole column table. A frame in memory (`FrameColumns`) serves the same steps with its own arrays, so
both build the same rows.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import pandas as pd

from ..io.parquet import column_table, row_count
from ..schema import DOC_ID, QUERY_ID


class ColumnSource(Protocol):
    """Per-row columns of the training sessions, in training order."""

    @property
    def columns(self) -> list[str]: ...

    @property
    def n_rows(self) -> int: ...

    def load(self, columns: Sequence[str]) -> pd.DataFrame:
        """The named columns (each of `columns` that the source holds) as a frame with a RangeIndex."""
        ...


class FrameColumns:
    """The columns of a frame in memory (never copied: a load is a frame over the same arrays)."""

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame.reset_index(drop=True) if not isinstance(frame.index, pd.RangeIndex) \
            or frame.index.start != 0 or frame.index.step != 1 else frame

    @property
    def columns(self) -> list[str]:
        return [str(c) for c in self.frame.columns]

    @property
    def n_rows(self) -> int:
        return len(self.frame)

    def load(self, columns: Sequence[str]) -> pd.DataFrame:
        held = set(self.frame.columns)
        out = pd.DataFrame({c: self.frame[c].to_numpy() for c in dict.fromkeys(columns) if c in held},
                           index=self.frame.index, copy=False)
        out.attrs = self.frame.attrs          # the id text (`schema.IdText`) of coded ids, shared
        return out


class PartitionColumns:
    """The columns of a sessions directory's Parquet partitions (`io.parquet.column_table`: text ids as
    int32 codes), read one load at a time; `overrides` replace a column's values (the identifiability pre-flight's
    merged bias factors)."""

    def __init__(self, paths: Sequence[str], columns: Sequence[str], overrides: dict[str, np.ndarray] | None = None):
        self.paths = list(paths)
        self._columns = list(columns)
        self._n_rows = row_count(self.paths)
        self.overrides = dict(overrides or {})

    @property
    def columns(self) -> list[str]:
        return list(self._columns)

    @property
    def n_rows(self) -> int:
        return self._n_rows

    def load(self, columns: Sequence[str]) -> pd.DataFrame:
        held = set(self._columns)
        wanted = [c for c in dict.fromkeys(columns) if c in held]
        read = [c for c in wanted if c not in self.overrides]
        frame = (column_table(self.paths, read, codes=(QUERY_ID, DOC_ID)) if read
                 else pd.DataFrame(index=pd.RangeIndex(self._n_rows)))
        for name in wanted:
            if name in self.overrides:
                frame[name] = self.overrides[name]
        return frame[wanted] if list(frame.columns) != wanted else frame

    def prepared(self, prepare: Callable[[pd.DataFrame], pd.DataFrame], columns: Sequence[str]) -> PartitionColumns:
        """This source after `prepare` (the train stage's identifiability pre-flight) ran on its `columns`: the
        columns `prepare` changed (a merge of bias-factor levels) are held in memory and read from there on."""
        frame = self.load(columns)
        out = prepare(frame)
        if len(out) != len(frame):
            raise ValueError(f"prepare changed the number of rows ({len(frame)} -> {len(out)}); the partitions "
                             "cannot follow")
        changed = {c: out[c].to_numpy() for c in frame.columns if out is not frame and not _same(out[c], frame[c])}
        return PartitionColumns(self.paths, self._columns, {**self.overrides, **changed})


def _same(a: pd.Series, b: pd.Series) -> bool:
    x, y = a.to_numpy(), b.to_numpy()
    return x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")


def as_column_source(train: pd.DataFrame | ColumnSource) -> ColumnSource:
    return FrameColumns(train) if isinstance(train, pd.DataFrame) else train
