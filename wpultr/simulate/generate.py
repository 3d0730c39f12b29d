"""`simulate(cfg, seed)`: whole-page click logs with their known truth, and writing them to disk.

One run: build the corpus, draw each session's query by popularity, let the logging ranker choose and
order what is shown, lay out the page, and let the user model click. Every random part draws from its
own stream of one SeedSequence, so a run is a pure function of (config, seed). Sessions are generated
in fixed-size chunks, which bounds memory and keeps the output independent of the machine.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..io.baidu_writer import write_baidu_annotations, write_baidu_sessions
from ..rundir.files import atomic_path
from ..rundir.layout import ANNOTATIONS_FILE, TRUTH_JSON, TRUTH_SESSIONS
from ..rundir.ownership import output_of
from ..schema import (
    ABSTRACT_TOKENS,
    BUCKET,
    CLICK,
    DOC_ID,
    FEATURE_VECTOR_TYPE,
    FEATURES,
    LABEL,
    POSITION,
    QUERY_ID,
    QUERY_ID_TYPE,
    QUERY_TOKENS,
    SESSION_ID,
    TITLE_TOKENS,
)
from ..settings.simulate import MEDIA_TYPE_NAMES, SimulateConfig, validate_simulate_config
from .corpus import Corpus, build_corpus
from .letor_corpus import build_letor_corpus
from .logging_policy import candidate_blocks, linear_logging_score, logging_scores, shown_order
from .onehot_corpus import build_onehot_corpus
from .page import (
    MEDIA_TYPE,
    SERP_HEIGHT,
    SERP_MAX_SHOW_HEIGHT,
    Page,
    build_page,
    context_columns,
    draw_context_scales,
    presented_media,
)
from .truth import true_graph
from .user_models import ModelContext, UserModel, make_user_model

TRUTH_FORMAT = "wpultr.simulate.truth/1"
TRUTH_FILES = (TRUTH_JSON, TRUTH_SESSIONS, ANNOTATIONS_FILE, "queries.parquet")
COMMAND = "wpultr simulate"           # what `write` may replace under its out_dir: only what it wrote there before


def output_names(fmt: str) -> tuple[str, ...]:
    """What `write` puts under its out_dir in format `fmt`: the paths checked before anything is simulated."""
    return ("train", "annotations.tsv.gz" if fmt == "baidu" else ANNOTATIONS_FILE, "truth")
TRUE_LABEL = "true_label"
EXAMINATION_PROB = "examination_prob"
CLICK_PROB = "click_prob"
POPULARITY = "popularity"
N_SESSIONS = "n_sessions"
CHUNK_SESSIONS = 50_000
DEFAULT_SESSIONS_PER_FILE = 1000
_STREAMS = ("corpus", "model", "context", "queries", "logging", "page", "clicks", "annotations",
            "presentation")   # appended streams leave the earlier ones' draws unchanged


def _feature_lists(features: np.ndarray) -> pa.ListArray:
    n, width = features.shape
    offsets = pa.array(np.arange(0, n * width + 1, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(features.reshape(-1), pa.float32()), type=FEATURE_VECTOR_TYPE)


@dataclass(frozen=True)
class _Chunk:
    session_table: pa.Table
    truth_table: pa.Table


def _session_chunk(first_session: int, query_index: np.ndarray, corpus: Corpus, cfg: SimulateConfig,
                   model: UserModel, context_scales: np.ndarray, rngs: dict[str, np.random.Generator],
                   reorder=None) -> _Chunk:
    """Sessions first_session .. first_session + len(query_index) - 1: shown results, page, clicks, truth."""
    k = cfg.results_per_page
    candidates = corpus.docs_of(query_index)
    media = presented_media(corpus.media_type[candidates], cfg, rngs["presentation"])
    scores = logging_scores(corpus.logging_base[candidates], media,
                            np.asarray(cfg.logging_media_boost, dtype=np.float64), cfg.logging_noise, rngs["logging"])
    order = (np.broadcast_to(np.arange(k), (len(query_index), k)).copy() if cfg.corpus == "onehot"   # as designed
             else shown_order(scores, k, rngs["logging"],
                              candidate_blocks(corpus.features[candidates, -1], cfg.position_blocks)))
    order = order if reorder is None else reorder(order, candidates)   # node intervention's swaps
    doc_rows = np.take_along_axis(candidates, order, axis=1)
    page: Page = build_page(doc_rows, corpus, cfg, model.layout_columns, context_scales, rngs["page"],
                            media_type=np.take_along_axis(media, order, axis=1))
    examination, click_prob = model.probabilities(page)
    clicks = model.sample_clicks(page, rngs["clicks"])

    n_rows = doc_rows.size
    rows = doc_rows.reshape(-1)
    session_id = pa.array(np.repeat(np.arange(first_session, first_session + len(query_index)), k), pa.int64())
    position = pa.array(page.position.reshape(-1), pa.int16())
    doc_id = pa.array(corpus.doc_ids[rows], pa.string())
    columns = {
        SESSION_ID: session_id,
        QUERY_ID: pa.array(corpus.query_ids[np.repeat(query_index, k)], QUERY_ID_TYPE),
        POSITION: position,
        CLICK: pa.array(clicks.reshape(-1), pa.int8()),
        DOC_ID: doc_id,
        QUERY_TOKENS: corpus.query_tokens.take(pa.array(np.repeat(query_index, k))),
        TITLE_TOKENS: corpus.title_tokens.take(pa.array(rows)),
        ABSTRACT_TOKENS: corpus.abstract_tokens.take(pa.array(rows)),
        FEATURES: _feature_lists(page.features.reshape(n_rows, -1)),
        MEDIA_TYPE: pa.array(page.media_type.reshape(-1), pa.int64()),
        SERP_HEIGHT: pa.array(page.serp_height.reshape(-1), pa.float64()),
        SERP_MAX_SHOW_HEIGHT: pa.array(page.serp_max_show_height.reshape(-1), pa.float64()),
    }
    for factor, name in enumerate(context_columns(cfg.n_context_factors)):
        columns[name] = pa.array(page.context[:, :, factor].reshape(-1), pa.int64())
    truth = {
        SESSION_ID: session_id, POSITION: position, DOC_ID: doc_id,
        TRUE_LABEL: pa.array(page.label.reshape(-1), pa.int8()),
        EXAMINATION_PROB: pa.array(examination.reshape(-1), pa.float64()),
        CLICK_PROB: pa.array(click_prob.reshape(-1), pa.float64()),
    }
    return _Chunk(pa.table(columns), pa.table(truth))


def _annotation_table(corpus: Corpus, query_index: np.ndarray) -> pa.Table:
    """Every candidate document of the annotated queries with its text, features, grade and query bucket."""
    rows = corpus.docs_of(query_index).reshape(-1)
    query_of_row = corpus.doc_query[rows]
    return pa.table({
        QUERY_ID: pa.array(corpus.query_ids[query_of_row], QUERY_ID_TYPE),
        DOC_ID: pa.array(corpus.doc_ids[rows], pa.string()),
        QUERY_TOKENS: corpus.query_tokens.take(pa.array(query_of_row)),
        TITLE_TOKENS: corpus.title_tokens.take(pa.array(rows)),
        ABSTRACT_TOKENS: corpus.abstract_tokens.take(pa.array(rows)),
        FEATURES: _feature_lists(corpus.features[rows]),
        LABEL: pa.array(corpus.label[rows], pa.int8()),
        BUCKET: pa.array(corpus.bucket[query_of_row], pa.int8()),
    })


def _query_table(corpus: Corpus, query_index: np.ndarray) -> pa.Table:
    """Each query's popularity, frequency bucket and number of simulated sessions."""
    return pa.table({
        QUERY_ID: pa.array(corpus.query_ids, QUERY_ID_TYPE),
        POPULARITY: pa.array(corpus.popularity, pa.float64()),
        BUCKET: pa.array(corpus.bucket, pa.int8()),
        N_SESSIONS: pa.array(np.bincount(query_index, minlength=corpus.n_queries), pa.int64()),
    })


@dataclass(frozen=True)
class SimulationEngine:
    """The fixed world of one (config, seed): corpus, user model, context scales and the random streams."""

    rngs: dict[str, np.random.Generator]
    corpus: Corpus
    model: UserModel
    context_scales: np.ndarray


def simulation_engine(cfg: SimulateConfig, seed: int) -> SimulationEngine:
    """Build the world every simulation of (cfg, seed) shares; experiments on the same world start here too."""
    validate_simulate_config(cfg)
    rngs = {name: np.random.default_rng(stream)
            for name, stream in zip(_STREAMS, np.random.SeedSequence(seed).spawn(len(_STREAMS)), strict=True)}
    corpus = {"letor": build_letor_corpus, "onehot": build_onehot_corpus}.get(cfg.corpus, build_corpus)(
        cfg, rngs["corpus"])
    if cfg.logging_ranker == "linear":    # drawn only then: the grade ranker's logging stream is left as it was
        corpus = dataclasses.replace(corpus, logging_score=linear_logging_score(
            corpus.features, corpus.label, corpus.doc_query, cfg.logging_ranker_queries, rngs["logging"]))
    std = corpus.features.std(axis=0).astype(np.float64)
    context = ModelContext(n_media_types=len(cfg.media_type_probs),
                           feature_mean=corpus.features.mean(axis=0).astype(np.float64),
                           feature_std=np.where(std > 0, std, 1.0), rng=rngs["model"],
                           features=corpus.features, labels=corpus.label)
    model = make_user_model(cfg.user_model, cfg.user_model_params, context, cfg.n_dense_features)
    context_scales = draw_context_scales(cfg.n_context_factors, cfg.context_levels, cfg.context_strength,
                                         rngs["context"])
    return SimulationEngine(rngs, corpus, model, context_scales)


def simulate(cfg: SimulateConfig, seed: int) -> SimulatedLogs:
    """Simulated click logs, annotations and the truth behind them; a pure function of (cfg, seed)."""
    engine = simulation_engine(cfg, seed)
    rngs, corpus, model, context_scales = engine.rngs, engine.corpus, engine.model, engine.context_scales
    query_index = rngs["queries"].choice(corpus.n_queries, size=cfg.n_sessions, p=corpus.popularity)
    chunks = [_session_chunk(start, query_index[start:start + CHUNK_SESSIONS], corpus, cfg, model,
                             context_scales, rngs)
              for start in range(0, cfg.n_sessions, CHUNK_SESSIONS)]
    annotated = np.sort(rngs["annotations"].choice(corpus.n_queries, size=cfg.n_annotated_queries, replace=False))
    truth = {
        "format": TRUTH_FORMAT,
        "seed": seed,
        "config": dataclasses.asdict(cfg),
        "user_model": {"name": model.name, "params": model.params(), "layout_columns": model.layout_columns},
        "graph": true_graph(cfg, model),
        "media_types": {str(code): (MEDIA_TYPE_NAMES[code] if code < len(MEDIA_TYPE_NAMES) else f"type_{code}")
                        for code in range(len(cfg.media_type_probs))},
        "context_scales": context_scales.tolist(),
        **({"corpus": corpus.source} if corpus.source is not None else {}),
    }
    return SimulatedLogs(
        session_table=pa.concat_tables([c.session_table for c in chunks]),
        truth_session_table=pa.concat_tables([c.truth_table for c in chunks]),
        annotation_table=_annotation_table(corpus, annotated),
        query_table=_query_table(corpus, query_index),
        truth=truth)


@dataclass(frozen=True)
class SimulatedLogs:
    """A simulation's tables (Arrow, and pandas through the properties) and its JSON-able truth."""

    session_table: pa.Table          # one row per shown result, the sessions contract
    truth_session_table: pa.Table    # session_id, position, doc_id, true_label, examination_prob, click_prob
    annotation_table: pa.Table       # all candidates of the annotated queries, with features
    query_table: pa.Table            # query_id, popularity, bucket, n_sessions
    truth: dict[str, Any]            # graph, user model and parameters, config, seed

    @cached_property
    def sessions(self) -> pd.DataFrame:
        return self.session_table.to_pandas()

    @cached_property
    def truth_sessions(self) -> pd.DataFrame:
        return self.truth_session_table.to_pandas()

    @cached_property
    def annotations(self) -> pd.DataFrame:
        return self.annotation_table.to_pandas()

    @cached_property
    def queries(self) -> pd.DataFrame:
        return self.query_table.to_pandas()

    def _session_slices(self, sessions_per_file: int) -> list[pa.Table]:
        session_id = self.session_table[SESSION_ID].to_numpy()
        firsts = np.flatnonzero(np.diff(session_id, prepend=session_id[0] - 1))
        cuts = list(firsts[::sessions_per_file]) + [len(session_id)]
        return [self.session_table.slice(start, stop - start) for start, stop in zip(cuts[:-1], cuts[1:], strict=True)]

    def write(self, out_dir: str | Path, fmt: Literal["baidu", "parquet"] = "baidu",
              sessions_per_file: int = DEFAULT_SESSIONS_PER_FILE, command: str | None = COMMAND) -> list[Path]:
        """Write train/part-*, the annotations and truth/ under out_dir; return the files written.

        baidu: train/part-00000.gz ... (gzip session logs) and annotations.tsv.gz; parquet:
        train/part-00000.parquet ... and annotations.parquet. Both: truth/truth.json,
        truth/truth_sessions.parquet, truth/annotations.parquet (with features) and truth/queries.parquet.
        Each directory and file is written under a temporary name and renamed into place. An existing train/,
        annotation file or truth/ is replaced only when `command` wrote it (listed with its sha256 in out_dir's
        .wpultr-outputs.json, rundir.ownership), never for its names; `command` None writes into a fresh directory
        of the caller's and records nothing.
        """
        if fmt not in ("baidu", "parquet"):
            raise ValueError(f"fmt: {fmt!r} is not allowed; allowed values: 'baidu', 'parquet'")
        if sessions_per_file < 1:
            raise ValueError(f"sessions_per_file: must be >= 1, got {sessions_per_file}")
        out_dir = Path(out_dir)
        owned = output_of(command) if command is not None else None
        written: list[str] = []
        with atomic_path(out_dir / "train", owned, key="--out") as train:
            train.mkdir()
            for i, part in enumerate(self._session_slices(sessions_per_file)):
                name = f"part-{i:05d}.gz" if fmt == "baidu" else f"part-{i:05d}.parquet"
                if fmt == "baidu":
                    write_baidu_sessions(part, train / name)
                else:
                    pq.write_table(part, train / name)
                written.append(f"train/{name}")
        if fmt == "baidu":
            write_baidu_annotations(self.annotation_table, out_dir / "annotations.tsv.gz", owned)
            written.append("annotations.tsv.gz")
        else:
            with atomic_path(out_dir / ANNOTATIONS_FILE, owned, key="--out") as tmp:
                pq.write_table(self.annotation_table, tmp)
            written.append(ANNOTATIONS_FILE)
        with atomic_path(out_dir / "truth", owned, key="--out") as truth:
            truth.mkdir()
            (truth / TRUTH_FILES[0]).write_text(json.dumps(self.truth, indent=2) + "\n")
            for name, table in zip(TRUTH_FILES[1:], (self.truth_session_table, self.annotation_table,
                                                     self.query_table), strict=True):
                pq.write_table(table, truth / name)
        written += [f"truth/{name}" for name in TRUTH_FILES]
        return [out_dir / name for name in written]
