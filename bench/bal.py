"""BAL against Naive, PB-BAL, FB-BAL and an oracle on the whole-page simulator (MLP ranker), over seeds.

Prints DCG@1,3,5,10 and ERR@1,3,5,10 (mean ± std over seeds) on held-out annotated queries, the
share of the Naive → oracle DCG@10 gap BAL closes, seconds per epoch of BAL and Naive on the same
data (ratio, same run), and one BAL run with the BERT backbone on the bundled sample logs.

The world (`base_config`) is the simulator's whole-page user model with position and multimedia type
biasing clicks (examination 1/p · attention[media]; visibility off, so the true click parents are
relevance, position and media type) and a logging ranker that ranks by noisy relevance and promotes
videos and ads (relevance → position and media type → position: the confounding BAL cuts). Two
choices make the media bias both harmful and learnable:
* the ranker sees each document's own media type (`media_type_features`), as a production ranker
  does, so Naive learns to promote rich results;
* presentation varies by impression (`media_type_consistency` 0.5): a document is shown as its own
  type half the time. If a document's media type never varied, its effect on clicks and its
  relevance would be confounded for any click model: no method could tell them apart.
Every query is annotated (80 % test, 20 % validation): with a few hundred test queries the spread
over seeds is mostly evaluation noise, which the ±1 std comparison would otherwise measure.
Timing: seconds per trained epoch (warm-up excluded), BAL against Naive on the same data in the same
run, on a LocalCluster; the per-step split of BAL's epoch is printed too.

    .venv/bin/python bench/bal.py                 # 5 seeds, ~25 min on 2 idle cores
    .venv/bin/python bench/bal.py --seeds 2 --sessions 30000 --skip-bert   # quicker look
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from wpultr.config import config_from_dict
from wpultr.methods.bal_config import VARIANTS
from wpultr.methods.losses import listwise_softmax_loss
from wpultr.methods.registry import get_method
from wpultr.methods.training import Trainer, build_ranker
from wpultr.metrics import evaluate
from wpultr.pipeline.cluster import open_client
from wpultr.rankers.base import score_frame
from wpultr.simulate import simulate

KS = ("DCG@1", "DCG@3", "DCG@5", "DCG@10", "ERR@1", "ERR@3", "ERR@5", "ERR@10")
REPO = Path(__file__).resolve().parents[1]


def base_config(seed: int, sessions: int, epochs: int) -> dict:
    return {
        "seed": seed,
        "data": {"simulate": {"n_queries": 600, "n_sessions": sessions, "n_annotated_queries": 600,
                              "user_model": "whole_page", "media_type_features": True, "media_type_consistency": 0.5,
                              "user_model_params": {"visibility_weight": 0.0,
                                                    "media_attention": [0.2, 0.5, 1.0, 1.0],
                                                    "media_attractiveness": [0.0, 0.0, 0.0, 0.0]},
                              "logging_noise": 1.0, "logging_media_boost": [0.0, 0.0, 1.0, 2.0]}},
        "ranker": {"backbone": "mlp", "head": [64, 32]},
        "train": {"epochs": epochs, "warmup_epochs": 1, "batch_size": 64, "learning_rate": 1e-3, "device": "cpu"},
        "discovery": {"n_sessions": 1000, "n_bootstrap": 0, "ci_test": "kci", "max_depth": 2},
        "bal": {"estimator_rows": 8000, "influence": {"epochs": 30, "patience": 4, "numerator": "model"}},
    }


def oracle(train: pd.DataFrame, truth: pd.DataFrame, valid: pd.DataFrame, cfg) -> object:
    """The same ranker trained on the true labels of the shown results (listwise softmax on gains)."""
    labels = train.merge(truth[["session_id", "position", "true_label"]], on=["session_id", "position"],
                         how="left", validate="one_to_one")["true_label"].to_numpy(np.float32)
    trainer = Trainer(build_ranker(cfg, train), train, valid, cfg)
    gains = trainer.lists.gather(np.exp2(labels) - 1.0)
    return trainer.fit(lambda s, b: listwise_softmax_loss(s, b.extras["gain"], b.mask), extras={"gain": gains},
                       epochs=cfg.train.epochs + cfg.train.warmup_epochs)


def one_seed(seed: int, sessions: int, epochs: int, client) -> tuple[dict, dict]:
    cfg_dict = base_config(seed, sessions, epochs)
    logs = simulate(config_from_dict(cfg_dict).data.simulate, seed=seed)
    train, annotations = logs.sessions, logs.annotations
    queries = np.sort(annotations["query_id"].unique())
    valid_q = np.random.default_rng(seed).choice(queries, size=len(queries) // 5, replace=False)
    valid = annotations[annotations["query_id"].isin(valid_q)]
    test = annotations[~annotations["query_id"].isin(valid_q)]
    rows, seconds = {}, {}
    runs = {"Naive": ("naive", {}), "BAL": ("bal", VARIANTS["bal"]), "PB-BAL": ("bal", VARIANTS["pb_bal"]),
            "FB-BAL": ("bal", VARIANTS["fb_bal"])}
    for label, (method, bal) in runs.items():
        cfg = config_from_dict({**cfg_dict, "train": {**cfg_dict["train"], "method": method},
                                "bal": {**cfg_dict["bal"], **bal}})
        start = time.perf_counter()
        result = get_method(method).fit(train, valid, cfg)
        scored = test.assign(score=score_frame(result.ranker, test))
        rows[label] = evaluate(scored, "score")["all"]
        trained = [e["seconds"] for e in result.history if e.get("phase") != "warmup"]
        seconds[label] = float(np.mean(trained))
        if label == "BAL":
            steps = [e["step_seconds"] for e in result.history if e.get("step_seconds")]
            seconds["BAL steps"] = {k: float(np.mean([st[k] for st in steps])) for k in steps[0]}
        print(f"  seed {seed} {label:7s} DCG@10 {rows[label]['DCG@10']:.3f}  {time.perf_counter() - start:.0f}s"
              f"  graph {result.history[-1].get('graph_edges', '')}", flush=True)
    cfg = config_from_dict(cfg_dict)
    ranker = oracle(train, logs.truth_sessions, valid, cfg)
    rows["Oracle"] = evaluate(test.assign(score=score_frame(ranker, test)), "score")["all"]
    return rows, seconds


def bert_on_sample(client) -> dict:
    from wpultr.pipeline.runner import run_pipeline
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config_from_dict({
            "name": "bal-bert", "seed": 0, "run_dir": f"{tmp}/{{name}}",
            "data": {"source": "baidu", "train": [str(REPO / "data/sample/train/*.gz")],
                     "annotations": str(REPO / "data/sample/annotations.tsv.gz"), "valid_fraction": 0.3},
            "ranker": {"backbone": "bert", "head": [64, 32], "bert": {"max_length": 48}},
            "train": {"method": "bal", "epochs": 2, "warmup_epochs": 1, "batch_size": 64},
            "discovery": {"n_sessions": 400, "n_bootstrap": 0, "max_depth": 2},
            "bal": {"estimator_rows": 5000, "influence": {"epochs": 30, "patience": 4}}})
        start = time.perf_counter()
        result = run_pipeline(cfg, client=client)
        history = json.loads((result.run_dir / "train/history.json").read_text())["epochs"]
        return {"seconds": round(time.perf_counter() - start, 1), "metrics": result.metrics["all"],
                "graph_last_epoch": history[-1].get("graph_edges")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--skip-bert", action="store_true")
    args = parser.parse_args()
    per_seed, timing = [], []
    with open_client() as client:
        for seed in range(args.seeds):
            rows, seconds = one_seed(seed, args.sessions, args.epochs, client)
            per_seed.append(rows)
            timing.append(seconds)
        bert = None if args.skip_bert else bert_on_sample(client)
    methods = list(per_seed[0])
    print(f"\nwhole-page simulator, MLP ranker, {args.seeds} seeds, {args.sessions} sessions, "
          f"{args.epochs} epochs after 1 warm-up (mean ± std over seeds)")
    print("| method | " + " | ".join(KS) + " |")
    print("|---" * (len(KS) + 1) + "|")
    for m in methods:
        cells = [f"{np.mean([r[m][k] for r in per_seed]):.3f} ± {np.std([r[m][k] for r in per_seed]):.3f}" for k in KS]
        print(f"| {m} | " + " | ".join(cells) + " |")
    d10 = {m: (np.mean([r[m]["DCG@10"] for r in per_seed]), np.std([r[m]["DCG@10"] for r in per_seed])) for m in methods}
    for other in ("Naive", "PB-BAL"):
        apart = d10["BAL"][0] - d10["BAL"][1] > d10[other][0] + d10[other][1]
        print(f"BAL above {other} with non-overlapping ±1 std on DCG@10: {apart} "
              f"({d10['BAL'][0] - d10['BAL'][1]:.3f} vs {d10[other][0] + d10[other][1]:.3f})")
    gaps = [(r["BAL"]["DCG@10"] - r["Naive"]["DCG@10"]) / (r["Oracle"]["DCG@10"] - r["Naive"]["DCG@10"])
            for r in per_seed]
    print(f"\nshare of the Naive -> oracle DCG@10 gap BAL closes: {np.mean(gaps):.1%} (per seed: "
          + ", ".join(f"{g:.1%}" for g in gaps) + ")")
    for m in ("BAL", "PB-BAL", "FB-BAL"):
        ratio = np.mean([t[m] for t in timing]) / np.mean([t["Naive"] for t in timing])
        print(f"seconds per epoch: {m} {np.mean([t[m] for t in timing]):.2f}, Naive "
              f"{np.mean([t['Naive'] for t in timing]):.2f}, ratio {ratio:.2f}x")
    steps = [t["BAL steps"] for t in timing]
    print("BAL epoch by step (s): " + ", ".join(f"{k} {np.mean([st[k] for st in steps]):.2f}" for k in steps[0]))
    if bert:
        print(f"\nBAL with the BERT backbone on data/sample: {json.dumps(bert)}")


if __name__ == "__main__":
    main()
