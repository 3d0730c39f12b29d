"""BAL against the strongest baselines on five simulated worlds, with paired tests over test queries.

For every world and seed the same simulated logs are given to every method; each trained ranker scores
the held-out annotated queries, and per seed a paired t-test over those queries compares each method
with the best baseline of its family (neural rankers: the better of Naive pointwise and listwise;
gradient-boosted ones: the better of Naive with the LightGBM backbone and plain LambdaMART on clicks),
whichever has the higher mean DCG@10 on that seed's test queries: the harder comparison for BAL.
Printed per world:

* DCG@1,3,5,10 and ERR@10 (mean ± std over seeds) for every method;
* per method: seeds significantly better / worse than its family's best baseline (p < 0.05, two-sided);
* the headroom: each family's unbiased-click ceiling against its best baseline per seed (Δ DCG@10, paired p), and
  the share of that gap each debiasing method closes (mean and per seed; undefined where the ceiling is not
  significantly above the baseline: the logs then carry no measurable cost of bias to recover);
* seconds per trained epoch against Naive's on the same data in the same run (BAL's by step; `--timing-rounds N`
  fits every method N times, the order reversed every other round, and averages: the machine's speed drifts);
* per seed, each `RIVALS` method (BAL, BAL-GBDT) against each rival a user would pick instead (the better Naive and
  PB-BAL; XGBoost's unbiased LambdaMART and LightGBM's position-aware ranker) and its unbiased-click ceiling: Δ DCG@10,
  p, and the seeds significantly better / worse (also after every seed, so a cut run still reports).

Reference rankers on the same sessions: **Oracle** = the same ranker trained on the true labels of the
shown results (listwise softmax on gains), **Ceiling** / **Ceiling-GBDT** = the family's best baseline,
same method and settings, trained on clicks drawn for the same shown results with no bias at all (every
result examined, clicked with its relevance's chance): what a perfect debiaser of these logs could reach.
**Oracle-IPW** / **Oracle-IPW-GBDT** (when BAL-list / BAL-GBDT-lambda-click or -both ran) = that BAL variant's
reweighted ranker step with each click weighted by 1 / its true examination: the bound of any examination estimate
with that step. **Oracle-skip-GBDT** (when BAL-GBDT-lambda ran) = its posterior-weighted λ step with the true
click model (each skipped result's true chance of not being clicked had it been seen). That chance holds each
document's true relevance, which no click model can learn from the logs, so this reference leaks labels and is not
a bound of what debiasing can reach. **Oracle-exam-GBDT** (when BAL-GBDT-lambda ran) is that bound: the same step
given the true examination of every shown result, with each document's relevance learned from its clicks as a
perfect click model would (Σ clicks / Σ examination over its impressions). The ceiling also sees every result
examined (more clicks than any reweighting can recover), so the gap it sets is part bias, part information.

The worlds (`default`, `production`, `position_only`, and the transfer checks `cascade` and `trust`) are
described in `bench/worlds.py`, shared with `bench/discovery.py`; none is built to match BAL's click model.
The real-feature worlds (`letor-pbm-2x` / its null twin `letor-pbm-1x`, `letor-cascade-2x` / `-1x`,
`letor-position_only`: `worlds.LETOR_WORLDS`) simulate on the LETOR sample's features and labels and test on every
LETOR query no click touched (rank.test's 50 and the 40 rank.train queries the corpus left out: 90, printed).

    .venv/bin/python bench/bal.py                                   # 5 worlds x 3 seeds, 50 000 sessions
    .venv/bin/python bench/bal.py --worlds production --seeds 5 --sessions 100000
    .venv/bin/python bench/bal.py --methods Naive,Naive-list,BAL --seeds 2 --sessions 20000   # quick look
    .venv/bin/python bench/bal.py --worlds production --methods Naive,BAL --seeds 1 --sessions 200000 \
        --no-references --timing-rounds 4                           # epoch cost at 200 000 sessions
    .venv/bin/python bench/bal.py --worlds letor-pbm-2x,letor-pbm-1x,letor-cascade-2x,letor-cascade-1x --seeds 5 \
        --sessions 40000 --no-oracle --methods \
        Naive,Naive-list,PB-BAL,BAL,Naive-GBDT,LambdaMART,BAL-GBDT,XGB-unbiased,LambdaMART-pos   # issue 30's wins
    .venv/bin/python bench/bal.py --worlds letor-pbm-2x --seeds 5 --sessions 40000 --no-oracle --resume \
        --per-query-dir DIR --methods Naive,Naive-list,Naive-GBDT,LambdaMART  # the ceilings of an earlier DIR run
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from outputs import check_json_output, write_json_output  # bench/outputs.py: --json replaces only its own file
from worlds import LETOR_HELD_OUT, LETOR_WORLDS, WORLDS  # bench/worlds.py: the worlds, shared with bench/discovery.py
from wpultr.bal.weights import clip_and_normalise
from wpultr.cluster import open_client
from wpultr.config import config_from_dict, set_dotted
from wpultr.evaluation.metrics import paired_test, per_query
from wpultr.io.letor import read_letor
from wpultr.methods.losses.lists import listwise_softmax_loss, weighted_softmax_loss
from wpultr.methods.training.gbdt import BoostingTrainer
from wpultr.methods.training.trainer import Trainer, build_ranker
from wpultr.rankers.base import score_frame
from wpultr.schema import CLICK, DOC_ID, FEATURES, LABEL, POSITION, QUERY_ID, QUERY_KEY, SESSION_ID
from wpultr.settings.methods import get_method
from wpultr.simulate import simulate
from wpultr.simulate.user_models import click_relevance

BENCH_WORLDS = {**WORLDS, **LETOR_WORLDS}

REPO = Path(__file__).resolve().parents[1]
METRICS = ("DCG@1", "DCG@3", "DCG@5", "DCG@10", "ERR@10")
ALPHA = 0.05


BAL = {"train.method": "bal"}
METHODS: dict[str, dict[str, Any]] = {
    "Naive": {"train.method": "naive", "train.loss": "pointwise"},
    "Naive-list": {"train.method": "naive", "train.loss": "listwise"},
    "IPW": {"train.method": "ipw"},
    "DLA": {"train.method": "dla"},
    "PB-BAL": {**BAL, "bal.graph": "position"},
    "FB-BAL": {**BAL, "bal.graph": "all_features"},
    "BAL": BAL,
    "BAL-list": {**BAL, "train.loss": "listwise"},
    "Naive-GBDT": {"train.method": "naive", "ranker.backbone": "lightgbm"},
    "BAL-GBDT": {**BAL, "ranker.backbone": "lightgbm"},
    "BAL-GBDT-list": {**BAL, "ranker.backbone": "lightgbm", "train.loss": "listwise"},
    "BAL-GBDT-lambda": {**BAL, "ranker.backbone": "lightgbm", "train.loss": "lambdarank"},
    "Naive-GBDT-lambda": {"train.method": "naive", "ranker.backbone": "lightgbm", "train.loss": "lambdarank"},
    "LambdaMART-pos": {"train.method": "lightgbm_position"},
}
NO_DOC = {"bal.click_model.document_effects": False}   # the paper's click model: u = α·r̂ + β alone
for _name in ("BAL", "BAL-list", "PB-BAL", "BAL-GBDT", "BAL-GBDT-lambda"):
    METHODS[f"{_name}-nodoc"] = {**METHODS[_name], **NO_DOC}
METHODS["LambdaMART"] = {"train.method": "lightgbm_lambdarank"}
METHODS["XGB-unbiased"] = {"train.method": "xgboost_unbiased"}     # XGBoost's unbiased LambdaMART (xgboost extra)
# the permutation numerator's K (`bal.weights.max_permuted_rows`): every permutation, or K = 2 at 50 000 sessions
# BAL-GBDT-lambda's pair weights (`bal.pair_weights`, default posterior)
for _pw in ("click", "both", "skip"):
    METHODS[f"BAL-GBDT-lambda-{_pw}"] = {**METHODS["BAL-GBDT-lambda"], "bal.pair_weights": _pw}
METHODS["BAL-K16"] = {**BAL, "bal.weights.max_permuted_rows": None}
METHODS["BAL-K2"] = {**BAL, "bal.weights.max_permuted_rows": 1_000_000}
# Two families, each judged against its own baselines and ceiling: the neural rankers (MLP) against the
# better Naive, the gradient-boosted ones against the better of Naive-GBDT and plain LambdaMART.
FAMILIES: dict[str, dict[str, Any]] = {
    "neural": {"baselines": ("Naive", "Naive-list"), "ceiling": "Ceiling"},
    "gbdt": {"baselines": ("Naive-GBDT", "LambdaMART"), "ceiling": "Ceiling-GBDT"},
}
# issue 30: each debiasing method against the rivals a user would pick instead and its unbiased-click ceiling,
# per seed by a paired t-test over the test queries; "A|B" is the better of A and B on that seed's test queries,
# and "best" the best of all the method's rivals but the ceiling (the bar for "never significantly below").
RIVALS: dict[str, tuple[str, ...]] = {
    "BAL": ("Naive|Naive-list", "PB-BAL", "Ceiling"),
    "BAL-GBDT": ("XGB-unbiased", "LambdaMART-pos", "Naive-GBDT|LambdaMART", "Ceiling-GBDT"),
    "BAL-GBDT-lambda": ("XGB-unbiased", "LambdaMART-pos", "Naive-GBDT|LambdaMART", "Ceiling-GBDT"),   # the λ step
}
GBDT_METHODS = ("Naive-GBDT", "LambdaMART", "BAL-GBDT", "BAL-GBDT-list", "BAL-GBDT-lambda", "Naive-GBDT-lambda",
                "LambdaMART-pos", "Ceiling-GBDT", "BAL-GBDT-nodoc", "BAL-GBDT-lambda-nodoc", "Oracle-IPW-GBDT",
                "BAL-GBDT-lambda-click", "BAL-GBDT-lambda-both", "Oracle-skip-GBDT", "Oracle-exam-GBDT",
                "BAL-GBDT-lambda-skip", "XGB-unbiased")


def family(label: str) -> str:
    return "gbdt" if label in GBDT_METHODS else "neural"


def shipped_defaults() -> dict[str, Any]:
    """The `discovery` and `bal` sections of pipelines/bal.yaml: the bench measures the defaults users get."""
    shipped = yaml.safe_load((REPO / "pipelines" / "bal.yaml").read_text())
    return {key: shipped[key] for key in ("discovery", "bal") if key in shipped}


def base_config(seed: int, sessions: int, epochs: int, world: dict[str, Any]) -> dict[str, Any]:
    """The shared run config: the world's simulator settings, the MLP ranker, BAL's shipped defaults."""
    simulate_cfg = {"n_queries": 600, "n_sessions": sessions, "n_annotated_queries": 600, **world}
    return {
        "seed": seed,
        "data": {"simulate": simulate_cfg},
        "ranker": {"backbone": "mlp", "head": [64, 32]},
        "train": {"epochs": epochs, "warmup_epochs": 1, "batch_size": 64, "learning_rate": 1e-3, "device": "cpu"},
        **shipped_defaults(),
    }


def with_overrides(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(values))
    for key, value in overrides.items():
        set_dotted(out, key, value)
    return out


def truth_of(train: pd.DataFrame, truth: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """The simulator's truth `columns` of every shown result of `train`, row for row."""
    return train[[SESSION_ID, POSITION]].merge(truth[[SESSION_ID, POSITION, *columns]], on=[SESSION_ID, POSITION],
                                               how="left", validate="one_to_one")[list(columns)]


def split_annotations(annotations: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(validation, test) annotations: a fifth of the queries, drawn by the seed, validate; the rest test."""
    queries = np.sort(annotations[QUERY_ID].unique())
    valid_q = np.random.default_rng(seed).choice(queries, size=len(queries) // 5, replace=False)
    return annotations[annotations[QUERY_ID].isin(valid_q)], annotations[~annotations[QUERY_ID].isin(valid_q)]


def unbiased_clicks(train: pd.DataFrame, truth: pd.DataFrame, click_noise: float, seed: int) -> np.ndarray:
    """Clicks for the same shown results with no bias: every result examined, clicked for its relevance."""
    chance = click_relevance(truth_of(train, truth, "true_label")["true_label"].to_numpy(np.float64), click_noise)
    return (np.random.default_rng(seed + 7919).random(len(chance)) < chance).astype(np.int8)


def true_examination(train: pd.DataFrame, truth: pd.DataFrame) -> np.ndarray:
    """The simulator's examination probability of every shown result of `train`."""
    return truth_of(train, truth, "examination_prob")["examination_prob"].to_numpy(np.float64)


def oracle_ipw(train: pd.DataFrame, truth: pd.DataFrame, valid: pd.DataFrame, cfg, boosted: bool) -> Any:
    """The ranker step BAL's reweighting aims at, given the true examination: each click weighted by 1/examination
    (mean 1, capped at bal.weights.max_weight as BAL's ω is) in the listwise softmax (MLP) or in the λ-pairs
    (LightGBM). What any estimate of the page's examination could reach with that step."""
    omega = clip_and_normalise(1.0 / true_examination(train, truth), cfg.bal.weights.max_weight)[0]
    if boosted:
        trainer = BoostingTrainer(train, valid, cfg)
        trainer.warm_up()
        grad_hess, loss = trainer.lambda_objective(trainer.in_dataset_order(omega))
        return trainer.fit(grad_hess, loss)
    trainer = Trainer(build_ranker(cfg, train), train, valid, cfg)
    return trainer.fit(lambda s, b: weighted_softmax_loss(s, b.clicks, b.mask, b.extras["omega"]),
                       extras={"omega": trainer.lists.gather(omega.astype(np.float32))},
                       epochs=cfg.train.epochs + cfg.train.warmup_epochs)


def oracle_skip(train: pd.DataFrame, truth: pd.DataFrame, valid: pd.DataFrame, cfg) -> Any:
    """BAL-GBDT-lambda's step (`bal.pair_weights: posterior`) given the true click model: every clicked-over-skipped
    pair weighted by its skipped result's true chance of not being clicked had it been examined,
    (1 − p(c)/p(o)) / (1 − p(c)), the click side by 1 — what a perfect estimate of u and v reaches with that step."""
    probs = truth_of(train, truth, "examination_prob", "click_prob")
    exam, click = probs["examination_prob"].to_numpy(np.float64), probs["click_prob"].to_numpy(np.float64)
    skip = np.clip(1.0 - click / np.maximum(exam, 1e-12), 0.0, 1.0) / np.maximum(1.0 - click, 1e-12)
    trainer = BoostingTrainer(train, valid, cfg)
    trainer.warm_up()
    grad_hess, loss = trainer.lambda_objective(np.ones(len(train)), trainer.in_dataset_order(skip))
    return trainer.fit(grad_hess, loss)


def oracle_examination(train: pd.DataFrame, truth: pd.DataFrame, valid: pd.DataFrame, cfg) -> Any:
    """BAL-GBDT-lambda's step given the true examination e of every shown result and nothing else: a (query,
    document)'s relevance is what a click model with that e learns from its clicks, r̃ = (Σ c + m) / (Σ e + 1)
    over its impressions (one pseudo-impression at the log's mean rate m = Σ c / Σ e), and each clicked-over-skipped
    pair weighs its skipped result's chance of having been skipped for irrelevance, (1 − r̃) / (1 − e·r̃). What a
    perfect estimate of the page's bias reaches with that step, with no label the logs do not hold."""
    exam = true_examination(train, truth)
    clicks = train[CLICK].to_numpy(np.float64)
    pair, _ = pd.factorize(pd.MultiIndex.from_arrays([train[QUERY_ID], train[DOC_ID]]))
    rate = clicks.sum() / exam.sum()
    relevance = np.clip((np.bincount(pair, clicks) + rate) / (np.bincount(pair, exam) + 1.0), 0.0, 1.0)[pair]
    skip = (1.0 - relevance) / np.maximum(1.0 - exam * relevance, 1e-12)
    trainer = BoostingTrainer(train, valid, cfg)
    trainer.warm_up()
    grad_hess, loss = trainer.lambda_objective(np.ones(len(train)), trainer.in_dataset_order(skip))
    return trainer.fit(grad_hess, loss)


def oracle(train: pd.DataFrame, truth: pd.DataFrame, valid: pd.DataFrame, cfg) -> Any:
    """The same ranker trained on the true labels of the shown results (listwise softmax on gains)."""
    labels = truth_of(train, truth, "true_label")
    trainer = Trainer(build_ranker(cfg, train), train, valid, cfg)
    gains = trainer.lists.gather(np.exp2(labels["true_label"].to_numpy(np.float32)) - 1.0)
    return trainer.fit(lambda s, b: listwise_softmax_loss(s, b.extras["gain"], b.mask), extras={"gain": gains},
                       epochs=cfg.train.epochs + cfg.train.warmup_epochs)


def untouched_letor_queries(logs: Any) -> pd.DataFrame:
    """Every LETOR sample query no click touched, all its documents with their real labels: the rank.test queries
    and the rank.train queries the corpus left out (query ids `test:<i>` and `train:<i>`)."""
    corpus = logs.truth["corpus"]
    left_out = {q["query_id"] for q in corpus["dropped_queries"] if q["file"] == 0}
    frames = []
    for tag, path, keep in (("train", corpus["files"][0], left_out), ("test", LETOR_HELD_OUT, None)):
        data = read_letor(path, f"{path}.query", n_features=logs.truth["config"]["n_dense_features"])
        query = np.repeat(data.query_ids, data.group_sizes)
        rows = np.flatnonzero(np.isin(query, list(keep))) if keep is not None else np.arange(data.n_docs)
        frames.append(pd.DataFrame({QUERY_ID: [f"{tag}:{q}" for q in query[rows]],
                                    DOC_ID: [f"{tag}:{r}" for r in rows],
                                    FEATURES: list(data.features[rows]), LABEL: data.labels[rows]}))
    return pd.concat(frames, ignore_index=True)


def test_metrics(ranker: Any, test: pd.DataFrame) -> pd.DataFrame:
    """Per-query metrics of `ranker` on the held-out annotated `test` queries (what every method is judged by)."""
    return per_query(test.assign(score=score_frame(ranker, test)), "score", label_col=LABEL)


def fit_method(label: str, values: dict[str, Any], train: pd.DataFrame, valid: pd.DataFrame) -> Any:
    """`label`'s method (its METHODS overrides on the world's config) fitted on the logs."""
    cfg = config_from_dict(with_overrides(values, METHODS[label]))
    return get_method(cfg.train.method).fit(train, valid, cfg)


def epoch_seconds(result: Any) -> float:
    """Mean seconds of a fit's trained epochs (warm-up left out); NaN if none was recorded."""
    trained = [e["seconds"] for e in result.history if e.get("phase") != "warmup" and "seconds" in e]
    return float(np.mean(trained)) if trained else float("nan")


def round_ratios(rounds: dict[str, list[float]], label: str) -> list[float]:
    """`label`'s seconds per epoch over Naive's, timing round by timing round (empty without Naive)."""
    return [a / b for a, b in zip(rounds[label], rounds.get("Naive", []), strict=False)]


def one_seed(world: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every method on one world's logs of one seed: per-query test metrics and seconds per epoch."""
    values = base_config(seed, args.sessions, args.epochs, BENCH_WORLDS[world])
    logs = simulate(config_from_dict(values).data.simulate, seed=seed)
    train, annotations, truth = logs.sessions, logs.annotations, logs.truth_sessions
    valid, test = split_annotations(annotations, seed)
    if world in LETOR_WORLDS:                            # test on every LETOR query no click touched
        test = untouched_letor_queries(logs)
    print(f"  {world} seed {seed}: {test[QUERY_ID].nunique()} test queries, {valid[QUERY_ID].nunique()} "
          f"validation queries, {train[QUERY_ID].nunique()} queries in the logs", flush=True)

    def measured(ranker: Any) -> pd.DataFrame:
        return test_metrics(ranker, test)

    out: dict[str, Any] = {"per_query": {}, "seconds": {}, "rounds": {}, "steps": {}, "graphs": {}, "examination": {}}
    exam = pd.Series(true_examination(train, truth)).groupby(train[POSITION].to_numpy()).mean()
    out["true_examination"] = (exam / exam.iloc[0]).to_numpy()
    for label in args.methods:
        kept = saved_per_query(args, world, seed, label)
        if kept is not None:                             # --resume: scored by an earlier run of this bench
            out["per_query"][label] = kept
            out["seconds"][label] = float("nan")
            print(f"  {world} seed {seed} {label:14s} DCG@10 {kept['DCG@10'].mean():.3f}  (read back: --resume)",
                  flush=True)
            continue
        start = time.perf_counter()
        result = fit_method(label, values, train, valid)
        out["per_query"][label] = measured(result.ranker)
        save_per_query(args, world, seed, label, out["per_query"][label])
        out["rounds"][label] = [epoch_seconds(result)]          # `seconds` is their mean, after the rounds
        steps = [e["step_seconds"] for e in result.history if e.get("step_seconds")]
        for e in (e for e in result.history if e.get("step_seconds")):      # where each BAL epoch's time went
            fits = {k: v["denominator_history"]["epochs_run"] for k, v in e["weights"].get("estimators", {}).items()}
            print(f"    epoch {e['bal_epoch']}: {e['step_seconds']} weights {e['weights'].get('seconds', {})} "
                  f"estimator epochs {fits}", flush=True)
        if steps:
            out["steps"][label] = {k: float(np.mean([s[k] for s in steps])) for k in steps[0]}
        learned = [e.get("examination_by_position") for e in (result.bias or {}).get("epochs", [])]
        if learned and learned[-1]:                    # the click model's position bias, last epoch
            out["examination"][label] = np.array(list(learned[-1].values()), dtype=float)
        edges = [e.get("graph_edges") for e in result.history if e.get("graph_edges")]
        if edges:
            out["graphs"][label] = edges[-1]
        aside = (result.bias or {}).get("separability", {}).get("set_aside")     # kept in the graph, not corrected
        print(f"  {world} seed {seed} {label:14s} DCG@10 {out['per_query'][label]['DCG@10'].mean():.3f}"
              f"  {time.perf_counter() - start:5.0f}s  {edges[-1] if edges else ''}"
              f"{f'  not corrected: {aside}' if aside else ''}", flush=True)
    timed = [label for label in args.methods if label in out["rounds"]]   # trained here, not read back
    for r in range(1, getattr(args, "timing_rounds", 1)):     # the machine's speed drifts: time again, the
        for label in (timed[::-1] if r % 2 else timed):        # order reversed every other round
            out["rounds"][label].append(epoch_seconds(fit_method(label, values, train, valid)))
    for label, rounds in out["rounds"].items():
        out["seconds"][label] = float(np.mean(rounds))
    out["best"] = {}
    if args.no_references:                               # a timing run: no Oracle, no ceilings
        return out
    cfg = config_from_dict(values)
    if not args.no_oracle:
        out["per_query"]["Oracle"] = measured(oracle(train, truth, valid, cfg))
    click_noise = logs.truth["user_model"]["params"].get("click_noise", 0.1)   # the world's own ε
    unbiased = train.assign(**{CLICK: unbiased_clicks(train, truth, click_noise, seed)})
    out["best"] = best_baselines(out["per_query"])
    for name, best in out["best"].items():
        fam = FAMILIES[name]
        # the ceiling: the better baseline's own method and settings, on clicks drawn with no bias
        overrides = METHODS[best]
        result = get_method(overrides["train.method"]).fit(unbiased, valid,
                                                          config_from_dict(with_overrides(values, overrides)))
        out["per_query"][fam["ceiling"]] = measured(result.ranker)
        save_per_query(args, world, seed, fam["ceiling"], out["per_query"][fam["ceiling"]])
    # the reweighted step with the true examination, for each family that ran a reweighting BAL
    for name, boosted, reweighting in (("Oracle-IPW", False, ("BAL-list",)),
                                       ("Oracle-IPW-GBDT", True, ("BAL-GBDT-lambda-click", "BAL-GBDT-lambda-both"))):
        ran = [m for m in reweighting if m in out["per_query"]]
        if ran:
            out["per_query"][name] = measured(oracle_ipw(train, truth, valid, config_from_dict(
                with_overrides(values, METHODS[ran[0]])), boosted))
    if "BAL-GBDT-lambda" in out["per_query"]:          # its posterior-weighted λ step with the true click model
        step = config_from_dict(with_overrides(values, METHODS["BAL-GBDT-lambda"]))
        out["per_query"]["Oracle-skip-GBDT"] = measured(oracle_skip(train, truth, valid, step))
        out["per_query"]["Oracle-exam-GBDT"] = measured(oracle_examination(train, truth, valid, step))
    for label in ("Oracle", *(f["ceiling"] for f in FAMILIES.values()), "Oracle-IPW", "Oracle-IPW-GBDT",
                  "Oracle-skip-GBDT", "Oracle-exam-GBDT"):
        if label in out["per_query"]:
            print(f"  {world} seed {seed} {label:14s} DCG@10 {out['per_query'][label]['DCG@10'].mean():.3f}",
                  flush=True)
    return out


def gap_closed(method: float, baseline: float, ceiling: float, ceiling_p: float) -> float:
    """The share of the baseline → ceiling gap a method's mean DCG@10 closes; NaN where the ceiling is not
    significantly above the baseline (`ceiling_p`: their paired test): clicks with no bias did not rank measurably
    better, so there is no cost of bias to recover, and a ratio to a gap near 0 reads as a huge or inverted share."""
    gap = ceiling - baseline
    return (method - baseline) / gap if gap > 0 and ceiling_p < ALPHA else float("nan")


def ceiling_tests(seeds: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[float, float]]:
    """(family, seed index) -> (p, Δ DCG@10) of the family's unbiased-click ceiling against its best baseline on that
    seed (paired t-test over the test queries): what a perfect debiaser of these logs could gain at most."""
    out = {}
    for name, fam in FAMILIES.items():
        for i, s in enumerate(seeds):
            if name in s["best"] and fam["ceiling"] in s["per_query"]:
                p, diff, _ = paired_test(s["per_query"][fam["ceiling"]], s["per_query"][s["best"][name]], "DCG@10",
                                         "all")
                out[name, i] = p, diff
    return out


def headroom(tests: dict[tuple[str, int], tuple[float, float]]) -> None:
    """Print `ceiling_tests` per family, seed by seed."""
    for name, fam in FAMILIES.items():
        cells = [f"{diff:+.3f} ({p:.3f}){'+' if p < ALPHA and diff > 0 else '−' if p < ALPHA else ''}"
                 for (family_name, _), (p, diff) in tests.items() if family_name == name]
        if cells:
            print(f"  {fam['ceiling']:14s} − best {name} baseline: " + "; ".join(cells))


def rival_of(seed: dict[str, Any], rival: str) -> str | None:
    """The method `rival` ("A|B": the better of those that ran, by mean DCG@10) names on one seed's tables."""
    ran = [m for m in rival.split("|") if m in seed["per_query"]]
    return max(ran, key=lambda m: seed["per_query"][m]["DCG@10"].mean()) if ran else None


def best_baselines(per_query: dict[str, pd.DataFrame]) -> dict[str, str]:
    """Each family's best baseline among those that ran: the higher mean DCG@10 on these test queries (the harder
    bar for the family's debiasing methods)."""
    best = {}
    for name, fam in FAMILIES.items():
        ran = [m for m in fam["baselines"] if m in per_query]
        if ran:
            best[name] = max(ran, key=lambda m: per_query[m]["DCG@10"].mean())
    return best


def save_per_query(args: argparse.Namespace, world: str, seed: int, label: str, table: pd.DataFrame) -> None:
    """With --per-query-dir: this method's per-query test metrics as soon as it is scored, so runs split over
    processes or machines (or cut short) can be joined and tested later (`--join`)."""
    if args.per_query_dir:
        directory = Path(args.per_query_dir)
        directory.mkdir(parents=True, exist_ok=True)
        table.to_csv(directory / f"{world}__seed{seed}__{label}.csv", index=False)


def saved_per_query(args: argparse.Namespace, world: str, seed: int, label: str) -> pd.DataFrame | None:
    """With --resume: the per-query table an earlier run wrote for this world, seed and method (None: train it).
    The logs are simulated again from the same seed and settings, so the ceilings and references computed after
    it see the same sessions and test queries; keep --sessions and --epochs as they were."""
    if not (args.resume and args.per_query_dir):
        return None
    path = Path(args.per_query_dir) / f"{world}__seed{seed}__{label}.csv"
    return read_per_query(path) if path.is_file() else None


def read_per_query(path: Path) -> pd.DataFrame:
    """A table `save_per_query` wrote, its query ids and keys as text (as `metrics.per_query` gives them)."""
    return pd.read_csv(path, dtype={QUERY_ID: str, QUERY_KEY: str})


def joined_seeds(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """The per-seed results `save_per_query` wrote, by world and seed, each family's best baseline chosen as
    `one_seed` chooses it (seconds and steps are not saved: a joined run reports quality only)."""
    found: dict[str, dict[int, dict[str, pd.DataFrame]]] = {}
    for path in sorted(directory.glob("*__seed*__*.csv")):
        world, seed, label = path.stem.split("__")
        found.setdefault(world, {}).setdefault(int(seed[4:]), {})[label] = read_per_query(path)
    seeds: dict[str, list[dict[str, Any]]] = {}
    for world, by_seed in found.items():
        for seed in sorted(by_seed):
            per_query = by_seed[seed]
            seeds.setdefault(world, []).append({"per_query": per_query, "best": best_baselines(per_query),
                                                "seconds": {}, "steps": {}, "graphs": {}, "examination": {},
                                                "seed": seed, "true_examination": np.full(1, np.nan)})
    return seeds


def rival_report(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """Print and return each `RIVALS` method's paired DCG@10 test against each of its rivals, seed by seed."""
    out: dict[str, Any] = {}
    n_queries = sorted({len(s["per_query"][next(iter(s["per_query"]))]) for s in seeds})
    print(f"\npaired t-tests of DCG@10 over the {'/'.join(map(str, n_queries))} test queries, per seed "
          f"(Δ = method − rival, p; + / − = significantly better / worse at p < {ALPHA}):")
    for label, rivals in RIVALS.items():
        if not any(label in s["per_query"] for s in seeds):
            continue
        beaten = "|".join(r for r in rivals if not r.startswith("Ceiling"))
        for rival in (*rivals, beaten):
            cells, better, worse = [], 0, 0
            for s in seeds:
                other = rival_of(s, rival)
                if label not in s["per_query"] or other is None:
                    continue
                p, diff, _ = paired_test(s["per_query"][label], s["per_query"][other], "DCG@10", "all")
                sign = "+" if p < ALPHA and diff > 0 else "−" if p < ALPHA and diff < 0 else " "
                better, worse = better + (sign == "+"), worse + (sign == "−")
                cells.append(f"{diff:+.3f} ({p:.3f}){sign}" + (f" [{other}]" if "|" in rival else ""))
            if cells:
                name = "best rival" if rival == beaten else rival
                print(f"  {label:9s} vs {name:22s} {better} / {worse}   " + "; ".join(cells))
                out.setdefault(label, {})[name] = {"better": better, "worse": worse, "cells": cells}
    return out


def report(world: str, seeds: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    labels = list(seeds[0]["per_query"])
    size = ("joined from --per-query-dir runs" if args.join
            else f"{args.sessions} sessions, {args.epochs} epochs after 1 warm-up")
    print(f"\n## world: {world} ({len(seeds)} seeds, {size})")
    print("| method | " + " | ".join(METRICS) + " | better / worse than its family's best baseline (seeds) |")
    print("|---" * (len(METRICS) + 2) + "|")
    summary: dict[str, Any] = {"methods": {}}
    for label in labels:
        means = {m: [s["per_query"][label][m].mean() for s in seeds] for m in METRICS}
        fam = family(label)
        tests = []
        for s in seeds:
            if fam not in s["best"]:
                continue
            p, diff, _ = paired_test(s["per_query"][label], s["per_query"][s["best"][fam]], "DCG@10", "all")
            tests.append((p, diff))
        better = sum(1 for p, d in tests if p < ALPHA and d > 0)
        worse = sum(1 for p, d in tests if p < ALPHA and d < 0)
        cells = [f"{np.mean(v):.3f} ± {np.std(v):.3f}" for v in means.values()]
        print(f"| {label} | " + " | ".join(cells) + f" | {better} / {worse} |")
        summary["methods"][label] = {"mean": {m: float(np.mean(v)) for m, v in means.items()},
                                     "better": better, "worse": worse,
                                     "p": [p for p, _ in tests], "diff": [d for _, d in tests]}
    summary["rivals"] = rival_report(seeds)
    print("\nheadroom: each family's unbiased-click ceiling against its best baseline, per seed (Δ DCG@10, p):")
    ceilings = ceiling_tests(seeds)
    headroom(ceilings)
    print("\nshare of the best-baseline -> ceiling DCG@10 gap closed (mean; per seed; 'no gap' where the ceiling is "
          "not significantly above the best baseline):")
    for label in labels:
        fam = family(label)
        if label in FAMILIES[fam]["baselines"] or label in ("Oracle", FAMILIES[fam]["ceiling"]):
            continue
        shares = []
        for i, s in enumerate(seeds):
            if (fam, i) not in ceilings:
                continue
            base = s["per_query"][s["best"][fam]]["DCG@10"].mean()
            shares.append(gap_closed(s["per_query"][label]["DCG@10"].mean(), base,
                                     s["per_query"][FAMILIES[fam]["ceiling"]]["DCG@10"].mean(), ceilings[fam, i][0]))
        summary["methods"][label]["gap_closed"] = shares
        if not shares:                                   # --no-references: no ceiling to close a gap to
            continue
        mean_gap = np.mean([s["per_query"][FAMILIES[fam]["ceiling"]]["DCG@10"].mean()
                            - s["per_query"][s["best"][fam]]["DCG@10"].mean() for s in seeds if fam in s["best"]])
        closed = [g for g in shares if not np.isnan(g)]
        none = (f"; no significant gap in {len(shares) - len(closed)} of {len(shares)} seeds: no measurable cost "
                "of bias to recover there") if len(closed) < len(shares) else ""
        print(f"  {label:14s} {f'{np.mean(closed):7.1%}' if closed else '      –'}  "
              f"({', '.join('no gap' if np.isnan(g) else f'{g:.1%}' for g in shares)})  "
              f"[{fam}: baseline {'/'.join(FAMILIES[fam]['baselines'])}, gap {mean_gap:.3f}{none}]")
    naive = [s["seconds"]["Naive"] for s in seeds if "Naive" in s["seconds"]]
    naive_s = float(np.mean(naive)) if naive else None               # no ratio when Naive did not run
    n_rounds = max((len(r) for s in seeds for r in s.get("rounds", {}).values()), default=1)
    print(f"\nseconds per trained epoch{f' (Naive {naive_s:.2f} s)' if naive_s else ''}"
          f"{f', mean of {n_rounds} timing rounds, the order reversed every other round' if n_rounds > 1 else ''}:")
    for label in labels:
        sec = [s["seconds"][label] for s in seeds if label in s["seconds"]]
        if sec and label != "Naive":
            ratio = f"  {np.mean(sec) / naive_s:5.2f}x Naive" if naive_s else ""
            per_round = [round_ratios(s["rounds"], label) for s in seeds if label in s.get("rounds", {})]
            rounds = (f"  (per round: {', '.join(f'{x:.2f}x' for r in per_round for x in r)})"
                      if n_rounds > 1 and naive_s else "")
            print(f"  {label:14s} {np.mean(sec):7.2f} s{ratio}{rounds}")
    for label in labels:
        steps = [s["steps"][label] for s in seeds if label in s["steps"]]
        if steps:
            print(f"  {label} by step: " + ", ".join(f"{k} {np.mean([st[k] for st in steps]):.2f}" for k in steps[0]))
    truth = np.mean([s["true_examination"] for s in seeds], axis=0)
    learned_by = {label: [s["examination"][label] for s in seeds if label in s["examination"]] for label in labels}
    if any(learned_by.values()):
        print(f"\nexamination by position relative to position 1, last epoch's click model (mean over seeds):\n"
              f"  {'truth':14s} {np.array2string(truth, precision=3, max_line_width=200)}")
    for label, learned in learned_by.items():
        if learned and all(len(x) == len(truth) for x in learned):
            mean = np.mean(learned, axis=0)
            error = np.max(np.abs(np.log(mean / truth)))
            print(f"  {label:14s} {np.array2string(mean, precision=3, max_line_width=200)}  "
                  f"max |log(learned / true)| {error:.3f}")
    for label in labels:
        graphs = [s["graphs"][label] for s in seeds if label in s["graphs"]]
        if graphs:
            print(f"  {label} last graph per seed: {graphs}")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worlds", default=",".join(WORLDS),
                        help=f"comma-separated, of {', '.join(BENCH_WORLDS)}")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=50_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--json", help="write the summary figures to this file")
    parser.add_argument("--no-references", action="store_true",
                        help="skip the Oracle and the ceilings (timing runs: seconds per epoch only)")
    parser.add_argument("--no-oracle", action="store_true", help="skip the Oracle (the ceilings still run)")
    parser.add_argument("--timing-rounds", type=int, default=1,
                        help="fit every trained method this many times, the order reversed every other round, and "
                             "report the mean seconds per epoch: the machine's speed drifts within a run, and a "
                             "round in each order cancels a steady drift (rounds after the first only time)")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--per-query-dir", help="write each method's per-query test metrics here as it is scored")
    parser.add_argument("--resume", action="store_true",
                        help="with --per-query-dir: read back each method that dir already holds for the world and "
                             "seed instead of training it again (a cut run goes on; references added to an old run)")
    parser.add_argument("--join", help="no training: join the per-query tables of earlier --per-query-dir runs "
                                       "(any number of processes or machines) and report over all their seeds")
    args = parser.parse_args()
    check_json_output(args.json)     # before anything is measured: a file of the user's is never replaced
    if args.join:
        for world, joined in joined_seeds(Path(args.join)).items():
            complete = [s for s in joined if all(label in s["per_query"] for label in joined[0]["per_query"])]
            print(f"\n### {world}: seeds {[s['seed'] for s in joined]} ({len(complete)} with every method)")
            rival_report(joined)
            report(world, complete, args)
        return
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in args.methods if m not in METHODS] + [w for w in args.worlds.split(",")
                                                               if w not in BENCH_WORLDS]
    if unknown:
        parser.error(f"unknown method(s) or world(s): {unknown}")
    worlds = args.worlds.split(",")
    seeds: dict[str, list[dict[str, Any]]] = {world: [] for world in worlds}
    with open_client():
        # seed by seed across the worlds: a cut run stays even
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for world in worlds:
                seeds[world].append(one_seed(world, seed, args))
                if seed + 1 < args.first_seed + args.seeds:   # the paired tests so far, in case the run is cut short
                    print(f"\n### {world}: after {seed + 1} seed(s)", end="")
                    rival_report(seeds[world])
    summary = {world: report(world, seeds[world], args) for world in worlds}
    if args.json:
        write_json_output(args.json, summary)


if __name__ == "__main__":
    main()
