"""The protocol every learning algorithm follows, so that each is run, scored and reported the same way.

A method is an object with a `name` and `fit(train, valid, config) -> FitResult`: `train` is the
sessions table (one row per shown result), `valid` the validation annotations (or None), and the
result holds the trained ranker, a per-epoch history and what the method learned about bias
(propensities, graphs, weight summaries) as JSON-able values.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from ..rankers.base import Ranker, score_frame
from ..settings.methods import METHODS, get_method  # the registry lives apart (torch-free) and is re-exported

__all__ = ["FitResult", "Method", "METHODS", "get_method", "score"]

if TYPE_CHECKING:
    from ..config import RunConfig


@dataclass
class FitResult:
    ranker: Ranker
    history: list[dict[str, Any]] = field(default_factory=list)
    bias: dict[str, Any] = field(default_factory=dict)
    graphs: list[Any] = field(default_factory=list)   # per-epoch DiscoveredGraph (methods that learn one)


class Method(Protocol):
    name: str

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> FitResult: ...


def score(ranker: Ranker, frame: pd.DataFrame, batch_size: int = 1024) -> np.ndarray:
    """Scores of every row of `frame` with `ranker` (eval mode, batched)."""
    return score_frame(ranker, frame, batch_size)
