"""The stages of a run: each a function from files in the run directory to files in the run directory.

A stage declares its outputs (relative to the run directory) as a function of the config; the
runner skips a stage whose completion record and outputs exist, so a run resumes at the first
stage that did not finish. Data-parallel work (ingest by file, featurising by partition) runs on
the Dask client in the context.
"""
from __future__ import annotations

import glob
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

import pandas as pd

from ..causal.biases import identify_biases
from ..causal.discover_stage import discover_epoch, score_sessions
from ..causal.graph import epoch_dir, graph_epochs
from ..config import RunConfig
from ..errors import ConfigError
from ..evaluation.annotated import evaluate_ranker
from ..evaluation.click_metrics import heldout_click_metrics
from ..evaluation.truth_metrics import truth_metrics  # MCC, click MSE (simulated logs)
from ..features.featurize_stage import featurize_run
from ..features.preprocess_stage import fit_page_encoder
from ..identifiability.preflight import preflight, summary_entry
from ..io.baidu import ingest_baidu, ingest_baidu_annotations
from ..io.baidu_embeddings import ingest_embedding_annotations, ingest_embedding_sessions
from ..io.parquet import column_names, partition_paths, read_table, row_count
from ..io.split import annotation_split, write_split
from ..io.tables import ingest_tables, read_annotations_table
from ..io.train_input import arrow_lists, read_sampled_sessions, training_columns
from ..memory import map_large_allocations
from ..methods.base import get_method
from ..methods.training.checkpoint import config_key, keep_checkpoints
from ..methods.training.distributed import fit_streamed
from ..methods.training.ranks import keep_rank_logs
from ..report.html import write_report
from ..rundir.epochs import renumber  # one numbering: warm-up named, the method's epochs 0…N−1
from ..rundir.files import RunDir, atomic_path, write_json, write_parquet
from ..rundir.layout import (
    ANNOTATIONS,
    ANNOTATIONS_FILE,
    BIAS,
    BIASES_FILE,
    FEATURED_ANNOTATIONS,
    FEATURED_SESSIONS_DIR,
    GRAPH_FILE,
    HELDOUT_INGEST_DIR,
    HELDOUT_INGESTED,
    HELDOUT_SESSIONS_DIR,
    HISTORY,
    IDENTIFIABILITY,
    INGEST_SUMMARY,
    LEXICAL_STATE,
    METRICS,
    PAGE_ENCODER,
    PER_QUERY,
    RANK_LOGS,
    RANKER_DIR,
    REPORT,
    SESSION_SCORES,
    SESSIONS_DIR,
    SPLIT,
    TEST_SCORES,
    TRAIN_CHECKPOINT,
    TRUTH_DIR,
)
from ..rundir.tables import ingested_columns, training_tables
from ..schema import FEATURES, query_key
from ..settings.methods import METHODS, METHODS_PACKAGE
from ..simulate import simulate
from ..simulate.unbiased import with_unbiased_clicks
from ..storage import expand, is_file

log = logging.getLogger(__name__)



@dataclass
class StageContext:
    """What every stage gets: the resolved config, the run directory and the Dask client."""

    config: RunConfig
    run: RunDir
    client: Any  # distributed.Client
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[StageContext], dict[str, Any] | None]
    outputs: Callable[[RunConfig], list[str]]


def _needs_lexical_features(cfg: RunConfig, run: RunDir) -> bool:
    """The dense MLP needs feature vectors; token-only logs (Baidu layout) get lexical ones."""
    return cfg.ranker.backbone in ("mlp", "lightgbm") and FEATURES not in ingested_columns(run)


# ---------------------------------------------------------------------------------------------
def ingest(ctx: StageContext) -> dict[str, Any]:
    """Bring the configured logs into the run as validated, partitioned Parquet plus annotations."""
    cfg, run = ctx.config, ctx.run
    data = cfg.data
    page_features = data.parsed_page_features
    sessions_dir = run.path(SESSIONS_DIR).parent  # ingest writers append "sessions/"
    if data.source == "simulate":
        raw = run.path("data/raw")
        logs = simulate(data.simulate, seed=cfg.seed)
        if data.clicks == "unbiased":   # the ceiling: the same shown results, clicks with no bias
            logs = with_unbiased_clicks(logs, cfg.seed)
        logs.write(raw, fmt="parquet")
        summary = ingest_tables(sorted(glob.glob(str(raw / "train" / "*.parquet"))), sessions_dir,
                                page_features, ctx.client, data.partition_rows, key="run_dir").to_dict()
        annotations = read_table(raw / ANNOTATIONS_FILE)
        _copy_truth(raw, run.path(TRUTH_DIR))
        write_parquet(run.path(ANNOTATIONS), annotations)
    elif data.source == "baidu":
        summary = ingest_baidu(_expand(data.train, "data.train"), sessions_dir, ctx.client,
                               data.partition_rows, key="run_dir").to_dict()
        # annotations.parquet and quarantine/annotations.parquet beside the sessions (ANNOTATIONS' directory)
        summary["annotations_quarantined"] = ingest_baidu_annotations(data.annotations, sessions_dir).quarantined
        annotations = read_table(run.path(ANNOTATIONS))
    elif data.source == "baidu_embeddings":
        summary, annotations = _ingest_embeddings(ctx, sessions_dir)
    else:
        summary = ingest_tables(_expand(data.train, "data.train"), sessions_dir, page_features,
                                ctx.client, data.partition_rows, key="run_dir").to_dict()
        annotations = read_annotations_table(data.annotations)
        write_parquet(run.path(ANNOTATIONS), annotations)
    summary["annotation_rows"] = int(len(annotations))
    summary["annotated_queries"] = int(query_key(annotations).nunique())
    summary["columns"] = sorted(column_names(run.path(SESSIONS_DIR)))   # from the Parquet footers, not the rows
    write_json(run.path(INGEST_SUMMARY), summary)
    return {k: v for k, v in summary.items() if k != "columns"}


def _ingest_embeddings(ctx: StageContext, sessions_dir: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """The Baidu-ULTR embedding datasets (io/baidu_embeddings.py): data.train's files as the sessions, data.heldout's
    as the held-out sessions (HELDOUT_INGEST_DIR, scored label-free by the evaluate stage), data.annotations."""
    data, run = ctx.config.data, ctx.run
    emb = data.embeddings
    options = dict(width=emb.width, ltr_features=tuple(emb.ltr_features), batch_rows=emb.batch_rows)
    train, held = _expand(data.train, "data.train"), _expand(data.heldout, "data.heldout") if data.heldout else []
    both = sorted(set(map(os.path.realpath, train)) & set(map(os.path.realpath, held)))
    if both:
        raise ConfigError(f"data.heldout: {both[0]} is in data.train too; held-out sessions must never be trained on")
    summary, _ = ingest_embedding_sessions(train, sessions_dir, ctx.client,
                                           partition_rows=data.partition_rows, key="run_dir", **options)
    summary = summary.to_dict()
    if held:
        heldout, _ = ingest_embedding_sessions(held, run.path(HELDOUT_INGEST_DIR),
                                               ctx.client, partition_rows=data.partition_rows, key="run_dir",
                                               **options)
        summary["heldout"] = heldout.to_dict()
    annotations = ingest_embedding_annotations(data.annotations, sessions_dir, **options)
    summary["annotations_quarantined"] = annotations.quarantined
    summary["annotations_file_reasons"] = annotations.file_reasons
    return summary, read_table(run.path(ANNOTATIONS))


def check_inputs(cfg: RunConfig) -> None:
    """Before any cluster starts: every `data.train` pattern names a file and `data.annotations` exists
    (FileNotFoundError naming the key), so a typo costs a second, not the cluster's start and an ingest."""
    if cfg.data.source not in ("baidu", "parquet", "baidu_embeddings"):     # simulated logs
        return
    _expand(cfg.data.train, "data.train")
    if cfg.data.source == "baidu_embeddings" and cfg.data.heldout:
        _expand(cfg.data.heldout, "data.heldout")
    if cfg.data.annotations is not None and not is_file(cfg.data.annotations):
        raise FileNotFoundError(f"data.annotations: {cfg.data.annotations}: no such file")


def _expand(patterns: list[str], key: str) -> list[str]:
    """The files `patterns` (paths, `*` globs, fsspec URLs) name, in order; FileNotFoundError naming `key`."""
    paths: list[str] = []
    for pattern in patterns:
        found = expand(pattern)
        if not found:
            raise FileNotFoundError(f"{key}: {pattern!r} matches no file")
        paths.extend(found)
    return paths


def _copy_truth(raw: Path, truth: Path) -> None:
    with atomic_path(truth) as tmp:
        shutil.copytree(raw / "truth", tmp)


def _ingest_outputs(cfg: RunConfig) -> list[str]:
    outputs = [SESSIONS_DIR, ANNOTATIONS, INGEST_SUMMARY] + ([HELDOUT_INGESTED] if cfg.data.heldout else [])
    return outputs + [TRUTH_DIR] if cfg.data.source == "simulate" else outputs


# ---------------------------------------------------------------------------------------------
def featurize(ctx: StageContext) -> dict[str, Any]:
    """Lexical features for token-only logs, fitted over all partitions in parallel and merged
    (features/featurize_stage.py)."""
    if not _needs_lexical_features(ctx.config, ctx.run):
        return {"skipped": "sessions carry dense features or the backbone reads tokens"}
    run = ctx.run
    return featurize_run(run.path(SESSIONS_DIR), run.path(ANNOTATIONS), run.path(FEATURED_SESSIONS_DIR),
                         run.path(FEATURED_ANNOTATIONS), run.path(LEXICAL_STATE), ctx.client)


def _featurize_outputs(cfg: RunConfig) -> list[str]:
    return []  # decided at run time from the ingested columns; the completion record suffices


# ---------------------------------------------------------------------------------------------
def preprocess(ctx: StageContext) -> dict[str, Any]:
    """Fit the page-feature encoder (Bradley–Terry scores, vocabularies, standardisation) over all partitions."""
    cfg = ctx.config
    features = cfg.data.parsed_page_features
    encoder = fit_page_encoder(ctx.run.path(SESSIONS_DIR), features, cfg.discovery.preprocess,
                               ctx.run.path(PAGE_ENCODER), ctx.client)
    info: dict[str, Any] = {"features": [f.name for f in features]}
    for name, fitted in encoder.encoders_.items():
        if hasattr(fitted, "score_table"):   # ordinal: the Bradley–Terry score of each level
            info[f"{name}_scores"] = {f"{level:g}": round(float(score), 4)
                                      for level, score in zip(fitted.levels_, fitted.scores_, strict=True)}
    return info


# ---------------------------------------------------------------------------------------------
def split(ctx: StageContext) -> dict[str, Any]:
    """Hold out a seeded share of annotated queries (schema.query_key) for model selection; the rest is the test set
    (io/split.py; with evaluation.heldout_sessions, whole sessions held out too)."""
    cfg = ctx.config
    return write_split(ctx.run, read_table(ctx.run.path(ANNOTATIONS)), cfg.data.valid_fraction, cfg.seed,
                       cfg.evaluation.heldout_sessions)


# ---------------------------------------------------------------------------------------------
def train(ctx: StageContext) -> dict[str, Any]:
    """Fit the configured method on the click logs, selecting epochs on the validation queries; DDP ranks
    (`train.processes` > 1) leave their logs in the run's train/ranks/. After every finished epoch the shared
    trainer writes train/checkpoint.pt: a rerun of a failed train stage resumes from it (training/checkpoint.py),
    and it is deleted once the ranker and history are written."""
    with keep_rank_logs(ctx.run.path(RANK_LOGS)), \
            keep_checkpoints(ctx.run.path(TRAIN_CHECKPOINT), config_key(ctx.config)) as checkpoint:
        resumed = checkpoint.finished_epochs()
        if resumed:
            log.warning("train: resuming after epoch %d of %d (%s)", resumed,
                        ctx.config.train.warmup_epochs + ctx.config.train.epochs, checkpoint.path)
        out = _train(ctx)
        checkpoint.remove()
    return {**out, "resumed_after_epochs": resumed} if resumed else out


def _train(ctx: StageContext) -> dict[str, Any]:
    cfg, run = ctx.config, ctx.run
    map_large_allocations()
    sessions_path, annotations_path = training_tables(run)
    annotations = read_table(annotations_path)
    valid = annotation_split(run, annotations, "valid")
    if cfg.train.streaming:   # the method's own streamed fit (its spec's streamed_fit), or the shared trainer's
        result, identifiability = streamed_fit(cfg.train.method)(sessions_path, valid if len(valid) else None, cfg,
                                                                 run.root)
        n_rows = row_count(partition_paths(sessions_path))
    else:
        sessions = read_sampled_sessions(sessions_path, cfg.data.max_sessions, cfg.seed,
                                         training_columns(cfg, column_names(sessions_path)), arrow_lists(cfg))
        sessions, identifiability = preflight(sessions, cfg, run.root)   # warn | merge | fail | intervene
        result = get_method(cfg.train.method).fit(sessions, valid if len(valid) else None, cfg)
        n_rows = len(sessions)
    with atomic_path(run.path(RANKER_DIR)) as tmp:
        result.ranker.save(tmp)
    history, bias = renumber(result.history, result.bias, cfg.train.select_metric)
    # the precision the ranker's passes ran in (train.precision resolved on the device; none for a booster)
    precision = next((e["precision"] for e in result.history if isinstance(e, dict) and "precision" in e), None)
    write_json(run.path(HISTORY), {"method": cfg.train.method, **({"precision": precision} if precision else {}),
                                   "epochs": history})
    write_json(run.path(BIAS), bias)
    _write_graphs(run, result)
    write_json(run.path(IDENTIFIABILITY), identifiability)
    return {"train_rows": int(n_rows), "valid_rows": int(len(valid)), "shipped": bias["shipped"].get("label"),
            **({"precision": precision} if precision else {}),
            "identifiability": summary_entry(identifiability)}


def streamed_fit(method: str) -> Callable[..., tuple[Any, dict[str, Any]]]:
    """The train stage's fit of `method` with `train.streaming`: its MethodSpec's `streamed_fit` hook (BAL's rows
    built a few columns at a time, bal/streamed.py), or the shared trainer streaming batches from the partitions."""
    target = METHODS[method].streamed_fit
    if target is None:
        return _shared_streamed_fit
    module, function = target.split(":")
    return getattr(import_module(module if module.startswith(".") else f".{module}", METHODS_PACKAGE), function)


def _shared_streamed_fit(sessions_path: Path, valid: pd.DataFrame | None, cfg: RunConfig,
                         run_root: Path) -> tuple[Any, dict[str, Any]]:
    """Batches streamed from the partitions (methods/training/distributed.fit_streamed); no pre-flight: the methods
    that stream this way (the config checks which) model no bias factor."""
    return fit_streamed(sessions_path, valid, cfg), {"checked": False,
                                                     "reason": f"method {cfg.train.method!r} models no bias factor"}


def _write_graphs(run: RunDir, result) -> None:
    """Each epoch's learned graph as epoch_<k>/graph.json and its biases as epoch_<k>/biases.json."""
    for k, graph in enumerate(result.graphs):
        out = epoch_dir(run.root, k)
        write_json(out / BIASES_FILE, identify_biases(graph).to_dict())
        graph.save(out / GRAPH_FILE)


# ---------------------------------------------------------------------------------------------
def discover(ctx: StageContext) -> dict[str, Any]:
    """The click model's graph under the trained ranker's scores (epoch 0), unless training learned its own."""
    cfg, run = ctx.config, ctx.run
    if graph_epochs(run.root):
        return {"skipped": f"training wrote graphs for epochs {graph_epochs(run.root)}"}
    if not cfg.evaluation.discover_graph:
        return {"skipped": "evaluation.discover_graph is false"}
    scored_rows = score_sessions(training_tables(run)[0], run.path(SESSION_SCORES), run.path(RANKER_DIR),
                                 cfg.train.batch_size * 8, ctx.client)
    features = cfg.data.parsed_page_features
    result = discover_epoch(run.path(SESSIONS_DIR), run.path(SESSION_SCORES), features, cfg.discovery, run.root, 0,
                            encoder_dir=run.path(PAGE_ENCODER), client=ctx.client, seed=cfg.seed)
    return {"edges": [f"{e.source} {e.arrow()} {e.target}" for e in result.graph.edges],
            "scored_rows": int(scored_rows)}


# ---------------------------------------------------------------------------------------------
def evaluate(ctx: StageContext) -> dict[str, Any]:
    """Score the held-out annotated queries with the trained ranker and compute the metrics."""
    cfg, run = ctx.config, ctx.run
    _, annotations_path = training_tables(run)
    test = annotation_split(run, read_table(annotations_path), "test")
    metrics, table, scores = evaluate_ranker(run.path(RANKER_DIR), test, cfg)
    truth = truth_metrics(run.root, training_tables(run)[0], cfg.train.batch_size)
    if truth is not None:
        metrics["truth"] = truth
    for heldout in (HELDOUT_SESSIONS_DIR, HELDOUT_INGESTED):     # evaluation.heldout_sessions > 0; data.heldout
        if run.path(heldout).is_dir():
            metrics["clicks"] = heldout_click_metrics(run, run.path(heldout), cfg)
    write_parquet(run.path(TEST_SCORES), scores)
    write_parquet(run.path(PER_QUERY), table)
    write_json(run.path(METRICS), metrics)
    return {"test_queries": metrics["all"].get("n_queries")}


# ---------------------------------------------------------------------------------------------
def report(ctx: StageContext) -> dict[str, Any]:
    write_report(ctx.run)
    return {}


STAGES: tuple[Stage, ...] = (
    Stage("ingest", ingest, _ingest_outputs),
    Stage("featurize", featurize, _featurize_outputs),
    Stage("preprocess", preprocess, lambda cfg: [PAGE_ENCODER]),
    Stage("split", split, lambda cfg: [SPLIT] + ([HELDOUT_SESSIONS_DIR] if cfg.evaluation.heldout_sessions else [])),
    Stage("train", train, lambda cfg: [RANKER_DIR, HISTORY, BIAS]),
    Stage("discover", discover, lambda cfg: []),
    Stage("evaluate", evaluate, lambda cfg: [METRICS, PER_QUERY, TEST_SCORES]),
    Stage("report", report, lambda cfg: [REPORT]),
)
