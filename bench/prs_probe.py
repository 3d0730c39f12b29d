"""Propensity Ratio Scoring (paper 003) in process: the pair weightings of `pipelines/reproduce/prs.yaml` fitted on
one simulated log per (setting, seed), with paired tests over the same test queries.

Each (setting, seed) resolves the YAML's runs (its base with the `--set` overrides, then the named setting's own
keys, as the harness does), simulates the log once, splits the annotated queries into validation and test as the
split stage does (`io.split.split_queries`: 400 test queries at the YAML's sizes), and fits every method of `--methods`
(labels of the YAML) on that log in this process: the harness's configs, data and split without its ingest, so a fit
takes seconds, not minutes (checked: seed 0 of the default setting gives the harness's nDCG@10 to the last digit for
IPS-LR, PRS-LR, IPS- and PRS-LambdaMART). Like the harness, training keeps every query's sessions (the paper's clicks
cover its training queries; here the test queries' clicks are simulated the same way and stay in).
`--oracle` adds `IPS-LR+oracle`: IPS-LR on the sessions with the skipped relevant results (binary relevance,
grade >= 3) removed — the negatives Eq. 10 of the paper wants, which no method can see, so it measures the gain
that cleaning the negatives would bring. `--full-info` adds the paper's skyline (§5: "the Full-Info ranker trained
with fully-labeled data"), one per learner among --methods: that learner's Naive config trained on the same shown
lists with every result labelled by its binary relevance instead of its click (`Full-Info-LR`, `Full-Info-LambdaMART`).

One JSON line per (setting, seed) goes to --out: each method's nDCG@10 and, against the first method, the paired
t-test over the test queries (`metrics.paired_test`). `--summary` prints mean ± std over seeds and how many seeds
each difference is significant in:

    nice -n 10 .venv/bin/python bench/prs_probe.py --settings eta1_mu0.1 eta2 mu0.4 --seeds 0 1 2 3 4 \
        --methods IPS-LR Naive-LR PNS-LR PRS-LR --oracle --out runs/prs/probe.jsonl
    .venv/bin/python bench/prs_probe.py --summary runs/prs/probe.jsonl
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# bench/seed_tables.py, shared with bench/pairwise_size.py
from seed_tables import (
    add_output_arguments,
    append_record,
    check_out,
    fit_and_score,
    paired_entry,
    print_summary,
    run_configs,
    validation_and_test,
)
from wpultr.config import parse_overrides
from wpultr.schema import CLICK, query_key
from wpultr.simulate import simulate

YAML = Path(__file__).resolve().parents[1] / "pipelines" / "reproduce" / "prs.yaml"
ORACLE = "IPS-LR+oracle"          # IPS-LR without the skipped relevant results among its negatives
RELEVANT_GRADE = 3                # the prs user model's binary relevance: grades 3-4 of 0-4 (§4.3)
FULL_INFO = "Full-Info-{learner}"  # the skyline: the learner's Naive config on every shown result's true relevance
LEARNERS = ("LR", "LambdaMART")    # the YAML's labels end in -<learner>


def full_info_frame(sessions: pd.DataFrame, true_label: np.ndarray) -> pd.DataFrame:
    """The shown lists fully labelled: each result's click replaced by its binary relevance (grade >= 3), so that the
    Naive weighting (every pair weight 1) trains on ground truth, not on what users happened to examine."""
    return sessions.assign(**{CLICK: (np.asarray(true_label) >= RELEVANT_GRADE).astype(sessions[CLICK].dtype)})


def full_info_runs(methods: list[str]) -> list[tuple[str, str]]:
    """(label, config label) of the Full-Info row of each learner that `methods` uses, in LEARNERS order."""
    used = [learner for learner in LEARNERS if any(m.endswith(f"-{learner}") for m in methods)]
    return [(FULL_INFO.format(learner=learner), f"Naive-{learner}") for learner in used]


def one_log(setting: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    skylines = full_info_runs(args.methods) if args.full_info else []
    labels = list(dict.fromkeys(args.methods + (["IPS-LR"] if args.oracle else []) + [c for _, c in skylines]))
    configs = run_configs(YAML, setting, seed, {f"base.{k}": v for k, v in args.sets.items()}, labels)
    first = next(iter(configs.values()))
    start = time.perf_counter()
    logs = simulate(first.data.simulate, seed)
    sessions, annotations = logs.sessions, logs.annotations
    valid, test = validation_and_test(annotations, first.data.valid_fraction, seed)
    true_label = logs.truth_sessions["true_label"].to_numpy()
    relevant_skipped = (sessions[CLICK].to_numpy() == 0) & (true_label >= RELEVANT_GRADE)
    record: dict[str, Any] = {"setting": setting, "seed": seed, "sets": args.sets,
                              "test_queries": int(query_key(test).nunique()),
                              "sessions": int(sessions["session_id"].nunique()), "clicks": int(sessions[CLICK].sum()),
                              "relevant_skipped_rows": int(relevant_skipped.sum()),
                              "simulate_seconds": round(time.perf_counter() - start, 1), "methods": {}}
    fits = [(m, m, sessions) for m in args.methods]
    if args.oracle:
        fits.append((ORACLE, "IPS-LR", sessions[~relevant_skipped].reset_index(drop=True)))
    if skylines:
        labelled = full_info_frame(sessions, true_label)
        fits += [(label, config_label, labelled) for label, config_label in skylines]
    tables = {}
    for label, config_label, frame in fits:
        _, tables[label], seconds = fit_and_score(configs[config_label], frame, valid, test, ks=(10,))
        record["methods"][label] = {"nDCG@10": float(tables[label]["nDCG@10"].mean()), "seconds": round(seconds, 1)}
    base = fits[0][0]
    record["paired"] = {f"{label} - {base}": paired_entry(tables[label], tables[base]) for label in list(tables)[1:]}
    return record


def summary(path: Path) -> None:
    print_summary(path, lambda r: (r["setting"], json.dumps(r.get("sets", {}), sort_keys=True)),
                  lambda key: f"{key[0]} sets={key[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", default=["eta1_mu0.1"], help="setting names of the YAML")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=["IPS-LR", "PRS-LR"],
                        help="labels of the YAML; the first is what the others are paired against")
    parser.add_argument("--oracle", action="store_true", help=f"add {ORACLE} (IPS without relevant negatives)")
    parser.add_argument("--full-info", action="store_true",
                        help="add the paper's Full-Info skyline per learner (its Naive config on true relevance)")
    add_output_arguments(parser, "runs/prs/probe.jsonl", "train.epochs=8")
    args = parser.parse_args()
    if args.summary:
        summary(args.summary)
        return
    args.sets = parse_overrides(args.sets)
    args.out = check_out(args.out)   # before any log is fitted: never a user's file
    for setting, seed in itertools.product(args.settings, args.seeds):
        record = one_log(setting, seed, args)
        append_record(args.out, record)
        print(f"{setting} seed={seed}: " + ", ".join(f"{m} {v['nDCG@10']:.4f} ({v['seconds']:.0f}s)"
                                                      for m, v in record["methods"].items())
              + " | " + json.dumps({k: [round(v["diff"], 4), float(f"{v['p']:.3g}")]
                                    for k, v in record["paired"].items()}), flush=True)


if __name__ == "__main__":
    main()
