"""The LightGBM ranker backbone (`ranker.backbone: lightgbm`): a booster grown round by round on a custom objective.

`BoostingTrainer` plays the part `training.Trainer` plays for the neural rankers, for the methods
whose ranker step is a per-row click loss (Naive, BAL): one persistent LightGBM booster on the
sessions' dense `features` grows `ranker.lightgbm.rounds_per_epoch` trees per epoch, each round
calling a gradient/Hessian function of the current raw scores (`losses.boosted`). Keeping the
booster and calling `Booster.update(fobj=...)` is what `lgb.train(params with a callable objective,
init_model=booster, keep_training_booster=True)` does, without re-predicting the training set to
rebuild the init scores each epoch. Epochs are validated and the best one kept as the Trainer does;
the result is a `LightGBMRanker` (LightGBM's model text, never a pickle).

Always in this process, whatever `ranker.lightgbm.distributed` says (a log line says so when it asks
for Dask): lightgbm.dask takes a callable objective only as a per-worker function of that worker's labels
and scores inside one `fit`, while these objectives need state refitted here between epochs (BAL's weights
and click model, propensities) and grow one booster across epochs round by round.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from ...cluster import current_client
from ...evaluation.metrics import evaluate as evaluate_scores
from ...rankers.lightgbm import LightGBMRanker
from ...rankers.mlp import feature_matrix
from ...schema import CLICK
from ..lambda_pairs import GradHess, Loss, lambda_objective, session_pairs
from ..lightgbm_rank import wants_dask
from ..losses import click_loss_named
from .trainer import SessionLists

if TYPE_CHECKING:
    from ...config import RunConfig

log = logging.getLogger(__name__)



def booster_params(cfg: RunConfig) -> dict[str, Any]:
    """LightGBM parameters of the backbone (`ranker.lightgbm.*`); the objective is supplied each round."""
    g = cfg.ranker.lightgbm
    return {"objective": "none", "metric": "None", "verbosity": -1, "seed": cfg.seed, "deterministic": True,
            "force_row_wise": True, "learning_rate": g.learning_rate, "num_leaves": g.num_leaves,
            "min_data_in_leaf": g.min_data_in_leaf, "num_threads": g.num_threads}


def note_in_process(cfg: RunConfig, rows: int) -> bool:
    """Log (and say True) when `ranker.lightgbm.distributed` would put this booster on Dask; it stays here."""
    mode = cfg.ranker.lightgbm.distributed
    wanted = wants_dask(cfg, current_client() if mode is not False else None, rows)
    if wanted:
        log.info("ranker.backbone lightgbm trains in this process: lightgbm.dask cannot grow a booster on a "
                 "custom objective driven from here (ranker.lightgbm.distributed=%s ignored)", mode)
    return wanted


class BoostingTrainer:
    """One booster's training run: dataset (sessions contiguous, by position), validation, history, best epoch."""

    def __init__(self, train: pd.DataFrame, valid: pd.DataFrame | None, cfg: RunConfig):
        import lightgbm as lgb  # lazy: lightgbm ~2.2 s (-X importtime); BAL and naive import gbdt for neural runs

        self.cfg = cfg
        self.lists = SessionLists.from_frame(train)
        self.order = self.lists.rows[self.lists.mask]            # dataset row i is frame row order[i]
        note_in_process(cfg, len(self.order))
        self.group_sizes = self.lists.mask.sum(axis=1).astype(np.int64)
        features = feature_matrix(train, "sessions")
        self.n_features = int(features.shape[1])
        self.clicks = train[CLICK].to_numpy(np.float64)[self.order]
        self.dataset = lgb.Dataset(features[self.order].astype(np.float64), label=self.clicks,
                                   params={"verbosity": -1}, free_raw_data=True)
        self.booster = lgb.Booster(params=booster_params(cfg), train_set=self.dataset)
        self.valid = valid.reset_index(drop=True) if valid is not None and len(valid) else None
        self.valid_x = feature_matrix(self.valid, "validation annotations").astype(np.float64) \
            if self.valid is not None else None
        self.generator = torch.Generator().manual_seed(cfg.seed)   # for what a method fits besides the booster
        self.history: list[dict[str, Any]] = []
        self.best: tuple[float, int, int] | None = None            # (metric, epoch, boosting rounds)

    # ------------------------------------------------------------------ data
    def in_dataset_order(self, values: np.ndarray) -> np.ndarray:
        """A per-row array of the sessions frame, reordered as the booster's dataset rows."""
        return np.asarray(values)[self.order]

    @property
    def rounds(self) -> int:
        """Boosting rounds (trees) in the booster so far."""
        return int(self.booster.current_iteration())

    def raw_scores(self) -> np.ndarray:
        """The booster's current raw score of every dataset row (LightGBM's own training scores, not re-predicted)."""
        captured: list[np.ndarray] = []

        def grab(preds: np.ndarray, _: Any) -> tuple[str, float, bool]:
            captured.append(np.array(preds, dtype=np.float64))
            return "raw", 0.0, False

        self.booster.eval_train(feval=grab)
        return captured[0]

    def train_scores(self) -> np.ndarray:
        """r̂ of every row of the sessions frame, in the frame's order."""
        out = np.empty(len(self.order), dtype=np.float64)
        out[self.order] = self.raw_scores()
        return out

    # ------------------------------------------------------------------ training
    def boost(self, grad_hess: GradHess, loss: Loss, rounds: int | None = None) -> dict[str, float]:
        """Add `rounds` (default rounds_per_epoch) trees fitted to `grad_hess`; the mean loss per row afterwards."""
        rounds = self.cfg.ranker.lightgbm.rounds_per_epoch if rounds is None else rounds
        before = self.rounds

        def fobj(preds: np.ndarray, _: Any) -> tuple[np.ndarray, np.ndarray]:
            return grad_hess(np.asarray(preds, dtype=np.float64))

        for _ in range(rounds):
            if self.booster.update(fobj=fobj):      # an empty tree: no split gains anything, more rounds add nothing
                break
        return {"loss": loss(self.raw_scores()) / max(len(self.order), 1), "rounds": self.rounds,
                "rounds_added": self.rounds - before}

    def naive_objective(self, kind: str) -> tuple[GradHess, Loss]:
        """Clicks as labels (BAL Eq. 3): `train.loss` pointwise (logistic), listwise (softmax per session) or
        lambdarank (LambdaMART's λ-gradients on clicked-over-skipped pairs)."""
        c, sizes, loss = self.clicks, self.group_sizes, click_loss_named(kind)
        if loss.pairs:
            return self.lambda_objective(np.ones(len(c)))
        return (lambda f: loss.grad_hess(f, c, sizes, None)), (lambda f: loss.total(f, c, sizes, None))

    def lambda_objective(self, click_weights: np.ndarray, skip_weights: np.ndarray | None = None
                         ) -> tuple[GradHess, Loss]:
        """LambdaMART on the clicks (gains 0/1, |ΔNDCG| at each round's ranking, normalised as LightGBM's lambdarank
        does), every clicked-over-skipped pair weighted by its clicked row's `click_weights` (dataset order): 1 for
        Naive, BAL's ω for its ranker step; times its skipped row's `skip_weights` when given (BAL's chance the
        skip meant irrelevant, `bal.pair_weights`)."""
        pair_i, pair_j, _, _ = session_pairs(self.group_sizes, self.clicks)
        base = np.asarray(click_weights, np.float64)[pair_i]
        if skip_weights is not None:
            base = base * np.asarray(skip_weights, np.float64)[pair_j]
        return lambda_objective(self.group_sizes, self.clicks, base, pair_i, pair_j,
                                normalise=True)   # as LightGBM's lambdarank (lambdarank_norm)

    def warm_up(self, epochs: int | None = None) -> None:
        """`train.warmup_epochs` epochs of the naive click loss, recorded with phase "warmup" (BAL §4.1)."""
        n = self.cfg.train.warmup_epochs if epochs is None else epochs
        grad_hess, loss = self.naive_objective(self.cfg.train.loss)
        for epoch in range(len(self.history), len(self.history) + n):
            start = time.perf_counter()
            stats = self.boost(grad_hess, loss)
            self.record(epoch, stats, time.perf_counter() - start, phase="warmup")

    def fit(self, grad_hess: GradHess, loss: Loss, epochs: int | None = None) -> LightGBMRanker:
        """`epochs` (default train.epochs) epochs of one objective after what ran, each recorded; the best ranker."""
        first = len(self.history)
        for epoch in range(first, first + (self.cfg.train.epochs if epochs is None else epochs)):
            start = time.perf_counter()
            stats = self.boost(grad_hess, loss)
            self.record(epoch, stats, time.perf_counter() - start)
        return self.finish()

    # ------------------------------------------------------------------ validation and the result
    def validate(self) -> dict[str, Any] | None:
        if self.valid is None:
            return None
        # num_threads as in training: a predict without it resets LightGBM's OpenMP threads to all cores, which then
        # stay in force for the following boosting rounds (on a busy machine, orders of magnitude slower)
        scores = self.booster.predict(self.valid_x, num_iteration=self.rounds,
                                      num_threads=self.cfg.ranker.lightgbm.num_threads)
        scored = self.valid.assign(score=scores)
        return evaluate_scores(scored, "score", ks=tuple(self.cfg.evaluation.ks))["all"]

    def record(self, epoch: int, train_stats: dict[str, Any], seconds: float, **more: Any) -> dict[str, Any]:
        """Validate, remember the epoch if it is the best so far (warm-up epochs never are), append it to history."""
        valid = self.validate()
        entry = {"epoch": epoch, "seconds": round(seconds, 3), "train": train_stats, "valid": valid, **more}
        value = valid.get(self.cfg.train.select_metric) if valid else None
        if more.get("phase") != "warmup" and value is not None and (self.best is None or value > self.best[0]):
            self.best = (float(value), epoch, self.rounds)
        self.history.append(entry)
        return entry

    @property
    def best_epoch(self) -> int | None:
        return self.best[1] if self.best else None

    def ranker(self, rounds: int | None = None) -> LightGBMRanker:
        """The booster's first `rounds` trees (all by default) as a LightGBMRanker."""
        model = self.booster.model_to_string(num_iteration=self.rounds if rounds is None else rounds)
        return LightGBMRanker.from_model_string(model, self.n_features).eval()

    def finish(self) -> LightGBMRanker:
        """The ranker of the best validation epoch (the last epoch without validation)."""
        return self.ranker(self.best[2] if self.best is not None else None)
