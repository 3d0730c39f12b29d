"""XGBoost's unbiased LambdaMART on the click logs (`train.method: xgboost_unbiased`): the booster a user would pick
instead of wpultr, set up as its documentation says, then exported and scored like the other boosters.

`xgboost.XGBRanker(objective="rank:ndcg" | "rank:pairwise", lambdarank_unbiased=True)` learns, jointly with the
trees, a position bias ratio for clicked (t+) and unclicked (t-) results per position (Hu et al. 2019, Unbiased
LambdaMART), regularised by the L_p norm `lambdarank_bias_norm`. XGBoost takes no position column: its unbiased
objective reads a result's position from its index within its query group ("since we assume label is sorted, this
reduces to idx_low, which represents the position on the input list", src/objective/lambdarank_obj.h, xgboost 2.0 to
3.2; the tutorial's click demo sorts each group by position first, `xgboost.testing.data.sort_ltr_samples`), and it
requires the groups themselves in order (`qid` non-decreasing). So every session is one group (clicks are per
session), the groups in session-id order and each group's rows in logged-position order (`SessionLists`): the same
booster whatever the order of the input rows. A session whose logged positions are not 1..n (a result dropped at
ingest) gives its later results XGBoost positions one up from the logged ones; their count is recorded. With
`lambdarank_pair_method: topk` the biases of the first `lambdarank_num_pair_per_sample` positions are learned, with
`mean` those of the first 32 (XGBoost's bound).

Clicks are the labels. Boosting stops as `xgboost.early_stopping` says (settings/xgboost.py): every `eval_every` rounds
`train.select_metric` is computed (wpultr's metrics) on the validation annotations or on held-out sessions' clicks,
and after `early_stopping_rounds` rounds without improvement the booster is cut to its best round. The learned
t+/t- are recorded in `train/bias.json` by logged position. The trained booster is returned as a
`wpultr.rankers.xgboost.XGBoostRanker` (XGBoost's JSON model, no pickle).
"""
from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..evaluation.metrics import evaluate as evaluate_scores
from ..rankers.mlp import feature_matrix
from ..rankers.xgboost import XGBoostRanker, import_xgboost
from ..schema import LABEL, QUERY_ID
from .base import FitResult
from .training.trainer import SessionLists

if TYPE_CHECKING:
    from ..config import RunConfig

log = logging.getLogger(__name__)


@dataclass
class Groups:
    """Training rows as XGBoost groups: the frame's rows session by session, each in logged-position order."""

    rows: np.ndarray          # row index into the sessions frame, in group order
    qid: np.ndarray           # group number of each row (non-decreasing)
    clicks: np.ndarray        # label of each row
    session_ids: np.ndarray   # the session of each group

    @classmethod
    def of(cls, lists: SessionLists, sessions: np.ndarray) -> Groups:
        """The groups of `sessions` (indices into `lists`, ascending)."""
        mask = lists.mask[sessions]
        return cls(lists.rows[sessions][mask], np.repeat(np.arange(len(sessions)), mask.sum(axis=1)),
                   lists.clicks[sessions][mask].astype(np.float32), lists.session_ids[sessions])


def position_gap_sessions(lists: SessionLists) -> int:
    """Sessions whose logged positions are not 1..n, where XGBoost's position (the index in the group) differs."""
    expected = np.where(lists.mask, np.arange(1, lists.slots + 1), 0)
    return int((lists.positions != expected).any(axis=1).sum())


@dataclass
class Validation:
    """What early stopping scores: a feature matrix and the frame (query, label) its rows belong to."""

    x: np.ndarray
    frame: pd.DataFrame

    @classmethod
    def annotations(cls, valid: pd.DataFrame) -> Validation:
        valid = valid.reset_index(drop=True)
        return cls(feature_matrix(valid, "validation annotations"), valid)

    @classmethod
    def clicks(cls, groups: Groups, x: np.ndarray) -> Validation:
        """Held-out sessions as queries, their clicks as labels."""
        frame = pd.DataFrame({QUERY_ID: groups.session_ids[groups.qid].astype(str), LABEL: groups.clicks})
        return cls(x[groups.rows], frame)

    def metrics(self, scores: np.ndarray, ks: tuple[int, ...]) -> dict[str, Any]:
        return evaluate_scores(self.frame.assign(score=scores), "score", ks=ks)["all"]


@dataclass
class Checkpoints:
    """The history and best round of a boosting run, scored every `every` rounds; stops after `patience` rounds
    without improvement of `metric` (None: never)."""

    validation: Validation | None
    metric: str
    ks: tuple[int, ...]
    rounds: int
    every: int
    patience: int | None
    history: list[dict[str, Any]] = field(default_factory=list)
    best: tuple[float, int] = (-math.inf, 0)      # (metric, rounds) of the best checkpoint
    _last: float = field(default_factory=time.perf_counter)

    def after_round(self, booster: Any, done: int) -> bool:
        """Record the checkpoint after round `done` when one falls there; True to stop boosting."""
        if done % self.every and done != self.rounds:
            return False
        seconds = time.perf_counter() - self._last
        metrics = None
        if self.validation is not None:
            metrics = self.validation.metrics(booster.inplace_predict(self.validation.x), self.ks)
        self.history.append({"epoch": len(self.history), "rounds": done, "seconds": round(seconds, 3), "train": {},
                             "valid": metrics})
        value = metrics.get(self.metric) if metrics else None
        if self.validation is None or (value is not None and value > self.best[0]):
            self.best = (value if value is not None else -math.inf, done)
        self._last = time.perf_counter()
        return self.patience is not None and done - self.best[1] >= self.patience

    @property
    def best_entry(self) -> dict[str, Any]:
        """The best checkpoint's history entry (the last when no checkpoint scored a metric)."""
        return next((h for h in self.history if h["rounds"] == self.best[1]), self.history[-1])


def _callback(xgb: Any, checkpoints: Checkpoints) -> Any:
    """An XGBoost training callback that hands each round to `checkpoints`."""

    class _Round(xgb.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            return checkpoints.after_round(model, epoch + 1)

    return _Round()


class XGBoostUnbiased:
    """XGBoost's unbiased LambdaMART on clicks, one group per session in logged-position order."""

    name = "xgboost_unbiased"

    def params(self, config: RunConfig) -> dict[str, Any]:
        """XGBRanker's arguments from the `xgboost` section (a null knob left to XGBoost)."""
        section = config.xgboost
        params: dict[str, Any] = {
            "objective": section.objective, "lambdarank_unbiased": True, "tree_method": "hist",
            "n_estimators": section.rounds, "learning_rate": section.learning_rate, "max_depth": section.max_depth,
            "lambdarank_pair_method": section.lambdarank_pair_method, "random_state": config.seed,
            "n_jobs": section.num_threads or None,
            "lambdarank_num_pair_per_sample": section.lambdarank_num_pair_per_sample,
            "lambdarank_bias_norm": section.lambdarank_bias_norm}
        return {k: v for k, v in params.items() if v is not None}

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> FitResult:
        xgb = import_xgboost(ConfigError, f"train.method: {self.name!r}")
        section = config.xgboost
        lists = SessionLists.from_frame(train)
        x = feature_matrix(train, "sessions")
        fitted, validation = self._split(lists, x, valid, config)
        patience = section.early_stopping_rounds if validation is not None else None
        checkpoints = Checkpoints(validation, config.train.select_metric, tuple(config.evaluation.ks),
                                  section.rounds, min(section.eval_every, section.rounds), patience)
        params = self.params(config)
        model = xgb.XGBRanker(**params, callbacks=[_callback(xgb, checkpoints)])
        model.fit(x[fitted.rows], fitted.clicks, qid=fitted.qid)
        booster = model.get_booster()
        best = checkpoints.best_entry
        kept = booster[: best["rounds"]] if best["rounds"] < booster.num_boosted_rounds() else booster
        ranker = XGBoostRanker.from_booster(kept, x.shape[1]).eval()
        bias = {"method": self.name, "loss": section.objective, "best_epoch": best["epoch"],
                "best_rounds": best["rounds"], "rounds": booster.num_boosted_rounds(),
                "early_stopping": section.early_stopping if validation is not None else "none",
                "params": {k: v for k, v in params.items() if k != "n_jobs"},
                "lambdarank_param": learned_params(booster),
                "position_gap_sessions": position_gap_sessions(lists), "xgboost_version": xgb.__version__,
                **position_biases(booster)}
        if bias["position_gap_sessions"]:
            log.warning("%s: %d sessions have logged positions other than 1..n; XGBoost reads each result's position "
                        "from its index in the session", self.name, bias["position_gap_sessions"])
        return FitResult(ranker, checkpoints.history, bias)

    def _split(self, lists: SessionLists, x: np.ndarray, valid: pd.DataFrame | None,
               config: RunConfig) -> tuple[Groups, Validation | None]:
        """(the training groups, what early stopping scores or None) for `xgboost.early_stopping`."""
        mode = config.xgboost.early_stopping
        everything = np.arange(len(lists))
        if mode == "clicks":
            rng = np.random.default_rng(config.seed)
            held = rng.random(len(lists)) < config.xgboost.valid_sessions_fraction
            if 0 < held.sum() < len(lists):
                return Groups.of(lists, everything[~held]), Validation.clicks(Groups.of(lists, everything[held]), x)
            log.info("%s: too few sessions to hold out; boosting %d rounds", self.name, config.xgboost.rounds)
        elif mode == "annotations":
            if valid is not None and len(valid):
                return Groups.of(lists, everything), Validation.annotations(valid)
            log.info("%s: no validation annotations; boosting %d rounds", self.name, config.xgboost.rounds)
        return Groups.of(lists, everything), None


def _objective_config(booster: Any) -> dict[str, Any]:
    return json.loads(booster.save_config())["learner"]["objective"]


def learned_params(booster: Any) -> dict[str, Any]:
    """The lambdarank parameters the booster trained with, XGBoost's defaults filled in (as numbers)."""
    return {k: _number(v) for k, v in _objective_config(booster).get("lambdarank_param", {}).items()}


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def position_biases(booster: Any) -> dict[str, Any]:
    """XGBoost's learned position bias ratios t+ (clicked) and t- (unclicked), keyed by logged position (its index
    in the session + 1), for the positions it tracked and saw."""
    objective = _objective_config(booster)
    plus, minus = objective.get("ti+", []), objective.get("tj-", [])
    seen = [i for i, (p, m) in enumerate(zip(plus, minus, strict=True)) if p > 0 and m > 0]
    return {"position_bias_t_plus": {str(i + 1): float(plus[i]) for i in seen},
            "position_bias_t_minus": {str(i + 1): float(minus[i]) for i in seen}}
