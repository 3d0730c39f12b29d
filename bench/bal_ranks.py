"""BAL's epoch at 1 rank and at N DDP ranks (`train.processes`), one torch thread each, against Naive's (issue 43).

On the production world's logs (bench/worlds.py) with the MLP ranker and BAL's shipped defaults (bench/bal.py's
config), each of Naive and BAL is fitted with 1 and with `--ranks` processes, `ranker.dropout: 0` (rank-exact),
every process on one torch thread (`OMP_NUM_THREADS=1`), discovery on the same 2-worker LocalCluster for all. Printed:

* seconds per trained epoch, and BAL's by step (score, graph, weights, click model, ranker), at each rank count
  (the mean of `--rounds` timing rounds, the order reversed every other round: the machine's speed drifts);
* the speedup of N ranks over 1 for each method (target for BAL >= 1.6x at 2 ranks) and BAL's epoch over Naive's
  at the same rank count (the carried figure: 1.73x at 1 rank, 200 000 sessions, docs/benchmarks.md);
* the rank-exact check: the largest difference between the 1-rank and the N-rank ranker (parameters, and scores of
  the test queries), and whether every epoch's graph is the same.

    .venv/bin/python bench/bal_ranks.py --sessions 200000          # the issue's measurement (a quiet machine)
    .venv/bin/python bench/bal_ranks.py --sessions 200000 --head 512,256,128 --batch-size 256 --epochs 1
    .venv/bin/python bench/bal_ranks.py --sessions 3000 --epochs 1 --rounds 1   # a quick look

What sets the speedup: every rank runs each step's fixed costs (the batch's bookkeeping, the optimiser step over
every parameter) and waits for one gloo all-reduce of the gradients over loopback (~1-5 ms for these MLPs); only
the forward and backward passes over the rows are split. `--head` and `--batch-size` give each step more work per
all-reduce (a wider ranker, larger batches), the regime in which data parallelism pays.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np
import torch

from bal import METHODS, base_config, epoch_seconds, split_annotations, with_overrides  # bench/bal.py
from worlds import WORLDS
from wpultr.cluster import open_client
from wpultr.config import config_from_dict
from wpultr.rankers.base import score_frame
from wpultr.settings.methods import get_method
from wpultr.simulate import simulate

STEPS = ("score", "graph", "weights", "click_model", "ranker")


def fit(label: str, values: dict[str, Any], ranks: int, train: Any, valid: Any) -> Any:
    cfg = config_from_dict(with_overrides(values, {**METHODS[label], "train.processes": ranks, "ranker.dropout": 0.0}))
    return get_method(cfg.train.method).fit(train, valid, cfg)


def step_seconds(result: Any) -> dict[str, float]:
    """BAL's mean seconds per epoch in each step (its history's `step_seconds`); {} for a method without steps."""
    epochs = [e["step_seconds"] for e in result.history if e.get("phase") == "bal" and "step_seconds" in e]
    return {s: float(np.mean([e.get(s, 0.0) for e in epochs])) for s in STEPS} if epochs else {}


def rank_exact(one: Any, many: Any, test: Any) -> dict[str, Any]:
    """How far the N-rank ranker is from the 1-rank one: parameters, test-query scores, graphs."""
    a, b = one.ranker.state_dict(), many.ranker.state_dict()
    params = max(float((a[k] - b[k]).abs().max()) for k in a)
    scores = float(np.abs(score_frame(one.ranker, test) - score_frame(many.ranker, test)).max())
    graphs = [g.to_dict()["edges"] for g in one.graphs] == [g.to_dict()["edges"] for g in many.graphs]
    return {"max_parameter_difference": params, "max_test_score_difference": scores, "same_graphs": graphs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=2, help="BAL's and Naive's trained epochs (a warm-up first)")
    parser.add_argument("--ranks", type=int, default=2, help="the DDP ranks set against 1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--world", default="production", choices=sorted(WORLDS))
    parser.add_argument("--rounds", type=int, default=2, help="timing rounds, the order reversed every other one")
    parser.add_argument("--head", help="the MLP's hidden widths, e.g. 512,256,128 (default: bench/bal.py's 64,32)")
    parser.add_argument("--batch-size", type=int, help="sessions per global batch (default: bench/bal.py's 64)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(1)                  # this process's fits; the ranks and the Dask workers inherit the env
    os.environ["OMP_NUM_THREADS"] = "1"
    values = base_config(args.seed, args.sessions, args.epochs, WORLDS[args.world])
    values = with_overrides(values, {**({"ranker.head": [int(w) for w in args.head.split(",")]} if args.head else {}),
                                     **({"train.batch_size": args.batch_size} if args.batch_size else {})})
    logs = simulate(config_from_dict(values).data.simulate, seed=args.seed)
    valid, test = split_annotations(logs.annotations, args.seed)
    print(f"{args.world} world, {args.sessions} sessions ({len(logs.sessions)} shown results), {args.epochs} "
          f"epoch(s), 1 and {args.ranks} ranks, one torch thread each; MLP head {values['ranker']['head']}, "
          f"{values['train']['batch_size']} sessions a batch", flush=True)
    timed: dict[tuple[str, int], list[dict[str, Any]]] = {}
    fits: dict[tuple[str, int], Any] = {}
    order = [(label, ranks) for ranks in (1, args.ranks) for label in ("Naive", "BAL")]
    with open_client() as client:
        client.wait_for_workers(2)            # the workers' start-up is not any fit's time
        for round_ in range(args.rounds):     # the machine's speed drifts: every other round in reverse order
            for label, ranks in (order if round_ % 2 == 0 else order[::-1]):
                fits[label, ranks] = result = fit(label, values, ranks, logs.sessions, valid)
                timed.setdefault((label, ranks), []).append({"seconds": epoch_seconds(result),
                                                             **step_seconds(result)})
                print(f"  round {round_ + 1}: {label} at {ranks} rank(s): {epoch_seconds(result):.2f} s/epoch",
                      flush=True)
    rows = {key: {k: float(np.mean([r[k] for r in runs])) for k in runs[0]} for key, runs in timed.items()}
    rows = {key: rows[key] for key in order}
    print(f"\n{'method':<7} {'ranks':>5} {'s/epoch':>8} " + " ".join(f"{s:>11}" for s in STEPS))
    for (label, ranks), row in rows.items():
        print(f"{label:<7} {ranks:>5} {row['seconds']:>8.2f} "
              + " ".join(f"{row[s]:>11.2f}" if s in row else f"{'':>11}" for s in STEPS))
    summary: dict[str, Any] = {"sessions": args.sessions, "ranks": args.ranks, "rounds": args.rounds,
                               "head": values["ranker"]["head"], "batch_size": values["train"]["batch_size"],
                               "seconds": {f"{label}@{ranks}": row for (label, ranks), row in rows.items()}}
    print()
    for label in ("BAL", "Naive"):
        speedup = rows[label, 1]["seconds"] / rows[label, args.ranks]["seconds"]
        summary[f"{label}_speedup"] = speedup
        target = " (target >= 1.6x)" if label == "BAL" and args.ranks == 2 else ""
        print(f"{label} speedup, {args.ranks} ranks over 1: {speedup:.2f}x{target}")
    for ranks in (1, args.ranks):
        ratio = rows["BAL", ranks]["seconds"] / rows["Naive", ranks]["seconds"]
        summary[f"BAL_over_Naive@{ranks}"] = ratio
        carried = " (carried: 1.73x at 200 000 sessions)" if ranks == 1 else ""
        print(f"BAL epoch / Naive epoch at {ranks} rank(s): {ratio:.2f}x{carried}")
    exact = rank_exact(fits["BAL", 1], fits["BAL", args.ranks], test)
    summary["rank_exact"] = exact
    print(f"rank-exact (BAL, 1 vs {args.ranks} ranks): largest parameter difference "
          f"{exact['max_parameter_difference']:.2e}, largest test-score difference "
          f"{exact['max_test_score_difference']:.2e}, same graphs every epoch: {exact['same_graphs']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
