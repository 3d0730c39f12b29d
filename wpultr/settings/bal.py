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
from typing import ClassVar, Literal

from ..errors import require
from .bal_weighting import InfluenceConfig, WeightConfig

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

    KEY: ClassVar[str] = "bal.click_model"   # dotted key of this section in a run config (names its errors)

    form: Literal["multiplicative", "additive"] = "multiplicative"   # σ(u)·σ(v) or σ(u + v)
    hidden: list[int] = field(default_factory=lambda: [32, 16])      # page-feature branch MLP
    embedding_dim: int = 4                                             # per categorical page feature
    epochs: int = 3                                                    # passes per BAL epoch
    learning_rate: float = 1e-2
    batch_size: int = 4096                                             # rows
    max_rows: int | None = 200_000     # φ_c is fitted on at most this many rows drawn by the epoch's seed (None: all);
    #                                    a few hundred parameters need no more, and the ranker step still sees every row
    document_effects: bool | str = "auto"   # fit φ_c with a per-(query, document) offset δ in u (beyond the paper):
    #                                    r̂ misses part of the relevance the logging ranker saw, and without δ the page
    #                                    term absorbs it (examination falls too steeply with position); auto = on when
    #                                    the logs carry doc_id and most rows' pairs were shown at two positions or more
    document_ridge: float = 0.3        # λ of δ ~ N(0, 1/λ): a pair seen a few times keeps δ near 0

    def __post_init__(self) -> None:
        k = self.KEY
        require(self.form in ("multiplicative", "additive"), f"{k}.form", "one of 'multiplicative', 'additive'",
                self.form)
        require(all(int(h) > 0 for h in self.hidden), f"{k}.hidden", "a list of positive widths", self.hidden)
        require(self.embedding_dim > 0, f"{k}.embedding_dim", "> 0", self.embedding_dim)
        require(self.epochs > 0, f"{k}.epochs", "> 0", self.epochs)
        require(0.0 < self.learning_rate < float("inf"), f"{k}.learning_rate", "a finite number > 0",
                self.learning_rate)
        require(self.batch_size > 0, f"{k}.batch_size", "> 0", self.batch_size)
        require(self.max_rows is None or self.max_rows > 0, f"{k}.max_rows", "> 0 or null", self.max_rows)
        require(isinstance(self.document_effects, bool) or self.document_effects == "auto", f"{k}.document_effects",
                "true, false or 'auto'", self.document_effects)
        require(0.0 < self.document_ridge < float("inf"), f"{k}.document_ridge", "a finite number > 0",
                self.document_ridge)


@dataclass
class BalConfig:
    """BAL's settings (run config key `bal`); whether `features` are declared page features is checked by
    the run config, which knows `data.page_features`."""

    KEY: ClassVar[str] = "bal"

    graph: Literal["discovered", "position", "all_features"] = "discovered"   # PC every epoch; PB-BAL; FB-BAL
    features: list[str] | None = None          # page features BAL sees (None: every declared one)
    estimator_rows: int = 20_000               # rows sampled to fit the influence estimators each epoch
    graph_bootstrap: int = 0                   # resamples behind each epoch graph's edge stabilities
    #                                            (each costs a PC run)
    # LightGBM backbone with train.loss lambdarank: what weights a clicked-over-skipped pair (`bal.pair_weights`):
    # posterior = the chance, under the click model, that the skipped result was skipped for being irrelevant
    # rather than unseen, the click side weighing 1 (the step bench/bal.py's Oracle-skip-GBDT runs); skip = that
    # chance times the click's w; click = the click's ω = w/σ(v) (IPW of the click); both = ω times that chance
    pair_weights: Literal["click", "skip", "posterior", "both"] = "posterior"
    # torch's CPU threads while the influence estimators and the click model fit and run (`bal/cpu_threads`):
    # small networks run faster on few threads on a many-core machine; null = torch's default (all cores)
    cpu_threads: int | None = 4
    click_model: ClickModelConfig = field(default_factory=ClickModelConfig)
    influence: InfluenceConfig = field(default_factory=InfluenceConfig)
    weights: WeightConfig = field(default_factory=WeightConfig)

    def __post_init__(self) -> None:
        require(self.graph in ("discovered", "position", "all_features"), f"{self.KEY}.graph",
                "one of 'discovered', 'position', 'all_features'", self.graph)
        require(self.features is None or (len(self.features) > 0 and len(set(self.features)) == len(self.features)),
                f"{self.KEY}.features", "null (every declared page feature) or a non-empty list of distinct names",
                self.features)
        require(self.estimator_rows > 0, f"{self.KEY}.estimator_rows", "> 0", self.estimator_rows)
        require(self.graph_bootstrap >= 0, f"{self.KEY}.graph_bootstrap", ">= 0", self.graph_bootstrap)
        threads = self.cpu_threads
        require(threads is None or (isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1),
                f"{self.KEY}.cpu_threads", "null (torch's default) or an integer >= 1", self.cpu_threads)
        require(self.pair_weights in ("click", "skip", "posterior", "both"), f"{self.KEY}.pair_weights",
                "one of 'click', 'skip', 'posterior', 'both'", self.pair_weights)
