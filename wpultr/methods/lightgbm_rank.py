"""LightGBM anchors on the dense `features`: plain lambdarank on clicks, and LightGBM's position-aware lambdarank.

* `LightGBMLambdaRank`: objective lambdarank, clicks as 0/1 labels, one query group per session.
* `LightGBMPositionLambdaRank`: the same with each row's logged position given to the Dataset
  (`position=`), so LightGBM's unbiased lambdarank learns a position bias factor per position jointly
  with the trees (its implementation of Unbiased LambdaMART-style debiasing), regularised by
  `lambdarank_position_bias_regularization` (`ranker.lightgbm.position_bias_regularization`).

Both are external anchors: no Trainer, no neural ranker. Model selection follows the Trainer's rule:
the validation annotations are scored at `ranker.lightgbm.eval_points` evenly spaced boosting
rounds and the round with the best `train.select_metric` is kept (the last round without validation).

On a Dask cluster (`ranker.lightgbm.distributed`: auto = when the run's client has >= 2 workers, the
training rows exceed one ingest partition (`data.partition_rows`) and the run is not itself a task on a
worker (an experiment's runs share the workers); true = always, needs a client; false = never)
`LightGBMLambdaRank` trains through `lightgbm.dask.DaskLGBMRanker` (data-parallel trees over the
workers): the sessions are cut into partitions at session boundaries, since lightgbm.dask takes `group`
per partition and a session split across two would become two queries. Validation checkpoints are then
scored after training from the finished booster (same rounds, same rule). LightGBM 4.7's Dask ranker has
no `position` argument, so `LightGBMPositionLambdaRank` trains in-process and logs why.

The trained booster is returned as a `wpultr.rankers.lightgbm.LightGBMRanker`.
"""
from __future__ import annotations

import logging
import math
import operator
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..cluster import current_client, inside_worker, n_workers
from ..config import ConfigError
from ..evaluation.metrics import evaluate as evaluate_scores
from ..rankers.lightgbm import LightGBMRanker
from ..rankers.mlp import feature_matrix
from .base import FitResult
from .training.trainer import SessionLists

if TYPE_CHECKING:
    from ..config import RunConfig

log = logging.getLogger(__name__)

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

    def __enter__(self) -> _PositionBiasLog:
        import lightgbm.basic as basic  # lazy: lightgbm ~2.2 s; gbdt imports this for every neural run
        self._previous = (getattr(basic, "_LOGGER", None), getattr(basic, "_INFO_METHOD_NAME", "info"),
                          getattr(basic, "_WARNING_METHOD_NAME", "warning"))
        basic.register_logger(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        import lightgbm.basic as basic  # lazy: lightgbm ~2.2 s; gbdt imports this for every neural run
        logger, info, warning = self._previous
        if logger is not None:
            basic.register_logger(logger, info, warning)


def session_partitions(group_sizes: np.ndarray, n_parts: int) -> list[tuple[int, int]]:
    """[start, end) session ranges cutting the sessions into <= n_parts runs of about equal rows, none empty.

    Cuts fall only between sessions: lightgbm.dask reads `group` partition by partition.
    """
    sizes = np.asarray(group_sizes, dtype=np.int64)
    ends = np.cumsum(sizes)
    targets = ends[-1] * np.arange(1, n_parts) / n_parts if len(sizes) else np.array([])
    cuts = np.unique(np.r_[0, np.searchsorted(ends, targets, side="left") + 1, len(sizes)].clip(0, len(sizes)))
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


def wants_dask(config: RunConfig, client: Any, rows: int) -> bool:
    """Whether `ranker.lightgbm.distributed` puts a booster of `rows` training rows on the Dask cluster: true
    always, false never, auto when `client` has >= 2 workers, the rows exceed one ingest partition and this is
    not itself a worker's task."""
    mode = config.ranker.lightgbm.distributed
    if mode is True or mode is False:
        return mode
    return client is not None and n_workers(client) >= 2 and rows > config.data.partition_rows and not inside_worker()


class LightGBMLambdaRank:
    """Lambdarank on clicks (one group per session), a LightGBM anchor on the dense features."""

    name = "lightgbm_lambdarank"
    position_aware = False

    def params(self, config: RunConfig) -> dict[str, Any]:
        return {
            "objective": "lambdarank", "metric": "None", "verbosity": -1, "seed": config.seed,
            "deterministic": True, "force_row_wise": True,
            "learning_rate": float(config.ranker.lightgbm.learning_rate),
            "num_leaves": config.ranker.lightgbm.num_leaves,
            "min_data_in_leaf": config.ranker.lightgbm.min_data_in_leaf,
            "num_threads": config.ranker.lightgbm.num_threads,
        }

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> FitResult:
        import lightgbm as lgb  # lazy: lightgbm ~2.2 s; gbdt imports this for every neural run

        lists = SessionLists.from_frame(train)
        order = lists.rows[lists.mask]                          # session by session, in position order
        features = feature_matrix(train, "sessions")
        groups = lists.mask.sum(axis=1)
        client = self.dask_client(config, len(order))
        if client is not None:
            return self._fit_dask(client, features[order], lists.clicks[lists.mask].astype(np.float64), groups,
                                  valid, config)
        dataset = lgb.Dataset(features[order], label=lists.clicks[lists.mask].astype(np.float64),
                              group=groups, free_raw_data=True,
                              position=lists.positions[lists.mask] if self.position_aware else None)
        params = self.params(config)
        rounds = config.ranker.lightgbm.rounds
        points = min(config.ranker.lightgbm.eval_points, rounds)
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
        result = self._result(booster, history, features.shape[1], rounds, params, config)
        if self.position_aware:
            # keyed by the logged position; additive score offsets after the last round, not probabilities
            result.bias["position_bias_factors"] = {str(k): v for k, v in sorted(factors.items())}
        return result

    def _result(self, booster: Any, history: list[dict[str, Any]], n_features: int, rounds: int,
                params: dict[str, Any], config: RunConfig) -> FitResult:
        """The ranker of the best validation checkpoint (the last without validation), its history and bias record."""
        metric = config.train.select_metric
        scored = [(h["valid"][metric], -h["rounds"], h) for h in history if h["valid"] and metric in h["valid"]]
        best = max(scored, key=lambda t: (t[0], t[1]))[2] if scored else history[-1]
        model = booster.model_to_string(num_iteration=best["rounds"])
        ranker = LightGBMRanker.from_model_string(model, n_features, self.position_aware).eval()
        bias: dict[str, Any] = {"method": self.name, "loss": "lambdarank", "best_epoch": best["epoch"],
                                "best_rounds": best["rounds"], "rounds": rounds,
                                "params": {k: v for k, v in params.items() if k not in ("verbosity",)}}
        return FitResult(ranker, history, bias)

    # ------------------------------------------------------------------ lightgbm.dask
    def dask_client(self, config: RunConfig, rows: int) -> Any:
        """The Dask client to train on (`ranker.lightgbm.distributed`), or None to train in this process."""
        mode = config.ranker.lightgbm.distributed
        if mode is False:
            return None
        client = current_client()
        if mode is True and client is None:
            raise ConfigError("ranker.lightgbm.distributed: true needs a Dask client (the run's cluster) and "
                              "none is running; set it to auto or false")
        if client is None or not wants_dask(config, client, rows):
            return None
        if self.position_aware:
            log.info("%s trains in this process: lightgbm.dask's ranker takes no `position`", self.name)
            return None
        return client

    def _fit_dask(self, client: Any, x: np.ndarray, y: np.ndarray, groups: np.ndarray,
                  valid: pd.DataFrame | None, config: RunConfig) -> FitResult:
        """DaskLGBMRanker on session-aligned partitions of (x, y, groups) scattered to the workers."""
        import dask  # lazy: with lightgbm.dask, only for a Dask-sharded fit
        import dask.array as da  # lazy: dask.array ~1.7 s (-X importtime), only for a Dask-sharded fit
        from lightgbm.dask import DaskLGBMRanker  # lazy: lightgbm.dask ~2.2 s, only for a Dask-sharded fit

        params = self.params(config)
        rounds = config.ranker.lightgbm.rounds
        n_parts = max(n_workers(client), math.ceil(len(x) / config.data.partition_rows))
        bounds = session_partitions(groups, n_parts)
        starts = np.r_[0, np.cumsum(groups)]
        chunks = [(x[starts[a]:starts[b]], y[starts[a]:starts[b]], groups[a:b]) for a, b in bounds]
        futures = client.scatter(chunks)

        def column(i: int, shape: tuple[int, ...], dtype: Any, future: Any) -> Any:   # item i of a scattered chunk
            return da.from_delayed(dask.delayed(operator.getitem)(future, i), shape=shape, dtype=dtype)

        xs, ys, gs = (da.concatenate([column(i, c[i].shape, c[i].dtype, f)
                                      for c, f in zip(chunks, futures, strict=True)])
                      for i in range(3))
        model = DaskLGBMRanker(
            client=client, n_estimators=rounds, learning_rate=params["learning_rate"],
            num_leaves=params["num_leaves"], min_child_samples=params["min_data_in_leaf"],
            random_state=params["seed"], objective="lambdarank", metric="None", verbosity=-1,
            deterministic=True, force_row_wise=True)
        start = time.perf_counter()
        model.fit(xs, ys, group=gs)
        seconds = time.perf_counter() - start
        booster = booster_without_cluster_settings(model.to_local().booster_, x)
        history = self._checkpoints_after(booster, rounds, seconds, valid, config)
        params = {k: v for k, v in params.items() if k != "num_threads"}   # each Dask worker uses its own threads
        result = self._result(booster, history, x.shape[1], rounds, params, config)
        result.bias["distributed"] = {"engine": "lightgbm.dask", "workers": n_workers(client),
                                      "partitions": len(bounds)}
        return result

    def _checkpoints_after(self, booster: Any, rounds: int, seconds: float, valid: pd.DataFrame | None,
                           config: RunConfig) -> list[dict[str, Any]]:
        """The history the in-process callback records, from the finished booster; seconds split by rounds."""
        points = min(config.ranker.lightgbm.eval_points, rounds)
        checkpoints = sorted({int(round(rounds * (i + 1) / points)) for i in range(points)})
        valid = valid.reset_index(drop=True) if valid is not None and len(valid) else None
        valid_x = feature_matrix(valid, "validation annotations").astype(np.float64) if valid is not None else None
        history, previous = [], 0
        for done in checkpoints:
            metrics = None
            if valid_x is not None:
                scored = valid.assign(score=booster.predict(valid_x, num_iteration=done))
                metrics = evaluate_scores(scored, "score", ks=tuple(config.evaluation.ks))["all"]
            history.append({"epoch": len(history), "rounds": done,
                            "seconds": round(seconds * (done - previous) / rounds, 3), "train": {},
                            "valid": metrics})
            previous = done
        return history


_CLUSTER_PARAMETERS = ("[machines: ", "[local_listen_port: ", "[num_machines: ", "[time_out: ")


def booster_without_cluster_settings(booster: Any, x: np.ndarray) -> Any:
    """The booster with the fit's cluster settings (the workers' ports, drawn at random per fit) left out of its model
    text, and its `feature_infos` (each feature's range, informational: prediction reads the trees) the range over all
    the rows `x` rather than over the rows of whichever worker lightgbm.dask took the booster from."""
    import lightgbm as lgb  # lazy: lightgbm ~2.2 s; gbdt imports this for every neural run
    low, high = np.fmin.reduce(x, axis=0), np.fmax.reduce(x, axis=0)           # NaN-skipping, without a copy of x
    lines = []
    for line in booster.model_to_string().split("\n"):
        if line.startswith(_CLUSTER_PARAMETERS):
            continue
        if line.startswith("feature_infos="):
            infos = line[len("feature_infos="):].split(" ")
            line = "feature_infos=" + " ".join(
                f"[{low[j]:.17g}:{high[j]:.17g}]" if info.startswith("[") and np.isfinite(low[j]) else info
                for j, info in enumerate(infos))
        lines.append(line)
    return lgb.Booster(model_str="\n".join(lines))


class LightGBMPositionLambdaRank(LightGBMLambdaRank):
    """LightGBM's position-aware (unbiased) lambdarank: `position` on the Dataset."""

    name = "lightgbm_position"
    position_aware = True

    def params(self, config: RunConfig) -> dict[str, Any]:
        out = super().params(config)
        out["lambdarank_position_bias_regularization"] = float(
            config.ranker.lightgbm.position_bias_regularization)
        return out
