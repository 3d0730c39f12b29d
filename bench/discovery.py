"""Causal discovery on the simulator's whole-page user model: graph quality, parallel speed-up, size limits.

Data: `simulate` (default SimulateConfig, user model whole_page) per seed; page features position
(ordinal, Bradley–Terry), media_type (categorical), serp_height and serp_max_show_height
(continuous), encoded by PageFeatureEncoder fitted on all simulated sessions; the sample is drawn as
the discover stage draws it (stratified sessions, one displayed result each). r̂ is the true grade
plus N(0, 0.1²) noise (a near-perfect ranker), so the truth's `relevance` node stands for r̂.

Parts (each prints its own lines; --json adds a machine-readable copy):
  quality  for KCI and RCIT over --seeds seeds at --n rows: structural Hamming distance to the true
           graph over {r̂, click, page features} (CPDAG marks vs the true DAG: an undirected edge
           counts 1), precision and recall of click's parents, wall time.
  speed    one seed at --n rows: our discovery (level-parallel PC on a LocalCluster of --workers
           single-threaded workers) against causal-learn's serial `pc` on the same sample with the
           same CI test (causal-learn's KCI; the categorical node as one-hot columns), in this
           process with BLAS on all cores; the ratio, and whether graph, marks and sepsets are identical.
  scale    for KCI and RCIT the largest n of a ladder that our discovery finishes within --budget s.

    .venv/bin/python bench/discovery.py --part quality --part speed --part scale [--seeds 5] [--n 2000]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from causallearn.search.ConstraintBased.PC import pc

from wpultr.causal.biases import identify_biases
from wpultr.causal.discovery import (DiscoveryConfig, ci_test_spec, discover, node_order, one_row_per_session,
                                     prior_knowledge, sample_session_ids)
from wpultr.causal.graph import GraphEdge, structural_hamming_distance
from wpultr.config import ClusterConfig
from wpultr.features.encoders import PageFeatureEncoder
from wpultr.pipeline.cluster import open_client
from wpultr.schema import BAIDU_PAGE_FEATURES, CLICK, POSITION, RELEVANCE_SCORE, SESSION_ID, FeatureKind
from wpultr.simulate import SimulateConfig, simulate
from wpultr.simulate.generate import TRUE_LABEL

FEATURES = BAIDU_PAGE_FEATURES
SCORE_NOISE = 0.1
KCI_LADDER = (1000, 2000, 3000, 4000, 6000)
RCIT_LADDER = (10_000, 25_000, 50_000, 100_000, 200_000)


@dataclass
class Sample:
    nodes: pd.DataFrame
    truth_edges: tuple[GraphEdge, ...]
    truth_click_parents: set[str]


USER_MODEL_PARAMS: dict = {}   # --user-model-params: whole_page parameters other than the simulator's defaults


def make_sample(seed: int, n_rows: int) -> Sample:
    """Simulate, fit the encoder on every session, draw n_rows results as the discover stage does."""
    logs = simulate(SimulateConfig(n_sessions=max(2 * n_rows, 20_000), user_model_params=dict(USER_MODEL_PARAMS)),
                    seed=seed)
    columns = [SESSION_ID, "query_id", POSITION, CLICK] + [f.name for f in FEATURES if f.name != POSITION]
    sessions = logs.sessions[columns].merge(logs.truth_sessions[[SESSION_ID, POSITION, TRUE_LABEL]],
                                            on=[SESSION_ID, POSITION])
    encoder = PageFeatureEncoder(FEATURES).fit(sessions)
    ids = sample_session_ids(sessions, n_rows, stratify=True, n_strata=4, seed=seed)
    rows = one_row_per_session(sessions[sessions[SESSION_ID].isin(ids)], seed)
    rng = np.random.default_rng([seed, 99])
    nodes = pd.concat([pd.DataFrame({RELEVANCE_SCORE: rows[TRUE_LABEL] + SCORE_NOISE * rng.normal(size=len(rows))}),
                       encoder.transform(rows), rows[[CLICK]].astype(float)], axis=1)
    graph = logs.truth["graph"]
    rename = {graph["relevance_node"]: RELEVANCE_SCORE}
    edges = tuple(GraphEdge(rename.get(e["from"], e["from"]), rename.get(e["to"], e["to"]), e["type"])
                  for e in graph["edges"])
    parents = {rename.get(p, p) for p in graph["parents"][CLICK]}
    return Sample(nodes, edges, parents)


def part_quality(client, seeds: range, n: int, out: dict) -> None:
    names = node_order(FEATURES)
    print(f"\n== quality: whole_page user model {USER_MODEL_PARAMS or '(default parameters)'}, n = {n} rows "
          f"(one per sampled session), alpha 0.05 ==")
    print(f"{'test':<6}{'seed':>5}{'SHD':>5}{'prec':>7}{'recall':>8}{'exact':>7}{'seconds':>9}  click parents found")
    rows = []
    for seed in seeds:
        sample = make_sample(seed, n)
        for test in ("kci", "rcit"):
            start = time.perf_counter()
            result = discover(sample.nodes, FEATURES, DiscoveryConfig(ci_test=test, n_bootstrap=0), client=client,
                              seed=seed)
            seconds = time.perf_counter() - start
            found = set(identify_biases(result.graph).click_parents)
            truth = sample.truth_click_parents
            shd = structural_hamming_distance(result.graph.edges, sample.truth_edges, names)
            precision = len(found & truth) / len(found) if found else 0.0
            recall = len(found & truth) / len(truth)
            rows.append({"test": test, "seed": seed, "shd": shd, "precision": precision, "recall": recall,
                         "exact": found == truth, "seconds": seconds, "found": sorted(found)})
            print(f"{test:<6}{seed:>5}{shd:>5}{precision:>7.2f}{recall:>8.2f}{str(found == truth):>7}{seconds:>9.1f}"
                  f"  {', '.join(sorted(found))}", flush=True)
    print(f"true click parents: {', '.join(sorted(truth))}")
    for test in ("kci", "rcit"):
        mine = [r for r in rows if r["test"] == test]
        print(f"{test}: click's parents exactly right in {sum(r['exact'] for r in mine)}/{len(mine)} seeds; "
              f"mean SHD {np.mean([r['shd'] for r in mine]):.1f}, mean precision "
              f"{np.mean([r['precision'] for r in mine]):.2f}, mean recall {np.mean([r['recall'] for r in mine]):.2f}")
    out["quality"] = rows


def part_speed(client, n: int, workers: int, out: dict) -> None:
    print(f"\n== speed: KCI, n = {n}, seed 0: ours ({workers} workers x 1 thread) vs causal-learn serial pc ==")
    sample = make_sample(0, n)
    cfg = DiscoveryConfig(ci_test="kci", n_bootstrap=0)
    start = time.perf_counter()
    ours = discover(sample.nodes, FEATURES, cfg, client=client, seed=0)
    ours_s = time.perf_counter() - start
    names = node_order(FEATURES)
    data = sample.nodes[names].to_numpy(dtype=np.float64)
    categorical = [names.index(f.name) for f in FEATURES if f.kind is FeatureKind.CATEGORICAL]
    spec = ci_test_spec(cfg, categorical, seed=0)
    start = time.perf_counter()
    serial = pc(data, cfg.alpha, spec.name, background_knowledge=prior_knowledge([f.name for f in FEATURES]),
                show_progress=False, node_names=names, **spec.options)
    serial_s = time.perf_counter() - start
    mine = ours.runs[0].graph
    same_graph = bool(np.array_equal(mine.G.graph, serial.G.graph))
    same_sepsets = all(mine.sepset[i, j] == serial.sepset[i, j] for i in range(len(names)) for j in range(len(names)))
    print(f"ours {ours_s:.1f} s ({ours.runs[0].n_tests} tests, levels {[l['tests'] for l in ours.runs[0].levels]}), "
          f"serial {serial_s:.1f} s, ratio {serial_s / ours_s:.2f}x; identical graph {same_graph}, "
          f"identical sepsets {same_sepsets}")
    out["speed"] = {"n": n, "workers": workers, "ours_s": ours_s, "serial_s": serial_s, "ratio": serial_s / ours_s,
                    "tests": ours.runs[0].n_tests, "identical_graph": same_graph, "identical_sepsets": same_sepsets}


def part_scale(client, budget: float, ladders: dict[str, tuple[int, ...]], out: dict) -> None:
    print(f"\n== scale: largest n our discovery finishes within {budget:.0f} s (seed 0, no bootstrap) ==")
    out["scale"] = {}
    for test, ladder in ladders.items():
        best, times = None, {}
        for n in ladder:
            sample = make_sample(0, n)
            start = time.perf_counter()
            discover(sample.nodes, FEATURES, DiscoveryConfig(ci_test=test, n_bootstrap=0), client=client, seed=0)
            times[n] = time.perf_counter() - start
            print(f"{test} n={n}: {times[n]:.1f} s", flush=True)
            if times[n] > budget:
                break
            best = n
        print(f"{test}: largest n within {budget:.0f} s: {best}")
        out["scale"][test] = {"largest_n": best, "seconds": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", action="append", choices=["quality", "speed", "scale"], required=True)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--user-model-params", default="{}", help="JSON of whole_page parameters to override")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--kci-ladder", default=",".join(map(str, KCI_LADDER)), help="sample sizes tried for KCI")
    parser.add_argument("--rcit-ladder", default=",".join(map(str, RCIT_LADDER)), help="sample sizes tried for RCIT")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    USER_MODEL_PARAMS.update(json.loads(args.user_model_params))
    out: dict = {"cpu_count": os.cpu_count(), "workers": args.workers, "score": f"true grade + N(0, {SCORE_NOISE}^2)",
                 "user_model_params": USER_MODEL_PARAMS}
    cluster = ClusterConfig(n_workers=args.workers, threads_per_worker=1, memory_limit="6GiB")
    with open_client(cluster) as client:
        if "quality" in args.part:
            part_quality(client, range(args.first_seed, args.first_seed + args.seeds), args.n, out)
        if "speed" in args.part:
            part_speed(client, args.n, args.workers, out)
        if "scale" in args.part:
            ladders = {"kci": tuple(int(v) for v in args.kci_ladder.split(",") if v),
                       "rcit": tuple(int(v) for v in args.rcit_ladder.split(",") if v)}
            part_scale(client, args.budget, {k: v for k, v in ladders.items() if v}, out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)


if __name__ == "__main__":
    main()
