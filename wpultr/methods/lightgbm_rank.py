"""LightGBM anchors on the dense `features`: plain lambdarank on clicks, and LightGBM's position-aware lambdarank.

* `LightGBMLambdaRank`: objective lambdarank, clicks as 0/1 labels, one query group per session.
* `LightGBMPositionLambdaRank`: the same with each row's logged position given to the Dataset
  (`position=`), so LightGBM's unbiased lambdarank learns a position bias factor per position jointly
  with the trees (its implementation of Unbiased LambdaMART-style debiasing), regularised by
  `lambdarank_position_bias_regularization` (`baselines.lightgbm_position_bias_regularization`).

Both are external anchors: no Trainer, no neural ranker. Model selection follows the Trainer's rule:
the validation annotations are scored at `baselines.lightgbm_eval_points` evenly spaced boosting
rounds and the round with the best `train.select_metric` is kept (the last round without validation).

The trained booster is returned as a `wpultr.rankers.lightgbm.LightGBMRanker`.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..metrics import evaluate as evaluate_scores
from ..rankers.lightgbm import LightGBMRanker
from ..rankers.mlp import feature_matrix
from .base import FitResult
from .position_propensity import setting
from .training import SessionLists

if TYPE_CHECKING:
    from ..config import RunConfig

# ---------------------------------------------------------------------------------------------
class _PositionBiasLog:
    """Collects the position bias factors LightGBM's position-aware lambdarank prints at debug verbosity.

    LightGBM keeps the factors inside its objective (one additive score offset per position, updated each
    round) and only logs them; this logger reads the last table logged, and the previous logger (or
    LightGBM's default) is put back afterwards.
    """

    HEADER = "bias_factor"

    def __init__(self) -> None:
        self.factors: dict[int, float] = {}
        self._reading = False

    def info(self, message: str) -> None:
        text = message.replace("[LightGBM] [Debug]", "").strip()
        if self.HEADER in text:
            self.factors, self._reading = {}, True
            return
        parts = text.split()
        if self._reading and len(parts) == 2:
            try:
                self.factors[int(parts[0])] = float(parts[1])
                return
            except ValueError:
                pass
        self._reading = False

    def warning(self, message: str) -> None:
        self._reading = False

    def __enter__(self) -> "_PositionBiasLog":
        import lightgbm.basic as basic
        self._previous = (getattr(basic, "_LOGGER", None), getattr(basic, "_INFO_METHOD_NAME", "info"),
                          getattr(basic, "_WARNING_METHOD_NAME", "warning"))
        basic.register_logger(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        import lightgbm.basic as basic
        logger, info, warning = self._previous
        if logger is not None:
            basic.register_logger(logger, info, warning)


def _positive_int(config: "RunConfig", name: str) -> int:
    value = setting(config, name)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        from ..config import ConfigError
        raise ConfigError(f"baselines.{name}: expected an integer >= 1, got {value!r}")
    return int(value)


def _threads(config: "RunConfig") -> int:
    value = setting(config, "lightgbm_num_threads")
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        from ..config import ConfigError
        raise ConfigError(f"baselines.lightgbm_num_threads: expected an integer >= 0 (0 = all cores), got {value!r}")
    return int(value)


class LightGBMLambdaRank:
    """Lambdarank on clicks (one group per session), a LightGBM anchor on the dense features."""

    name = "lightgbm_lambdarank"
    position_aware = False

    def params(self, config: "RunConfig") -> dict[str, Any]:
        return {
            "objective": "lambdarank", "metric": "None", "verbosity": -1, "seed": config.seed,
            "deterministic": True, "force_row_wise": True,
            "learning_rate": float(setting(config, "lightgbm_learning_rate")),
            "num_leaves": _positive_int(config, "lightgbm_num_leaves"),
            "min_data_in_leaf": _positive_int(config, "lightgbm_min_data_in_leaf"),
            "num_threads": _threads(config),
        }

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: "RunConfig") -> FitResult:
        import lightgbm as lgb

        lists = SessionLists.from_frame(train)
        order = lists.rows[lists.mask]                          # session by session, in position order
        features = feature_matrix(train, "sessions")
        groups = lists.mask.sum(axis=1)
        dataset = lgb.Dataset(features[order], label=lists.clicks[lists.mask].astype(np.float64),
                              group=groups, free_raw_data=True,
                              position=lists.positions[lists.mask] if self.position_aware else None)
        params = self.params(config)
        rounds = _positive_int(config, "lightgbm_rounds")
        points = min(_positive_int(config, "lightgbm_eval_points"), rounds)
        checkpoints = sorted({int(round(rounds * (i + 1) / points)) for i in range(points)})
        valid = valid.reset_index(drop=True) if valid is not None and len(valid) else None
        valid_x = feature_matrix(valid, "validation annotations").astype(np.float64) if valid is not None else None
        history: list[dict[str, Any]] = []
        clock = {"train": 0.0, "last": time.perf_counter()}

        def checkpoint(env: Any) -> None:                       # a lightgbm callback, after each round
            done = env.iteration + 1
            now = time.perf_counter()
            clock["train"] += now - clock["last"]
            if done in checkpoints:
                metrics = None
                if valid_x is not None:
                    scored = valid.assign(score=env.model.predict(valid_x, num_iteration=done))
                    metrics = evaluate_scores(scored, "score", ks=tuple(config.evaluation.ks))["all"]
                history.append({"epoch": len(history), "rounds": done, "seconds": round(clock["train"], 3),
                                "train": {}, "valid": metrics})
                clock["train"] = 0.0
            clock["last"] = time.perf_counter()

        if self.position_aware:
            with _PositionBiasLog() as log:                     # debug verbosity prints the bias factors
                booster = lgb.train({**params, "verbosity": 2}, dataset, num_boost_round=rounds,
                                    callbacks=[checkpoint])
            factors = log.factors
        else:
            booster = lgb.train(params, dataset, num_boost_round=rounds, callbacks=[checkpoint])
        metric = config.train.select_metric
        scored = [(h["valid"][metric], -h["rounds"], h) for h in history if h["valid"] and metric in h["valid"]]
        best = max(scored, key=lambda t: (t[0], t[1]))[2] if scored else history[-1]
        model = booster.model_to_string(num_iteration=best["rounds"])
        ranker = LightGBMRanker.from_model_string(model, features.shape[1], self.position_aware).eval()
        bias: dict[str, Any] = {"method": self.name, "loss": "lambdarank", "best_epoch": best["epoch"],
                                "best_rounds": best["rounds"], "rounds": rounds,
                                "params": {k: v for k, v in params.items() if k not in ("verbosity",)}}
        if self.position_aware:
            # keyed by the logged position; additive score offsets after the last round, not probabilities
            bias["position_bias_factors"] = {str(k): v for k, v in sorted(factors.items())}
        return FitResult(ranker, history, bias)


class LightGBMPositionLambdaRank(LightGBMLambdaRank):
    """LightGBM's position-aware (unbiased) lambdarank: `position` on the Dataset."""

    name = "lightgbm_position"
    position_aware = True

    def params(self, config: "RunConfig") -> dict[str, Any]:
        out = super().params(config)
        out["lambdarank_position_bias_regularization"] = float(
            setting(config, "lightgbm_position_bias_regularization"))
        return out
