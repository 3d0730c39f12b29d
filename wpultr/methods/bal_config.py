"""Settings of BAL (run config key `bal`); its variants are values of these keys, not copies of the method.

| variant | `bal.graph`     | `bal.features`   |
|---------|-----------------|------------------|
| BAL     | discovered      | null (all)       |
| PB-BAL  | position        | null             |
| FB-BAL  | all_features    | null             |
| BAL-pos | discovered      | [position]       |
| BAL-MM  | discovered      | [media_type]     |

`discovered` re-runs PC every epoch (run config key `discovery`); `position` fixes the graph
position → click, r̂ → click (no confounding edge, so no reweighting); `all_features` fixes
r̂ → every page feature → click (every feature confounded, case 1).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..propensity.config import InfluenceConfig, WeightConfig

VARIANTS: dict[str, dict[str, object]] = {
    "bal": {"graph": "discovered", "features": None},
    "pb_bal": {"graph": "position", "features": None},
    "fb_bal": {"graph": "all_features", "features": None},
    "bal_pos": {"graph": "discovered", "features": ["position"]},
    "bal_mm": {"graph": "discovered", "features": ["media_type"]},
}


@dataclass
class ClickModelConfig:
    """The click model p(c | parents of c) of Eq. 10 (parameters φ_c)."""

    form: Literal["multiplicative", "additive"] = "multiplicative"   # σ(u)·σ(v) or σ(u + v)
    hidden: list[int] = field(default_factory=lambda: [32, 16])      # page-feature branch MLP
    embedding_dim: int = 4                                             # per categorical page feature
    epochs: int = 3                                                    # passes per BAL epoch
    learning_rate: float = 1e-2
    batch_size: int = 4096                                             # rows
    max_rows: int | None = 200_000     # φ_c is fitted on at most this many rows drawn by the epoch's seed (None: all);
    #                                    a few hundred parameters need no more, and the ranker step still sees every row

    def __post_init__(self) -> None:
        checks = {"form": (self.form in ("multiplicative", "additive"), "one of 'multiplicative', 'additive'"),
                  "hidden": (all(int(h) > 0 for h in self.hidden), "positive widths"),
                  "embedding_dim": (self.embedding_dim > 0, "> 0"), "epochs": (self.epochs > 0, "> 0"),
                  "learning_rate": (self.learning_rate > 0, "> 0"), "batch_size": (self.batch_size > 0, "> 0"),
                  "max_rows": (self.max_rows is None or self.max_rows > 0, "> 0 or null")}
        for key, (ok, expected) in checks.items():
            if not ok:
                raise ValueError(f"click_model.{key}: expected {expected}, got {getattr(self, key)!r}")


@dataclass
class BalConfig:
    graph: Literal["discovered", "position", "all_features"] = "discovered"
    features: list[str] | None = None          # page features BAL sees (None: every declared one)
    estimator_rows: int = 20_000               # rows sampled to fit the influence estimators each epoch
    click_model: ClickModelConfig = field(default_factory=ClickModelConfig)
    influence: InfluenceConfig = field(default_factory=InfluenceConfig)
    weights: WeightConfig = field(default_factory=WeightConfig)
