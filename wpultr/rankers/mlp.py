"""The dense-feature ranker: an MLP over each result's feature vector (feature-vector logs, CPU-scale runs).

Inputs are standardised with the mean and standard deviation of the training rows, kept as buffers
so a saved ranker scores new tables exactly as it scored during training.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import torch

from ..errors import ExportError
from ..schema import FEATURES, SchemaError
from ..settings.ranker import MAX_LAYERS, MAX_WIDTH  # the bounds a run's config is checked against at load, too
from .base import Arg, Inputs, Ranker

FEATURE_INPUT = "features"
MAX_FEATURES = 1_000_000      # input width of a dense-feature ranker


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int = 1, dropout: float = 0.0) -> torch.nn.Sequential:
    """Linear-ELU(-dropout) blocks of widths `hidden`, then a linear output (BAL §4.1 head: 512-256-128)."""
    layers: list[torch.nn.Module] = []
    width = in_dim
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ELU()]
        if dropout > 0:
            layers.append(torch.nn.Dropout(dropout))
        width = h
    layers.append(torch.nn.Linear(width, out_dim))
    return torch.nn.Sequential(*layers)


def feature_matrix(frame: pd.DataFrame, table: str = "table") -> np.ndarray:
    """The `features` column as a float32 matrix; every row must have the same length."""
    if FEATURES not in frame.columns:
        raise SchemaError(f"{table}: the mlp ranker needs a dense {FEATURES!r} column (or lexical features "
                          f"from token ids); present: {list(frame.columns)}")
    column = frame[FEATURES]
    if len(column) == 0:
        return np.zeros((0, 0), dtype=np.float32)
    if isinstance(column.dtype, pd.ArrowDtype) and pa.types.is_list(column.dtype.pyarrow_dtype):
        matrix = _arrow_feature_matrix(pa.array(column.array), table)
    else:
        values = column.to_numpy()
        lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
        _check_lengths(lengths, table)
        matrix = np.stack([np.asarray(v, dtype=np.float32) for v in values])
    bad = ~np.isfinite(matrix)
    if bad.any():
        row, col = (int(i[0]) for i in np.nonzero(bad))
        raise SchemaError(f"{table}: column {FEATURES!r} row {row} value {col} is {matrix[row, col]}, expected finite")
    return matrix


def _check_lengths(lengths: np.ndarray, table: str) -> None:
    """Every row holds as many values as row 0 (SchemaError naming the first row that does not)."""
    if (lengths != lengths[0]).any():
        row = int(np.flatnonzero(lengths != lengths[0])[0])
        raise SchemaError(f"{table}: column {FEATURES!r} row {row} has {lengths[row]} values, row 0 has {lengths[0]}")


def _arrow_feature_matrix(column: pa.Array | pa.ChunkedArray, table: str) -> np.ndarray:
    """An Arrow list column as one (n, d) float32 matrix, read from the values buffers: no object per row."""
    column = column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column])
    if column.null_count:
        row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise SchemaError(f"{table}: column {FEATURES!r} row {row} is null, expected {FEATURES!r} values")
    lengths = pc.list_value_length(column).to_numpy()
    _check_lengths(lengths, table)
    values = [chunk.flatten().to_numpy(zero_copy_only=False) for chunk in column.chunks]
    flat = np.concatenate(values).astype(np.float32, copy=False) if values else np.zeros(0, np.float32)
    return flat.reshape(len(lengths), int(lengths[0]))


def feature_inputs(frame: pd.DataFrame, n_features: int) -> Inputs:
    """The ranker inputs of a feature-vector ranker: the `features` matrix, checked against its trained width."""
    matrix = feature_matrix(frame)
    if matrix.shape[0] and matrix.shape[1] != n_features:
        raise SchemaError(f"column {FEATURES!r} has {matrix.shape[1]} values per row; this ranker was "
                          f"trained on {n_features}")
    return {FEATURE_INPUT: torch.from_numpy(matrix.reshape(len(frame), n_features))}


class MLPRanker(Ranker):
    """score = MLP(standardise(features))."""

    kind = "mlp"
    ARGS = {"n_features": Arg("int", 1, MAX_FEATURES),
            "hidden": Arg("int_list", 1, MAX_WIDTH, max_items=MAX_LAYERS),
            "dropout": Arg("float", 0.0, 1.0, high_open=True)}

    def __init__(self, n_features: int, hidden: Sequence[int] = (512, 256, 128), dropout: float = 0.1):
        super().__init__()
        self.n_features, self.hidden, self.dropout = int(n_features), [int(h) for h in hidden], float(dropout)
        self.register_buffer("mean", torch.zeros(self.n_features))
        self.register_buffer("scale", torch.ones(self.n_features))
        self.net = mlp(self.n_features, self.hidden, 1, self.dropout)

    @classmethod
    def for_table(cls, frame: pd.DataFrame, hidden: Sequence[int], dropout: float) -> MLPRanker:
        """A ranker sized for `frame`'s feature vectors, standardised with its statistics."""
        matrix = feature_matrix(frame, "sessions")
        ranker = cls(matrix.shape[1], hidden, dropout)
        std = matrix.std(axis=0)
        ranker.mean.copy_(torch.from_numpy(matrix.mean(axis=0)))
        ranker.scale.copy_(torch.from_numpy(np.where(std > 1e-8, std, 1.0).astype(np.float32)))
        return ranker

    def init_args(self) -> dict[str, Any]:
        return {"n_features": self.n_features, "hidden": self.hidden, "dropout": self.dropout}

    def check_loaded(self, where: str) -> None:
        """The saved standardisation must be usable: finite means, finite positive scales."""
        for name, tensor, ok in (("mean", self.mean, torch.isfinite(self.mean)),
                                 ("scale", self.scale, torch.isfinite(self.scale) & (self.scale > 0))):
            if not bool(ok.all()):
                i = int((~ok).nonzero()[0, 0])
                raise ExportError(f"{where}: tensor {name!r} value {i} is {float(tensor[i])}, expected a finite "
                                  f"number{' > 0' if name == 'scale' else ''}")

    def prepare(self, frame: pd.DataFrame) -> Inputs:
        return feature_inputs(frame, self.n_features)

    def forward(self, inputs: Inputs) -> torch.Tensor:
        x = (inputs[FEATURE_INPUT] - self.mean) / self.scale
        return self.net(x).squeeze(-1)
