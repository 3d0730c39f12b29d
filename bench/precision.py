"""Same quality in bf16 (issue 43 part 3): DCG@10 of the BERT ranker trained in `train.precision: bf16` against fp32,
on the simulator, over seeds.

Per seed one simulated log (bench/worlds.py's `production` world); the demo's ranker and train sections with the
BERT backbone (the in-process tiny BERT, or `--base` for the BERT-base sizes on a GPU), one masked-LM warm-up epoch
and `--epochs` naive epochs, fitted once in fp32 and once in bf16 from the same initial weights; each ranker scored on
the test queries (four fifths of the annotated queries, a fifth validates) in its own precision. Printed: DCG@10 per
seed and precision, the paired difference over the test queries (p), and over seeds the mean ± standard error of
each; the claim holds when |mean bf16 − mean fp32| <= the standard error of fp32's mean.

    PYTHONPATH=. python bench/precision.py                                  # CPU, tiny BERT, 3 seeds
    PYTHONPATH=. python bench/precision.py --device cuda --base --sessions 20000
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import wpultr  # noqa: F401  first, as in `wpultr run`: its OpenMP wait policy is read when torch loads

# isort: split
import numpy as np
import torch

from worlds import WORLDS  # bench/worlds.py (the script's folder is on the path)
from wpultr.config import config_from_dict, read_yaml_mapping
from wpultr.evaluation.metrics import paired_test, per_query
from wpultr.rankers.base import score_frame
from wpultr.rankers.precision import scoring_precision
from wpultr.schema import QUERY_ID
from wpultr.settings.methods import get_method
from wpultr.simulate import simulate

DEMO = Path(__file__).resolve().parents[1] / "pipelines" / "demo.yaml"
BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}


def run_values(seed: int, args: argparse.Namespace, precision: str) -> dict:
    demo = read_yaml_mapping(DEMO)
    bert = {**(demo["ranker"].get("bert") or {}), **(BASE if args.base else {})}
    return {"seed": seed, "cluster": {"memory_limit": "auto"},
            "data": {"source": "simulate", "simulate": {**WORLDS["production"], "n_sessions": args.sessions,
                                                         "n_queries": args.queries, "n_annotated_queries": 100}},
            "ranker": {**demo["ranker"], "backbone": "bert", "bert": bert},
            "train": {**demo["train"], "epochs": args.epochs, "warmup_epochs": 1, "device": args.device,
                      "precision": precision}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=2, help="naive epochs after the masked-LM warm-up")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--base", action="store_true", help="BERT-base sizes (a GPU's work)")
    args = parser.parse_args()
    print(f"bf16 against fp32: {'BERT-base' if args.base else 'tiny BERT'} on {args.device}, {args.seeds} seeds, "
          f"{args.sessions} sessions, 1 warm-up + {args.epochs} epochs; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    dcg: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for seed in range(args.seeds):
        logs = simulate(config_from_dict(run_values(seed, args, "fp32")).data.simulate, seed=seed)
        annotations = logs.annotations
        queries = np.sort(annotations[QUERY_ID].unique())
        valid_q = np.random.default_rng(seed).choice(queries, size=len(queries) // 5, replace=False)
        valid = annotations[annotations[QUERY_ID].isin(valid_q)]
        test = annotations[~annotations[QUERY_ID].isin(valid_q)].reset_index(drop=True)
        tables = {}
        for precision in ("fp32", "bf16"):
            cfg = config_from_dict(run_values(seed, args, precision))
            start = time.perf_counter()
            result = get_method("naive").fit(logs.sessions, valid, cfg)
            seconds = time.perf_counter() - start
            scored = test.assign(score=score_frame(result.ranker, test, cfg.train.batch_size,
                                                   scoring_precision(precision, result.ranker.device)))
            tables[precision] = per_query(scored, "score", ks=(10,))
            dcg[precision].append(float(tables[precision]["DCG@10"].mean()))
            print(f"  seed {seed} {precision}: DCG@10 {dcg[precision][-1]:.4f} on {len(tables[precision])} test "
                  f"queries ({seconds:.1f} s, best epoch {result.bias.get('best_epoch')})", flush=True)
        p, diff, n = paired_test(tables["bf16"], tables["fp32"], "DCG@10", "all")
        print(f"  seed {seed}: bf16 - fp32 = {diff:+.4f} DCG@10 over {n} queries (paired p {p:.3f})", flush=True)

    def mean_se(values: list[float]) -> tuple[float, float]:
        return statistics.fmean(values), (statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0)
    (m32, se32), (m16, se16) = mean_se(dcg["fp32"]), mean_se(dcg["bf16"])
    gap = m16 - m32
    print(f"over {args.seeds} seeds: fp32 DCG@10 {m32:.4f} ± {se32:.4f} (SE), bf16 {m16:.4f} ± {se16:.4f}; "
          f"bf16 - fp32 = {gap:+.4f}: {'within' if abs(gap) <= se32 else 'NOT within'} one standard error of fp32")


if __name__ == "__main__":
    main()
