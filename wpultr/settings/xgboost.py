"""Settings of XGBoost's unbiased LambdaMART (`train.method: xgboost_unbiased`, run config key `xgboost`), torch- and
xgboost-free so loading a config stays fast and works without the optional extra.

The boosting knobs a user of `xgboost.XGBRanker` would set; a knob left null takes XGBoost's own default (recorded in
the run's `train/bias.json` as the trained booster reports it). `early_stopping` picks what stops the boosting:
`annotations` — `train.select_metric` on the run's validation annotations, as every other method selects;
`clicks` — the same metric on the clicks of a held-out share of the training sessions (what a user without
annotations would watch); `none` — exactly `rounds` rounds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from ..errors import require

OBJECTIVES = ("rank:ndcg", "rank:pairwise")
PAIR_METHODS = ("topk", "mean")
EARLY_STOPPING = ("annotations", "clicks", "none")


def _int_at_least(value: object, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class XGBoostConfig:
    """XGBRanker's rounds, tree shape, lambdarank objective and position debiasing, and its early stopping."""

    KEY: ClassVar[str] = "xgboost"       # dotted key of this section in a run config (names its errors)

    rounds: int = 500                    # n_estimators: the most boosting rounds
    learning_rate: float = 0.1
    max_depth: int = 6
    objective: Literal["rank:ndcg", "rank:pairwise"] = "rank:ndcg"
    lambdarank_pair_method: Literal["topk", "mean"] = "topk"
    lambdarank_num_pair_per_sample: int | None = None   # topk: the truncation (positions debiased); null: XGBoost's
    lambdarank_bias_norm: float | None = None           # p of the L_p norm on the position biases; null: XGBoost's
    early_stopping: Literal["annotations", "clicks", "none"] = "annotations"
    early_stopping_rounds: int = 50      # stop when select_metric has not improved for this many rounds
    eval_every: int = 10                 # rounds between validation checkpoints (the history's entries)
    valid_sessions_fraction: float = 0.1   # early_stopping clicks: the share of sessions held out
    num_threads: int = 0                 # 0 = XGBoost's default (all cores)

    def __post_init__(self) -> None:
        k = self.KEY
        for name in ("rounds", "max_depth", "early_stopping_rounds", "eval_every"):
            require(_int_at_least(getattr(self, name), 1), f"{k}.{name}", "an integer >= 1", getattr(self, name))
        require(_number(self.learning_rate) and 0 < self.learning_rate <= 1, f"{k}.learning_rate",
                "a number in (0, 1]", self.learning_rate)
        require(self.objective in OBJECTIVES, f"{k}.objective", f"one of {', '.join(map(repr, OBJECTIVES))}",
                self.objective)
        require(self.lambdarank_pair_method in PAIR_METHODS, f"{k}.lambdarank_pair_method",
                f"one of {', '.join(map(repr, PAIR_METHODS))}", self.lambdarank_pair_method)
        require(self.lambdarank_num_pair_per_sample is None or _int_at_least(self.lambdarank_num_pair_per_sample, 1),
                f"{k}.lambdarank_num_pair_per_sample", "null or an integer >= 1", self.lambdarank_num_pair_per_sample)
        require(self.lambdarank_bias_norm is None or (_number(self.lambdarank_bias_norm)
                                                      and self.lambdarank_bias_norm > 0),
                f"{k}.lambdarank_bias_norm", "null or a finite number > 0", self.lambdarank_bias_norm)
        require(self.early_stopping in EARLY_STOPPING, f"{k}.early_stopping",
                f"one of {', '.join(map(repr, EARLY_STOPPING))}", self.early_stopping)
        require(_number(self.valid_sessions_fraction) and 0 < self.valid_sessions_fraction < 1,
                f"{k}.valid_sessions_fraction", "a number in (0, 1)", self.valid_sessions_fraction)
        require(_int_at_least(self.num_threads, 0), f"{k}.num_threads", "an integer >= 0 (0 = all cores)",
                self.num_threads)
