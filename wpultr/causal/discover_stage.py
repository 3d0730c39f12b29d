"""The discover stage as a function from files to files (the runner wires it in; the preprocess stage that
fits its encoder is `features.preprocess_stage`).

* `discover_epoch`: sessions directory + relevance scores + fitted encoder → `epoch_<k>/graph.json`,
  `biases.json` and `sample.parquet` (the sampled rows PC saw, before encoding; the hybrid test's click
  rows, whole sessions, are counted in graph.json, not written). Every file is
  written under a temporary name and renamed; graph.json goes last, so its presence means done.
"""
from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..features.encoders import PageFeatureEncoder
from ..io.parquet import partition_paths, read_table
from ..rankers.base import score_frame
from ..rankers.registry import load_ranker
from ..rundir.files import write_json, write_parquet
from ..rundir.layout import BIASES_FILE, GRAPH_FILE, SAMPLE_FILE
from ..schema import (
    CLICK,
    DOC_ID,
    POSITION,
    QUERY_ID,
    RELEVANCE_SCORE,
    SESSION_ID,
    PageFeature,
    SchemaError,
    query_document_pairs,
)
from .biases import identify_biases
from .discovery import DiscoveryConfig, DiscoveryResult, discover, draw_discovery_sessions, one_row_per_session
from .graph import epoch_dir
from .within_document_ci import DOCUMENT_CODE


def _read_sessions(sessions_dir: str | Path, columns: list[str], session_ids: np.ndarray) -> pd.DataFrame:
    """Rows of the chosen sessions only (pushed down to the Parquet scan)."""
    dataset = ds.dataset([str(p) for p in partition_paths(sessions_dir)], format="parquet")
    missing = [c for c in columns if c not in dataset.schema.names]
    if missing:
        raise SchemaError(f"{sessions_dir}: missing column(s) {missing}; present: {dataset.schema.names}")
    table = dataset.to_table(columns=columns, filter=pc.field(SESSION_ID).isin(pa.array(session_ids)))
    return table.to_pandas()


def _columns_of(sessions_dir: str | Path) -> list[str]:
    return ds.dataset([str(p) for p in partition_paths(sessions_dir)], format="parquet").schema.names


def _scores_column(sessions_dir: str | Path, scores: str | Path) -> str | None:
    """The sessions column holding r̂ if `scores` names one; None if it is a scores file."""
    if Path(scores).exists():   # a scores file, or a directory of its partitions
        return None
    names = _columns_of(sessions_dir)
    if isinstance(scores, str) and scores in names:
        return scores
    raise SchemaError(f"scores {str(scores)!r}: neither a column of {sessions_dir} (columns: {names}) "
                      f"nor an existing Parquet file")


def _join_scores(rows: pd.DataFrame, path: Path) -> pd.DataFrame:
    """r̂ per sampled row from a Parquet file (or directory of partitions) keyed by (session_id, position)."""
    files = [str(p) for p in partition_paths(path)] if Path(path).is_dir() else [str(path)]
    dataset = ds.dataset(files, format="parquet")
    needed = [SESSION_ID, POSITION, RELEVANCE_SCORE]
    missing = [c for c in needed if c not in dataset.schema.names]
    if missing:
        raise SchemaError(f"{path}: missing column(s) {missing}; present: {dataset.schema.names}")
    wanted = pc.field(SESSION_ID).isin(pa.array(rows[SESSION_ID].unique()))   # only the sampled sessions' rows
    table = dataset.to_table(columns=needed, filter=wanted).to_pandas()
    duplicated = table.duplicated([SESSION_ID, POSITION])
    if duplicated.any():
        row = int(np.flatnonzero(duplicated.to_numpy())[0])
        raise SchemaError(f"{path}: row {row} repeats ({SESSION_ID}, {POSITION}) = "
                          f"({table[SESSION_ID].iloc[row]}, {table[POSITION].iloc[row]})")
    merged = rows.merge(table, on=[SESSION_ID, POSITION], how="left", validate="one_to_one")
    absent = merged[RELEVANCE_SCORE].isna().to_numpy()
    if absent.any():
        row = int(np.flatnonzero(absent)[0])
        raise SchemaError(f"{path}: no {RELEVANCE_SCORE} for {SESSION_ID} {merged[SESSION_ID].iloc[row]} "
                          f"{POSITION} {merged[POSITION].iloc[row]}")
    return merged


def sample_rows(sessions_dir: str | Path, scores: str | Path, page_features: Sequence[PageFeature],
                cfg: DiscoveryConfig, seed: int) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The discovery sample, drawn by `causal.discovery.draw_discovery_sessions` from `seed` (as BAL's in-memory
    rows are): one displayed result of each sampled session, with r̂; and for the hybrid test its click rows (None
    for the other tests): every shown result of its sessions, ordered by session and position, with doc_id when
    the sessions have it (the within-document click test's strata).

    `scores` names the sessions column holding r̂, or a Parquet file of (session_id, position, relevance_score).
    """
    drawn = draw_discovery_sessions(read_table(sessions_dir, columns=[SESSION_ID, QUERY_ID]), cfg, seed)
    whole = None if drawn.click is None else _sample_of(sessions_dir, scores, page_features, drawn.click, seed, True)
    return _sample_of(sessions_dir, scores, page_features, drawn.kci, seed, False), whole


def _sample_of(sessions_dir: str | Path, scores: str | Path, page_features: Sequence[PageFeature], ids: np.ndarray,
               seed: int, whole_sessions: bool) -> pd.DataFrame:
    """The rows of sessions `ids` with r̂: every shown result (`whole_sessions`) or one drawn from each with `seed`."""
    column = _scores_column(sessions_dir, scores)
    documents = [DOC_ID] if whole_sessions and DOC_ID in _columns_of(sessions_dir) else []   # the click test's strata
    columns = list(dict.fromkeys([SESSION_ID, QUERY_ID, POSITION, CLICK] + documents + [f.name for f in page_features]
                                 + ([column] if column else [])))
    rows = _read_sessions(sessions_dir, columns, ids)
    rows = rows.sort_values([SESSION_ID, POSITION], kind="stable").reset_index(drop=True) if whole_sessions \
        else one_row_per_session(rows, seed)
    if column is None:
        return _join_scores(rows, Path(scores))
    return rows.rename(columns={column: RELEVANCE_SCORE}) if column != RELEVANCE_SCORE else rows


def _nodes(rows: pd.DataFrame, encoder: PageFeatureEncoder) -> pd.DataFrame:
    """r̂, the encoded page features and the click of sampled rows: the columns discovery reads."""
    return pd.concat([rows[[RELEVANCE_SCORE]].astype("float64"), encoder.transform(rows),
                      rows[[CLICK]].astype("float64")], axis=1)


def click_nodes_of(whole: pd.DataFrame, encoder: PageFeatureEncoder) -> pd.DataFrame:
    """The hybrid test's click rows as discovery reads them: the nodes, session_id and, with doc_id, each row's
    (query, document) code (`DOCUMENT_CODE`: the within-document test's strata)."""
    nodes = _nodes(whole, encoder).assign(**{SESSION_ID: whole[SESSION_ID].to_numpy()})
    if DOC_ID in whole.columns:
        nodes[DOCUMENT_CODE] = query_document_pairs(whole)
    return nodes


def discover_epoch(sessions_dir: str | Path, scores: str | Path, page_features: Sequence[PageFeature],
                   cfg: DiscoveryConfig, run_dir: str | Path, epoch: int, *, encoder_dir: str | Path,
                   client: Any = None, seed: int = 0) -> DiscoveryResult:
    """Sample, encode, run PC (+ bootstrap) and write epoch_<epoch>/{sample.parquet, biases.json, graph.json}."""
    sample_seed = seed + cfg.seed_offset + epoch
    rows, whole = sample_rows(sessions_dir, scores, page_features, cfg, sample_seed)
    encoder = PageFeatureEncoder.load(encoder_dir)
    click_nodes = None if whole is None else click_nodes_of(whole, encoder)
    result = discover(_nodes(rows, encoder), page_features, cfg, client=client, seed=sample_seed,
                      click_nodes=click_nodes)
    result.graph.meta["sample"] = {
        "n_rows": int(len(rows)), "n_sessions_requested": cfg.n_sessions, "stratified": cfg.stratify,
        "n_strata": cfg.n_strata, "n_queries": int(rows[QUERY_ID].nunique()), "seed": sample_seed,
        "rows_per": "one displayed result per sampled session"}
    result.graph.meta["epoch"] = epoch
    out = epoch_dir(run_dir, epoch)
    write_parquet(out / SAMPLE_FILE, rows)
    write_json(out / BIASES_FILE, identify_biases(result.graph).to_dict())
    result.graph.save(out / GRAPH_FILE)
    return result


def _score_partition(path: str, out: str, ranker_dir: str, rows_per_batch: int) -> int:
    """Write r̂ of every shown result of one partition to `out` (runs on a Dask worker); the rows written."""
    frame = pd.read_parquet(path)
    scores = score_frame(load_ranker(ranker_dir), frame, rows_per_batch)
    write_parquet(out, pd.DataFrame({SESSION_ID: frame[SESSION_ID].to_numpy(), POSITION: frame[POSITION].to_numpy(),
                                     RELEVANCE_SCORE: scores}))
    return len(frame)


def score_sessions(sessions_dir: Path, out: Path, ranker_dir: Path, rows_per_batch: int, client: Any) -> int:
    """r̂ of the saved ranker at `ranker_dir` for every shown result of `sessions_dir`, as a directory `out` of
    partitions, one per sessions partition, written by the workers themselves (a run_dir URL's working copy collects
    them after the stage; the stage's record marks them complete); the rows scored."""
    parts = [str(p) for p in partition_paths(sessions_dir)]
    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    out.mkdir(parents=True)
    written = client.map(_score_partition, parts, [str(out / Path(p).name) for p in parts],
                         ranker_dir=str(ranker_dir), rows_per_batch=rows_per_batch, pure=False)
    return int(sum(client.gather(written)))
