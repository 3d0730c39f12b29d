"""Where the gradient-boosted family's Naive → ceiling gap comes from in `bench/bal.py`'s worlds: bias or information.

`bench/bal.py` judges BAL with the LightGBM backbone by the share of the LambdaMART → Ceiling-GBDT DCG@10 gap it
closes, the ceiling being LambdaMART on clicks drawn with every result examined. That gap has two parts. One is
bias: which results were looked at skews the clicks. The other is information: a result nobody looked at says
nothing about its relevance, whatever the learner knows about the page. A debiaser can close only the first part.

This bench splits the gap on the logs themselves. Each shown result gets a latent (examined o, relevant R) drawn
from its posterior given its logged click under the simulator's true click model (a click: o = R = 1; a skip:
(o, R) ∈ {(1, 0), (0, 1), (0, 0)} in proportion to e(1 − r), (1 − e)r and (1 − e)(1 − r), e and r the true
examination and click-if-examined chances). All are λ-gradient boosters with the settings `bench/bal.py` gives
LambdaMART, scored on the same held-out test queries:

* **LambdaMART**: on the logged clicks, all shown results (the baseline).
* **Seen-only**: on the logged clicks of the results that were examined (o = 1) only: perfect knowledge of who
  looked at what. Among seen results a click is relevance, so no bias is left; but the unseen results are dropped,
  and with them what the logging ranker's order says about them (a skip low on the page is also a vote of the
  logging ranker, which LambdaMART on all results learns from).
* **Oracle-IPW**: LambdaMART's λ-pairs with each click weighted by 1 / its true examination (`bench/bal.py`'s
  Oracle-IPW-GBDT, the step of BAL-GBDT-lambda-click with a perfect examination estimate).
* **Oracle-exam**: BAL-GBDT-lambda's posterior step given the true examination, each document's relevance
  learned from its clicks (`bench/bal.py`'s Oracle-exam-GBDT).
* **Ceiling**: on R for every shown result (the ceiling of `bench/bal.py`, on the same draws of the seen results).

The three middle rows are three ways to use a perfect estimate of the bias; none sees a click the logs do not hold.
Printed per seed and as a mean: DCG@10 of each, the share of the LambdaMART → Ceiling gap each closes, and the
paired t-test over test queries against LambdaMART.

    .venv/bin/python bench/gbdt_gap.py                          # production world, 5 seeds, 50 000 sessions
    .venv/bin/python bench/gbdt_gap.py --world default --seeds 3
"""
from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import pandas as pd

from bal import (
    METHODS,
    WORLDS,
    base_config,
    oracle_examination,
    oracle_ipw,
    paired_test,
    split_annotations,
    test_metrics,
    true_examination,
    truth_of,
    with_overrides,
)
from wpultr.cluster import open_client
from wpultr.config import config_from_dict
from wpultr.schema import CLICK
from wpultr.settings.methods import get_method
from wpultr.simulate import simulate

LABELS = ("LambdaMART", "Seen-only", "Oracle-IPW", "Oracle-exam", "Ceiling")


def latent_draws(clicks: np.ndarray, exam: np.ndarray, relevance: np.ndarray, seed: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(o, R) per shown result drawn from their posterior given the logged click under p(c) = e·r (module doc)."""
    u = np.random.default_rng(seed + 104729).random(len(clicks))
    e, r = np.clip(exam, 0.0, 1.0), np.clip(relevance, 0.0, 1.0)
    no_click = np.maximum(1.0 - e * r, 1e-12)
    seen_irrelevant = e * (1.0 - r) / no_click
    unseen_relevant = (1.0 - e) * r / no_click
    clicked = clicks > 0
    seen = clicked | (u < seen_irrelevant)
    relevant = clicked | (~seen & (u < seen_irrelevant + unseen_relevant))
    return seen, relevant.astype(np.int8)


def one_seed(world: str, seed: int, sessions: int, epochs: int) -> dict[str, pd.DataFrame]:
    values = base_config(seed, sessions, epochs, WORLDS[world])
    logs = simulate(config_from_dict(values).data.simulate, seed=seed)
    train, truth = logs.sessions, logs.truth_sessions
    valid, test = split_annotations(logs.annotations, seed)
    exam = true_examination(train, truth)
    click_prob = truth_of(train, truth, "click_prob")["click_prob"].to_numpy(np.float64)
    seen, relevant = latent_draws(train[CLICK].to_numpy(), exam, click_prob / np.maximum(exam, 1e-12), seed)
    cfg = config_from_dict(with_overrides(values, METHODS["LambdaMART"]))
    lambdamart = get_method(cfg.train.method)

    def measured(ranker: Any) -> pd.DataFrame:
        return test_metrics(ranker, test)

    out = {"LambdaMART": measured(lambdamart.fit(train, valid, cfg).ranker),
           "Seen-only": measured(lambdamart.fit(train[seen].reset_index(drop=True), valid, cfg).ranker),
           "Oracle-IPW": measured(oracle_ipw(train, truth, valid, config_from_dict(
               with_overrides(values, METHODS["BAL-GBDT-lambda-click"])), boosted=True)),
           "Oracle-exam": measured(oracle_examination(train, truth, valid, config_from_dict(
               with_overrides(values, METHODS["BAL-GBDT-lambda"])))),
           "Ceiling": measured(lambdamart.fit(train.assign(**{CLICK: relevant}), valid, cfg).ranker)}
    print(f"  {world} seed {seed}: " + ", ".join(f"{k} {v['DCG@10'].mean():.3f}" for k, v in out.items())
          + f"  (seen {seen.mean():.1%} of shown results)", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", default="production", choices=sorted(WORLDS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=50_000)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    start = time.perf_counter()
    with open_client():
        runs = [one_seed(args.world, seed, args.sessions, args.epochs) for seed in range(args.seeds)]
    print(f"\n## {args.world}: {args.seeds} seeds, {args.sessions} sessions ({time.perf_counter() - start:.0f} s)")
    print("| | DCG@10 | share of the LambdaMART → Ceiling gap (per seed) | better / worse than LambdaMART (seeds) |")
    print("|---|---|---|---|")
    for label in LABELS:
        dcg = [r[label]["DCG@10"].mean() for r in runs]
        shares = [(r[label]["DCG@10"].mean() - r["LambdaMART"]["DCG@10"].mean())
                  / (r["Ceiling"]["DCG@10"].mean() - r["LambdaMART"]["DCG@10"].mean()) for r in runs]
        tests = [paired_test(r[label], r["LambdaMART"], "DCG@10", "all") for r in runs] if label != "LambdaMART" else []
        better = sum(1 for p, d, _ in tests if p < 0.05 and d > 0)
        worse = sum(1 for p, d, _ in tests if p < 0.05 and d < 0)
        print(f"| {label} | {np.mean(dcg):.3f} ± {np.std(dcg):.3f} | {np.mean(shares):.1%} "
              f"({', '.join(f'{s:.0%}' for s in shares)}) | {f'{better} / {worse}' if tests else '—'} |")


if __name__ == "__main__":
    main()
