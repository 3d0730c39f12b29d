"""Oracle: the configured ranker trained on the true labels of the shown results instead of their clicks.

The reference every debiasing method is measured against ("Labeled Data" in LBD §6.1): the same ranker,
trainer, batches, epoch selection and loss kind (`train.loss`) as the click-trained methods, with the true
grade y in place of the click: listwise, the softmax loss on the gains 2^y − 1 (lists with no relevant
result are skipped); pointwise, σ(score) fitted by cross-entropy to the normalised gain
(2^y − 1) / (2^4 − 1), so that, like a pointwise click model's, its σ(score) is a relevance probability on
one scale across queries (a listwise score is one only up to a shift per list). It needs the truth, so it
runs on simulated logs only: the labels come from a `true_label` column of the sessions table when there is
one, else from the run directory's `data/truth/truth_sessions.parquet` (joined on session and position).
The simulated logs hold sessions of the test queries too; their labels are the test set's, so sessions of
the run's test queries (`data/split.json`) are left out: the oracle never trains on a label it is scored
on. It trains for `train.warmup_epochs + train.epochs` epochs, as many as the click-trained methods, with
no click warm-up.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..io.parquet import read_table, sample_sessions
from ..io.split import split_test_queries
from ..rundir.layout import TRUTH_DIR, TRUTH_SESSIONS
from ..schema import MAX_LABEL, POSITION, SESSION_ID, query_key
from .base import FitResult
from .losses import click_loss_named
from .losses.lists import listwise_softmax_loss, pointwise_click_loss
from .training.distributed import SharedTrainerFit
from .training.trainer import LossFn, build_ranker

if TYPE_CHECKING:
    from ..config import RunConfig

TRUE_LABEL = "true_label"                      # as the simulator's truth tables name it


def true_labels(train: pd.DataFrame, config: RunConfig) -> np.ndarray:
    """The true grade of every row of `train`: its own `true_label` column, or the run's simulator truth."""
    if TRUE_LABEL in train.columns:
        labels = train[TRUE_LABEL]
    else:
        path = config.resolved_run_dir / TRUTH_DIR / TRUTH_SESSIONS
        if config.data.source != "simulate" or not path.is_file():
            raise ConfigError(f"train.method: 'oracle' needs the simulator's truth (data.source 'simulate'); "
                              f"got data.source {config.data.source!r} and no {path}")
        truth = pd.read_parquet(path, columns=[SESSION_ID, POSITION, TRUE_LABEL])
        keys = train[[SESSION_ID, POSITION]].astype({SESSION_ID: "int64", POSITION: "int64"})
        labels = keys.merge(truth.astype({SESSION_ID: "int64", POSITION: "int64"}), on=[SESSION_ID, POSITION],
                            how="left", validate="many_to_one")[TRUE_LABEL]
    if labels.isna().any():
        row = int(np.flatnonzero(labels.isna().to_numpy())[0])
        raise ConfigError(f"train.method: 'oracle': sessions row {row} has no true label in the simulator's truth")
    return labels.to_numpy(np.float32)


def without_test_queries(train: pd.DataFrame, config: RunConfig) -> pd.DataFrame:
    """`train` less the sessions of the run's test queries (schema.query_key), when the run has a split."""
    test = split_test_queries(config.resolved_run_dir)
    if not test:
        return train
    return train[~query_key(train).isin(test).to_numpy()].reset_index(drop=True)


def label_loss(kind: str) -> tuple[str, Callable[[np.ndarray], np.ndarray], LossFn]:
    """(what the bias record calls it, the per-row target of the grades, the loss) of `train.loss` `kind`."""
    if kind == "pointwise":
        return ("pointwise", lambda y: (np.exp2(y) - 1.0) / (2.0 ** MAX_LABEL - 1.0),
                lambda scores, batch: pointwise_click_loss(scores, batch.extras["target"], batch.mask))
    if kind == "listwise":
        return ("listwise on gains 2^y - 1", lambda y: np.exp2(y) - 1.0,
                lambda scores, batch: listwise_softmax_loss(scores, batch.extras["target"], batch.mask))
    raise ConfigError(f"train.loss: train.method 'oracle' trains with 'pointwise' or 'listwise', got {kind!r}")


class Oracle(SharedTrainerFit):
    name = "oracle"

    def fit_rank(self, sessions: Any, valid: pd.DataFrame | None, config: RunConfig, trainer_class: type,
                 arrow_lists: Sequence[str] = (), overrides: Any = None) -> FitResult:
        """One DDP rank's fit (`training.distributed`): the same rows and labels as one process, the epochs on this
        rank's shares (each shard's loss scaled by its share of the global batch's shown results, or of its lists
        with a relevant result)."""
        train = sample_sessions(read_table(sessions, arrow_lists=arrow_lists), config.data.max_sessions, config.seed)
        return self.fit_with(train, valid, config, trainer_class)

    def fit_with(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig,
                 trainer_class: type) -> FitResult:
        n_rows = len(train)
        train = without_test_queries(train, config)
        labels = true_labels(train, config)
        loss_name, target, loss = label_loss(config.train.loss)
        trainer = trainer_class(build_ranker(config, train), train, valid, config)
        epochs = config.train.warmup_epochs + config.train.epochs
        step = click_loss_named(config.train.loss)      # what the loss divides by: shown results, or lists
        ranker = trainer.fit(loss, epochs=epochs, extras={"target": trainer.lists.gather(target(labels))},
                             normaliser=lambda b: step.normaliser(b.extras["target"], b.mask))
        return FitResult(ranker, trainer.history, {"method": self.name, "loss": loss_name,
                                                    "best_epoch": trainer.best_epoch, "epochs": epochs,
                                                    "rows": len(train),
                                                    "test_query_rows_left_out": n_rows - len(train)})
