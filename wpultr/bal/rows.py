"""What BAL holds for every training row, built once per fit from the sessions' own columns, never the ranker's.

`TrainingRows.build(train, config)` encodes the page features BAL sees (Bradley–Terry position scores,
standardised continuous features, category codes: `features.encoders`) and fixes what every epoch reads the
same: clicks, positions, the rows discovery samples, the (query, document) codes of the click model's document
effects and which page features vary within a document (`separability`). Nothing after it reads the sessions
frame, so a streamed fit (`BAL.fit_streamed`) lets that frame go and BAL's per-row memory is these arrays (plus
r̂, the weights and the page logits of the epoch).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..causal.discovery import draw_discovery_sessions, one_row_per_session
from ..causal.within_document_ci import DOCUMENT_CODE
from ..errors import ConfigError
from ..features.encoders import CategoricalEncoder, PageFeatureEncoder, session_spans
from ..methods.propensities.position import share_shown_at_several_positions
from ..schema import (
    CHUNK_ROWS,
    CLICK,
    DOC_ID,
    POSITION,
    QUERY_ID,
    SESSION_ID,
    FeatureKind,
    PageFeature,
    query_document_pairs,
)
from .column_sources import ColumnSource, as_column_source
from .node_columns import NodeColumns
from .separability import Separability, SeparabilityCheck

if TYPE_CHECKING:
    from ..config import RunConfig


def bal_features(config: RunConfig) -> tuple[PageFeature, ...]:
    """The declared page features BAL sees (`bal.features` selects; None keeps them all)."""
    declared = config.data.parsed_page_features
    wanted = config.bal.features
    return declared if wanted is None else tuple(f for f in declared if f.name in set(wanted))


def discovery_seed(config: RunConfig) -> int:
    """The seed of BAL's discovery rows and CI tests: the same every epoch, so r̂-free tests can be reused."""
    return config.seed * 1000


def document_pairs(train: pd.DataFrame, config: RunConfig, codes: np.ndarray | None = None
                   ) -> tuple[np.ndarray | None, dict[str, Any]]:
    """Each row's (query, document) code for the click model's document effects, or None, and why (`codes`:
    `schema.query_document_pairs` of `train` when the caller already has them).

    `bal.click_model.document_effects`: true needs query_id and doc_id; auto turns them on when at least
    half the rows belong to a pair shown at two positions or more (the harvested interventions that tell
    examination from relevance); false keeps the paper's u = α·r̂ + β.
    """
    wanted = config.bal.click_model.document_effects
    if wanted is False:
        return None, {"used": False, "reason": "bal.click_model.document_effects is false"}
    if DOC_ID not in train.columns or QUERY_ID not in train.columns:
        if wanted is True:
            raise ConfigError("bal.click_model.document_effects: true needs the sessions' query_id and doc_id columns; "
                              f"present: {sorted(map(str, train.columns))}")
        return None, {"used": False, "reason": "the sessions have no doc_id"}
    pairs = query_document_pairs(train) if codes is None else codes
    share = share_shown_at_several_positions(pairs, train[POSITION].to_numpy())
    info = {"pairs": int(pairs.max()) + 1 if len(pairs) else 0, "rows_in_pairs_at_two_positions": round(share, 4)}
    if wanted == "auto" and share < 0.5:
        return None, {**info, "used": False, "reason": "auto: under half the rows' documents were shown at two "
                                                       "positions or more"}
    return pairs, {**info, "used": True}


@dataclass(frozen=True)
class GraphRows:
    """The rows every epoch's discovery reads (drawn once, by the run's seed): one shown result per sampled
    session for KCI, and the whole sessions of hybrid's click tests (row indices, None for other tests: a few
    bytes per chosen row, not a mask over the log) with their session ids (the click test's clusters)."""

    kci: np.ndarray
    click_rows: np.ndarray | None
    click_sessions: np.ndarray | None
    click_documents: np.ndarray | None = None   # their (query, document) codes: the within-document click test's

    @classmethod
    def draw(cls, train: pd.DataFrame, config: RunConfig) -> GraphRows:
        seed = discovery_seed(config)
        drawn = draw_discovery_sessions(train, config.discovery, seed)
        chosen = train.loc[train[SESSION_ID].isin(drawn.kci), [SESSION_ID, POSITION]].assign(_row=lambda f: f.index)
        rows = None if drawn.click is None else np.flatnonzero(train[SESSION_ID].isin(drawn.click).to_numpy())
        sessions = None if rows is None else train[SESSION_ID].to_numpy()[rows]
        return cls(one_row_per_session(chosen, seed)["_row"].to_numpy(), rows, sessions)

    def click_frame(self, nodes: NodeColumns | pd.DataFrame) -> pd.DataFrame | None:
        """Hybrid's click rows of `nodes` with their session_id; None for a test without them."""
        if self.click_rows is None:
            return None
        rows = nodes.iloc[self.click_rows].assign(**{SESSION_ID: self.click_sessions})
        if self.click_documents is not None:
            rows[DOCUMENT_CODE] = self.click_documents
        return rows.reset_index(drop=True)


RAW_POSITION, PAIR = "_position", "_pair"     # per-row state held beside the nodes (`node_columns` doc)


@dataclass
class TrainingRows:
    """BAL's per-row state of one fit (see the module doc); `nodes` gets r̂ each epoch (`with_scores`)."""

    features: tuple[PageFeature, ...]
    kinds: dict[str, str]                      # feature → ordinal | continuous | categorical
    n_categories: dict[str, int]               # categorical feature → codes (vocabulary + unknown)
    nodes: NodeColumns                         # encoded page features, r̂, c (the graph's variables), positions, pairs
    graph_rows: GraphRows | None               # None for a fixed-graph variant (`bal.graph`)
    document_effects: dict[str, Any]
    separable: Separability

    @classmethod
    def build(cls, train: pd.DataFrame | ColumnSource, config: RunConfig, spill: bool = False) -> TrainingRows:
        """From the sessions' ids, position, click and page-feature columns (rows in training order): a frame, or
        a `column_sources.ColumnSource` (a log larger than memory: its partitions).

        Step by step, each reading only its own columns and letting them go (`column_sources`): the ids (the
        encoder's whole-session chunks, discovery's rows), the query and document ids (the (query, document)
        codes), then each page feature alone (its encoder's fit, its within-document share, its encoding). With
        `spill`, the rows' fixed columns go to local disk as each is made (`NodeColumns.spilled`) and the epochs
        read them a chunk at a time: held in memory are r̂ and one step's columns."""
        source = as_column_source(train)
        available = set(source.columns)
        features = bal_features(config)
        n = source.n_rows
        ids = source.load([SESSION_ID, QUERY_ID, POSITION])
        spans = session_spans(ids, CHUNK_ROWS)                        # the encoders' chunks of whole sessions
        graph_rows = GraphRows.draw(ids, config) if config.bal.graph == "discovered" else None
        del ids
        docs = source.load([QUERY_ID, DOC_ID, POSITION])
        codes = None
        if {QUERY_ID, DOC_ID} <= available:                           # coded once, for both users
            codes = query_document_pairs(docs)
            if len(codes) and codes.max() < np.iinfo(np.int32).max:
                codes = codes.astype(np.int32)
        if graph_rows is not None and graph_rows.click_rows is not None and codes is not None:
            graph_rows = replace(graph_rows, click_documents=codes[graph_rows.click_rows])
        pairs, document_effects = document_pairs(docs, config, codes)
        nodes = NodeColumns.spilled(n) if spill else NodeColumns(n)
        if pairs is not None:
            nodes.add(PAIR, pairs)
            del pairs
        nodes.add(RAW_POSITION, docs[POSITION].to_numpy())
        del docs
        separable = SeparabilityCheck(config.discovery.min_within_document_share, codes)
        encoders: dict[str, Any] = {}
        for f in features:                                            # one feature's columns at a time
            frame = source.load([SESSION_ID, POSITION, f.name] if f.kind is FeatureKind.ORDINAL else [f.name])
            encoder = PageFeatureEncoder((f,), config.discovery.preprocess).fit(frame, spans=spans)
            encoders[f.name] = encoder.encoders_[f.name]
            separable.add(f, frame[f.name].to_numpy())
            nodes.add_all(encoder.transform_columns(frame, drop=True))
            del frame
        del codes
        separable.pairs = None                                        # the codes' memory goes with them
        nodes.set_scores(np.zeros(n, np.float32))                     # r̂: replaced every epoch
        nodes.add(CLICK, source.load([CLICK])[CLICK].to_numpy(np.float32))
        return cls(features, {f.name: f.kind.value for f in features},
                   {name: len(enc.vocabulary_) + 1 for name, enc in encoders.items()
                    if isinstance(enc, CategoricalEncoder)},
                   nodes, graph_rows, document_effects,
                   separable.result())

    @property
    def clicks(self) -> np.ndarray:
        """c of every row, float32 (spilled: read from disk; hold it only while it is needed)."""
        return self.nodes.column(CLICK)

    @property
    def positions(self) -> np.ndarray:
        """The sessions' own positions of every row (spilled: read from disk)."""
        return self.nodes.column(RAW_POSITION)

    @property
    def has_pairs(self) -> bool:
        return PAIR in self.nodes.held

    def pairs_at(self, index: np.ndarray | None = None) -> np.ndarray | None:
        """The (query, document) codes of the click model's document effects (`document_pairs`) at `index`
        (None: every row); None when the click model has none."""
        if not self.has_pairs:
            return None
        return self.nodes.column(PAIR) if index is None else self.nodes.take(PAIR, index)

    def with_scores(self, r: np.ndarray) -> tuple[NodeColumns, np.ndarray]:
        """`nodes` with this epoch's r̂ (the other columns never change), and r̂ as the nodes' own array
        (read-only): the caller can let its `r` go, one copy of r̂ is held."""
        return self.nodes, self.nodes.set_scores(r)
