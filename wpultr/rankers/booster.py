"""What the gradient-boosted rankers share: a booster's own model bytes held in a uint8 buffer.

The bytes (LightGBM's model text, XGBoost's JSON model: trees and parameters, no Python objects) round-trip
through the generic `save`/`load_ranker` path (config.json + model.safetensors) unchanged and are checked like
every ranker's weights; `save` also writes them to the library's own model file, for people and for the library's
own tools. A subclass says where the bytes live and how its library parses them and predicts.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch

from ..errors import ExportError
from .base import Inputs, Ranker
from .mlp import FEATURE_INPUT, feature_inputs


class BoosterRanker(Ranker):
    """A booster as a Ranker over the dense `features` column: scores = the booster's predictions."""

    BUFFER: ClassVar[str]        # the state-dict key of the model bytes (kept as saved exports name it)
    OWN_FILE: ClassVar[str]      # the library's own model file written beside the generic ones
    LIBRARY: ClassVar[str]       # the library's name, in messages

    def __init__(self, n_features: int, model_bytes: int = 0):
        super().__init__()
        self.n_features = int(n_features)
        self.register_buffer(self.BUFFER, torch.zeros(int(model_bytes), dtype=torch.uint8))
        self._booster: Any = None

    # ------------------------------------------------------------------ what a subclass provides
    def _parse(self, data: bytes, where: str) -> Any:
        """The library's booster parsed from `data`; ExportError naming `where` when it is not one."""
        raise NotImplementedError

    def _n_features_of(self, booster: Any) -> int:
        raise NotImplementedError

    def _predict(self, booster: Any, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # ------------------------------------------------------------------ the model bytes
    def _hold(self, data: bytes) -> None:
        """Hold `data` as the model (the buffer resized to it)."""
        self.register_buffer(self.BUFFER, torch.frombuffer(bytearray(data), dtype=torch.uint8).clone())
        self._booster = None

    def model_bytes(self) -> bytes:
        return bytes(getattr(self, self.BUFFER).cpu().numpy().tobytes())

    @property
    def booster(self) -> Any:
        """The booster, parsed from the model bytes on first use (and after a state load)."""
        if self._booster is None:
            if getattr(self, self.BUFFER).numel() == 0:
                raise ValueError(f"this {self.LIBRARY} ranker holds no model (model_bytes = 0); "
                                 f"train or load one first")
            self._booster = self._parse(self.model_bytes(), f"the {self.LIBRARY} ranker's {self.BUFFER}")
        return self._booster

    def check_loaded(self, where: str) -> None:
        """The loaded bytes must be a model of this library over `n_features` features (ExportError otherwise)."""
        self._booster = self._parse(self.model_bytes(), where)
        found = self._n_features_of(self._booster)
        if found != self.n_features:
            raise ExportError(f"{where}: the {self.LIBRARY} model reads {found} features, config n_features is "
                              f"{self.n_features}")

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._booster = None                      # the model bytes changed: parse again on next use

    def init_args(self) -> dict[str, Any]:
        return {"n_features": self.n_features, "model_bytes": int(getattr(self, self.BUFFER).numel())}

    @property
    def device(self) -> torch.device:             # no parameters: the buffer says where the module lives
        return getattr(self, self.BUFFER).device

    # ------------------------------------------------------------------ the Ranker protocol
    def prepare(self, frame: pd.DataFrame) -> Inputs:
        return feature_inputs(frame, self.n_features)

    def forward(self, inputs: Inputs) -> torch.Tensor:
        x = inputs[FEATURE_INPUT]
        if x.shape[0] == 0:
            return torch.zeros(0, dtype=torch.float32, device=x.device)
        scores = self._predict(self.booster, x.detach().cpu().numpy())
        return torch.as_tensor(np.asarray(scores, dtype=np.float32), device=x.device)

    def save(self, directory: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        """config.json and model.safetensors (the generic format) plus the library's own model file."""
        directory = super().save(directory, extra)
        (directory / self.OWN_FILE).write_bytes(self.model_bytes())
        return directory
