"""Causal discovery on the simulator's whole-page user model: graph quality, speed against causal-learn, size limits.

Data: `simulate` (default SimulateConfig, user model whole_page) per seed; page features position
(ordinal, Bradley–Terry), media_type (categorical), serp_height and serp_max_show_height
(continuous), encoded by PageFeatureEncoder fitted on all simulated sessions; the sample is drawn as
the discover stage draws it (stratified sessions, one displayed result each). r̂ is the true grade
plus N(0, 0.1²) noise (a near-perfect ranker), so the truth's `relevance` node stands for r̂.

Parts (each prints its own lines; --json adds a machine-readable copy), run in this order:
  speed    seed --first-seed at --speed-n rows, KCI: our discovery (level-parallel PC on a LocalCluster of
           --workers single-threaded workers, kernels shared across tests by wpultr.causal.kci) against
           causal-learn's serial `pc` on the same sample with causal-learn's own KCI (the categorical
           node as the same one-hot columns), in this process with BLAS on every core. Prints both wall
           times, the ratio, whether graph and sepsets are identical and the largest |Δp| over all tests.
  quality  KCI and RCIT over --seeds seeds at --n rows: structural Hamming distance to the true graph
           over {r̂, click, page features} (our CPDAG with the priors' orientations vs the true DAG; an
           undirected edge where the truth has a directed one counts 1), precision and recall of
           click's parents, wall time. The speed part's KCI run is reused for its seed.
  scale    KCI and RCIT: the largest n of a ladder that our discovery finishes within --budget s
           (a run past the budget is stopped there and the workers restarted).
  null     issue 30's media worlds (bench/worlds.py MEDIA_WORLDS, --null-worlds picks some): per world and seed,
           --null-sessions sessions, the hybrid test at its defaults with the within-document click test
           (`discovery.click_test: within_document`) and, with --old-test, the r̂-conditioned one on the same
           sample. r̂ there is an imperfect ranker's: the true grade + N(0, --score-noise²) drawn per (query,
           document) (a ranker's score is a function of the document). Prints per world: seeds with a false page
           feature → click edge as the product decides it (`discovery.click_error: per_graph`, Holm over the page
           features' deciding p-values), media type → click found where it is real (power), position → click found,
           seconds per graph, and the false edges and power had each edge been decided alone at alpha (per_edge:
           the edges Holm removed put back; each false edge with its deciding p-value, the largest of PC's tests);
           then the click test's calibration: each non-parent page feature tested given the true click parents,
           whose p-values are uniform for a calibrated test (shares below 0.01/0.05/0.10/0.50 and the KS distance).
           A world's 1x/1.5x/2x twins share each seed's corpus, presentation, heights and click draws (only the
           click probabilities differ: clicks agree on 98 % of rows between 1.5x and 2x), so a chance false edge in
           one seed tends to recur in its twins: they are not independent evidence.
  compare  KCI at --n rows against the hybrid test (`discovery.ci_test: hybrid`, its default config: KCI on
           n_sessions = 1000 one-per-session rows, click tests on --click-rows shown results of whole
           sessions): click parents exactly right per seed, SHD, seconds per graph.

The world is `--world` of bench/worlds.py (default: the simulator's default whole-page world), with
--user-model-params / --simulate-params over it. BENCH_USER_MODEL / BENCH_SIMULATE hold the world an
earlier version of this bench used by default, tuned so that every true click parent is detectable by
KCI at n = 2000. With the defaults two edges are near-unfaithful at that n: a media type almost fixes a
result's height (log-normal spread 0.25 around well-separated means), so media ⟂ click | height nearly
holds; and a result's on-screen height adds little to position and height when 1/p examination is steep
and half of examination ignores it.
The tuned world widens the height spread, strengthens the media and visibility effects and flattens the
position curve. The hybrid test (compare part) is meant to work on the defaults: its click tests read
~10^5 shown results.

Wall times share the CPU with whatever else runs on the machine: the ratio is taken within one run,
and the load average is printed beside every part.

    .venv/bin/python bench/discovery.py                 # all four parts, ~20 min on 2 idle cores
    .venv/bin/python bench/discovery.py --part compare --seeds 3
    .venv/bin/python bench/discovery.py --part compare --seeds 5 --world production
    .venv/bin/python bench/discovery.py --part speed --n 1000 --json out.json
    .venv/bin/python bench/discovery.py --part null --seeds 10 --null-sessions 50000 --old-test
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from causallearn.search.ConstraintBased.PC import pc
from scipy import stats
from threadpoolctl import threadpool_info

from outputs import check_json_output, write_json_output  # bench/outputs.py: --json replaces only its own file
from worlds import MEDIA_WORLDS, WORLDS  # bench/worlds.py: shared with bench/bal.py
from wpultr.causal.biases import identify_biases
from wpultr.causal.click_evidence import deciding_p_values
from wpultr.causal.discovery import (
    DiscoveryConfig,
    DiscoveryResult,
    ci_test_spec,
    discover,
    node_order,
    one_row_per_session,
    prior_knowledge,
    sample_click_rows,
    sample_session_ids,
)
from wpultr.causal.graph import GraphEdge, structural_hamming_distance
from wpultr.causal.kci import clear_store
from wpultr.causal.within_document_ci import DOCUMENT_CODE
from wpultr.cluster import open_client
from wpultr.config import ClusterConfig
from wpultr.features.encoders import PageFeatureEncoder
from wpultr.schema import (
    BAIDU_PAGE_FEATURES,
    CLICK,
    DOC_ID,
    POSITION,
    QUERY_ID,
    RELEVANCE_SCORE,
    SESSION_ID,
    FeatureKind,
    query_document_pairs,
)
from wpultr.settings.simulate import SimulateConfig
from wpultr.simulate import simulate
from wpultr.simulate.generate import TRUE_LABEL

FEATURES = BAIDU_PAGE_FEATURES
SCORE_NOISE = 0.1
KCI_LADDER = (2000, 3000, 4000, 5000, 6000, 8000)
RCIT_LADDER = (10_000, 25_000, 50_000, 100_000)
_META_KEYS = ("data_hash", "method_name", "parameters_hash")


@dataclass
class Sample:
    nodes: pd.DataFrame
    truth_edges: tuple[GraphEdge, ...]
    truth_click_parents: set[str]
    click_nodes: pd.DataFrame | None = None    # every shown result of whole sessions, with session_id


BENCH_USER_MODEL = {"position_power": 0.7, "visibility_weight": 0.9, "readable_height": 300.0,
                    "media_attention": [0.5, 0.8, 1.0, 0.4], "media_attractiveness": [0.0, 0.2, 0.4, 0.3]}
BENCH_SIMULATE = {"height_spread": 0.6}
USER_MODEL_PARAMS: dict = {}   # --user-model-params: whole_page parameters other than the simulator's defaults
SIMULATE_PARAMS: dict = {}     # --simulate-params: other SimulateConfig fields (page presentation, logging ranker)
_SAMPLES: dict[tuple[int, int, int], Sample] = {}


def _node_frame(rows: pd.DataFrame, encoder: PageFeatureEncoder) -> pd.DataFrame:
    return pd.concat([pd.DataFrame({RELEVANCE_SCORE: rows["_score"].to_numpy()}, index=rows.index),
                      encoder.transform(rows), rows[[CLICK]].astype(float)], axis=1).reset_index(drop=True)


def make_sample(seed: int, n_rows: int, click_rows: int = 0) -> Sample:
    """Simulate, fit the encoder on every session, draw n_rows results as the discover stage does.

    With `click_rows`, also every shown result of about click_rows / 10 further-sampled whole sessions
    (what the hybrid test's click tests read, drawn by `sample_click_rows` as the discover stage draws them).
    """
    if (seed, n_rows, click_rows) in _SAMPLES:
        return _SAMPLES[seed, n_rows, click_rows]
    logs = simulate(SimulateConfig(**{"n_sessions": max(int(1.5 * n_rows), 20_000, int(1.2 * click_rows / 10)),
                                      **SIMULATE_PARAMS, "user_model_params": dict(USER_MODEL_PARAMS)}), seed=seed)
    columns = [SESSION_ID, "query_id", POSITION, CLICK] + [f.name for f in FEATURES if f.name != POSITION]
    sessions = logs.sessions[columns].merge(logs.truth_sessions[[SESSION_ID, POSITION, TRUE_LABEL]],
                                            on=[SESSION_ID, POSITION])
    rng = np.random.default_rng([seed, 99])
    sessions["_score"] = sessions[TRUE_LABEL] + SCORE_NOISE * rng.normal(size=len(sessions))
    encoder = PageFeatureEncoder(FEATURES).fit(sessions)
    ids = sample_session_ids(sessions, n_rows, stratify=True, n_strata=4, seed=seed)
    rows = one_row_per_session(sessions[sessions[SESSION_ID].isin(ids)], seed)
    nodes = _node_frame(rows, encoder)
    click_nodes = None
    if click_rows:
        chosen = sample_click_rows(sessions[[SESSION_ID, "query_id"]], click_rows, n_strata=4, seed=seed + 7)
        whole = sessions[sessions[SESSION_ID].isin(chosen)].sort_values([SESSION_ID, POSITION])
        click_nodes = _node_frame(whole, encoder).assign(**{SESSION_ID: whole[SESSION_ID].to_numpy()})
    graph = logs.truth["graph"]
    rename = {graph["relevance_node"]: RELEVANCE_SCORE}
    edges = tuple(GraphEdge(rename.get(e["from"], e["from"]), rename.get(e["to"], e["to"]), e["type"])
                  for e in graph["edges"])
    parents = {rename.get(p, p) for p in graph["parents"][CLICK]}
    if len(nodes) != n_rows:
        raise RuntimeError(f"sample of {len(nodes)} rows, wanted {n_rows}")
    if n_rows <= 10_000:                       # the quality and speed samples are reused; ladder ones are not
        _SAMPLES[seed, n_rows, click_rows] = Sample(nodes, edges, parents, click_nodes)
    return Sample(nodes, edges, parents, click_nodes)


def _load() -> str:
    return f"load average (1 min) {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def _cold(client) -> None:
    """Empty the kernel stores (workers and this process) so a timed run starts from nothing."""
    client.run(clear_store)
    clear_store()


def _p_values(cg) -> dict[str, float]:
    return {k: float(v) for k, v in cg.test.pvalue_cache.items() if k not in _META_KEYS}


def part_speed(client, seed: int, n: int, workers: int, out: dict) -> DiscoveryResult:
    print(f"\n== speed: KCI, n = {n}, seed {seed}: ours ({workers} Dask workers x 1 thread, cached KCI) vs "
          f"causal-learn's serial pc with its KCI (this process, BLAS threads "
          f"{sorted({i['num_threads'] for i in threadpool_info()})}) == [{_load()}]", flush=True)
    sample = make_sample(seed, n)
    cfg = DiscoveryConfig(ci_test="kci", n_bootstrap=0)
    _cold(client)
    start = time.perf_counter()
    ours = discover(sample.nodes, FEATURES, cfg, client=client, seed=seed)
    ours_s = time.perf_counter() - start
    print(f"ours: {ours_s:.1f} s, {ours.runs[0].n_tests} tests, per depth "
          f"{[(lv['tests'], lv['seconds']) for lv in ours.runs[0].levels]} [{_load()}]", flush=True)

    names = node_order(FEATURES)
    data = sample.nodes[names].to_numpy(dtype=np.float64)
    categorical = [names.index(f.name) for f in FEATURES if f.kind is FeatureKind.CATEGORICAL]
    reference = DiscoveryConfig(ci_test="kci")
    reference.kci.engine = "causal-learn"
    spec = ci_test_spec(reference, categorical, seed=seed)
    start = time.perf_counter()
    serial = pc(data, cfg.alpha, spec.name, background_knowledge=prior_knowledge([f.name for f in FEATURES]),
                show_progress=False, node_names=names, **spec.options)
    serial_s = time.perf_counter() - start
    mine = ours.runs[0].graph
    same_graph = bool(np.array_equal(mine.G.graph, serial.G.graph))
    same_sepsets = all(mine.sepset[i, j] == serial.sepset[i, j] for i in range(len(names)) for j in range(len(names)))
    ref_p, our_p = _p_values(serial), ours.runs[0].p_values
    same_tests = ref_p.keys() == our_p.keys()
    max_dp = max(abs(our_p[k] - ref_p[k]) for k in ref_p.keys() & our_p.keys())
    print(f"causal-learn serial: {serial_s:.1f} s, {len(ref_p)} tests [{_load()}]")
    print(f"ratio serial / ours: {serial_s / ours_s:.2f}x; identical graph {same_graph}, identical sepsets "
          f"{same_sepsets}, same tests {same_tests}, max |p_ours - p_causal-learn| {max_dp:.1e}", flush=True)
    out["speed"] = {"n": n, "seed": seed, "workers": workers, "ours_s": ours_s, "serial_s": serial_s,
                    "ratio": serial_s / ours_s, "tests": ours.runs[0].n_tests, "identical_graph": same_graph,
                    "identical_sepsets": same_sepsets, "same_tests": same_tests, "max_abs_dp": max_dp,
                    "levels": ours.runs[0].levels}
    ours.graph.meta["bench_seconds"] = ours_s
    return ours


def part_quality(client, seeds: range, n: int, out: dict, reuse: dict[int, DiscoveryResult]) -> None:
    names = node_order(FEATURES)
    print(f"\n== quality: whole_page user model {USER_MODEL_PARAMS or '(default parameters)'}, simulator "
          f"{SIMULATE_PARAMS or '(default presentation)'}, n = {n} rows "
          f"(one per sampled session), alpha 0.05 == [{_load()}]")
    print(f"{'test':<6}{'seed':>5}{'SHD':>5}{'prec':>7}{'recall':>8}{'exact':>7}{'seconds':>9}  click parents found")
    rows = []
    truth: set[str] = set()
    for seed in seeds:
        sample = make_sample(seed, n)
        truth = sample.truth_click_parents
        for test in ("kci", "rcit"):
            if test == "kci" and seed in reuse:
                result, seconds = reuse[seed], reuse[seed].graph.meta["bench_seconds"]
            else:
                start = time.perf_counter()
                result = discover(sample.nodes, FEATURES, DiscoveryConfig(ci_test=test, n_bootstrap=0),
                                  client=client, seed=seed)
                seconds = time.perf_counter() - start
            found = set(identify_biases(result.graph).click_parents)
            shd = structural_hamming_distance(result.graph.edges, sample.truth_edges, names)
            precision = len(found & truth) / len(found) if found else 0.0
            recall = len(found & truth) / len(truth)
            rows.append({"test": test, "seed": seed, "shd": shd, "precision": precision, "recall": recall,
                         "exact": found == truth, "seconds": seconds, "found": sorted(found),
                         "edges": [f"{e.source} {e.arrow()} {e.target}" for e in result.graph.edges]})
            print(f"{test:<6}{seed:>5}{shd:>5}{precision:>7.2f}{recall:>8.2f}{str(found == truth):>7}{seconds:>9.1f}"
                  f"  {', '.join(sorted(found))}", flush=True)
    print(f"true click parents: {', '.join(sorted(truth))}")
    for test in ("kci", "rcit"):
        mine = [r for r in rows if r["test"] == test]
        print(f"{test}: click's parents exactly right in {sum(r['exact'] for r in mine)}/{len(mine)} seeds; "
              f"mean SHD {np.mean([r['shd'] for r in mine]):.1f}, mean precision "
              f"{np.mean([r['precision'] for r in mine]):.2f}, mean recall {np.mean([r['recall'] for r in mine]):.2f}, "
              f"mean seconds {np.mean([r['seconds'] for r in mine]):.1f}")
    out["quality"] = rows


def part_compare(client, seeds: range, kci_n: int, hybrid_cfg: DiscoveryConfig, out: dict) -> None:
    """KCI on --n one-per-session rows against the hybrid test at its default config (click tests on whole sessions)."""
    names = node_order(FEATURES)
    print(f"\n== compare: KCI at n = {kci_n} rows vs hybrid (KCI on {hybrid_cfg.n_sessions} rows, click tests on "
          f"{hybrid_cfg.click_rows} shown results of whole sessions), whole_page world "
          f"{USER_MODEL_PARAMS or '(simulator defaults)'}, simulator {SIMULATE_PARAMS or '(defaults)'}, "
          f"alpha 0.05, no bootstrap == [{_load()}]")
    print(f"{'test':<7}{'seed':>5}{'SHD':>5}{'exact':>7}{'seconds':>9}  click parents found")
    rows, truth = [], set()
    for seed in seeds:
        for test in ("kci", "hybrid"):
            if test == "kci":
                sample, cfg, extra = make_sample(seed, kci_n), DiscoveryConfig(ci_test="kci", n_bootstrap=0), {}
            else:
                sample = make_sample(seed, hybrid_cfg.n_sessions, hybrid_cfg.click_rows)
                cfg, extra = hybrid_cfg, {"click_nodes": sample.click_nodes}
            truth = sample.truth_click_parents
            _cold(client)
            start = time.perf_counter()
            result = discover(sample.nodes, FEATURES, cfg, client=client, seed=seed, **extra)
            seconds = time.perf_counter() - start
            found = set(identify_biases(result.graph).click_parents)
            shd = structural_hamming_distance(result.graph.edges, sample.truth_edges, names)
            evidence = {e["node"]: {"in_graph": e["in_graph"], "p_value": e["p_value"],
                                    "loglik_gain_per_row": (e["effect"] or {}).get("loglik_gain_per_row")}
                        for e in result.graph.meta["click_evidence"]}
            rows.append({"test": test, "seed": seed, "shd": shd, "exact": found == truth, "seconds": seconds,
                         "found": sorted(found), "evidence": evidence,
                         "near_deterministic": result.graph.meta["near_deterministic"]["pairs"]})
            print(f"{test:<7}{seed:>5}{shd:>5}{str(found == truth):>7}{seconds:>9.1f}  {', '.join(sorted(found))}"
                  f"  [{_load()}]", flush=True)
    print(f"true click parents: {', '.join(sorted(truth))}")
    for test in ("kci", "hybrid"):
        mine = [r for r in rows if r["test"] == test]
        print(f"{test}: click's parents exactly right in {sum(r['exact'] for r in mine)}/{len(mine)} seeds; "
              f"mean SHD {np.mean([r['shd'] for r in mine]):.1f}; seconds per graph "
              f"{np.mean([r['seconds'] for r in mine]):.1f} (max {max(r['seconds'] for r in mine):.1f})")
    out["compare"] = rows


@dataclass
class MediaSample:
    """One media world's discovery input: the KCI rows, the click rows (with documents) and the true click parents."""

    nodes: pd.DataFrame
    click_nodes: pd.DataFrame
    truth_click_parents: set[str]


def media_sample(world: dict, seed: int, n_sessions: int, cfg: DiscoveryConfig, score_noise: float) -> MediaSample:
    """Simulate the world, give r̂ = grade + N(0, score_noise²) per (query, document), draw rows as the discover
    stage does."""
    logs = simulate(SimulateConfig(**{**world, "n_sessions": n_sessions}), seed=seed)
    columns = [SESSION_ID, QUERY_ID, DOC_ID, POSITION, CLICK] + [f.name for f in FEATURES if f.name != POSITION]
    sessions = logs.sessions[columns].merge(logs.truth_sessions[[SESSION_ID, POSITION, TRUE_LABEL]],
                                            on=[SESSION_ID, POSITION])
    codes = query_document_pairs(sessions)
    noise = np.random.default_rng([seed, 98]).normal(0.0, score_noise, size=int(codes.max()) + 1)
    sessions["_score"] = sessions[TRUE_LABEL] + noise[codes]
    encoder = PageFeatureEncoder(FEATURES).fit(sessions)
    ids = sample_session_ids(sessions, cfg.n_sessions, stratify=cfg.stratify, n_strata=cfg.n_strata, seed=seed)
    nodes = _node_frame(one_row_per_session(sessions[sessions[SESSION_ID].isin(ids)], seed), encoder)
    chosen = sample_click_rows(sessions[[SESSION_ID, QUERY_ID]], cfg.click_rows, n_strata=cfg.n_strata, seed=seed + 1)
    whole = sessions[sessions[SESSION_ID].isin(chosen)].sort_values([SESSION_ID, POSITION])
    click_nodes = _node_frame(whole, encoder).assign(**{SESSION_ID: whole[SESSION_ID].to_numpy(),
                                                        DOCUMENT_CODE: query_document_pairs(whole)})
    graph = logs.truth["graph"]
    return MediaSample(nodes, click_nodes, {p for p in graph["parents"][CLICK] if p != graph["relevance_node"]})


def shipped_discovery() -> DiscoveryConfig:
    """pipelines/bal.yaml's discovery section (what a user runs), without bootstrap resamples."""
    from wpultr.config import load_config
    return replace(load_config(Path(__file__).resolve().parents[1] / "pipelines" / "bal.yaml").discovery,
                   n_bootstrap=0)


def part_null(client, worlds: list[str], seeds: range, n_sessions: int, score_noise: float, old_test: str,
              out: dict) -> None:
    """Issue 30's media worlds: false page-feature → click edges, power, seconds per graph (module docstring)."""
    base = shipped_discovery()
    old = replace(base, click_test="relevance")
    print(f"\n== null: media worlds, {n_sessions} sessions, {len(seeds)} seeds, pipelines/bal.yaml's discovery "
          f"section (KCI on {base.n_sessions} rows, click tests on {base.click_rows} shown results, max depth "
          f"{base.max_depth}), r̂ = grade + N(0, {score_noise}^2) per document, alpha {base.alpha}; the r̂-conditioned "
          f"test (r̂-cond) on {old_test} worlds == [{_load()}]")
    print(f"{'world':<24}{'test':<8}{'false edge':>11}{'media found':>12}{'position':>9}{'s/graph':>9}"
          f"{'per-edge':>11}{'pe media':>9}  false edges by feature (per-edge false edges, seed: deciding p)")
    rows = []
    for name in worlds:
        no_effect = len(set(MEDIA_WORLDS[name]["media_click_scale"])) == 1
        tests = {"within": base} | ({"r̂-cond": old} if old_test == "all" or (old_test == "null" and no_effect) else {})
        per_test: dict[str, list[dict]] = {t: [] for t in tests}
        truth: set[str] = set()
        for seed in seeds:
            sample = media_sample(MEDIA_WORLDS[name], seed, n_sessions, base, score_noise)
            truth = sample.truth_click_parents
            for test, cfg in tests.items():
                start = time.perf_counter()
                result = discover(sample.nodes, FEATURES, cfg, client=client, seed=seed, click_nodes=sample.click_nodes)
                seconds = time.perf_counter() - start
                found = {f.name for f in FEATURES if result.graph.adjacent(f.name, CLICK)}
                edgewise = per_edge_click_parents(result, base.alpha)
                per_test[test].append({"seed": seed, "found": sorted(found), "false": sorted(found - truth),
                                       "seconds": seconds, "null_p": null_p_values(result, truth),
                                       "decisive_p": deciding_p_values(result.graph.meta["click_evidence"],
                                                                       result.graph.nodes),
                                       "edgewise_found": sorted(edgewise), "edgewise_false": sorted(edgewise - truth)})
                print(f"  {name} {test} seed {seed}: click parents {sorted(found)}, per-edge {sorted(edgewise)}, "
                      f"{seconds:.1f} s", flush=True)
        real_media = "media_type" in truth
        for test, runs in per_test.items():
            n = len(runs)
            false = sum(bool(r["false"]) for r in runs)
            media = sum("media_type" in r["found"] for r in runs)
            by_feature = {f: sum(f in r["false"] for r in runs) for f in sorted({f for r in runs for f in r["false"]})}
            row = {"world": name, "test": test, "seeds": n, "seeds_with_false_edge": false,
                   "media_found": media, "media_real": real_media,
                   "position_found": sum("position" in r["found"] for r in runs),
                   "seconds_per_graph": float(np.mean([r["seconds"] for r in runs])), "runs": runs,
                   "false_by_feature": by_feature}
            rows.append(row)
            power = f"{media}/{n}" if real_media else "-"
            false_text, position_text = f"{false}/{n}", f"{row['position_found']}/{n}"
            row["null_p"] = [p for r in runs for p in r["null_p"].values()]
            row["edgewise_false"] = sum(bool(r["edgewise_false"]) for r in runs)
            row["edgewise_media"] = sum("media_type" in r["edgewise_found"] for r in runs)
            gw_power = f"{row['edgewise_media']}/{n}" if real_media else "-"
            where = "; ".join(f"{r['seed']}: " + ", ".join(f"{f} {r['decisive_p'].get(f, float('nan')):.3g}"
                                                             for f in r["edgewise_false"])
                              for r in runs if r["edgewise_false"])
            print(f"{name:<24}{test:<8}{false_text:>11}{power:>12}{position_text:>9}"
                  f"{row['seconds_per_graph']:>9.1f}{row['edgewise_false']:>9}/{n}{gw_power:>9}  {by_feature or ''}"
                  f"{'  (' + where + ')' if where else ''}\n{'':<24}{'null p':<8}{calibration_text(row['null_p'])}",
                  flush=True)
    print("null p-values over all worlds (each non-parent page feature tested against click given the true click "
          "parents; uniform when the test is calibrated):")
    for test in dict.fromkeys(r["test"] for r in rows):
        print(f"  {test:<8}{calibration_text([p for r in rows if r['test'] == test for p in r['null_p']])}")
    out["null"] = {"sessions": n_sessions, "score_noise": score_noise, "rows": rows}


def null_p_values(result: DiscoveryResult, truth: set[str]) -> dict[str, float]:
    """The click test's p-value of each page feature that is not a true click parent, given the true parents
    (the d-separating set, so each p-value is uniform under a calibrated test): the calibration sample."""
    names = list(result.graph.nodes)
    test = result.runs[0].test
    given = [names.index(t) for t in sorted(truth | {RELEVANCE_SCORE}) if t in names]   # r̂: the within test drops it
    return {f.name: float(test.click_p_value(names.index(f.name), [g for g in given if g != names.index(f.name)]))
            for f in FEATURES if f.name in names and f.name not in truth}


def per_edge_click_parents(result: DiscoveryResult, alpha: float) -> set[str]:
    """The page-feature click parents the graph would hold with `discovery.click_error: per_edge` (each edge at
    alpha): those in the graph and those the product's Holm step removed (`click_evidence.decide_per_graph`)."""
    evidence = result.graph.meta["click_evidence"]
    removed = {e["node"] for e in evidence if "holm" in e and not e["holm"]["kept"] and e["holm"]["p_value"] <= alpha}
    return removed | {f.name for f in FEATURES if result.graph.adjacent(f.name, CLICK)}


def calibration_text(p: list[float]) -> str:
    """A QQ summary of null p-values: the share below 0.01, 0.05, 0.10 and 0.50 (nominal: the same numbers) and
    the Kolmogorov–Smirnov distance from uniform with its p-value."""
    if not p:
        return "no null tests"
    v = np.asarray(p)
    ks = stats.kstest(v, "uniform")
    shares = "  ".join(f"<{a:g}: {np.mean(v < a):.3f}" for a in (0.01, 0.05, 0.10, 0.50))
    return f"n {len(v):>4}  {shares}  KS {ks.statistic:.3f} (p {ks.pvalue:.2g})"


def part_scale(cluster: ClusterConfig, seed: int, budget: float, ladders: dict[str, tuple[int, ...]], out: dict,
               known: dict[tuple[str, int], float]) -> None:
    """Each test's ladder on a fresh cluster: one stopped at the budget is closed with its workers."""
    print(f"\n== scale: largest n our discovery finishes within {budget:.0f} s (seed {seed}, no bootstrap) "
          f"== [{_load()}]")
    out["scale"] = {}
    for test, ladder in ladders.items():
        best, times = None, {}
        with open_client(cluster) as client:
            for n in ladder:
                if (test, n) in known:
                    times[n] = known[test, n]
                    print(f"{test} n={n}: {times[n]:.1f} s (timed in the speed part)", flush=True)
                else:
                    sample = make_sample(seed, n)
                    _cold(client)
                    start = time.perf_counter()
                    try:
                        discover(sample.nodes, FEATURES, DiscoveryConfig(ci_test=test, n_bootstrap=0),
                                 client=client, seed=seed, timeout=budget)
                        times[n] = time.perf_counter() - start
                    except TimeoutError:
                        times[n] = None
                    print(f"{test} n={n}: " + (f"{times[n]:.1f} s" if times[n] is not None else
                                               f"stopped at {budget:.0f} s") + f" [{_load()}]", flush=True)
                if times[n] is None or times[n] > budget:
                    break
                best = n
        print(f"{test}: largest n within {budget:.0f} s: {best}")
        out["scale"][test] = {"largest_n": best, "seconds": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", action="append", choices=["quality", "speed", "scale", "compare", "null"],
                        help="default: quality, speed, scale and compare")
    parser.add_argument("--null-worlds", default="all",
                        help="null part: comma-separated names of bench/worlds.py MEDIA_WORLDS (default all: "
                             f"{', '.join(MEDIA_WORLDS)})")
    parser.add_argument("--null-sessions", type=int, default=50_000, help="null part: sessions simulated per seed")
    parser.add_argument("--score-noise", type=float, default=1.0,
                        help="null part: sd of the per-document noise on r̂ (the true grade + noise)")
    parser.add_argument("--old-test", choices=["none", "null", "all"], default="none",
                        help="null part: also run the r̂-conditioned click test (discovery.click_test: relevance) on "
                             "the worlds without a media effect (null) or on every world (all)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--world", choices=sorted(WORLDS), default="default",
                        help="a world of bench/worlds.py (as bench/bal.py measures BAL on); the two JSON options "
                             "below override its settings")
    parser.add_argument("--user-model-params", default="{}",
                        help="JSON of whole_page parameters (default '{}': the simulator's defaults; the world "
                             f"tuned for KCI at n = 2000 is {json.dumps(BENCH_USER_MODEL)})")
    parser.add_argument("--simulate-params", default="{}",
                        help="JSON of other simulator settings (default '{}'; the tuned world adds "
                             f"{json.dumps(BENCH_SIMULATE)})")
    parser.add_argument("--click-rows", type=int, default=DiscoveryConfig().click_rows,
                        help="compare: the hybrid test's click rows (default: the config default)")
    parser.add_argument("--n", type=int, default=2000, help="rows of the quality part")
    parser.add_argument("--speed-n", type=int, default=600,
                        help="rows of the speed part (causal-learn's serial KCI is cubic in n: ~5 min at 600)")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--kci-ladder", default=",".join(map(str, KCI_LADDER)), help="sample sizes tried for KCI")
    parser.add_argument("--rcit-ladder", default=",".join(map(str, RCIT_LADDER)), help="sample sizes tried for RCIT")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    check_json_output(args.json)     # before anything is measured: a file of the user's is never replaced
    parts = args.part or ["speed", "quality", "scale", "compare"]
    world = dict(WORLDS[args.world])
    USER_MODEL_PARAMS.update(world.pop("user_model_params", {}))
    SIMULATE_PARAMS.update(world)
    USER_MODEL_PARAMS.update(json.loads(args.user_model_params))
    SIMULATE_PARAMS.update(json.loads(args.simulate_params))
    out: dict = {"world": args.world, "cpu_count": os.cpu_count(), "workers": args.workers,
                 "score": f"true grade + N(0, {SCORE_NOISE}^2)",
                 "user_model_params": USER_MODEL_PARAMS,
                 "simulate_params": SIMULATE_PARAMS}
    cluster = ClusterConfig(n_workers=args.workers, threads_per_worker=1, memory_limit="6GiB")
    started = time.perf_counter()
    reuse: dict[int, DiscoveryResult] = {}
    known: dict[tuple[str, int], float] = {}
    with open_client(cluster) as client:
        if "speed" in parts:
            ours = part_speed(client, args.first_seed, args.speed_n, args.workers, out)
            known["kci", args.speed_n] = out["speed"]["ours_s"]
            if args.speed_n == args.n:
                reuse[args.first_seed] = ours
        if "quality" in parts:
            part_quality(client, range(args.first_seed, args.first_seed + args.seeds), args.n, out, reuse)
        if "null" in parts:
            names = list(MEDIA_WORLDS) if args.null_worlds == "all" else args.null_worlds.split(",")
            unknown = [n for n in names if n not in MEDIA_WORLDS]
            if unknown:
                parser.error(f"--null-worlds: unknown {unknown}; known: {', '.join(MEDIA_WORLDS)}")
            part_null(client, names, range(args.first_seed, args.first_seed + args.seeds), args.null_sessions,
                      args.score_noise, args.old_test, out)
        if "compare" in parts:
            part_compare(client, range(args.first_seed, args.first_seed + args.seeds), args.n,
                         DiscoveryConfig(ci_test="hybrid", n_bootstrap=0, click_rows=args.click_rows), out)
    if "scale" in parts:
        ladders = {"kci": tuple(int(v) for v in args.kci_ladder.split(",") if v),
                   "rcit": tuple(int(v) for v in args.rcit_ladder.split(",") if v)}
        part_scale(cluster, args.first_seed, args.budget, {k: v for k, v in ladders.items() if v}, out, known)
    out["total_seconds"] = time.perf_counter() - started
    print(f"\ntotal {out['total_seconds']:.0f} s [{_load()}]")
    if args.json:
        write_json_output(args.json, out, default=str)


if __name__ == "__main__":
    main()
