"""An XGBoost booster as a Ranker (kind "xgboost"), saved as XGBoost's own JSON model — never a pickle.

The JSON model (`Booster.save_raw("json")`: trees, objective and its learned position biases, no Python objects) is
held as a `booster.BoosterRanker`'s bytes (round-tripped and checked by the generic save/load, and written to
`model.json`, which XGBoost's own tools load). xgboost is an optional extra, imported on first use.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ExportError
from ..settings.methods import install_hint
from .base import Arg
from .booster import BoosterRanker
from .mlp import MAX_FEATURES

MODEL_JSON_FILE = "model.json"
MAX_MODEL_BYTES = 1 << 31


def import_xgboost(error: type[Exception], where: str) -> Any:
    """The xgboost module; `error` (a WpultrError kind) naming `where` and the extra to install when it is missing."""
    try:
        import xgboost  # lazy: optional package (the xgboost extra), +9 s
    except ImportError:
        raise error(f"{where}: needs the optional package xgboost, which is not installed: "
                    f"{install_hint('xgboost')}") from None
    return xgboost


def booster_from_json(data: bytes, where: str) -> Any:
    """An xgboost Booster parsed from its JSON model bytes; ExportError naming `where` when they are not one."""
    xgb = import_xgboost(ExportError, where)
    if not data.lstrip()[:1] == b"{":
        raise ExportError(f"{where}: model_json is not an XGBoost JSON model (it does not start with '{{')")
    booster = xgb.Booster()
    try:
        booster.load_model(bytearray(data))
    except Exception as error:  # xgboost.core.XGBoostError, or what a damaged model makes its parser raise
        detail = str(error).strip().splitlines()[0][:120] if str(error).strip() else "no detail"
        raise ExportError(f"{where}: model_json is not an XGBoost model ({type(error).__name__}: {detail})") from None
    return booster


class XGBoostRanker(BoosterRanker):
    """An XGBoost booster as a Ranker: scores = booster.inplace_predict(features)."""

    kind = "xgboost"
    BUFFER, OWN_FILE, LIBRARY = "model_json", MODEL_JSON_FILE, "XGBoost"
    ARGS = {"n_features": Arg("int", 1, MAX_FEATURES), "model_bytes": Arg("int", 1, MAX_MODEL_BYTES)}

    @classmethod
    def from_booster(cls, booster: Any, n_features: int) -> XGBoostRanker:
        """The ranker holding `booster`'s JSON model."""
        data = bytes(booster.save_raw(raw_format="json"))
        ranker = cls(n_features, len(data))
        ranker._hold(data)
        return ranker

    def _parse(self, data: bytes, where: str) -> Any:
        return booster_from_json(data, where)

    def _n_features_of(self, booster: Any) -> int:
        return booster.num_features()

    def _predict(self, booster: Any, x: np.ndarray) -> np.ndarray:
        return booster.inplace_predict(np.ascontiguousarray(x, dtype=np.float32))
