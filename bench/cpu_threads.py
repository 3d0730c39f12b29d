"""Seconds and minor page faults of one influence-estimator fit by torch's CPU threads: what `bal.cpu_threads` caps.

The fit is BAL's own (`bal.influence.fit_influence_estimators`, position | r̂ on a synthetic log of `--rows` rows,
`--epochs` epochs without early stopping), run twice per setting after one untimed warm-up fit (a process's first
fit pays torch's one-time set-up). Settings: thread counts, and `cuda` for the estimators on the GPU. Prints one
line a setting; the fastest count on the machine is what `bal.cpu_threads` should be set to there:

    PYTHONPATH=. python bench/cpu_threads.py 1 2 4 8 16 cuda
"""
from __future__ import annotations

import argparse
import os
import resource
import time

import wpultr  # noqa: F401  first, as in `wpultr run`: its OpenMP wait policy is read when torch loads

# isort: split
import numpy as np
import pandas as pd
import torch

from wpultr.bal.cpu_threads import torch_threads
from wpultr.bal.influence import fit_influence_estimators
from wpultr.causal.biases import BiasReport, ConfoundedFeature
from wpultr.schema import POSITION, RELEVANCE_SCORE
from wpultr.settings.bal_weighting import InfluenceConfig


def synthetic_nodes(rows: int, seed: int = 0) -> pd.DataFrame:
    """r̂ and a position that follows it (better results shown higher), as the weights step sees them."""
    rng = np.random.default_rng(seed)
    r = rng.normal(size=rows)
    position = np.clip(np.round(5 - 2 * r + 2 * rng.normal(size=rows)), 1, 10)
    return pd.DataFrame({RELEVANCE_SCORE: r.astype(np.float32), POSITION: position.astype(np.float32)})


def timed_fit(nodes: pd.DataFrame, config: InfluenceConfig) -> tuple[float, int]:
    """(seconds, minor page faults) of one fit of the estimators of a position confounded by r̂."""
    report = BiasReport((ConfoundedFeature(POSITION, (RELEVANCE_SCORE,), 1),), (POSITION,), (RELEVANCE_SCORE, POSITION))
    faults, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    fit_influence_estimators(nodes, report, {POSITION: "continuous"}, config, seed=0)
    return time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("settings", nargs="*", default=["1", "2", "4"], help="thread counts, or cuda")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    nodes = synthetic_nodes(args.rows)
    print(f"cpu threads: torch {torch.__version__}, default threads {torch.get_num_threads()}, {os.cpu_count()} cpus, "
          f"{args.rows} rows, {args.epochs} epochs a fit", flush=True)
    timed_fit(nodes, InfluenceConfig(epochs=2, patience=100))                 # one-time set-up, untimed
    for setting in args.settings:
        cuda = not setting.isdigit()
        config = InfluenceConfig(epochs=args.epochs, patience=10 * args.epochs, device=setting if cuda else "cpu")
        with torch_threads(None if cuda else int(setting)) as threads:
            runs = [timed_fit(nodes, config) for _ in range(2)]
        label = setting if cuda else f"{threads} threads"
        print(f"{label:>11}: " + ", ".join(f"{s:.2f} s ({f} minor faults)" for s, f in runs)
              + f"; {min(s for s, _ in runs) / args.epochs * 1000:.0f} ms an epoch", flush=True)


if __name__ == "__main__":
    main()
