"""ULM against RULM (paper 004) as the number of training lists grows: the paired nDCG@10 difference per seed.

Each (setting, lists, seed) simulates one log from `pipelines/reproduce/pairwise_framework.yaml` (its base, the
named setting, `--set` overrides on top), with `lists / --replays` training queries (004 §6.1 replays every query's
list 16 times) and `--annotated` annotated queries more; every method of `--methods` (labels of the YAML) is fitted
on the same log in this process and scored on the same held-out test queries. The annotated queries are split into
validation and test by the seed as the split stage does, and with `--unseen` (the default, as in the paper, whose test
queries are Yahoo's test part) their sessions are dropped from the training log, so the test queries are unseen.

One JSON line per (setting, lists, seed) goes to --out: each method's nDCG@k, and per pair of methods the paired
t-test over the test queries (`metrics.paired_test`). `--summary` prints mean ± std over seeds per size.

    nice -n 10 .venv/bin/python bench/pairwise_size.py --settings continuous_30 independent_30 \
        --lists 2000 8000 32000 --seeds 0 1 2 --out runs/pw/size.jsonl
    .venv/bin/python bench/pairwise_size.py --summary runs/pw/size.jsonl
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import seed_tables  # bench/seed_tables.py, shared with bench/prs_probe.py
from wpultr.config import parse_overrides
from wpultr.schema import QUERY_ID, QUERY_KEY, query_key
from wpultr.simulate import simulate

YAML = Path(__file__).resolve().parents[1] / "pipelines" / "reproduce" / "pairwise_framework.yaml"
KS = (1, 3, 5, 10)
# the paper's upper bound, LambdaMART on the labelled data: LambdaMART-clicks' config on the shown lists' true grades
LABELS_OF = {"LambdaMART-labels": "LambdaMART-clicks"}


def run_configs(setting: str, lists: int, seed: int, replays: int, annotated: int, sets: dict[str, Any],
                methods: list[str]) -> dict[str, Any]:
    """Each method's resolved run config for one (setting, lists, seed), from the YAML and the overrides:
    `lists / replays` training queries plus `annotated` annotated ones, sessions spread evenly over all of them
    (zipf_exponent 0), so that the training queries hold `lists` lists on average."""
    train_queries = max(lists // replays, 1)
    n_queries = train_queries + annotated
    overrides = {"base.data.simulate.n_sessions": int(round(lists * n_queries / train_queries)),
                 "base.data.simulate.n_queries": n_queries, "base.data.simulate.n_annotated_queries": annotated}
    overrides.update({f"base.{k}": v for k, v in sets.items()})
    return seed_tables.run_configs(YAML, setting, seed, overrides, methods)


def one_log(setting: str, lists: int, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    wanted = [LABELS_OF.get(m, m) for m in args.methods]
    configs = run_configs(setting, lists, seed, args.replays, args.annotated, args.sets, list(dict.fromkeys(wanted)))
    configs = {m: configs[LABELS_OF.get(m, m)] for m in args.methods}
    first = next(iter(configs.values()))
    start = time.perf_counter()
    logs = simulate(first.data.simulate, seed)
    sessions, annotations = logs.sessions.assign(true_label=logs.truth_sessions["true_label"].to_numpy()), \
        logs.annotations
    valid, test = seed_tables.validation_and_test(annotations, first.data.valid_fraction, seed)
    if args.unseen:
        sessions = sessions[~sessions[QUERY_ID].isin(set(annotations[QUERY_ID]))].reset_index(drop=True)
    record: dict[str, Any] = {"setting": setting, "lists": lists, "seed": seed, "unseen": args.unseen,
                              "annotated": args.annotated,
                              "labels_once": args.labels_once,
                              "train_lists": int(sessions["session_id"].nunique()),
                              "test_queries": int(query_key(test).nunique()), "sets": args.sets,
                              "clicks_per_list": float(sessions["click"].sum() / sessions["session_id"].nunique()),
                              "simulate_seconds": round(time.perf_counter() - start, 1), "methods": {}}
    tables = {}
    for label, cfg in configs.items():
        frame = sessions
        if label in LABELS_OF:     # the labelled data: grades as gains, each query's list once (replays are copies)
            kept = sessions.groupby(QUERY_ID)["session_id"].min() if args.labels_once else sessions["session_id"]
            frame = sessions[sessions["session_id"].isin(kept)].assign(click=lambda f: f["true_label"])
        result, tables[label], seconds = seed_tables.fit_and_score(cfg, frame.drop(columns="true_label"), valid, test,
                                                                   ks=KS)
        record["methods"][label] = {**{f"nDCG@{k}": float(tables[label][f"nDCG@{k}"].mean()) for k in KS},
                                    "seconds": round(seconds, 1),
                                    "best_epoch": result.bias.get("best_epoch"),
                                    **({"t_minus": result.bias["t_minus"]} if "t_minus" in result.bias else {})}
    record["per_query"] = {label: (dict(zip(t[QUERY_KEY].astype(str), t["nDCG@10"].round(6), strict=True))
                                   if QUERY_KEY in t else {})
                           for label, t in tables.items()}     # to pair runs of one log afterwards
    record["paired"] = {f"{b} - {a}": seed_tables.paired_entry(tables[b], tables[a])
                        for a, b in itertools.combinations(configs, 2)}
    return record


def summary(path: Path) -> None:
    seed_tables.print_summary(
        path, lambda r: (r["setting"], json.dumps(r.get("sets", {}), sort_keys=True), r["unseen"], r["lists"],
                         r.get("annotated", 400)),      # lines written before the key held the default 400
        lambda key: f"{key[0]} lists={key[3]} annotated={key[4]} unseen={key[2]} sets={key[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", default=["continuous_30", "independent_30"])
    parser.add_argument("--lists", type=int, nargs="+", default=[2000, 8000, 32000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=["LambdaMART-clicks", "ULM", "RULM"])
    parser.add_argument("--replays", type=int, default=16, help="lists per query (004 §6.1: 16)")
    parser.add_argument("--annotated", type=int, default=400,
                        help="annotated queries besides the training ones (data.valid_fraction of them validate)")
    parser.add_argument("--unseen", action=argparse.BooleanOptionalAction, default=True,
                        help="drop the annotated queries' sessions from training (the paper's disjoint test set)")
    parser.add_argument("--labels-once", action=argparse.BooleanOptionalAction, default=True,
                        help="LambdaMART-labels trains on one list per query (its replays hold the same grades)")
    seed_tables.add_output_arguments(parser, "runs/pw/size.jsonl", "data.simulate.logging_ranker=linear")
    args = parser.parse_args()
    if args.summary:
        summary(args.summary)
        return
    args.sets = parse_overrides(args.sets)
    args.out = seed_tables.check_out(args.out)   # before any log is fitted: never a user's file
    for lists, setting, seed in itertools.product(args.lists, args.settings, args.seeds):
        record = one_log(setting, lists, seed, args)
        seed_tables.append_record(args.out, record)
        times = {m: v["seconds"] for m, v in record["methods"].items()}
        print(f"{setting} lists={lists} seed={seed}: " + ", ".join(
            f"{m} {v['nDCG@10']:.4f}" for m, v in record["methods"].items())
            + f" | {json.dumps({k: round(v['diff'], 4) for k, v in record['paired'].items()})} | s {times}",
            flush=True)


if __name__ == "__main__":
    main()
