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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..config import RunConfig
from ..io.parquet import column_names, partition_paths, read_table, row_count, table_to_pandas
from ..rundir.files import RunDir, read_json, write_json, write_parquet
from ..rundir.layout import (ANNOTATIONS, ANNOTATIONS_FILE, BIAS, BIASES_FILE, FEATURED_ANNOTATIONS,
                             FEATURED_SESSIONS_DIR, GRAPH_FILE, HELDOUT_INGEST_DIR, HELDOUT_INGESTED,
                             HELDOUT_SESSIONS_DIR, HISTORY, IDENTIFIABILITY,
                             INGEST_SUMMARY, LEXICAL_STATE, METRICS, PAGE_ENCODER, PER_QUERY, RANK_LOGS, RANKER_DIR,
                             REPORT, SESSIONS_DIR, SESSION_SCORES, SPLIT, TEST_SCORES, TRAIN_CHECKPOINT, TRUTH_DIR)
from ..schema import CLICK, DOC_ID, FEATURES, POSITION, QUERY_ID, SESSION_ID, \
    query_key

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


def _needs_lexical_features(ctx_or_cfg: RunConfig, run: RunDir) -> bool:
    """The dense MLP needs feature vectors; token-only logs (Baidu layout) get lexical ones."""
    if ctx_or_cfg.ranker.backbone not in ("mlp", "lightgbm"):
        return False
    summary = read_json(run.path(INGEST_SUMMARY))
    return FEATURES not in summary.get("columns", [])


# ---------------------------------------------------------------------------------------------
def ingest(ctx: StageContext) -> dict[str, Any]:
    """Bring the configured logs into the run as validated, partitioned Parquet plus annotations."""
    cfg, run = ctx.config, ctx.run
    data = cfg.data
    page_features = data.parsed_page_features
    sessions_dir = run.path(SESSIONS_DIR).parent  # ingest writers append "sessions/"
    if data.source == "simulate":
        from ..io.tables import ingest_tables
        from ..simulate import simulate
        raw = run.path("data/raw")
        logs = simulate(data.simulate, seed=cfg.seed)
        if data.clicks == "unbiased":   # the ceiling: the same shown results, clicks with no bias
            from ..simulate.unbiased import with_unbiased_clicks
            logs = with_unbiased_clicks(logs, cfg.seed)
        logs.write(raw, fmt="parquet")
        summary = ingest_tables(sorted(glob.glob(str(raw / "train" / "*.parquet"))), sessions_dir,
                                page_features, ctx.client, data.partition_rows, key="run_dir").to_dict()
        annotations = read_table(raw / ANNOTATIONS_FILE)
        _copy_truth(raw, run.path(TRUTH_DIR))
        write_parquet(run.path(ANNOTATIONS), annotations)
    elif data.source == "baidu":
        from ..io.baidu import ingest_baidu, ingest_baidu_annotations
        summary = ingest_baidu(_expand(data.train, "data.train"), sessions_dir, ctx.client,
                               data.partition_rows, key="run_dir").to_dict()
        # annotations.parquet and quarantine/annotations.parquet beside the sessions (ANNOTATIONS' directory)
        summary["annotations_quarantined"] = ingest_baidu_annotations(data.annotations, sessions_dir).quarantined
        annotations = read_table(run.path(ANNOTATIONS))
    elif data.source == "baidu_embeddings":
        summary, annotations = _ingest_embeddings(ctx, sessions_dir)
    else:
        from ..io.tables import ingest_tables, read_annotations_table
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
    from ..io.baidu_embeddings import ingest_embedding_annotations, ingest_embedding_sessions
    data, run = ctx.config.data, ctx.run
    emb = data.embeddings
    options = dict(width=emb.width, ltr_features=tuple(emb.ltr_features), batch_rows=emb.batch_rows)
    train, held = _expand(data.train, "data.train"), _expand(data.heldout, "data.heldout") if data.heldout else []
    both = sorted(set(map(os.path.realpath, train)) & set(map(os.path.realpath, held)))
    if both:
        from ..errors import ConfigError
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
    from ..storage import is_file
    _expand(cfg.data.train, "data.train")
    if cfg.data.source == "baidu_embeddings" and cfg.data.heldout:
        _expand(cfg.data.heldout, "data.heldout")
    if cfg.data.annotations is not None and not is_file(cfg.data.annotations):
        raise FileNotFoundError(f"data.annotations: {cfg.data.annotations}: no such file")


def _expand(patterns: list[str], key: str) -> list[str]:
    """The files `patterns` (paths, `*` globs, fsspec URLs) name, in order; FileNotFoundError naming `key`."""
    from ..storage import expand
    paths: list[str] = []
    for pattern in patterns:
        found = expand(pattern)
        if not found:
            raise FileNotFoundError(f"{key}: {pattern!r} matches no file")
        paths.extend(found)
    return paths


def _copy_truth(raw: Path, truth: Path) -> None:
    import shutil
    from ..rundir.files import atomic_path
    with atomic_path(truth) as tmp:
        shutil.copytree(raw / "truth", tmp)


def _ingest_outputs(cfg: RunConfig) -> list[str]:
    outputs = [SESSIONS_DIR, ANNOTATIONS, INGEST_SUMMARY] + ([HELDOUT_INGESTED] if cfg.data.heldout else [])
    return outputs + [TRUTH_DIR] if cfg.data.source == "simulate" else outputs


# ---------------------------------------------------------------------------------------------
def featurize(ctx: StageContext) -> dict[str, Any]:
    """Lexical features for token-only logs, fitted over all partitions in parallel and merged."""
    from ..features.lexical import featurize_partitions
    from distributed import wait
    if not _needs_lexical_features(ctx.config, ctx.run):
        return {"skipped": "sessions carry dense features or the backbone reads tokens"}
    parts = [str(p) for p in partition_paths(ctx.run.path(SESSIONS_DIR))]
    fitted = ctx.client.map(_fit_lexical_partition, parts, pure=False)
    states = ctx.client.gather(fitted)
    featurizer = states[0]
    for other in states[1:]:
        featurizer = featurizer.merge(other)
    featurizer.save(ctx.run.path(LEXICAL_STATE))
    out_dir = ctx.run.path(FEATURED_SESSIONS_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = ctx.client.map(featurize_partitions, [[p] for p in parts], out_dir=str(out_dir),
                             featurizer=featurizer, pure=False)
    wait(written)
    ctx.client.gather(written)
    annotations = read_table(ctx.run.path(ANNOTATIONS))
    annotations[FEATURES] = list(featurizer.transform(annotations))
    write_parquet(ctx.run.path(FEATURED_ANNOTATIONS), annotations)
    return {"n_features": len(featurizer.feature_names_), "partitions": len(parts)}


def _fit_lexical_partition(path: str):
    from ..features.lexical import LexicalFeaturizer
    return LexicalFeaturizer().fit(pd.read_parquet(path))


def _featurize_outputs(cfg: RunConfig) -> list[str]:
    return []  # decided at run time from the ingested columns; the completion record suffices


def _training_tables(run: RunDir) -> tuple[Path, Path]:
    if run.path(FEATURED_SESSIONS_DIR).exists():
        return run.path(FEATURED_SESSIONS_DIR), run.path(FEATURED_ANNOTATIONS)
    return run.path(SESSIONS_DIR), run.path(ANNOTATIONS)


# ---------------------------------------------------------------------------------------------
def preprocess(ctx: StageContext) -> dict[str, Any]:
    """Fit the page-feature encoder (Bradley–Terry scores, vocabularies, standardisation) over all partitions."""
    from ..features.preprocess_stage import fit_page_encoder
    cfg = ctx.config
    features = cfg.data.parsed_page_features
    encoder = fit_page_encoder(ctx.run.path(SESSIONS_DIR), features, cfg.discovery.preprocess,
                               ctx.run.path(PAGE_ENCODER), ctx.client)
    info: dict[str, Any] = {"features": [f.name for f in features]}
    for name, fitted in encoder.encoders_.items():
        if hasattr(fitted, "score_table"):   # ordinal: the Bradley–Terry score of each level
            info[f"{name}_scores"] = {f"{level:g}": round(float(score), 4)
                                      for level, score in zip(fitted.levels_, fitted.scores_)}
    return info


# ---------------------------------------------------------------------------------------------
def split_queries(annotations: pd.DataFrame, valid_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(validation, test) query keys (schema.query_key): a seeded `valid_fraction` of the annotated queries validate."""
    queries = np.sort(query_key(annotations).unique())
    n_valid = int(round(len(queries) * valid_fraction))
    valid = (np.sort(np.random.default_rng(seed).choice(queries, size=n_valid, replace=False)) if n_valid
             else np.array([], dtype=object))
    return valid, np.setdiff1d(queries, valid)


def split(ctx: StageContext) -> dict[str, Any]:
    """Hold out a seeded share of annotated queries (schema.query_key) for model selection; the rest is the test set."""
    valid, test = split_queries(read_table(ctx.run.path(ANNOTATIONS)), ctx.config.data.valid_fraction, ctx.config.seed)
    write_json(ctx.run.path(SPLIT), {"valid_queries": valid.tolist(), "test_queries": test.tolist(),
                                     "seed": ctx.config.seed})
    info = {"valid_queries": int(len(valid)), "test_queries": int(len(test))}
    if ctx.config.evaluation.heldout_sessions > 0:
        info["heldout_rows"] = hold_out_sessions(ctx.run, ctx.config.evaluation.heldout_sessions, ctx.config.seed)
    return info


def heldout_session_mask(session_ids: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Whether each session is held out: a seeded hash of its id (splitmix64) below `fraction`, so the choice
    depends on the id alone — the same in every partition and on a rerun of a split that stopped midway."""
    with np.errstate(over="ignore"):
        x = np.asarray(session_ids).astype(np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53) < fraction


def hold_out_sessions(run: RunDir, fraction: float, seed: int) -> int:
    """Move the held-out sessions' rows out of the sessions tables (ingested and featured) into
    HELDOUT_SESSIONS_DIR (the training table's rows, one file per partition); the rows held out.

    Each partition is rewritten only after its held-out rows are written, so a rerun finds them there."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from ..rundir.files import atomic_path

    def write(path: Path, table: pa.Table) -> None:
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp)

    training, _ = _training_tables(run)
    tables = [run.path(SESSIONS_DIR)] + ([training] if training != run.path(SESSIONS_DIR) else [])
    heldout = run.path(HELDOUT_SESSIONS_DIR)
    for table in reversed(tables):                              # the training table first: its rows are kept
        for part in partition_paths(table):
            rows = pq.read_table(part)
            mask = heldout_session_mask(rows.column(SESSION_ID).to_numpy(), fraction, seed)
            if not mask.any():
                continue
            if table == training:
                write(heldout / part.name, rows.filter(pa.array(mask)))
            write(part, rows.filter(pa.array(~mask)))
    return row_count(partition_paths(heldout)) if heldout.is_dir() else 0


def _annotation_split(run: RunDir, annotations: pd.DataFrame, which: str) -> pd.DataFrame:
    queries = read_json(run.path(SPLIT))[f"{which}_queries"]
    return annotations[query_key(annotations).isin(queries)].reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
def train(ctx: StageContext) -> dict[str, Any]:
    """Fit the configured method on the click logs, selecting epochs on the validation queries; DDP ranks
    (`train.processes` > 1) leave their logs in the run's train/ranks/. After every finished epoch the shared
    trainer writes train/checkpoint.pt: a rerun of a failed train stage resumes from it (training/checkpoint.py),
    and it is deleted once the ranker and history are written."""
    from ..methods.training.checkpoint import config_key, keep_checkpoints
    from ..methods.training.ranks import keep_rank_logs
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
    from ..methods.base import get_method
    cfg, run = ctx.config, ctx.run
    from ..memory import map_large_allocations
    map_large_allocations()
    sessions_path, annotations_path = _training_tables(run)
    annotations = read_table(annotations_path)
    valid = _annotation_split(run, annotations, "valid")
    from ..identifiability.preflight import preflight, summary_entry
    if cfg.train.streaming and cfg.train.method == "bal":   # BAL's own columns in memory, the ranker's streamed
        result, identifiability, n_rows = _fit_bal_streamed(sessions_path, valid, cfg, run)
    elif cfg.train.streaming:   # naive (checked by the config): batches streamed from the partitions
        from ..methods.training.distributed import fit_streamed
        result = fit_streamed(sessions_path, valid if len(valid) else None, cfg)
        identifiability = {"checked": False, "reason": f"method {cfg.train.method!r} models no bias factor"}
        n_rows = row_count(partition_paths(sessions_path))
    else:
        sessions = read_sampled_sessions(sessions_path, cfg.data.max_sessions, cfg.seed,
                                         training_columns(cfg, column_names(sessions_path)), arrow_lists(cfg))
        sessions, identifiability = preflight(sessions, cfg, run.root)   # warn | merge | fail | intervene
        result = get_method(cfg.train.method).fit(sessions, valid if len(valid) else None, cfg)
        n_rows = len(sessions)
    from ..rundir.files import atomic_path
    with atomic_path(run.path(RANKER_DIR)) as tmp:
        result.ranker.save(tmp)
    from ..rundir.epochs import renumber     # one numbering: warm-up named, the method's epochs 0…N−1
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


def _fit_bal_streamed(sessions_path: Path, valid: pd.DataFrame, cfg: RunConfig, run: RunDir):
    """BAL with `train.streaming` (`BAL.fit_streamed`, out of core): the identifiability pre-flight on the columns
    it checks, read from the partitions (text ids as codes) and then let go; BAL's rows built from the partitions
    a few columns at a time and spilled to local disk; the ranker's features streamed."""
    from ..bal.method import BAL
    from ..errors import ConfigError
    from ..identifiability.preflight import bias_factors, preflight
    report: dict[str, Any] = {}

    def checked(frame: pd.DataFrame) -> pd.DataFrame:
        out, found = preflight(frame, cfg, run.root)
        if len(out) != len(frame):
            raise ConfigError(f"identifiability.on_disconnected: {cfg.identifiability.on_disconnected!r} adds "
                              "sessions, which train.streaming cannot stream (they are not in the partitions); "
                              "allowed values with streaming: warn, merge, fail")
        report.update(found)
        return out

    needed = [QUERY_ID, DOC_ID, POSITION, CLICK, *(bias_factors(cfg) or [])]     # what the check reads (its
    if cfg.identifiability.on_disconnected == "intervene":                   # intervention numbers new sessions)
        needed.append(SESSION_ID)
    result = BAL().fit_streamed(sessions_path, valid if len(valid) else None, cfg, prepare=checked,
                                prepare_columns=needed)
    return result, report, row_count(partition_paths(sessions_path))


def training_columns(cfg: RunConfig, available: list[str]) -> list[str]:
    """The sessions' columns the train stage hands a method: all but what no method reads — Baidu behaviour
    columns no page feature declares and, when a dense `features` vector and a `doc_id` serve a non-BERT ranker,
    the title and abstract token lists (Python objects per row: much of the train stage's memory). The query
    tokens stay: they are part of the query key (schema.query_key) that keeps test queries out of training."""
    from ..schema import (ABSTRACT_TOKENS, BAIDU_BEHAVIOUR_COLUMNS, DOC_ID, EMBEDDING_EXTRA_COLUMNS,
                          QUERY_REFORMULATION, TITLE_TOKENS)
    declared = set(cfg.data.declared_page_features())
    drop = {c for c in (*BAIDU_BEHAVIOUR_COLUMNS, QUERY_REFORMULATION, *EMBEDDING_EXTRA_COLUMNS) if c not in declared}
    if cfg.ranker.backbone != "bert" and FEATURES in available and DOC_ID in available:
        drop |= {TITLE_TOKENS, ABSTRACT_TOKENS}
    return [c for c in available if c not in drop]


def arrow_lists(cfg: RunConfig) -> tuple[str, ...]:
    """The list columns the train stage keeps as Arrow arrays (io.parquet.read_table): the dense `features`
    (the rankers read them as one matrix, rankers.mlp.feature_matrix) and, but for BERT (which reads each
    row's token ids), the query tokens (read only by schema.query_key, through Arrow)."""
    from ..schema import QUERY_TOKENS
    return (FEATURES,) if cfg.ranker.backbone == "bert" else (FEATURES, QUERY_TOKENS)


def read_sampled_sessions(directory: Path, max_sessions: int | None, seed: int,
                          columns: list[str] | None = None, arrow_lists: tuple[str, ...] = ()) -> pd.DataFrame:
    """`io.parquet.sample_sessions(read_table(directory), max_sessions, seed)` without reading unsampled rows.

    The session ids are chosen from the session_id column alone (same ids, same draw), then only their rows
    are read, the choice pushed down to the Parquet scan as a filter. `columns` (None: all) are read;
    `arrow_lists` as in `read_table`.
    """
    if max_sessions is None:
        return read_table(directory, columns, arrow_lists)
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from ..schema import SESSION_ID
    ids = read_table(directory, columns=[SESSION_ID])[SESSION_ID].unique()
    if len(ids) <= max_sessions:
        return read_table(directory, columns, arrow_lists)
    keep = np.random.default_rng(seed).choice(ids, size=max_sessions, replace=False)
    del ids
    dataset = ds.dataset([str(p) for p in partition_paths(directory)], format="parquet")
    table = dataset.to_table(columns=columns, filter=pc.field(SESSION_ID).isin(pa.array(keep)))
    return table_to_pandas(table, arrow_lists).reset_index(drop=True)


def _write_graphs(run: RunDir, result) -> None:
    """Each epoch's learned graph as epoch_<k>/graph.json and its biases as epoch_<k>/biases.json."""
    from ..causal.biases import identify_biases
    from ..causal.graph import epoch_dir
    for k, graph in enumerate(result.graphs):
        out = epoch_dir(run.root, k)
        write_json(out / BIASES_FILE, identify_biases(graph).to_dict())
        graph.save(out / GRAPH_FILE)


# ---------------------------------------------------------------------------------------------
def discover(ctx: StageContext) -> dict[str, Any]:
    """The click model's graph under the trained ranker's scores (epoch 0), unless training learned its own."""
    from ..causal.graph import graph_epochs
    from ..causal.discover_stage import discover_epoch
    cfg, run = ctx.config, ctx.run
    if graph_epochs(run.root):
        return {"skipped": f"training wrote graphs for epochs {graph_epochs(run.root)}"}
    if not cfg.evaluation.discover_graph:
        return {"skipped": "evaluation.discover_graph is false"}
    sessions_path, _ = _training_tables(run)
    parts = [str(p) for p in partition_paths(sessions_path)]
    # a directory of partitions, one per sessions partition, written by the workers themselves (as featurize's
    # are: a run_dir URL's working copy collects them after the stage); the stage's record marks them complete
    out = run.path(SESSION_SCORES)
    if out.exists():
        import shutil
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    out.mkdir(parents=True)
    written = ctx.client.map(_score_partition, parts, [str(out / Path(p).name) for p in parts],
                             ranker_dir=str(run.path(RANKER_DIR)), rows_per_batch=cfg.train.batch_size * 8,
                             pure=False)
    scored_rows = sum(ctx.client.gather(written))
    features = cfg.data.parsed_page_features
    result = discover_epoch(run.path(SESSIONS_DIR), run.path(SESSION_SCORES), features, cfg.discovery, run.root, 0,
                            encoder_dir=run.path(PAGE_ENCODER), client=ctx.client, seed=cfg.seed,
                            min_within_document_share=cfg.bal.min_within_document_share)
    return {"edges": [f"{e.source} {e.arrow()} {e.target}" for e in result.graph.edges],
            "scored_rows": int(scored_rows)}


def _score_partition(path: str, out: str, ranker_dir: str, rows_per_batch: int) -> int:
    """Write r̂ of every shown result of one partition to `out` (runs on a Dask worker); the rows written."""
    from ..rankers.base import score_frame
    from ..rankers.registry import load_ranker
    from ..schema import POSITION, RELEVANCE_SCORE, SESSION_ID
    frame = pd.read_parquet(path)
    scores = score_frame(load_ranker(ranker_dir), frame, rows_per_batch)
    write_parquet(out, pd.DataFrame({SESSION_ID: frame[SESSION_ID].to_numpy(), POSITION: frame[POSITION].to_numpy(),
                                     RELEVANCE_SCORE: scores}))
    return len(frame)


# ---------------------------------------------------------------------------------------------
def evaluate(ctx: StageContext) -> dict[str, Any]:
    """Score the held-out annotated queries with the trained ranker and compute the metrics."""
    cfg, run = ctx.config, ctx.run
    _, annotations_path = _training_tables(run)
    test = _annotation_split(run, read_table(annotations_path), "test")
    from ..evaluation import evaluate_ranker
    metrics, table, scores = evaluate_ranker(run.path(RANKER_DIR), test, cfg)
    from ..identifiability.truth_metrics import truth_metrics   # MCC, click MSE (simulated logs)
    truth = truth_metrics(run.root, _training_tables(run)[0], cfg.train.batch_size)
    if truth is not None:
        metrics["truth"] = truth
    for heldout in (HELDOUT_SESSIONS_DIR, HELDOUT_INGESTED):     # evaluation.heldout_sessions > 0; data.heldout
        if run.path(heldout).is_dir():
            metrics["clicks"] = heldout_click_metrics(run, run.path(heldout), cfg)
    write_parquet(run.path(TEST_SCORES), scores)
    write_parquet(run.path(PER_QUERY), table)
    write_json(run.path(METRICS), metrics)
    return {"test_queries": metrics["all"].get("n_queries")}


def heldout_click_metrics(run: RunDir, heldout_path: Path, cfg: RunConfig) -> dict[str, Any]:
    """`click_metrics.click_metrics` of the run on (a sample of) the sessions at `heldout_path`, its click models
    fitted where they need it on a sample of the training sessions."""
    from ..click_metrics import FIT_SESSIONS, HELDOUT_SESSIONS, click_metrics
    training, _ = _training_tables(run)
    lists = arrow_lists(cfg)    # dense features as Arrow buffers, not a numpy object per row
    train = read_sampled_sessions(training, FIT_SESSIONS, cfg.seed, training_columns(cfg, column_names(training)),
                                  lists)
    if Path(heldout_path).is_dir():
        heldout = read_sampled_sessions(Path(heldout_path), HELDOUT_SESSIONS, cfg.seed,
                                        training_columns(cfg, column_names(Path(heldout_path))), lists)
    else:
        from ..io.parquet import sample_sessions
        heldout = sample_sessions(read_table(heldout_path), HELDOUT_SESSIONS, cfg.seed).reset_index(drop=True)
    return click_metrics(run.root, heldout, train, cfg.train.batch_size)


# ---------------------------------------------------------------------------------------------
def report(ctx: StageContext) -> dict[str, Any]:
    from ..report.html import write_report
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
