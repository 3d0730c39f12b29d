"""A LightGBM booster as a Ranker (kind "lightgbm"), saved as LightGBM's own model text — never a pickle.

`prepare` reads the dense `features` column and `forward` returns the booster's scores as a float32
tensor. The model text is held in a uint8 buffer, so the generic `save`/`load_ranker` path
(config.json + model.safetensors) round-trips it unchanged; `save` also writes the same text to
`model.txt` for people and for LightGBM's own tools, and `LightGBMRanker.load` reads that file.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
import torch

from .base import CONFIG_FILE, RANKER_FORMAT, Arg, Inputs, Ranker
from .mlp import FEATURE_INPUT, MAX_FEATURES, feature_inputs

MODEL_TEXT_FILE = "model.txt"


class LightGBMRanker(Ranker):
    """A LightGBM booster as a Ranker: scores = booster.predict(features)."""

    kind = "lightgbm"
    ARGS = {"n_features": Arg("int", 1, MAX_FEATURES), "model_bytes": Arg("int", 1, 1 << 31),
            "position_aware": Arg("bool")}   # checked when a saved ranker is loaded (rankers.base)

    def check_loaded(self, where: str) -> None:
        """The loaded model text must be a LightGBM model over `n_features` features (ExportError otherwise)."""
        from ..errors import ExportError
        try:
            found = self.booster.num_feature()
        except Exception as error:  # UnicodeDecodeError, lightgbm's own LightGBMError
            raise ExportError(f"{where}: model_text is not a LightGBM model ({type(error).__name__}: "
                              f"{str(error)[:120]})") from None
        if found != self.n_features:
            raise ExportError(f"{where}: the LightGBM model reads {found} features, config n_features is "
                              f"{self.n_features}")

    def __init__(self, n_features: int, model_bytes: int = 0, position_aware: bool = False):
        super().__init__()
        self.n_features, self.position_aware = int(n_features), bool(position_aware)
        self.register_buffer("model_text", torch.zeros(int(model_bytes), dtype=torch.uint8))
        self._booster: Any = None

    # ------------------------------------------------------------------ construction and state
    @classmethod
    def from_model_string(cls, model: str, n_features: int, position_aware: bool = False) -> "LightGBMRanker":
        data = model.encode("utf-8")
        ranker = cls(n_features, len(data), position_aware)
        ranker.model_text.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        return ranker

    def model_string(self) -> str:
        return bytes(self.model_text.cpu().numpy().tobytes()).decode("utf-8")

    @property
    def booster(self) -> Any:
        """The LightGBM booster, parsed from the model text on first use (and after a state load)."""
        if self._booster is None:
            if self.model_text.numel() == 0:
                raise ValueError("this LightGBM ranker holds no model (model_bytes = 0); train or load one first")
            import lightgbm as lgb
            self._booster = lgb.Booster(model_str=self.model_string())
        return self._booster

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._booster = None                      # the model text changed: parse again on next use

    def init_args(self) -> dict[str, Any]:
        return {"n_features": self.n_features, "model_bytes": int(self.model_text.numel()),
                "position_aware": self.position_aware}

    @property
    def device(self) -> torch.device:             # no parameters: the buffer says where the module lives
        return self.model_text.device

    # ------------------------------------------------------------------ the Ranker protocol
    def prepare(self, frame: pd.DataFrame) -> Inputs:
        return feature_inputs(frame, self.n_features)

    def forward(self, inputs: Inputs) -> torch.Tensor:
        x = inputs[FEATURE_INPUT]
        if x.shape[0] == 0:
            return torch.zeros(0, dtype=torch.float32, device=x.device)
        scores = self.booster.predict(x.detach().cpu().numpy().astype(np.float64))
        return torch.as_tensor(np.asarray(scores, dtype=np.float32), device=x.device)

    def save(self, directory: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        """config.json and model.safetensors (the generic format) plus model.txt, the booster's own text."""
        directory = super().save(directory, extra)
        (directory / MODEL_TEXT_FILE).write_text(self.model_string())
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "LightGBMRanker":
        """Read a saved LightGBM ranker from config.json and model.txt (no safetensors needed)."""
        directory = Path(directory)
        config = json.loads((directory / CONFIG_FILE).read_text())
        if config.get("format") != RANKER_FORMAT or config.get("kind") != cls.kind:
            raise ValueError(f"{directory / CONFIG_FILE}: not a saved {cls.kind} ranker "
                             f"(format {config.get('format')!r}, kind {config.get('kind')!r})")
        args = config["args"]
        return cls.from_model_string((directory / MODEL_TEXT_FILE).read_text(), args["n_features"],
                                     args.get("position_aware", False)).eval()
