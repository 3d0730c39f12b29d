"""Training cost of the baselines relative to Naive, measured in one run on the same data.

Data: `simulate` with the whole-page user model (default SimulateConfig but --sessions sessions, 10
results per page, 16 dense features), seed 0. Every neural method trains the MLP ranker (the BAL §4.1
head 512-256-128 unless --head) for --epochs epochs with the same batch size, learning rate and seed,
validating on the simulated annotations after each epoch as a run does.

Printed per method: seconds per training epoch (the mean over epochs of the trainer's own per-epoch
timing, which excludes validation), that figure over Naive's, the set-up time outside the epochs
(e.g. IPW's RandPair experiment and propensity estimate, building the ranker and inputs) and the whole
fit's wall time. The LightGBM anchors have no epochs: their row gives the boosting time of the whole
fit (--rounds rounds) and its ratio to one Naive epoch; PRS-LambdaMART (`propensity_lambdamart`) boosts
in epochs of ranker.lightgbm.rounds_per_epoch (50) rounds and is timed per epoch like the neural methods.
Naive runs first and again last (after an untimed warm-up fit), and the ratios use the mean of its two
timings, so drift in the machine's load shows.
Threads: --threads for torch and LightGBM alike (default 1, which is stable on a shared machine).

    .venv/bin/python bench/methods.py [--sessions 4000] [--epochs 2] [--rounds 200] [--json out.json]
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch

from outputs import check_json_output, write_json_output  # bench/outputs.py: --json replaces only its own file
from wpultr.config import RunConfig
from wpultr.settings.methods import get_method
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate

METHODS = ("naive", "ipw", "regression_em", "dla", "pairwise_debias", "lightgbm_lambdarank", "lightgbm_position",
           "propensity_pairs", "propensity_lambdamart",   # PRS pairs on the MLP; PRS-LambdaMART per 50-round epoch
           "pairwise_framework", "robust_lambdamart", "unbiased_lambdamart")   # 004: Eq. 10 on the MLP; Eq. 26 and
#                                                             Hu et al. as LightGBM objectives, per 50-round epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--head", type=int, nargs="+", default=[512, 256, 128])
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch and LightGBM threads, the same for every method (1: stable on a shared box)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    check_json_output(args.json)     # before anything is measured: a file of the user's is never replaced

    torch.set_num_threads(args.threads)
    sim = SimulateConfig(n_sessions=args.sessions, results_per_page=10, n_dense_features=16, user_model="whole_page")
    start = time.perf_counter()
    logs = simulate(sim, seed=0)
    sessions, annotations = logs.sessions, logs.annotations
    print(f"data: whole_page simulation, {args.sessions} sessions, {len(sessions)} rows, "
          f"{len(annotations)} validation rows ({time.perf_counter() - start:.1f} s); "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, "
          f"{platform.processor() or platform.machine()}")

    def config(name: str) -> RunConfig:
        cfg = RunConfig()
        cfg.data.simulate = sim
        cfg.ranker.head = list(args.head)
        cfg.train.method = name
        cfg.train.epochs = args.epochs
        cfg.train.batch_size = args.batch_size
        cfg.train.device = "cpu"
        cfg.ranker.lightgbm.rounds = args.rounds
        cfg.ranker.lightgbm.num_threads = args.threads      # the lambdarank and the boosted methods
        return cfg

    # warm-up (lazy imports, allocator, first-call costs), not timed
    small = sessions[sessions["session_id"] < sessions["session_id"].min() + 50]
    warm = config("naive")
    warm.train.epochs = 1
    get_method("naive").fit(small, annotations.head(50), warm)

    rows = []
    order = list(args.methods) + (["naive"] if "naive" in args.methods and len(args.methods) > 1 else [])
    for name in order:           # Naive first and last: its two timings bracket the run's drift
        cfg = config(name)
        start = time.perf_counter()
        result = get_method(name).fit(sessions, annotations, cfg)
        wall = time.perf_counter() - start
        epochs = [h for h in result.history if h.get("phase") != "warmup"]
        train_seconds = float(sum(h["seconds"] for h in epochs))
        lightgbm = name.startswith("lightgbm")
        per_epoch = train_seconds if lightgbm else train_seconds / max(len(epochs), 1)
        best = result.history[-1]["valid"] or {}
        rows.append({"method": name, "seconds_per_epoch": per_epoch, "setup_seconds": wall - train_seconds,
                     "fit_seconds": wall, "epochs": 1 if lightgbm else len(epochs),
                     "last_DCG@10": best.get("DCG@10"), "kind": "whole fit" if lightgbm else "per epoch"})
    naive_runs = [r["seconds_per_epoch"] for r in rows if r["method"] == "naive"]
    naive = float(np.mean(naive_runs)) if naive_runs else None
    if len(naive_runs) > 1:
        print(f"naive s/epoch, first and last run: {naive_runs[0]:.3f}, {naive_runs[1]:.3f}; ratios use their mean")
    print(f"{'method':<22}{'s/epoch':>10}{'x naive':>9}{'setup s':>9}{'fit s':>8}{'DCG@10':>8}  note")
    for r in rows:
        r["relative_to_naive"] = r["seconds_per_epoch"] / naive if naive else None
        note = f"boosting, {args.rounds} rounds (whole fit)" if r["kind"] == "whole fit" else f"{r['epochs']} epochs"
        ratio = f"{r['relative_to_naive']:.2f}" if r["relative_to_naive"] is not None else "-"
        dcg = f"{r['last_DCG@10']:.2f}" if r["last_DCG@10"] is not None else "-"
        print(f"{r['method']:<22}{r['seconds_per_epoch']:>10.3f}{ratio:>9}{r['setup_seconds']:>9.2f}"
              f"{r['fit_seconds']:>8.2f}{dcg:>8}  {note}")
    if args.json:
        write_json_output(args.json, {"sessions": args.sessions, "epochs": args.epochs, "rounds": args.rounds,
                                      "head": args.head, "threads": args.threads, "rows": rows})


if __name__ == "__main__":
    main()
