"""A LightGBM booster as a Ranker (kind "lightgbm"), saved as LightGBM's own model text — never a pickle.

The model text is held as a `booster.BoosterRanker`'s bytes (round-tripped by the generic save/load and written to
`model.txt` for people and LightGBM's own tools); `LightGBMRanker.load` reads that file alone.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ExportError
from .base import CONFIG_FILE, RANKER_FORMAT, Arg
from .booster import BoosterRanker
from .mlp import MAX_FEATURES

MODEL_TEXT_FILE = "model.txt"


class LightGBMRanker(BoosterRanker):
    """A LightGBM booster as a Ranker: scores = booster.predict(features)."""

    kind = "lightgbm"
    BUFFER, OWN_FILE, LIBRARY = "model_text", MODEL_TEXT_FILE, "LightGBM"
    ARGS = {"n_features": Arg("int", 1, MAX_FEATURES), "model_bytes": Arg("int", 1, 1 << 31),
            "position_aware": Arg("bool")}   # checked when a saved ranker is loaded (rankers.base)

    def __init__(self, n_features: int, model_bytes: int = 0, position_aware: bool = False):
        super().__init__(n_features, model_bytes)
        self.position_aware = bool(position_aware)

    @classmethod
    def from_model_string(cls, model: str, n_features: int, position_aware: bool = False) -> LightGBMRanker:
        data = model.encode("utf-8")
        ranker = cls(n_features, len(data), position_aware)
        ranker._hold(data)
        return ranker

    def model_string(self) -> str:
        return self.model_bytes().decode("utf-8")

    def init_args(self) -> dict[str, Any]:
        return {**super().init_args(), "position_aware": self.position_aware}

    def _parse(self, data: bytes, where: str) -> Any:
        import lightgbm as lgb  # lazy: +2.2 s, only to parse a booster; a neural run imports this registry too
        try:
            return lgb.Booster(model_str=data.decode("utf-8"))
        except Exception as error:  # UnicodeDecodeError, lightgbm's own LightGBMError
            raise ExportError(f"{where}: model_text is not a LightGBM model ({type(error).__name__}: "
                              f"{str(error)[:120]})") from None

    def _n_features_of(self, booster: Any) -> int:
        return booster.num_feature()

    def _predict(self, booster: Any, x: np.ndarray) -> np.ndarray:
        return booster.predict(x.astype(np.float64))

    @classmethod
    def load(cls, directory: str | Path) -> LightGBMRanker:
        """Read a saved LightGBM ranker from config.json and model.txt (no safetensors needed)."""
        directory = Path(directory)
        config = json.loads((directory / CONFIG_FILE).read_text())
        if config.get("format") != RANKER_FORMAT or config.get("kind") != cls.kind:
            raise ValueError(f"{directory / CONFIG_FILE}: not a saved {cls.kind} ranker "
                             f"(format {config.get('format')!r}, kind {config.get('kind')!r})")
        args = config["args"]
        return cls.from_model_string((directory / MODEL_TEXT_FILE).read_text(), args["n_features"],
                                     args.get("position_aware", False)).eval()
