"""How much of LightGBM's ranking quality the dense MLP ranker reaches when both learn the true labels.

No clicks here: both rankers see the graded labels of the same training queries, so the gap is one of
ranker capacity and training (feature scaling, optimiser, epochs, early stopping), not of debiasing.

* **LightGBM**: lambdarank on the labels, early stopping on the validation queries' NDCG@10.
* **MLP**: the project's dense ranker (``wpultr.rankers.mlp``) built by ``build_ranker`` and trained by
  ``Trainer`` with the listwise softmax loss on gains 2^label - 1 (bench/bal.py's Oracle), each query one
  list; the epoch kept is the best validation DCG@10.

``--data production-sessions`` trains both on what bench/bal.py's Oracle sees instead: the true labels of
the shown results of its production world's sessions (one list per session), tested on its annotated
queries, whose documents all appear in those sessions; a gap there that the held-out-query data sets do not
show is the booster fitting the logged documents themselves, not ranking capacity.

Data: the simulator's annotated queries (600 queries x 20 documents, split 60/20/20 by query per seed)
and the real LETOR sample in /work/shared/data/letor-sample (rank.train split 80/20 by query into
train/validation; rank.test held out). Printed: held-out DCG@10 of both, and the gap, per seed and mean.

    .venv/bin/python bench/ranker_capacity.py                         # both data sets, 3 seeds
    .venv/bin/python bench/ranker_capacity.py --data letor --seeds 1 --epochs 50
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from wpultr.config import config_from_dict
from wpultr.evaluation.metrics import per_query
from wpultr.methods.losses.lists import listwise_softmax_loss
from wpultr.methods.training.trainer import Trainer, build_ranker
from wpultr.rankers.base import score_frame
from wpultr.schema import CLICK, FEATURES, LABEL, POSITION, QUERY_ID, SESSION_ID
from wpultr.simulate import simulate

LETOR = Path("/work/shared/data/letor-sample")


def read_letor(path: Path) -> pd.DataFrame:
    """One SVMlight/LETOR file and its `.query` group sizes as a table: query_id, doc_id, features, label."""
    from sklearn.datasets import load_svmlight_file
    matrix, labels = load_svmlight_file(str(path), n_features=300, dtype=np.float32)
    sizes = np.loadtxt(f"{path}.query", dtype=np.int64)
    dense = matrix.toarray()
    return pd.DataFrame({QUERY_ID: np.repeat(np.arange(len(sizes)), sizes), "doc_id": np.arange(len(labels)),
                         FEATURES: list(dense), LABEL: labels.astype(np.int64)})


def split_queries(frame: pd.DataFrame, shares: tuple[float, ...], seed: int) -> list[pd.DataFrame]:
    """`frame` split by query into parts of the given shares (the last part takes the rest)."""
    queries = np.random.default_rng(seed).permutation(np.sort(frame[QUERY_ID].unique()))
    cuts = np.cumsum([int(round(s * len(queries))) for s in shares])
    parts = np.split(queries, cuts)
    return [frame[frame[QUERY_ID].isin(p)].reset_index(drop=True) for p in parts]


def simulated(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    sim = config_from_dict({"data": {"simulate": {"n_queries": 600, "n_sessions": 30000,
                                                  "n_annotated_queries": 600}}}).data.simulate
    annotations = simulate(sim, seed=seed).annotations[[QUERY_ID, "doc_id", FEATURES, LABEL]]
    train, valid, test = split_queries(annotations, (0.6, 0.2), seed)
    return train, valid, test


def production_sessions(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """bench/bal.py's Oracle data: the true labels of the shown results of its production world's 50 000
    sessions (each session one list), validated and tested on its annotated queries, whose documents all
    appear in the training sessions: a test of fitting documents seen in the logs, not of new queries."""
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from bal import base_config, split_annotations, truth_of
    from worlds import WORLDS
    logs = simulate(config_from_dict(base_config(seed, 50000, 3, WORLDS["production"])).data.simulate, seed=seed)
    labels = truth_of(logs.sessions, logs.truth_sessions, "true_label")["true_label"].to_numpy(np.int64)
    valid, test = split_annotations(logs.annotations, seed)
    return logs.sessions.assign(**{LABEL: labels}), valid.reset_index(drop=True), test.reset_index(drop=True)


def letor(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    train, valid = split_queries(read_letor(LETOR / "rank.train"), (0.8,), seed)
    return train, valid, read_letor(LETOR / "rank.test")


DATA: dict[str, Callable[[int], tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]]] = {
    "simulated": simulated, "letor": letor, "production-sessions": production_sessions}


def dcg10(frame: pd.DataFrame, scores: np.ndarray) -> float:
    return float(per_query(frame.assign(score=scores), "score", label_col=LABEL)["DCG@10"].mean())


def matrix(frame: pd.DataFrame) -> np.ndarray:
    return np.stack(frame[FEATURES].to_numpy()).astype(np.float32)


def group_sizes(frame: pd.DataFrame) -> np.ndarray:
    """Rows per list: per session for click-log rows, else per query (rows of a list are contiguous)."""
    return frame.groupby(SESSION_ID if SESSION_ID in frame.columns else QUERY_ID, sort=False).size().to_numpy()


def lightgbm_dcg(train: pd.DataFrame, valid: pd.DataFrame, test: pd.DataFrame, seed: int) -> float:
    """LambdaMART on the labels, early-stopped on validation NDCG@10."""
    params = {"objective": "lambdarank", "metric": "ndcg", "ndcg_eval_at": [10], "learning_rate": 0.05,
              "num_leaves": 31, "min_data_in_leaf": 20, "seed": seed, "verbose": -1, "num_threads": 2,
              "label_gain": [2.0 ** i - 1 for i in range(32)]}
    dtrain = lgb.Dataset(matrix(train), train[LABEL].to_numpy(), group=group_sizes(train))
    dvalid = lgb.Dataset(matrix(valid), valid[LABEL].to_numpy(), group=group_sizes(valid), reference=dtrain)
    booster = lgb.train(params, dtrain, num_boost_round=1000, valid_sets=[dvalid],
                        callbacks=[lgb.early_stopping(50, verbose=False)])
    return dcg10(test, booster.predict(matrix(test), num_iteration=booster.best_iteration))


def as_lists(frame: pd.DataFrame) -> pd.DataFrame:
    """Labelled queries as sessions for the Trainer: one list per query (order within it is irrelevant)."""
    out = frame.assign(**{SESSION_ID: frame[QUERY_ID]})
    out[POSITION] = out.groupby(QUERY_ID).cumcount() + 1
    out[CLICK] = 0
    return out


def mlp_dcg(train: pd.DataFrame, valid: pd.DataFrame, test: pd.DataFrame, seed: int,
            args: argparse.Namespace) -> tuple[float, int | None]:
    """The project's MLP ranker on the labels (listwise softmax on gains), best validation epoch kept."""
    cfg = config_from_dict({"seed": seed, "ranker": {"backbone": "mlp", "head": args.head},
                            "train": {"epochs": args.epochs, "batch_size": args.batch_size,
                                      "learning_rate": args.learning_rate, "device": "cpu"}})
    lists = train if SESSION_ID in train.columns else as_lists(train)
    trainer = Trainer(build_ranker(cfg, lists), lists, valid, cfg)
    gains = trainer.lists.gather(np.exp2(lists[LABEL].to_numpy(np.float32)) - 1.0)
    ranker = trainer.fit(lambda s, b: listwise_softmax_loss(s, b.extras["gain"], b.mask), extras={"gain": gains})
    return dcg10(test, score_frame(ranker, test)), trainer.best_epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="simulated,letor", help="comma list of: " + ", ".join(DATA))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16, help="queries per batch")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--head", default="64,32", help="hidden widths of the MLP, comma separated")
    args = parser.parse_args()
    args.head = [int(h) for h in args.head.split(",") if h]
    for name in args.data.split(","):
        rows: list[dict[str, Any]] = []
        for seed in range(args.seeds):
            start = time.perf_counter()
            train, valid, test = DATA[name](seed)
            gbdt = lightgbm_dcg(train, valid, test, seed)
            net, best = mlp_dcg(train, valid, test, seed, args)
            rows.append({"lightgbm": gbdt, "mlp": net, "gap": gbdt - net})
            print(f"{name:9s} seed {seed}  LightGBM DCG@10 {gbdt:.3f}  MLP {net:.3f} (best epoch {best})"
                  f"  gap {gbdt - net:+.3f}  {time.perf_counter() - start:4.0f}s", flush=True)
        table = pd.DataFrame(rows)
        print(f"{name:9s} mean    LightGBM DCG@10 {table['lightgbm'].mean():.3f}  MLP {table['mlp'].mean():.3f}"
              f"  gap {table['gap'].mean():+.3f} ± {table['gap'].std(ddof=1) if len(table) > 1 else 0:.3f}")


if __name__ == "__main__":
    main()
